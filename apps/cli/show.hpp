// What an operator reads: the status JSON of a running endpoint as text for
// people (`show`, in the spirit of `wg show` and `swanctl --list-sas`) or in
// the Prometheus text format (`status --format prometheus`), and where the
// control sockets are.
#pragma once

#include "service/json_io.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace esptun::cli {

/// One endpoint's status as read from its control socket.
struct EndpointStatus {
	std::string socket;
	service::Json json;
};

/**
 * render_show() - the human view of one endpoint: interface, then each peer
 * with its endpoint, keying, last packet, transfer and SAs (IKE SAs under
 * their peer), then the non-zero drops
 * @colour:      ANSI colour (the caller decides: a TTY and no NO_COLOR)
 * @now_unix_ms: the wall clock, for "3 seconds ago"
 */
std::string render_show(const service::Json& status, bool colour, int64_t now_unix_ms);

/**
 * render_prometheus() - the counters of every endpoint in the Prometheus
 * text exposition format (version 0.0.4), one HELP/TYPE block per metric,
 * the endpoints told apart by the label interface="..."
 */
std::string render_prometheus(const std::vector<EndpointStatus>& endpoints);

/**
 * running_sockets() - the control sockets in conf::kControlSocketDir (the
 * endpoints started without their own control_socket), sorted
 */
std::vector<std::string> running_sockets();

} // namespace esptun::cli
