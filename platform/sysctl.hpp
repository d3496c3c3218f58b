// Per-interface kernel settings under /proc/sys, for set-up only.
#pragma once

#include <string_view>

namespace esptun::platform {

/**
 * set_ipv6_enabled() - turn IPv6 on or off for one interface
 * @ifname:  the interface
 * @enabled: false writes 1 to net/ipv6/conf/@ifname/disable_ipv6
 *
 * A tunnel with no IPv6 address still gets a link-local one, and the kernel
 * then sends router solicitations and MLD reports into it that no peer
 * accepts; turning IPv6 off keeps such packets off the tunnel.
 * Throws SystemError, except when the kernel has no IPv6 at all (nothing to do).
 */
void set_ipv6_enabled(std::string_view ifname, bool enabled);

} // namespace esptun::platform
