// Which tun side the data planes get (config [tunnel] tun_io): vhost-net is
// opened for "vhost" and "auto" before any interface exists; "auto" falls
// back to direct tun I/O with a one-line reason when that fails.
#pragma once

#include "conf/config.hpp"
#include "platform/vhost_net.hpp"

#include <optional>
#include <string>

namespace esptun::service {

struct TunIoChoice {
	std::optional<platform::VhostNet> vhost; ///< set when the mode is "vhost"
	std::string mode;                        ///< "vhost" or "direct"
	std::string reason;                      ///< why, for the log and the status JSON
};

/**
 * choose_tun_io() - open vhost-net as @io asks
 * @io:   the config's tun_io
 * @path: the vhost-net device (tests pass another)
 *
 * Return: the choice. "auto" never throws for a vhost-net problem: the reason
 * then reads "vhost-net unavailable: /dev/vhost-net: No such file or
 * directory; using direct tun I/O". "vhost" throws std::runtime_error with the
 * same facts instead.
 */
TunIoChoice choose_tun_io(conf::TunIo io, const std::string& path = platform::kVhostNetPath);

/**
 * vhost_fallback_reason() - the reason "auto" gives for direct I/O after @err
 * (a set-up step of vhost-net failed with @err)
 */
std::string vhost_fallback_reason(const std::exception& err);

} // namespace esptun::service
