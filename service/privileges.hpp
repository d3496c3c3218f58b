// The start-up step that gives up root once the endpoint is set up
// (platform/privileges.hpp has the system calls and the reasons).
#pragma once

#include "conf/config.hpp"

#include <memory>

namespace esptun::service {

class DnsHelper;

/**
 * drop_privileges() - step 9 of run_service(), after everything that needs
 * root (tun, vhost-net, ports, routes, control socket) and before any thread
 * starts: unless [tunnel] drop_privileges = false, hand the state_dir to
 * [tunnel] user, become that user with CAP_NET_ADMIN only, set
 * no_new_privs and install the seccomp allow-list. Logs one line saying what
 * remains. An IKE client keeps @dns (start_helpers(); started here if null)
 * to run its DNS tools as root; otherwise @dns is ended. Throws
 * (SystemError, std::runtime_error) when any part fails: an endpoint never
 * runs with less protection than it was configured for.
 */
void drop_privileges(const conf::Config& config, std::unique_ptr<DnsHelper> dns = nullptr);

} // namespace esptun::service
