// What the esptun-bench measurement commands share on their command line
// beyond apps/cli/options.hpp: `--json [FILE]` and where the JSON goes.
#pragma once

#include "apps/cli/options.hpp"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace esptun::bench::lab {

/**
 * add_json_option() - `--json [FILE]` on @verb: JSON to FILE, or to stdout
 * without one (the table then goes to stderr)
 * @file: receives FILE; stays empty for stdout
 * Return: the option; its count() is non-zero when JSON was asked for.
 */
CLI::Option* add_json_option(CLI::App& verb, std::string& file);

/**
 * write_json() - @doc as one line of JSON to stdout when @file is empty, else to @file
 * Throws std::runtime_error when @file cannot be written.
 */
void write_json(const nlohmann::ordered_json& doc, const std::string& file);

} // namespace esptun::bench::lab
