// `esptun-bench demo`: the whole tunnel on one machine, in the order it runs:
//   1. check root, pick the cipher, find esptun-gateway next to this binary
//   2. temp dir (0700), two namespaces joined by a veth pair
//   3. random SPIs and keys, two mirror-image configs
//   4. start a gateway in each namespace; wait until both answer `status`
//   5. ping A->B and B->A through the tunnel
//   6. TCP transfer A->B, byte count and hash checked on both ends
//   7. read both status JSONs, stop the gateways, print the summary
// Everything made in 2-4 is undone by destructors, in reverse order, on
// success, failure and SIGINT/SIGTERM alike.
#include "apps/bench/demo/demo.hpp"

#include "apps/bench/demo/gateway_config.hpp"
#include "apps/bench/lab/cli.hpp"
#include "apps/bench/lab/gateway_process.hpp"
#include "apps/bench/lab/netns_pair.hpp"
#include "apps/bench/lab/ping.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/run_info.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/tcp_transfer.hpp"
#include "apps/bench/lab/temp_dir.hpp"

#include <climits>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <unistd.h>

namespace esptun::bench::demo {

using namespace lab;
using service::Json;

namespace {

constexpr uint16_t kTcpPort = 5201;
constexpr Millis kIdleTimeout{10000};
const std::string kTunnelA = "10.99.0.1", kTunnelB = "10.99.0.2";
/// The prefix of every name a run creates: namespaces, its /tmp folder.
const std::string kPrefix = "esptun-demo-";

/**
 * underlay() - the namespace pair of this run
 *
 *   netns esptun-demo-PID-a                netns esptun-demo-PID-b
 *   veth0 10.201.0.1/24 <-----veth-----> veth0 10.201.0.2/24
 */
NetnsPair::Layout underlay() {
	const std::string run = kPrefix + std::to_string(getpid());
	return {run + "-a", run + "-b", "veth0", "veth0", "10.201.0.1", "10.201.0.2"};
}

struct DemoOptions {
	std::string cipher = "aes128-gcm";
	uint64_t bytes = 200'000'000;
	unsigned pings = 20;
	std::string gateway; ///< empty: esptun-gateway next to this binary
};

/**
 * count() - a check that turns "200000", "200M", "1G", "64k" (decimal
 * multipliers) into the whole number, at least 1 and at most @max
 */
CLI::Validator count(uint64_t max) {
	return CLI::Validator(
	    [max](std::string& text) -> std::string {
		    size_t used = 0;
		    uint64_t n = 0;
		    try {
			    if (!text.empty() && text[0] != '-') n = std::stoull(text, &used, 10);
		    } catch (const std::exception&) {
			    used = 0;
		    }
		    const std::string suffix = text.substr(used);
		    const uint64_t mul = suffix.empty()                   ? 1
		                         : suffix == "k" || suffix == "K" ? 1000
		                         : suffix == "M"                  ? 1000000
		                         : suffix == "G"                  ? 1000000000
		                                                          : 0;
		    if (used == 0 || mul == 0 || n == 0 || n > max / mul)
			    return "wants a count from 1 to " + std::to_string(max) + ", e.g. 200M, not '" +
			           text + "'";
		    text = std::to_string(n * mul);
		    return "";
	    },
	    "N[k|M|G]");
}

std::string human_bytes(double b) {
	const char* units[] = {"B", "kB", "MB", "GB", "TB"};
	int u = 0;
	while (b >= 1000 && u < 4) {
		b /= 1000;
		u++;
	}
	char buf[32];
	std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
	return buf;
}

/// The outcome of every step, for the summary and the exit status.
struct Results {
	std::optional<PingResult> ping_ab, ping_ba;
	std::optional<TransferSide> sent, received;
	std::optional<Json> status_a, status_b;
	std::vector<std::string> failures;

