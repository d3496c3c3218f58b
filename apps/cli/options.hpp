// The one way esptun's programs read their command line: a CLI11 app built
// by make_app() and parsed by parse_command_line(), so esptun-gateway,
// esptun-client and esptun-bench agree on --help, --version, how a mistake
// is reported (the program's name, the message, exit status 2) and how a
// failure is (exit status 1). Each program declares its verbs as CLI11
// subcommands and their options on those.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace esptun::cli {

/// Exit statuses shared by every program.
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

/// UsageError - a mistake on the command line found after parsing (two
/// options that only make sense together, a name that is not known):
/// reported like a parse error, exit status 2.
struct UsageError : std::runtime_error {
	using std::runtime_error::runtime_error;
};

/// Verb - a subcommand and what runs it once the command line has chosen it
struct Verb {
	CLI::App* app;
	std::function<int()> run;
};

/**
 * make_app() - an app with esptun's conventions: -h/--help, --version
 * (printing "@program VERSION"), help text @description, no prefix matching
 * @program: the name in messages, e.g. "esptun-gateway" or "esptun-bench"
 */
std::unique_ptr<CLI::App> make_app(const std::string& program, const std::string& description);

/**
 * add_verb() - a subcommand of @parent with a one-line @summary (what the
 * parent's help lists) and, when given, a longer @details shown by the
 * subcommand's own --help
 */
CLI::App* add_verb(CLI::App& parent, const std::string& name, const std::string& summary,
                   const std::string& details = "");

/**
 * parse_command_line() - parse @argv into @app
 * Help and --version are printed to stdout. A mistake (an unknown option or
 * command, a missing or bad value, options that exclude each other) is
 * reported on stderr as "PROGRAM [VERB]: message" with a pointer to --help.
 * Return: -1 when the caller should go on and run the chosen command; else
 * the exit status (0 after help or --version, 2 after a mistake).
 */
int parse_command_line(CLI::App& app, int argc, const char* const* argv);

/**
 * run_verb() - run @body, the work of @verb (an app or subcommand parsed by
 * parse_command_line()), reporting what it throws: a UsageError as a
 * mistake (exit 2), anything else as a failure (exit 1), both as
 * "PROGRAM VERB: message" on stderr
 * Return: what @body returned, or that exit status.
 */
int run_verb(const CLI::App& verb, const std::function<int()>& body);

/**
 * report_usage_error() - print @message as a mistake of @verb (the line
 * parse_command_line() prints)
 * Return: kExitUsage.
 */
int report_usage_error(const CLI::App& verb, const std::string& message);

/// full_name() - "esptun-bench vhost-counts row": @verb and its parents' names
std::string full_name(const CLI::App& verb);

/// between() - a check that a whole number lies in [@lo, @hi]; its message
/// names the option and the range
CLI::Validator between(long long lo, long long hi);

} // namespace esptun::cli
