// `esptun-bench ike-load`: how fast IKEv2 clients can connect to a
// responder, and what each costs it. The project's own IKE engine runs N
// initiators (generator.hpp) from a namespace of their own against
// esptun-gateway and against strongSwan's charon, side by side in one run,
// with the same proposals and credentials (a pre-shared key per client).
// Needs root; leaves nothing behind.
#pragma once

#include "apps/cli/options.hpp"

#include <string>

namespace esptun::bench::ike_load {

/**
 * add_ike_load() - the ike-load command on @bench and what runs it: exit
 * status 0 when every client of every responder was established and the
 * responder counted them all, 1 otherwise, 2 for a usage error, 130 when
 * interrupted
 * @command_line: the whole command line, recorded in the report
 */
cli::Verb add_ike_load(CLI::App& bench, const std::string& command_line);

} // namespace esptun::bench::ike_load