	/**
	 * attempt() - run one step; a failure is recorded and the demo goes on
	 * (so the summary still shows what the gateways counted). A stop
	 * request is not a failure of the step: it propagates.
	 */
	template <class F> void attempt(const std::string& step, F&& fn) {
		try {
			fn();
		} catch (const Interrupted&) {
			throw;
		} catch (const std::exception& e) {
			failures.push_back(step + ": " + e.what());
			std::printf("  %-12s FAILED: %s\n", step.c_str(), e.what());
		}
	}
};

/// run_ping() - @count echoes from namespace @netns to @dst; prints a line
PingResult run_ping(const std::string& label, const std::string& netns, const std::string& dst,
                    unsigned count) {
	Millis interval(50), timeout(1000);
	std::string text = run_collect(
	    netns, [&] { return ping(dst, count, interval, timeout).to_text(); },
	    Millis(5000) + count * (interval + timeout));
	PingResult r = PingResult::from_text(text);
	RttSummary s = RttSummary::of(r.rtt_ms);
	std::printf("  %-12s %u/%u replies, rtt min/median/max %.3f/%.3f/%.3f ms\n", label.c_str(),
	            r.received(), r.sent, s.min, s.median, s.max);
	if (r.received() == 0)
		throw std::runtime_error("no reply to any of " + std::to_string(r.sent) + " pings");
	return r;
}

/// run_transfer() - TCP from A to B through the tunnel; checks count and hash
void run_transfer(const NetnsPair& nets, uint64_t bytes, Results& res) {
	TcpReceiver receiver(nets.b(), kTunnelB, kTcpPort, kIdleTimeout);
	Millis budget = Millis(30000) + Millis(bytes / 2000); // a floor of 2 MB/s
	res.sent = TransferSide::from_text(run_collect(
	    nets.a(), [&] { return send_stream(kTunnelB, kTcpPort, bytes, kIdleTimeout).to_text(); },
	    budget));
	res.received = receiver.result(kIdleTimeout);
	const TransferSide &tx = *res.sent, &rx = *res.received;
	double gbps = static_cast<double>(tx.bytes) * 8 / tx.seconds / 1e9;
	bool same = tx.bytes == rx.bytes && tx.hash == rx.hash;
	std::printf("  %-12s %s in %.2f s = %.2f Gbit/s, received %s, hash %016llx %s\n", "tcp A->B",
	            human_bytes(static_cast<double>(tx.bytes)).c_str(), tx.seconds, gbps,
	            human_bytes(static_cast<double>(rx.bytes)).c_str(),
	            static_cast<unsigned long long>(rx.hash), same ? "matches" : "MISMATCH");
	if (!same)
		throw std::runtime_error("the stream arrived changed: sent " + std::to_string(tx.bytes) +
		                         " bytes, received " + std::to_string(rx.bytes) + ", hashes differ");
}

/// drops_text() - "0", or "auth_failed 3, replay 1" for the non-zero reasons
std::string drops_text(const Json& status) {
	const Json* drops = service::json_at(status, {"drops"});
	if (!drops || !drops->is_object()) return "?";
	std::string s;
	uint64_t total = 0;
	for (const auto& [reason, v] : drops->items()) {
		uint64_t n = service::json_u64(&v);
		total += n;
		if (n) s += (s.empty() ? "" : ", ") + reason + " " + std::to_string(n);
	}
	return total ? std::to_string(total) + " (" + s + ")" : "0";
}

/// u64_at() - the integer at @path under @v, 0 when @v is null or it is missing
uint64_t u64_at(const Json* v, std::initializer_list<std::string_view> path) {
	return service::json_u64(v ? service::json_at(*v, path) : nullptr);
}

/// string_at() - the string at @path under @v, "?" when missing
std::string string_at(const Json* v, std::initializer_list<std::string_view> path) {
	return service::json_string(v ? service::json_at(*v, path) : nullptr, "?");
}

/// print_gateway() - one gateway's block of the summary table: its first
/// (only) peer's cipher and both SAs, then its drops
void print_gateway(const std::string& side, const Json& st) {
	const Json* peers = service::json_at(st, {"peers"});
	const Json* peer = peers && peers->is_array() && !peers->empty() ? &peers->front() : nullptr;
	const struct {
		const char* label;
		std::string_view key;
	} sas[] = {{"out", "sa_out"}, {"in", "sa_in"}};
	for (const auto& sa : sas) {
		if (sa.key == "sa_out")
			std::printf("  %-4s %-22s %-8s %5llu", side.c_str(),
			            string_at(peer, {"cipher"}).c_str(),
			            string_at(&st, {"tun_io", "mode"}).c_str(),
			            static_cast<unsigned long long>(u64_at(&st, {"mtu"})));
		else
			std::printf("  %-4s %-22s %-8s %5s", "", "", "", "");
		std::printf("  %-3s 0x%08llx %10llu %10s\n", sa.label,
		            static_cast<unsigned long long>(u64_at(peer, {sa.key, "spi"})),
		            static_cast<unsigned long long>(u64_at(peer, {sa.key, "packets"})),
		            human_bytes(static_cast<double>(u64_at(peer, {sa.key, "bytes"}))).c_str());
	}
	std::printf("  %-4s drops: %s\n", "", drops_text(st).c_str());
}

void print_summary(const DemoOptions& opt, const Results& r) {
	std::printf("\nsummary (%s)\n", opt.cipher.c_str());
	for (const auto& [label, p] : {std::pair{"A->B", &r.ping_ab}, std::pair{"B->A", &r.ping_ba}}) {
		if (!*p) continue;
		RttSummary s = RttSummary::of((*p)->rtt_ms);
		std::printf("  ping %s  %u/%u  rtt min/median/max %.3f / %.3f / %.3f ms\n", label,
		            (*p)->received(), (*p)->sent, s.min, s.median, s.max);
	}
	if (r.sent && r.received)
		std::printf("  tcp A->B  %.2f Gbit/s (%s in %.2f s)\n",
		            static_cast<double>(r.sent->bytes) * 8 / r.sent->seconds / 1e9,
		            human_bytes(static_cast<double>(r.sent->bytes)).c_str(), r.sent->seconds);
	std::printf("\n  %-4s %-22s %-8s %5s  %-3s %-10s %10s %10s\n", "gw", "cipher", "tun_io", "mtu", "SA",
	            "spi", "packets", "bytes");
	if (r.status_a) print_gateway("A", *r.status_a);
	if (r.status_b) print_gateway("B", *r.status_b);
}

/// run() - steps 2-7; every resource is owned by a local and so cleaned up
int run(const DemoOptions& opt, const crypto::CipherSpec& spec, const std::string& gateway) {
	if (int n = remove_stale_leftovers(kPrefix))
		std::printf("removed %d leftover(s) of an earlier demo that was killed\n", n);
	TempDir tmp("/tmp/" + kPrefix + std::to_string(getpid()) + "-");
	std::printf("esptun-bench demo: %s, %u pings each way, %s over TCP\n", opt.cipher.c_str(), opt.pings,
	            human_bytes(static_cast<double>(opt.bytes)).c_str());
	NetnsPair nets(underlay());
	const NetnsPair::Layout& under = nets.layout();
	std::printf("  %-12s %s (%s) <-veth-> %s (%s)\n", "underlay", nets.a().c_str(), under.addr_a.c_str(),
	            nets.b().c_str(), under.addr_b.c_str());

	DemoSide a{"site-a", kTunnelA, under.addr_a, tmp.file("a.sock")};
	DemoSide b{"site-b", kTunnelB, under.addr_b, tmp.file("b.sock")};
	SaKeys a_to_b = make_sa_keys(spec), b_to_a = make_sa_keys(spec, a_to_b.spi);
	write_private_file(tmp.file("a.toml"), gateway_config(a, b, spec, a_to_b, b_to_a));
	write_private_file(tmp.file("b.toml"), gateway_config(b, a, spec, b_to_a, a_to_b));

	auto t0 = Clock::now();
	GatewayProcess gw_a("A", nets.a(), gateway, tmp.file("a.toml"), tmp.file("a.log"));
	GatewayProcess gw_b("B", nets.b(), gateway, tmp.file("b.toml"), tmp.file("b.log"));
	wait_until_ready(gw_a, gw_b, Millis(15000));
	std::printf("  %-12s A %s, B %s: both answer status after %.2f s\n", "gateways", kTunnelA.c_str(),
	            kTunnelB.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());

	Results r;
	r.attempt("ping A->B", [&] { r.ping_ab = run_ping("ping A->B", nets.a(), kTunnelB, opt.pings); });
	r.attempt("ping B->A", [&] { r.ping_ba = run_ping("ping B->A", nets.b(), kTunnelA, opt.pings); });
	if (r.ping_ab && r.ping_ba)
		r.attempt("tcp A->B", [&] { run_transfer(nets, opt.bytes, r); });
	else
		r.failures.push_back("tcp A->B: skipped, pings got no reply");
	r.attempt("status A", [&] { r.status_a = gw_a.status(); });
	r.attempt("status B", [&] { r.status_b = gw_b.status(); });

	for (GatewayProcess* g : {&gw_a, &gw_b})
		if (std::string err = g->stop(); !err.empty()) r.failures.push_back(err);
	print_summary(opt, r);

	if (r.failures.empty()) {
		std::printf("\ndemo passed; removing namespaces and temp files\n");
		return 0;
	}
	std::printf("\ndemo FAILED:\n");
	for (const auto& f : r.failures)
		std::printf("  - %s\n", f.c_str());
	std::printf("log of gateway A:\n%slog of gateway B:\n%s", gw_a.log_tail().c_str(),
	            gw_b.log_tail().c_str());
	return 1;
}

/// run_demo() - the demo command with @opt; the exit status
int run_demo(const CLI::App& verb, const DemoOptions& opt) {
	const crypto::CipherSpec* spec = crypto::find_cipher(opt.cipher);
	if (!spec) return cli::report_usage_error(verb, "unknown cipher '" + opt.cipher + "'");
	return run_as_root(verb, "gateways", [&] {
		const std::string gateway = opt.gateway.empty() ? gateway_binary() : opt.gateway;
		return run(opt, *spec, gateway);
	});
}

} // namespace

cli::Verb add_demo(CLI::App& bench) {
	auto opt = std::make_shared<DemoOptions>();
	CLI::App* verb =
	    cli::add_verb(bench, "demo", "two gateways in two namespaces: pings and a TCP transfer (root)",
	                  "Two gateways in two network namespaces: ping both ways and a TCP transfer\n"
	                  "through the tunnel, then both gateways' counters. Needs root.");
	std::vector<std::string> ciphers;
	for (const auto& c : crypto::all_ciphers())
		ciphers.emplace_back(c.name);
	verb->add_option("--cipher", opt->cipher, "the suite")->check(CLI::IsMember(ciphers));
	verb->add_option("--bytes", opt->bytes, "bytes of the TCP transfer")->transform(count(UINT64_MAX));
	verb->add_option("--pings", opt->pings, "pings each way")->transform(count(10000));
	verb->add_option("--gateway", opt->gateway,
	                 "the esptun-gateway program (default: the one beside this one)");
	return {verb, [verb, opt] { return run_demo(*verb, *opt); }};
}

} // namespace esptun::bench::demo
