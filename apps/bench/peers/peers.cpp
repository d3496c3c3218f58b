// `esptun-bench peers` (peers.hpp):
//
//   netns S0 .. S(K-1), one per spoke gateway      netns H (hub)
//   esptun-gateway 10.206.0.(10+k) <-- veth --> br0 10.206.0.1  esptun-gateway, N static peers
//   flow sources 10.81.k.(j+1) (lo)                flow ends 10.82.g.1 (lo), g = k*P + j
//
// N peers come from K = min(N, --spokes) spoke gateways with P = N/K peers
// each (two cores cannot run 64 gateways and their 64 flows without the
// peers' own per-packet costs, each flow thin, drowning the hub's): every
// peer has its own SAs, addresses and TCP flow, and the hub sees a peer per
// SA as it would see one per machine; the peers of one spoke share its
// address and port, so the hub's workers split the spokes, not the peers.
// The spokes' workers are always ordinary threads (worker_priority =
// "normal"; spoke_config() says why); the hub's as its default says.
// Every flow starts at once and runs unpaced; after --warmup seconds the
// receivers' notes (one per MiB, tcp_transfer.hpp) give each flow's bytes
// over the next --seconds. Static keys: the question is the data path,
// and IKE for 64 peers would only add set-up time.
#include "apps/bench/peers/peers.hpp"

#include "apps/bench/lab/cli.hpp"
#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/gateway_process.hpp"
#include "apps/bench/lab/netns_pair.hpp"
#include "apps/bench/lab/proc_stats.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/run_info.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/static_peer.hpp"
#include "apps/bench/lab/tcp_transfer.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "crypto/esp_transform.hpp"
#include "platform/netns.hpp"
#include "service/json_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <sstream>
#include <unistd.h>

namespace esptun::bench::peers {
namespace {

using namespace lab;
using service::Json;

constexpr const char* kPrefix = "esptun-peers-";
constexpr unsigned kMaxPeers = 200;  // 10.82.0.1 .. 10.82.199.1
constexpr unsigned kMaxSpokes = 200; // 10.206.0.10 .. 10.206.0.209
constexpr const char* kHubUnderlay = "10.206.0.1";
constexpr const char* kHubInner = "10.80.0.1"; // the hub's tun
constexpr uint16_t kFirstPort = 6000;
constexpr Millis kIdle{30000};

struct Options {
	std::string command;
	std::vector<unsigned> counts{1, 8, 64};
	unsigned seconds = 10;
	unsigned warmup = 2;
	unsigned spokes = 8;
	std::string congestion = "cubic";
	std::string cipher = "aes128-gcm";
	std::string gateway;
	std::string json_file;
	CLI::Option* json = nullptr;
};

std::string spoke_addr(unsigned k) { return "10.206.0." + std::to_string(10 + k); }
/// spoke_tun() - spoke @k's tun address (its flows' sources are on lo)
std::string spoke_tun(unsigned k) { return "10.83." + std::to_string(k) + ".1"; }
/// flow_source() - where the flow of spoke @k's peer @j comes from
std::string flow_source(unsigned k, unsigned j) {
	return "10.81." + std::to_string(k) + "." + std::to_string(j + 1);
}
/// flow_end() - where peer @g's flow goes: the hub's receiver
std::string flow_end(unsigned g) { return "10.82." + std::to_string(g) + ".1"; }

/// spokes_for() - how many spoke gateways carry @n peers (each the same number)
unsigned spokes_for(unsigned n, unsigned most_spokes) { return std::min(n, most_spokes); }

/// The namespaces: the hub's with a bridge, and one per spoke with a veth
/// into it; the flows' addresses on each side's lo.
class Topology {
public:
	Topology(const std::string& run_id, unsigned spokes, unsigned peers_per_spoke, unsigned peers)
	    : hub_(kPrefix + run_id + "-h") {
		const std::string& h = hub_.name();
		ip({"-n", h, "link", "set", "lo", "up"});
		ip({"-n", h, "link", "add", "br0", "type", "bridge"});
		ip({"-n", h, "addr", "add", std::string(kHubUnderlay) + "/24", "dev", "br0"});
		ip({"-n", h, "link", "set", "br0", "up"});
		for (unsigned g = 0; g < peers; g++)
			ip({"-n", h, "addr", "add", flow_end(g) + "/32", "dev", "lo"});
		for (unsigned k = 0; k < spokes; k++) {
			const auto& s = spokes_
			                    .emplace_back(std::make_unique<platform::NetnsGuard>(
			                        kPrefix + run_id + "-s" + std::to_string(k)))
			                    ->name();
			const std::string port = "sp" + std::to_string(k);
			ip({"-n", s, "link", "set", "lo", "up"});
			ip({"-n", s, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns",
			    h});
			ip({"-n", h, "link", "set", port, "master", "br0", "up"});
			ip({"-n", s, "addr", "add", spoke_addr(k) + "/24", "dev", "eth0"});
			ip({"-n", s, "link", "set", "eth0", "up"});
			for (unsigned j = 0; j < peers_per_spoke; j++)
				ip({"-n", s, "addr", "add", flow_source(k, j) + "/32", "dev", "lo"});
		}
	}
	const std::string& hub() const { return hub_.name(); }
	const std::string& spoke(unsigned k) const { return spokes_[k]->name(); }

private:
	platform::NetnsGuard hub_;
	std::vector<std::unique_ptr<platform::NetnsGuard>> spokes_;
};

/// One flow's outcome.
struct Flow {
	uint64_t bytes = 0;        ///< the whole transfer
	bool intact = false;       ///< count and hash equal on both ends
	uint64_t window_bytes = 0; ///< arrived in the measured window
	std::string error;
};

/// One count's outcome.
struct Row {
	unsigned peers = 0;
	unsigned spokes = 0; ///< gateways carrying them
	std::vector<Flow> flows;
	double window_s = 0;
	double hub_cpu_s = 0;     ///< in the window
	double spokes_cpu_s = 0;  ///< the peers' gateways, in the window
	double tcp_cpu_s = 0;     ///< the flows' senders and receivers, in the window
	double machine_cpu_s = 0; ///< the whole machine busy, in the window (of window_s x CPUs)
	unsigned hub_workers = 0;
	std::vector<uint64_t> worker_rx; ///< the hub's workers' underlay packets, whole run
	Json hub_drops = Json::object(); ///< the hub's drops by reason (those not 0), whole run
	/// The hub's tun writes, whole run: packets written, and those of them
	/// written merged into TCP super-packets, in how many writes.
	uint64_t tun_tx = 0, gro_segments = 0, gro_writes = 0;
	std::string error;

