// ICMP echo through the tunnel, in C++ (no ping(8)): the demo's latency probe and
// compare's check that a tunnel is up.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <string>
#include <vector>

namespace esptun::bench::lab {

struct PingResult {
	unsigned sent = 0;
	std::vector<double> rtt_ms; ///< one per reply received, in order

	unsigned received() const noexcept { return static_cast<unsigned>(rtt_ms.size()); }
	/// to_text() / from_text() - carry the result from a child over a pipe
	std::string to_text() const;
	static PingResult from_text(const std::string& text);
};

/// RttSummary - min / median / max of a set of round-trip times, in ms.
struct RttSummary {
	double min = 0, median = 0, max = 0;
	static RttSummary of(std::vector<double> rtt_ms);
};

/**
 * ping() - send @count ICMP echo requests to @dst, one every @interval
 * @dst:     IPv4 address in dotted form
 * @timeout: how long to wait for each reply
 *
 * Uses a raw ICMP socket (needs root or CAP_NET_RAW): ping sockets
 * (SOCK_DGRAM) are off in a fresh namespace, whose net.ipv4.ping_group_range
 * is "1 0". Each request waits for its own reply (or @timeout) before the
 * next is sent, so RTTs are not disturbed by queueing. Runs in the caller's
 * network namespace. Throws on socket errors, not on lost replies.
 */
PingResult ping(const std::string& dst, unsigned count, Millis interval, Millis timeout);

} // namespace esptun::bench::lab
