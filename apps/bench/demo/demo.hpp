// `esptun-bench demo`: two gateways in two network namespaces, a ping each
// way and a TCP transfer through the tunnel, then a summary of both
// gateways' status. Needs root; leaves nothing behind.
#pragma once

#include <string>
#include <vector>

namespace esptun::bench::demo {

/// Usage lines of the demo command (for the top-level usage text).
extern const char* const kDemoUsage;

/**
 * run_demo() - the demo command
 * @args: the arguments after "demo"
 * Return: the process exit status: 0 when every step passed, 1 when one
 * failed, 2 for a usage error, 130 when interrupted.
 */
int run_demo(const std::vector<std::string>& args);

} // namespace esptun::bench::demo
