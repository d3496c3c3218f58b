// What the esptun-bench measurement commands share on their command line
// beyond apps/cli/options.hpp: `--json [FILE]` and where the JSON goes.
#pragma once

#include "apps/cli/options.hpp"

#include <functional>
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

/**
 * run_as_root() - what demo, compare and ike-load do around their work:
 * refuse without root (they make network namespaces and tun devices), make
 * SIGINT and SIGTERM stop it (lab::Interrupted), and say how it ended on
 * stderr: a cli::UsageError as a mistake (exit 2), an interruption as 130,
 * anything else thrown as a failure (1), each time adding that @what (e.g.
 * "tunnels") were stopped and the namespaces and temp files removed
 * Return: what @body returned, or that exit status.
 */
int run_as_root(const CLI::App& verb, const std::string& what, const std::function<int()>& body);

} // namespace esptun::bench::lab
