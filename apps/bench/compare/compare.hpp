// `esptun-bench compare`: plain veth, esptun and the userspace tunnels users
// pick instead (wireguard-go, OpenVPN 2.6, strongSwan with kernel-libipsec),
// side by side between two network namespaces, measured interleaved in one
// run. Needs root; leaves nothing behind.
#pragma once

#include "apps/cli/options.hpp"

#include <string>

namespace esptun::bench::compare {

/**
 * add_compare() - the compare command on @bench (esptun-bench's app) and
 * what runs it: exit status 0 when every subject that could run was
 * measured, 1 when a subject failed to start or a test failed, 2 for a usage
 * error, 130 when interrupted
 * @command_line: the whole command line, recorded in the report
 */
cli::Verb add_compare(CLI::App& bench, const std::string& command_line);

} // namespace esptun::bench::compare
