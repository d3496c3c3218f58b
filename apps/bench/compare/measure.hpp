// `esptun-bench compare`: the measurements. Each runs between the two
// namespaces: iperf3 (TCP and UDP throughput), ping(8) (ICMP latency), a
// small UDP request/response pair written here (application-level latency),
// and the CPU time of the tunnel processes from /proc.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace esptun::bench::compare {

/// LatencyStats - round trips of one latency test, in milliseconds.
struct LatencyStats {
	unsigned sent = 0, received = 0;
	double p50 = 0, p99 = 0;
	static LatencyStats of(unsigned sent, std::vector<double> rtt_ms);
};

/**
 * percentile() - the nearest-rank percentile @q (0..1) of @v; 0 when empty
 */
double percentile(std::vector<double> v, double q);

/// IperfTest - which iperf3 run. udp_paced: 1200-byte datagrams at
/// kPacedUdpMbps, a flow that does not back off (a call, a video stream).
enum class IperfTest { tcp1, tcp4, udp1400, udp_paced };
inline constexpr unsigned kPacedUdpMbps = 100;

/// IperfResult - what the receiving end counted.
struct IperfResult {
	double gbps = 0;     ///< received bits per second / 1e9
	uint64_t bytes = 0;  ///< bytes received
	double loss_pct = 0; ///< UDP only
};

/**
 * run_iperf() - one iperf3 test from namespace @client_ns to @dst in @server_ns
 * @seconds: test length (-t)
 * @scratch: folder for stderr files
 *
 * A one-off server (iperf3 -s -1) is started for each test, so a test that
 * died half-way cannot leave a busy server for the next one. The UDP test
 * sends 1400-byte datagrams at full rate (-b 0). Throws std::runtime_error
 * when iperf3 fails or reports an error.
 */
IperfResult run_iperf(const std::string& server_ns, const std::string& client_ns, const std::string& dst,
                      IperfTest test, unsigned seconds, const std::string& scratch);

/// The load under which run_ping_under_load() probes.
enum class Load {
	tcp1,     ///< one saturating TCP stream
	tcp4_udp, ///< four TCP streams and a paced UDP flow
};

/// UnderLoad - the probes' round trips and what the load moved meanwhile.
struct UnderLoad {
	LatencyStats ping;
	double load_gbps = 0; ///< the TCP streams' received rate over the whole test
};

/**
 * run_ping_under_load() - ping from @client_ns to @dst while @load runs the
 * same way (iperf3 from @client_ns to @server_ns for @seconds)
 * @pings: most probes; fewer when the load's middle part (after a ramp-up
 *         of up to 1 s, ending half a second before the load) cannot hold
 *         them at 10 ms apart
 *
 * Probes and load share the tunnel and its queues: what a probe waits for
 * is the standing queue the load builds. Throws std::runtime_error when the
 * load or ping fails.
 */
UnderLoad run_ping_under_load(const std::string& server_ns, const std::string& client_ns,
                              const std::string& dst, Load load, unsigned seconds, unsigned pings,
                              const std::string& scratch);

/**
 * run_ping() - `ping -n -i 0.01 -c @count -W 1 @dst` in @ns, per-packet times
 * parsed from its output. Throws when ping cannot run at all.
 */
LatencyStats run_ping(const std::string& ns, const std::string& dst, unsigned count,
                      const std::string& scratch);

/**
 * run_udp_rr() - UDP request/response latency: @count 64-byte requests,
 * each sent when the previous reply arrived (or after 1 s without one), from
 * @client_ns to an echo server this function starts in @server_ns on @port.
 */
LatencyStats run_udp_rr(const std::string& server_ns, const std::string& client_ns, const std::string& dst,
                        uint16_t port, unsigned count);

} // namespace esptun::bench::compare
