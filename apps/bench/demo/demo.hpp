// `esptun-bench demo`: two gateways in two network namespaces, a ping each
// way and a TCP transfer through the tunnel, then a summary of both
// gateways' status. Needs root; leaves nothing behind.
#pragma once

#include "apps/cli/options.hpp"

namespace esptun::bench::demo {

/**
 * add_demo() - the demo command on @bench (esptun-bench's app) and what
 * runs it: exit status 0 when every step passed, 1 when one failed, 2 for a
 * usage error, 130 when interrupted
 */
cli::Verb add_demo(CLI::App& bench);

} // namespace esptun::bench::demo