	double mbit(const Flow& f) const {
		return window_s > 0 ? double(f.window_bytes) * 8 / window_s / 1e6 : 0;
	}
	double aggregate_mbit() const {
		double s = 0;
		for (const Flow& f : flows)
			s += mbit(f);
		return s;
	}
	/// min_share() - the slowest flow against an equal split of the aggregate
	double min_share() const {
		if (flows.empty() || aggregate_mbit() <= 0) return 0;
		double lo = mbit(flows[0]);
		for (const Flow& f : flows)
			lo = std::min(lo, mbit(f));
		return lo / (aggregate_mbit() / double(flows.size()));
	}
	/// jain() - Jain's fairness index over the flows' rates (1: all equal)
	double jain() const {
		double s = 0, s2 = 0;
		for (const Flow& f : flows) {
			s += mbit(f);
			s2 += mbit(f) * mbit(f);
		}
		return s2 > 0 ? s * s / (double(flows.size()) * s2) : 0;
	}
	double cpu_s_per_gb() const {
		double bytes = 0;
		for (const Flow& f : flows)
			bytes += double(f.window_bytes);
		return bytes > 0 ? hub_cpu_s / (bytes / 1e9) : 0;
	}
	bool ok() const {
		if (!error.empty() || flows.size() != peers) return false;
		return std::all_of(flows.begin(), flows.end(), [](const Flow& f) {
			return f.intact && f.window_bytes > 0 && f.error.empty();
		});
	}
};

/// Files of one count's run are named after the count ("n8-hub.toml").
std::string hub_config(const TempDir& tmp, const std::string& tag, const std::vector<StaticPeer>& peers) {
	std::ostringstream t;
	t << "# esptun-bench peers: the hub (generated; keys are random per run)\n"
	  << "[tunnel]\n"
	  << "interface = \"pr0\"\n"
	  << "addresses = [\"" << kHubInner << "/24\"]\n"
	  << "listen = \"0.0.0.0:4500\"\n"
	  << "ike_port = 0\n"
	  << "control_socket = \"" << tmp.file(tag + "hub.sock") << "\"\n"
	  << "state_dir = \"" << tmp.file(tag + "hub.state") << "\"\n";
	for (const StaticPeer& p : peers)
		t << "\n" << static_peer_toml(p);
	const std::string path = tmp.file(tag + "hub.toml");
	write_private_file(path, t.str());
	return path;
}

/// spoke_config() - spoke @k with one [[peer]] per entry of @to_hub
std::string spoke_config(const TempDir& tmp, const std::string& tag, unsigned k,
                         const std::vector<StaticPeer>& to_hub) {
	const std::string name = tag + "s" + std::to_string(k);
	std::ostringstream t;
	t << "# esptun-bench peers: spoke " << k << " (generated; keys are random per run)\n"
	  << "[tunnel]\n"
	  << "interface = \"ps0\"\n"
	  << "addresses = [\"" << spoke_tun(k) << "/24\"]\n"
	  << "listen = \"" << spoke_addr(k) << ":4500\"\n"
	  << "ike_port = 0\n"
	  << "control_socket = \"" << tmp.file(name + ".sock") << "\"\n"
	  << "state_dir = \"" << tmp.file(name + ".state")
	  << "\"\n"
	  // The spokes stand in for peers on machines of their own. On the
	  // hub's two cores, real-time workers in some spokes and ordinary ones
	  // (stepped down) in others would split the CPU between the spokes as
	  // separate machines never would: one run had its slowest flow at 4%
	  // of a fair share that way, 90% with ordinary spokes. (Normal is a
	  // gateway's default; said here so that it stays so.)
	  << "worker_priority = \"normal\"\n";
	for (const StaticPeer& p : to_hub)
		t << "\n" << static_peer_toml(p);
	const std::string path = tmp.file(name + ".toml");
	write_private_file(path, t.str());
	return path;
}

void wait_ready(GatewayProcess& g) {
	const auto deadline = Clock::now() + Millis(30000);
	while (!g.status()) {
		g.check_alive();
		if (Clock::now() > deadline)
			throw std::runtime_error("gateway " + g.label() +
			                         " did not answer status within 30 s: " + g.status_error());
		sleep_for(Millis(50));
	}
}

/// measure() - N peers through the hub; errors go into the row
void measure(Row& row, const Topology& topo, const TempDir& tmp, const std::string& gateway,
             const crypto::CipherSpec& spec, const Options& opt) {
	const unsigned n = row.peers, k_n = row.spokes, p_n = n / k_n;
	const std::string tag = "n" + std::to_string(n) + "-";
	try {
		std::vector<StaticPeer> at_hub;
		std::vector<std::string> spoke_files;
		for (unsigned k = 0; k < k_n; k++) {
			std::vector<StaticPeer> to_hub;
			for (unsigned j = 0; j < p_n; j++) {
				const unsigned g = k * p_n + j;
				const SaKeys up = make_sa_keys(spec), down = make_sa_keys(spec, up.spi);
				at_hub.push_back({"p" + std::to_string(g), spoke_addr(k) + ":4500",
				                  flow_source(k, j) + "/32", spec, down, up});
				to_hub.push_back({"hub" + std::to_string(j),
				                  std::string(kHubUnderlay) + ":4500", flow_end(g) + "/32",
				                  spec, up, down});
			}
			spoke_files.push_back(spoke_config(tmp, tag, k, to_hub));
		}
		GatewayProcess hub("hub", topo.hub(), gateway, hub_config(tmp, tag, at_hub),
		                   tmp.file(tag + "hub.log"), tmp.file(tag + "hub.sock"));
		std::vector<std::unique_ptr<GatewayProcess>> spokes;
		for (unsigned k = 0; k < k_n; k++)
			spokes.push_back(std::make_unique<GatewayProcess>(
			    "s" + std::to_string(k), topo.spoke(k), gateway, spoke_files[k],
			    tmp.file(tag + "s" + std::to_string(k) + ".log"),
			    tmp.file(tag + "s" + std::to_string(k) + ".sock")));
		wait_ready(hub);
		for (auto& s : spokes)
			wait_ready(*s);

		// Receivers first: a sender's child must not hold their pipes.
		std::vector<std::unique_ptr<TcpReceiver>> rx;
		for (unsigned g = 0; g < n; g++)
			rx.push_back(
			    std::make_unique<TcpReceiver>(topo.hub(), flow_end(g), kFirstPort, kIdle));
		std::vector<std::unique_ptr<TcpSender>> tx;
		for (unsigned g = 0; g < n; g++) {
			SendOptions from;
			from.from = flow_source(g / p_n, g % p_n);
			from.congestion = opt.congestion;
			tx.push_back(std::make_unique<TcpSender>(topo.spoke(g / p_n), flow_end(g), kFirstPort,
			                                         UINT64_MAX, kIdle, from));
		}
		sleep_for(std::chrono::seconds(opt.warmup));
		const std::vector<pid_t> hub_pid{hub.pid()};
		std::vector<pid_t> spoke_pids, tcp_pids;
		for (auto& s : spokes)
			spoke_pids.push_back(s->pid());
		for (unsigned i = 0; i < n; i++) {
			tcp_pids.push_back(tx[i]->pid());
			tcp_pids.push_back(rx[i]->pid());
		}
		const double cpu0 = cpu_seconds(hub_pid), spokes0 = cpu_seconds(spoke_pids),
		             tcp0 = cpu_seconds(tcp_pids), machine0 = machine_busy_seconds();
		const auto t0 = Clock::now();
		sleep_for(std::chrono::seconds(opt.seconds));
		const auto t1 = Clock::now();
		row.hub_cpu_s = cpu_seconds(hub_pid) - cpu0;
		row.spokes_cpu_s = cpu_seconds(spoke_pids) - spokes0;
		row.tcp_cpu_s = cpu_seconds(tcp_pids) - tcp0;
		row.machine_cpu_s = machine_busy_seconds() - machine0;
		row.window_s = std::chrono::duration<double>(t1 - t0).count();
		for (auto& t : tx)
			t->stop();
		for (unsigned i = 0; i < n; i++) {
			Flow f;
			try {
				const TransferSide sent = tx[i]->result(kIdle);
				const TransferSide got = rx[i]->result(kIdle);
				f.bytes = sent.bytes;
				f.intact = sent.bytes == got.bytes && sent.hash == got.hash;
				f.window_bytes = got.bytes_by(t1) - got.bytes_by(t0);
			} catch (const Interrupted&) {
				throw;
			} catch (const std::exception& e) {
				f.error = e.what();
			}
			row.flows.push_back(f);
		}
		if (std::optional<Json> st = hub.status(Millis(10000))) {
			row.hub_workers = unsigned(service::json_u64(service::json_at(*st, {"workers"})));
			if (const Json* w = service::json_at(*st, {"per_worker"}); w && w->is_array())
				for (const Json& one : *w)
					row.worker_rx.push_back(
					    service::json_u64(service::json_at(one, {"udp_rx_packets"})));
			row.tun_tx = service::json_u64(service::json_at(*st, {"counters", "tun_tx_packets"}));
			row.gro_segments =
			    service::json_u64(service::json_at(*st, {"tun_io", "gro_segments"}));
			row.gro_writes = service::json_u64(service::json_at(*st, {"tun_io", "gro_writes"}));
			if (const Json* d = service::json_at(*st, {"drops"}); d && d->is_object())
				for (const auto& [reason, v] : d->items())
					if (service::json_u64(&v))
						row.hub_drops[reason] = service::json_u64(&v);
		}
		for (auto& s : spokes)
			if (const std::string e = s->stop(); !e.empty() && row.error.empty()) row.error = e;
		if (const std::string e = hub.stop(); !e.empty() && row.error.empty()) row.error = e;
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		row.error = e.what();
	}
}

Json row_json(const Row& r) {
	Json flows = Json::array();
	for (const Flow& f : r.flows) {
		Json j{{"bytes", f.bytes},
		       {"intact", f.intact},
		       {"window_bytes", f.window_bytes},
		       {"mbit", service::json_round3(r.mbit(f))}};
		if (!f.error.empty()) j["error"] = f.error;
		flows.push_back(j);
	}
	Json j{{"peers", r.peers},
	       {"peer_gateways", r.spokes},
	       {"window_s", service::json_round3(r.window_s)},
	       {"aggregate_mbit", service::json_round3(r.aggregate_mbit())},
	       {"min_share", service::json_round3(r.min_share())},
	       {"jain", service::json_round3(r.jain())},
	       {"hub_cpu_s", service::json_round3(r.hub_cpu_s)},
	       {"hub_cpu_s_per_gb", service::json_round3(r.cpu_s_per_gb())},
	       {"peers_cpu_s", service::json_round3(r.spokes_cpu_s)},
	       {"tcp_ends_cpu_s", service::json_round3(r.tcp_cpu_s)},
	       {"machine_busy_cpu_s", service::json_round3(r.machine_cpu_s)},
	       {"hub_workers", r.hub_workers},
	       {"hub_worker_udp_rx_packets", r.worker_rx},
	       {"hub_drops", r.hub_drops},
	       {"hub_tun_tx_packets", r.tun_tx},
	       {"hub_gro_segments", r.gro_segments},
	       {"hub_gro_writes", r.gro_writes},
	       {"flows", flows}};
	if (!r.error.empty()) j["error"] = r.error;
	return j;
}

void print_row(std::FILE* out, const Row& r) {
	if (!r.error.empty()) {
		std::fprintf(out, "  %5u %5u FAILED: %s\n", r.peers, r.spokes, r.error.c_str());
		return;
	}
	std::vector<double> rates;
	for (const Flow& f : r.flows)
		rates.push_back(r.mbit(f));
	std::sort(rates.begin(), rates.end());
	std::string workers;
	const double total = double(std::accumulate(r.worker_rx.begin(), r.worker_rx.end(), uint64_t(0)));
	for (uint64_t w : r.worker_rx)
		workers += (workers.empty() ? "" : "/") +
		           std::to_string(int(std::lround(total > 0 ? 100 * double(w) / total : 0)));
	std::fprintf(out, "  %5u %5u %10.0f %9.1f %9.1f %9.1f %9.2f %6.3f %9.2f  %u (%s%%)\n", r.peers,
	             r.spokes, r.aggregate_mbit(), rates.front(), rates[rates.size() / 2], rates.back(),
	             r.min_share(), r.jain(), r.cpu_s_per_gb(), r.hub_workers, workers.c_str());
	std::fprintf(
	    out,
	    "        CPU over the %.1f s: hub %.1f s, the peers' gateways %.1f s, the TCP ends %.1f s; "
	    "machine busy %.1f s\n",
	    r.window_s, r.hub_cpu_s, r.spokes_cpu_s, r.tcp_cpu_s, r.machine_cpu_s);
	const uint64_t writes = r.tun_tx - r.gro_segments + r.gro_writes;
	std::fprintf(
	    out, "        hub's tun: %.1f packets per write (%.0f%% of them merged into TCP super-packets)\n",
	    writes ? double(r.tun_tx) / double(writes) : 0.0,
	    r.tun_tx ? 100.0 * double(r.gro_segments) / double(r.tun_tx) : 0.0);
	if (!r.hub_drops.empty()) {
		std::string d;
		for (const auto& [reason, v] : r.hub_drops.items())
			d += (d.empty() ? "" : ", ") + reason + " " + std::to_string(service::json_u64(&v));
		std::fprintf(out, "        hub drops: %s\n", d.c_str());
	}
	for (size_t i = 0; i < r.flows.size(); i++)
		if (!r.flows[i].error.empty() || !r.flows[i].intact)
			std::fprintf(out, "      flow %zu: %s\n", i,
			             r.flows[i].error.empty() ? "count or hash differ"
			                                      : r.flows[i].error.c_str());
}

int run(const Options& opt) {
	if (int n = remove_stale_leftovers(kPrefix))
		std::fprintf(stderr, "removed %d leftover(s) of an earlier peers run that was killed\n", n);
	std::FILE* out = opt.json->count() && opt.json_file.empty() ? stderr : stdout;
	const std::string gateway = gateway_binary(opt.gateway);
	const crypto::CipherSpec* spec = crypto::find_cipher(opt.cipher);
	if (!spec) throw cli::UsageError("unknown cipher \"" + opt.cipher + "\"");
	const unsigned most = *std::max_element(opt.counts.begin(), opt.counts.end());
	unsigned most_spokes = 0, most_per_spoke = 0;
	for (unsigned n : opt.counts) {
		const unsigned k = spokes_for(n, opt.spokes);
		if (n % k)
			throw cli::UsageError(std::to_string(n) + " peers do not split evenly over " +
			                      std::to_string(k) + " peer gateways (--spokes)");
		most_spokes = std::max(most_spokes, k);
		most_per_spoke = std::max(most_per_spoke, n / k);
	}
	const std::string run_id = std::to_string(getpid());
	TempDir tmp("/tmp/" + std::string(kPrefix) + run_id + "-");
	const std::string version = version_word({gateway, "--version"}, "esptun-gateway ", tmp.path());
	std::fprintf(out,
	             "esptun-bench peers: esptun-gateway %s, %s; one unpaced TCP flow (%s) per peer into the "
	             "hub, %u s measured after %u s; %s\n",
	             version.c_str(), std::string(spec->name).c_str(), opt.congestion.c_str(), opt.seconds,
	             opt.warmup, host_text().c_str());
	Topology topo(run_id, most_spokes, most_per_spoke, most);
	std::fprintf(out, "  %5s %5s %10s %9s %9s %9s %9s %6s %9s  %s\n", "peers", "gws", "aggr Mb/s", "min",
	             "median", "max", "min/fair", "Jain", "CPU s/GB", "hub workers (rx split)");
	std::vector<Row> rows;
	for (unsigned n : opt.counts) {
		Row& r = rows.emplace_back();
		r.peers = n;
		r.spokes = spokes_for(n, opt.spokes);
		measure(r, topo, tmp, gateway, *spec, opt);
		print_row(out, r);
	}
	const Row* one = nullptr;
	for (const Row& r : rows)
		if (r.peers == 1 && r.ok()) one = &r;
	if (one && one->aggregate_mbit() > 0)
		for (const Row& r : rows)
			if (r.peers > 1 && r.ok())
				std::fprintf(out,
				             "  %u peers: aggregate %.0f%% of the single peer's; slowest "
				             "peer %.0f%% of a "
				             "fair share\n",
				             r.peers, 100 * r.aggregate_mbit() / one->aggregate_mbit(),
				             100 * r.min_share());
	bool ok = true;
	Json doc{{"command", opt.command},
	         {"started", utc_now()},
	         {"host", host_text()},
	         {"esptun", version},
	         {"cipher", std::string(spec->name)},
	         {"seconds", opt.seconds},
	         {"warmup", opt.warmup},
	         {"congestion", opt.congestion},
	         {"rows", Json::array()}};
	for (const Row& r : rows) {
		doc["rows"].push_back(row_json(r));
		ok = ok && r.ok();
	}
	if (opt.json->count()) write_json(doc, opt.json_file);
	return ok ? 0 : 1;
}

} // namespace

cli::Verb add_peers(CLI::App& bench, const std::string& command_line) {
	auto opt = std::make_shared<Options>();
	opt->command = command_line;
	CLI::App* verb = cli::add_verb(
	    bench, "peers", "one gateway's data path shared by many peers: throughput and fairness (root)",
	    "A hub esptun-gateway with N peers (static keys), each sending one unpaced TCP\n"
	    "flow into the hub, for each N of --counts in turn. The peers are carried by\n"
	    "min(N, --spokes) esptun-gateways, each in a namespace of its own with an equal\n"
	    "share of them (each peer its own SAs and addresses). After --warmup seconds,\n"
	    "each flow's bytes over the next --seconds (the receivers note every MiB):\n"
	    "aggregate Mbit/s, the slowest, median and fastest flow, the slowest against an\n"
	    "equal split of the aggregate, Jain's fairness index, the hub's CPU seconds per\n"
	    "GB and how its workers split the packets; then the aggregate against the\n"
	    "single peer's. Every flow's bytes are checked (count and hash on both ends).\n"
	    "Exit status 1 when a flow failed, arrived changed or moved nothing in the\n"
	    "window. Needs root.");
	verb->add_option("--counts", opt->counts, "numbers of peers, each measured in turn")
	    ->type_name("a,b")
	    ->delimiter(',')
	    ->check(cli::between(1, kMaxPeers))
	    ->default_str("1,8,64");
	verb->add_option("--seconds", opt->seconds, "measured seconds per count")
	    ->type_name("S")
	    ->check(cli::between(1, 600))
	    ->default_str("10");
	verb->add_option("--warmup", opt->warmup, "seconds before the measurement starts")
	    ->type_name("S")
	    ->check(cli::between(0, 60))
	    ->default_str("2");
	verb->add_option("--spokes", opt->spokes,
	                 "at most this many peer gateways; N peers are spread evenly over min(N, K)")
	    ->type_name("K")
	    ->check(cli::between(1, kMaxSpokes))
	    ->default_str("8");
	verb->add_option("--congestion", opt->congestion,
	                 "the flows' TCP congestion control (the machine's own default may be another)")
	    ->type_name("CC")
	    ->default_str("cubic");
	verb->add_option("--cipher", opt->cipher, "the peers' suite")
	    ->type_name("C")
	    ->default_str("aes128-gcm");
	verb->add_option("--gateway", opt->gateway, "the esptun-gateway program")->type_name("PATH");
	opt->json = add_json_option(*verb, opt->json_file);
	return {verb, [verb, opt] { return run_as_root(*verb, "gateways", [&] { return run(*opt); }); }};
}

} // namespace esptun::bench::peers
