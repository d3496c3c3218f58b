// `esptun-bench peers`: how one gateway shares its data path among many
// peers. A hub gateway with N static peers, each a gateway of its own in a
// namespace of its own running one TCP flow to the hub, for each N of
// --counts in one run: aggregate throughput against the single peer's,
// each peer's share of a fair one, the hub's CPU per GB and how its
// workers split the load. Needs root; leaves nothing behind.
#pragma once

#include "apps/cli/options.hpp"

#include <string>

namespace esptun::bench::peers {

/**
 * add_peers() - the peers command on @bench and what runs it: exit status 0
 * when every flow of every count delivered its bytes intact, 1 otherwise,
 * 2 for a usage error, 130 when interrupted
 * @command_line: the whole command line, recorded in the report
 */
cli::Verb add_peers(CLI::App& bench, const std::string& command_line);

} // namespace esptun::bench::peers
