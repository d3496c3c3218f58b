// What the esptun-bench measurement commands share on their command line:
// the usage error, the error handling around a run, and where the JSON goes.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>

namespace esptun::bench::lab {

/// UsageError - a mistake on the command line: the usage is printed, exit 2.
struct UsageError : std::runtime_error {
	using std::runtime_error::runtime_error;
};

/**
 * run_command() - run @body and turn its exceptions into messages
 * @cmd:   the command's name, e.g. "crypto"
 * @usage: its usage text, printed after a UsageError
 * Return: what @body returned; 2 after a UsageError, 1 after another exception
 */
int run_command(const char* cmd, const char* usage, const std::function<int()>& body);

/**
 * parse_number() - the value of option @opt: a whole number from @lo to @hi
 * Throws UsageError naming @opt and the range otherwise.
 */
unsigned long parse_number(const std::string& opt, const std::string& text, unsigned long lo,
                           unsigned long hi);

/**
 * write_json() - @doc as one line of JSON to stdout when @file is empty, else to @file
 * Throws std::runtime_error when @file cannot be written.
 */
void write_json(const nlohmann::ordered_json& doc, const std::string& file);

} // namespace esptun::bench::lab
