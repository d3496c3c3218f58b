// `esptun-bench compare`: plain veth, esptun and the userspace tunnels users
// pick instead (wireguard-go, OpenVPN 2.6, strongSwan with kernel-libipsec),
// side by side between two network namespaces, measured interleaved in one
// run. Needs root; leaves nothing behind.
#pragma once

#include <string>
#include <vector>

namespace esptun::bench::compare {

/// Usage lines of the compare command (for the top-level usage text).
extern const char* const kCompareUsage;

/**
 * run_compare() - the compare command
 * @args: the arguments after "compare"
 * Return: 0 when every subject that could run was measured, 1 when a subject
 * failed to start or a test failed, 2 for a usage error, 130 when interrupted.
 */
int run_compare(const std::vector<std::string>& args);

} // namespace esptun::bench::compare
