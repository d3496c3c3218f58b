// `esptun-bench compare`, in the order it runs:
//   1. options; root; iperf3 and ping present; leftovers of killed runs removed
//   2. temp dir (0700) and the underlay: two namespaces, one veth
//   3. each selected subject: not installed / skipped (with the reason), or
//      started; one that fails to start is reported as failed; the version of
//      each that is there
//   4. the tests, each one round-robin over the running subjects (so machine
//      noise hits them alike): TCP 1 stream (with the tunnel processes' CPU
//      time), TCP 4 streams, UDP 1400 bytes at full rate, ping, ping under
//      one TCP stream and under four plus a paced UDP flow, UDP
//      request/response; after each, an estimate of the time left
//   5. table on the terminal; JSON, CSV and SVG files
// Everything made in 2-3 is undone by destructors, in reverse order, on
// success, failure and SIGINT/SIGTERM alike.
#include "apps/bench/compare/compare.hpp"

#include "apps/bench/compare/measure.hpp"
#include "apps/bench/compare/report.hpp"
#include "apps/bench/compare/subjects.hpp"
#include "apps/bench/lab/cli.hpp"
#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/proc_stats.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/run_info.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace esptun::bench::compare {

using namespace lab;
using cli::UsageError;

namespace {

constexpr uint16_t kRrPort = 7007;
constexpr size_t kMaxWireguardGo = 4;

struct CompareOptions {
	bool quick = false;
	unsigned duration = 0; ///< 0: 10 s, or 2 s with --quick
	std::string json, csv, svg, out_dir = ".", gateway;
	std::vector<std::string> peers;        ///< empty: all
	std::vector<std::string> wireguard_go; ///< --wireguard-go, in order; empty: PATH's
	std::string command;
};

/// write_text() - replace @path with @text; throws on failure
void write_text(const std::string& path, const std::string& text) {
	std::FILE* f = std::fopen(path.c_str(), "w");
	if (!f) throw_errno("create " + path);
	bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
	ok = std::fclose(f) == 0 && ok;
	if (!ok) throw_errno("write " + path);
}

/// A started subject and its row of results.
struct Live {
	Subject* subject;
	Row* row;
};

/**
 * Eta - an estimate of the time the tests have left
 *
 * Each test on each subject has a planned length: an iperf3 test its -t
 * plus about a second to start a server, connect and tear down; ping its
 * count at 10 ms apart; UDP-RR its count at half a millisecond. What is
 * left of the plan is scaled by how long the steps done so far took against
 * their plan, so a slow machine or a retry shows in the estimate.
 */
class Eta {
public:
	void plan(double seconds) { total_ += seconds; }
	void start() { t0_ = Clock::now(); }
	void done(double planned) { done_ += planned; }
	double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
	/// left() - seconds still to go, by the plan scaled to the pace so far
	double left() const {
		const double pace = done_ > 0 ? std::clamp(elapsed() / done_, 0.5, 4.0) : 1.0;
		return std::max(0.0, total_ - done_) * pace;
	}

private:
	double total_ = 0, done_ = 0;
	Clock::time_point t0_ = Clock::now();
};

/// duration_text() - "45 s" or "3 min 05 s"
std::string duration_text(double seconds) {
	const auto s = static_cast<unsigned>(seconds + 0.5);
	char buf[32];
	if (s < 60)
		std::snprintf(buf, sizeof buf, "%u s", s);
	else
		std::snprintf(buf, sizeof buf, "%u min %02u s", s / 60, s % 60);
	return buf;
}

/**
 * round_robin() - run test @label once on every live subject, in order
 * @planned: the seconds one step is expected to take (for @eta)
 *
 * A test that fails is tried once more (a flood on two shared cores can
 * cost iperf3 its control connection); a second failure is recorded on
 * that subject's row and the other subjects go on. The line ends with the
 * estimate of the time left.
 */
void round_robin(std::vector<Live>& live, const std::string& label, double planned, Eta& eta,
                 const std::function<std::string(Live&)>& fn) {
	std::printf("  %-11s", (label + ":").c_str());
	std::fflush(stdout);
	for (auto& l : live) {
		std::string shown;
		for (int attempt = 1; attempt <= 2 && shown.empty(); attempt++) {
			throw_if_stopped();
			try {
				l.subject->check_alive();
				shown = fn(l);
			} catch (const Interrupted&) {
				throw;
			} catch (const std::exception& e) {
				if (attempt == 1) {
					std::printf(" (%s: retrying after: %s)", l.subject->name().c_str(),
					            std::string(e.what()).substr(0, 120).c_str());
					continue;
				}
				l.row->errors.push_back(label + ": " + e.what());
				shown = "FAILED";
			}
		}
		eta.done(planned);
		std::printf(" %s %s;", l.subject->name().c_str(), shown.c_str());
		std::fflush(stdout);
	}
	const double left = eta.left();
	if (left >= 0.5)
		std::printf("  [about %s left]\n", duration_text(left).c_str());
	else
		std::printf("\n");
}

std::string two(double v, const char* unit) {
	char buf[48];
	std::snprintf(buf, sizeof buf, "%.2f%s", v, unit);
	return buf;
}

int run(const CompareOptions& opt) {
	if (int n = remove_stale_leftovers(kPrefix))
		std::printf("removed %d leftover(s) of an earlier compare run that was killed\n", n);
	for (const char* tool : {"iperf3", "ping", "ip"})
		if (find_program(tool).empty())
			throw std::runtime_error(std::string(tool) +
			                         " not found in PATH (run scripts/setup.sh)");

	Report rep;
	rep.started = utc_now();
	rep.command = opt.command;
	rep.host = host_text();
	rep.quick = opt.quick;
	rep.duration_s = opt.duration;
	rep.pings = opt.quick ? 50 : 200;
	rep.rr_requests = opt.quick ? 300 : 2000;

	const std::string run_id = std::to_string(getpid());
	TempDir tmp("/tmp/" + std::string(kPrefix) + run_id + "-");
	SubjectOptions sopt;
	for (const auto& p : opt.wireguard_go) {
		// A bare name is looked up in PATH, as a shell would.
		std::string path = p.find('/') == std::string::npos ? find_program(p) : p;
		if (path.empty()) throw UsageError("--wireguard-go " + p + ": not found in PATH");
		path = std::filesystem::absolute(path).lexically_normal().string();
		sopt.wireguard_go.push_back({path, wireguard_go_version(path, tmp.path())});
	}
	if (sopt.wireguard_go.empty()) {
		std::string path = find_program("wireguard-go");
		sopt.wireguard_go.push_back(
		    {path, path.empty() ? "" : wireguard_go_version(path, tmp.path())});
	}
	std::vector<std::unique_ptr<Subject>> subjects = make_subjects(sopt);
	std::set<std::string> known;
	for (const auto& s : subjects) {
		known.insert(s->name());
		known.insert(s->family());
	}
	for (const auto& p : opt.peers)
		if (!known.count(p)) throw UsageError("unknown peer \"" + p + "\" in --peers");
	auto selected = [&](const Subject& s) {
		if (opt.peers.empty()) return s.in_default_set();
		for (const auto& p : opt.peers)
			if (p == s.name() || p == s.family()) return true;
		return false;
	};
	std::printf("esptun-bench compare%s: %u s per iperf3 test, %u pings, %u UDP requests; %s\n",
	            opt.quick ? " --quick" : "", rep.duration_s, rep.pings, rep.rr_requests,
	            rep.host.c_str());
	NetnsPair topo(underlay_layout(run_id));
	std::printf("  underlay  %s (%s) <-veth-> %s (%s)\n", topo.a().c_str(), kUnderA, topo.b().c_str(),
	            kUnderB);
	SubjectEnv env{&topo, run_id, tmp.path(),
	               opt.gateway.empty() ? self_dir() + "/esptun-gateway" : opt.gateway};

	// Declared after the NetnsPair: subjects stop their processes before the
	// namespaces are deleted.
	std::vector<std::unique_ptr<Subject>> chosen;
	for (auto& s : subjects)
		if (selected(*s)) chosen.push_back(std::move(s));
	rep.rows.resize(chosen.size());

	// Names in one column, as wide as the longest chosen one.
	int nw = 14;
	for (const auto& s : chosen)
		nw = std::max(nw, static_cast<int>(s->name().size()));
	std::vector<Live> live;
	for (size_t i = 0; i < chosen.size(); i++) {
		Subject& s = *chosen[i];
		Row& row = rep.rows[i];
		row.name = s.name();
		row.detail = s.detail();
		Availability av = s.availability(env);
		if (av.state != Availability::State::not_installed) {
			row.version = s.version(env);
			row.program = s.program(env);
		}
		if (av.state != Availability::State::ok) {
			row.status = av.state == Availability::State::skipped ? "skipped" : "not installed";
			row.reason = av.reason;
			std::printf("  %-*s %s: %s\n", nw, s.name().c_str(), row.status.c_str(),
			            av.reason.c_str());
			continue;
		}
		auto t0 = Clock::now();
		try {
			s.start(env);
			live.push_back({&s, &row});
			std::printf("  %-*s up after %.2f s (%s; %s)\n", nw, s.name().c_str(),
			            std::chrono::duration<double>(Clock::now() - t0).count(),
			            s.detail().c_str(),
			            row.version.empty() ? "version ?" : row.version.c_str());
		} catch (const Interrupted&) {
			throw;
		} catch (const std::exception& e) {
			row.status = "failed";
			row.reason = e.what();
			std::printf("  %-*s FAILED to start: %s\n", nw, s.name().c_str(), e.what());
			s.stop_processes();
		}
	}

	const double iperf_step = opt.duration + 1.0, ping_step = rep.pings * 0.01 + 0.3,
	             rr_step = rep.rr_requests * 0.0005 + 0.3;
	Eta eta;
	eta.plan(static_cast<double>(live.size()) * (5 * iperf_step + ping_step + rr_step));
	std::printf("measuring (each test round-robin over %zu subjects; about %s)\n", live.size(),
	            duration_text(eta.left()).c_str());
	eta.start();
	round_robin(live, "tcp-1", iperf_step, eta, [&](Live& l) {
		std::vector<pid_t> pids =
		    l.subject->counts_cpu() ? l.subject->tunnel_pids() : std::vector<pid_t>{};
		const double cpu0 = cpu_seconds(pids), all0 = machine_busy_seconds();
		IperfResult r = run_iperf(topo.b(), topo.a(), l.subject->dst(), IperfTest::tcp1, opt.duration,
		                          tmp.path());
		const double cpu1 = cpu_seconds(pids), all1 = machine_busy_seconds();
		l.row->tcp1_gbps = r.gbps;
		const double gb = static_cast<double>(r.bytes) / 1e9;
		if (l.subject->counts_cpu() && r.bytes > 0) l.row->cpu_s_per_gb = (cpu1 - cpu0) / gb;
		if (r.bytes > 0) l.row->machine_cpu_s_per_gb = (all1 - all0) / gb;
		return two(r.gbps, "");
	});
	round_robin(live, "tcp-4", iperf_step, eta, [&](Live& l) {
		IperfResult r = run_iperf(topo.b(), topo.a(), l.subject->dst(), IperfTest::tcp4, opt.duration,
		                          tmp.path());
		l.row->tcp4_gbps = r.gbps;
		return two(r.gbps, "");
	});
	round_robin(live, "udp-1400", iperf_step, eta, [&](Live& l) {
		IperfResult r = run_iperf(topo.b(), topo.a(), l.subject->dst(), IperfTest::udp1400,
		                          opt.duration, tmp.path());
		l.row->udp_gbps = r.gbps;
		l.row->udp_loss_pct = r.loss_pct;
		return two(r.gbps, "") + " (" + std::to_string(static_cast<int>(r.loss_pct + 0.5)) + "%)";
	});
	round_robin(live, "ping", ping_step, eta, [&](Live& l) {
		LatencyStats s = run_ping(topo.a(), l.subject->dst(), rep.pings, tmp.path());
		l.row->ping_sent = s.sent;
		l.row->ping_received = s.received;
		if (s.received == 0) throw std::runtime_error("no ping reply");
		l.row->ping_p50_ms = s.p50;
		l.row->ping_p99_ms = s.p99;
		return two(s.p50, "") + "/" + two(s.p99, "ms");
	});
	// Latency under load: the probes share the tunnel with bulk traffic
	// (issue 20); both loads run for the iperf3 test length.
	struct LoadCase {
		const char* label;
		Load load;
		std::optional<double> Row::*p50;
		std::optional<double> Row::*p99;
		std::optional<double> Row::*gbps;
		unsigned Row::*sent;
		unsigned Row::*received;
	};
	for (const LoadCase& lc :
	     {LoadCase{"ping+tcp1", Load::tcp1, &Row::load1_p50_ms, &Row::load1_p99_ms, &Row::load1_gbps,
	               &Row::load1_sent, &Row::load1_received},
	      LoadCase{"ping+tcp4u", Load::tcp4_udp, &Row::load4_p50_ms, &Row::load4_p99_ms, &Row::load4_gbps,
	               &Row::load4_sent, &Row::load4_received}})
		round_robin(live, lc.label, iperf_step, eta, [&](Live& l) {
			UnderLoad u = run_ping_under_load(topo.b(), topo.a(), l.subject->dst(), lc.load,
			                                  opt.duration, rep.pings, tmp.path());
			if (u.ping.received == 0) throw std::runtime_error("no ping reply under load");
			l.row->*lc.sent = u.ping.sent;
			l.row->*lc.received = u.ping.received;
			l.row->*lc.p50 = u.ping.p50;
			l.row->*lc.p99 = u.ping.p99;
			l.row->*lc.gbps = u.load_gbps;
			return two(u.ping.p50, "") + "/" + two(u.ping.p99, "ms");
		});
	round_robin(live, "udp-rr", rr_step, eta, [&](Live& l) {
		LatencyStats s = run_udp_rr(topo.b(), topo.a(), l.subject->dst(), kRrPort, rep.rr_requests);
		l.row->rr_sent = s.sent;
		l.row->rr_received = s.received;
		if (s.received == 0) throw std::runtime_error("no UDP reply");
		l.row->rr_p50_ms = s.p50;
		l.row->rr_p99_ms = s.p99;
		return two(s.p50, "") + "/" + two(s.p99, "ms");
	});

	rep.measure_s = eta.elapsed();
	std::printf("measured in %s\n\n%s", duration_text(rep.measure_s).c_str(), table_text(rep).c_str());
	std::filesystem::create_directories(opt.out_dir);
	const std::string json = opt.json.empty() ? opt.out_dir + "/compare.json" : opt.json;
	const std::string csv = opt.csv.empty() ? opt.out_dir + "/compare.csv" : opt.csv;
	const std::string svg = opt.svg.empty() ? opt.out_dir + "/compare.svg" : opt.svg;
	write_text(json, json_text(rep));
	write_text(csv, csv_text(rep));
	write_text(svg, svg_text(rep));
	std::printf("\nwrote %s, %s, %s\n", json.c_str(), csv.c_str(), svg.c_str());

	bool ok = true;
	for (const auto& row : rep.rows)
		if (row.status == "failed" || !row.errors.empty()) ok = false;
	std::printf("stopping tunnels; removing namespaces and temp files\n");
	return ok ? 0 : 1;
}

/// run_compare() - the compare command with @opt; the exit status
int run_compare(const CLI::App& verb, CompareOptions& opt) {
	if (opt.wireguard_go.size() > kMaxWireguardGo)
		return cli::report_usage_error(verb, "--wireguard-go at most " +
		                                         std::to_string(kMaxWireguardGo) + " times");
	if (opt.duration == 0) opt.duration = opt.quick ? 2 : 10;
	return run_as_root(verb, "tunnels", [&] { return run(opt); });
}

} // namespace

