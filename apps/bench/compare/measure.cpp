// The comparison's measurements: iperf3, ping(8), UDP request/response, /proc CPU.
#include "apps/bench/compare/measure.hpp"

#include "apps/bench/lab/command.hpp"
#include "base/error.hpp"
#include "platform/unique_fd.hpp"
#include "service/json_io.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

namespace esptun::bench::compare {

using namespace lab;
using service::Json;
using service::parse_json;
namespace {

constexpr uint16_t kIperfPort = 5201;
constexpr size_t kRrPayload = 64;

/// listening() - true when process @pid's namespace has a TCP listener on @port
bool listening(pid_t pid, uint16_t port) {
	char want[8];
	std::snprintf(want, sizeof want, ":%04X", port);
	for (const char* file : {"/net/tcp", "/net/tcp6"}) {
		std::ifstream in("/proc/" + std::to_string(pid) + file);
		std::string line;
		std::getline(in, line); // header
		while (std::getline(in, line)) {
			std::istringstream f(line);
			std::string sl, local, remote, state;
			f >> sl >> local >> remote >> state;
			if (state == "0A" && local.size() > 5 &&
			    local.compare(local.size() - 5, 5, want) == 0)
				return true;
		}
	}
	return false;
}

/// number_at() - the number at @path in @doc, or NaN
double number_at(const Json& doc, std::initializer_list<std::string_view> path) {
	return service::json_number(service::json_at(doc, path), std::nan(""));
}

} // namespace

double percentile(std::vector<double> v, double q) {
	if (v.empty()) return 0;
	std::sort(v.begin(), v.end());
	auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
	return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

LatencyStats LatencyStats::of(unsigned sent, std::vector<double> rtt_ms) {
	LatencyStats s;
	s.sent = sent;
	s.received = static_cast<unsigned>(rtt_ms.size());
	s.p50 = percentile(rtt_ms, 0.50);
	s.p99 = percentile(rtt_ms, 0.99);
	return s;
}

namespace {

/// A running iperf3 test: its one-off server and its client, whose JSON
/// goes to @out.
struct IperfRun {
	IperfTest test;
	unsigned seconds;
	Child server, client;
	std::string out;
};

/**
 * start_iperf() - start a one-off server in @server_ns on @port, then the
 * client of @test in @client_ns towards @dst, without waiting for it
 */
IperfRun start_iperf(const std::string& server_ns, const std::string& client_ns, const std::string& dst,
                     IperfTest test, unsigned seconds, uint16_t port, const std::string& scratch) {
	std::string iperf = find_program("iperf3");
	if (iperf.empty()) throw std::runtime_error("iperf3 not found in PATH");
	const std::string tag = std::to_string(port);
	IperfRun run{test, seconds, {}, {}, scratch + "/iperf3-client-" + tag + ".json"};
	run.server = spawn_in_netns(server_ns, {iperf, "-s", "-1", "-p", tag},
	                            scratch + "/iperf3-server-" + tag + ".log");
	auto deadline = Clock::now() + Millis(5000);
	while (!listening(run.server.pid(), port)) {
		if (run.server.poll()) throw std::runtime_error("iperf3 server exited at start");
		if (Clock::now() > deadline)
			throw std::runtime_error("iperf3 server not listening after 5 s");
		sleep_for(Millis(10));
	}
	std::vector<std::string> argv{
	    iperf, "-c", dst, "-p", tag, "-t", std::to_string(seconds), "-J", "--connect-timeout", "3000"};
	if (test == IperfTest::tcp4) argv.insert(argv.end(), {"-P", "4"});
	if (test == IperfTest::udp1400) argv.insert(argv.end(), {"-u", "-b", "0", "-l", "1400"});
	if (test == IperfTest::udp_paced)
		argv.insert(argv.end(), {"-u", "-b", std::to_string(kPacedUdpMbps) + "M", "-l", "1200"});
	std::error_code ec; // the log is appended to: each run starts a new one
	std::filesystem::remove(run.out, ec);
	run.client = spawn_in_netns(client_ns, argv, run.out);
	return run;
}

/// finish_iperf() - wait for @run's client and read what its receiver counted
IperfResult finish_iperf(IperfRun& run) {
	// iperf3 3.12's client can spin forever when the path dies mid-test.
	const int status = run.client.wait(Millis(run.seconds * 1000 + 20000));
	std::ifstream in(run.out);
	std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	// The log has stderr too: the JSON document is from the first '{' to the last '}'.
	const auto open = text.find('{'), close = text.rfind('}');
	Json doc;
	try {
		if (open == std::string::npos || close == std::string::npos || close < open)
			throw std::runtime_error("no JSON");
		doc = parse_json(text.substr(open, close - open + 1));
	} catch (const std::exception&) {
		throw std::runtime_error("iperf3 (" + describe_status(status) +
		                         ") printed no JSON: " + text.substr(0, 300));
	}
	if (const Json* err = service::json_at(doc, {"error"}))
		throw std::runtime_error("iperf3: " + service::json_string(err));
	if (!exited_ok(status)) throw std::runtime_error("iperf3 failed (" + describe_status(status) + ")");
	IperfResult res;
	double bps = number_at(doc, {"end", "sum_received", "bits_per_second"});
	if (std::isnan(bps)) throw std::runtime_error("iperf3 JSON has no end.sum_received");
	res.gbps = bps / 1e9;
	res.bytes = service::json_u64(service::json_at(doc, {"end", "sum_received", "bytes"}));
	if (run.test == IperfTest::udp1400 || run.test == IperfTest::udp_paced) {
		double loss = number_at(doc, {"end", "sum_received", "lost_percent"});
		if (std::isnan(loss)) loss = number_at(doc, {"end", "sum", "lost_percent"});
		res.loss_pct = std::isnan(loss) ? 0 : loss;
	}
	// The one-off server exits by itself after the test; if it lingers, the
	// Child's destructor stops it.
	for (int i = 0; i < 100 && !run.server.poll(); i++)
		sleep_for(Millis(10));
	return res;
}

} // namespace

IperfResult run_iperf(const std::string& server_ns, const std::string& client_ns, const std::string& dst,
                      IperfTest test, unsigned seconds, const std::string& scratch) {
	IperfRun run = start_iperf(server_ns, client_ns, dst, test, seconds, kIperfPort, scratch);
	return finish_iperf(run);
}

UnderLoad run_ping_under_load(const std::string& server_ns, const std::string& client_ns,
                              const std::string& dst, Load load, unsigned seconds, unsigned pings,
                              const std::string& scratch) {
	IperfRun tcp =
	    start_iperf(server_ns, client_ns, dst, load == Load::tcp1 ? IperfTest::tcp1 : IperfTest::tcp4,
	                seconds, kIperfPort, scratch);
	std::optional<IperfRun> udp;
	if (load == Load::tcp4_udp)
		udp = start_iperf(server_ns, client_ns, dst, IperfTest::udp_paced, seconds, kIperfPort + 1,
		                  scratch);
	// Let TCP fill the queues first (slow start takes a few round trips),
	// and stop probing before the load winds down.
	const unsigned total_ms = seconds * 1000, ramp_ms = std::min(1000u, total_ms / 3);
	const unsigned window_ms = total_ms > ramp_ms + 500 ? total_ms - ramp_ms - 500 : total_ms / 3;
	sleep_for(Millis(ramp_ms));
	UnderLoad r;
	r.ping = run_ping(client_ns, dst, std::max(10u, std::min(pings, window_ms / 10)), scratch);
	r.load_gbps = finish_iperf(tcp).gbps;
	if (udp) finish_iperf(*udp);
	return r;
}

LatencyStats run_ping(const std::string& ns, const std::string& dst, unsigned count,
                      const std::string& scratch) {
	CmdResult r = capture(ns, {"ping", "-n", "-i", "0.01", "-W", "1", "-c", std::to_string(count), dst},
	                      Millis(count * 20 + 15000), scratch);
	std::vector<double> rtt;
	std::istringstream in(r.out);
	for (std::string line; std::getline(in, line);) {
		auto at = line.find(" time=");
		if (at == std::string::npos || line.find("icmp_seq=") == std::string::npos) continue;
		rtt.push_back(std::strtod(line.c_str() + at + 6, nullptr));
	}
	if (rtt.empty() && !r.ok())
		throw std::runtime_error("ping " + dst + " (" + describe_status(r.status) +
		                         "): " + r.err.substr(0, 200));
	return LatencyStats::of(count, std::move(rtt));
}

LatencyStats run_udp_rr(const std::string& server_ns, const std::string& client_ns, const std::string& dst,
                        uint16_t port, unsigned count) {
	// The echo server: binds, says "ready" by closing its end of a pipe,
	// then answers every datagram with itself until it is stopped.
	Pipe ready = Pipe::make();
	Child server = fork_in_netns(server_ns, [&]() -> int {
		ready.read_end.reset();
		platform::UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		if (!s) throw_errno("socket");
		sockaddr_in any{};
		any.sin_family = AF_INET;
		any.sin_port = htons(port);
		if (bind(s.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) < 0) throw_errno("bind");
		ready.write_end.reset();
		uint8_t buf[2048];
		for (;;) {
			sockaddr_in from{};
			socklen_t len = sizeof from;
			ssize_t n =
			    recvfrom(s.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
			if (n < 0 && errno == EINTR) continue;
			if (n < 0) throw_errno("recvfrom");
			sendto(s.get(), buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
			       len);
		}
	});
	ready.write_end.reset();
	read_all(ready.read_end.get(), Clock::now() + Millis(5000));
	if (server.poll()) throw std::runtime_error("UDP echo server failed to start");

	std::string text = run_collect(
	    client_ns,
	    [&] {
		    platform::UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		    if (!s) throw_errno("socket");
		    sockaddr_in to{};
		    to.sin_family = AF_INET;
		    to.sin_port = htons(port);
		    if (inet_pton(AF_INET, dst.c_str(), &to.sin_addr) != 1)
			    throw std::runtime_error("bad address " + dst);
		    if (connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) < 0)
			    throw_errno("connect");
		    std::ostringstream out;
		    out.precision(6);
		    uint8_t req[kRrPayload]{}, rsp[2048];
		    for (uint32_t seq = 1; seq <= count; seq++) {
			    std::memcpy(req, &seq, sizeof seq);
			    auto t0 = Clock::now();
			    if (send(s.get(), req, sizeof req, 0) < 0 && errno != ECONNREFUSED)
				    throw_errno("send");
			    auto deadline = t0 + Millis(1000);
			    while (Clock::now() < deadline) {
				    pollfd p{s.get(), POLLIN, 0};
				    auto left =
				        std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
				    if (::poll(&p, 1, static_cast<int>(std::max<long>(left, 1))) <= 0)
					    continue;
				    ssize_t n = recv(s.get(), rsp, sizeof rsp, 0);
				    uint32_t got = 0;
				    if (n >= 4) std::memcpy(&got, rsp, sizeof got);
				    if (n == static_cast<ssize_t>(sizeof req) && got == seq) {
					    out << std::chrono::duration<double, std::milli>(Clock::now() -
					                                                     t0)
					               .count()
					        << "\n";
					    break;
				    }
			    }
		    }
		    return out.str();
	    },
	    Millis(count * 1000 + 10000));
	std::vector<double> rtt;
	std::istringstream in(text);
	for (double v; in >> v;)
		rtt.push_back(v);
	return LatencyStats::of(count, std::move(rtt));
}

} // namespace esptun::bench::compare