cli::Verb add_compare(CLI::App& bench, const std::string& command_line) {
	auto opt = std::make_shared<CompareOptions>();
	opt->command = command_line;
	CLI::App* verb = cli::add_verb(
	    bench, "compare", "esptun next to wireguard-go, OpenVPN, strongSwan, kernel tunnels (root)",
	    "Plain veth, esptun, wireguard-go, OpenVPN (GCM, CBC), strongSwan and the\n"
	    "kernel's WireGuard and XFRM ESP (where it has them) between two namespaces,\n"
	    "interleaved: iperf3 TCP 1/4 streams, UDP 1400 B, ping (idle, beside one TCP\n"
	    "stream, beside four and a 100 Mbit/s UDP flow) and UDP request/response\n"
	    "p50/p99, CPU s/GB (the tunnel's processes and the whole machine); writes\n"
	    "compare.{json,csv,svg} to DIR (default .).\n"
	    "Peers: veth, esptun, esptun-direct, esptun-vhost, wireguard-go, openvpn,\n"
	    "openvpn-gcm, openvpn-cbc, strongswan, kernel, kernel-wireguard, kernel-esp\n"
	    "(default all), and, only when named, esptun-direct-busypoll (busy_poll_us = 50),\n"
	    "esptun-direct-nowakepoll (wake_poll_us = 0), esptun-direct-nolimit\n"
	    "(queue_target_us = 0: no queue limit, no send flow queue) and\n"
	    "esptun-direct-realtime (worker_priority = \"realtime\"). --wireguard-go: the\n"
	    "wireguard-go program (default: the one in PATH); given more than once (up to\n"
	    "4), one row per build, named after its version. --quick: 2 s tests, 50 pings\n"
	    "(default 10 s, 200 pings). Needs root.");
	verb->add_flag("--quick", opt->quick, "2 s tests, 50 pings");
	verb->add_option("--duration", opt->duration, "seconds per iperf3 test (default 10, 2 with --quick)")
	    ->type_name("S")
	    ->check(cli::between(1, 600))
	    ->default_str("");
	verb->add_option("--peers", opt->peers, "the subjects (default: all)")
	    ->type_name("a,b,...")
	    ->delimiter(',')
	    ->default_str("");
	verb->add_option("--out-dir", opt->out_dir, "where compare.{json,csv,svg} go")->type_name("DIR");
	verb->add_option("--json", opt->json, "the JSON file (default DIR/compare.json)")->type_name("FILE");
	verb->add_option("--csv", opt->csv, "the CSV file (default DIR/compare.csv)")->type_name("FILE");
	verb->add_option("--svg", opt->svg, "the SVG file (default DIR/compare.svg)")->type_name("FILE");
	verb->add_option("--gateway", opt->gateway, "the esptun-gateway program")->type_name("PATH");
	verb->add_option("--wireguard-go", opt->wireguard_go, "a wireguard-go program; up to 4 times")
	    ->type_name("PATH")
	    ->allow_extra_args(false)
	    ->default_str("");
	return {verb, [verb, opt] { return run_compare(*verb, *opt); }};
}

} // namespace esptun::bench::compare
