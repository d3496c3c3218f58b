// `esptun-bench vhost-counts`: per-packet tun-side cost of a phase, from the
// gateways' exact counters. See vhost_counts.hpp for the three steps.
#include "apps/bench/vhost_counts/vhost_counts.hpp"

#include "service/control.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace esptun::bench::vhost_counts {

using cli::UsageError;
using service::Json;
using service::json_round3;
using service::parse_json;

namespace {

/// Goals from issue 3.
constexpr double kMinDirectShare = 0.95; // one in flight: share of direct writes
constexpr double kMaxBulkKicksPerPacket = 1.0 / 32;
constexpr double kMaxBulkSyscallsPerPacket = 0.1;

uint64_t u64_at(const Json& v, std::initializer_list<std::string_view> path) {
	const Json* n = service::json_at(v, path);
	if (!n || !n->is_number())
		throw std::runtime_error("status has no number at " + std::string(*path.begin()) + "." +
		                         std::string(*(path.end() - 1)) +
		                         " (a gateway built before the tun_syscalls counters?)");
	return service::json_u64(n);
}

std::string mode_of(const Json& status) {
	std::string mode = service::json_string(service::json_at(status, {"tun_io", "mode"}), "?");
	if (mode == "vhost") mode += " dwm=" + std::to_string(u64_at(status, {"tun_io", "direct_write_max"}));
	return mode;
}

/// add_delta() - @row += the counters of @after - @before (one gateway)
void add_delta(PhaseCounts& row, const Json& before, const Json& after) {
	auto d = [&](std::initializer_list<std::string_view> path) {
		const uint64_t a = u64_at(after, path), b = u64_at(before, path);
		if (a < b) throw std::runtime_error("a counter went backwards: was the gateway restarted?");
		return a - b;
	};
	row.to_tun += d({"counters", "tun_tx_packets"});
	row.from_tun += d({"counters", "tun_rx_packets"});
	row.tx_ring += d({"tun_io", "tx_ring_packets"});
	row.rx_ring += d({"tun_io", "rx_ring_packets"});
	row.direct_writes += d({"tun_io", "direct_writes"});
	row.ring_full += d({"tun_io", "ring_full"});
	row.rx_kicks += d({"tun_io", "rx_kicks"});
	row.tx_kicks += d({"tun_io", "tx_kicks"});
	row.rx_kicks_suppressed += d({"tun_io", "rx_kicks_suppressed"});
	row.tx_kicks_suppressed += d({"tun_io", "tx_kicks_suppressed"});
	row.needless_kicks += d({"tun_io", "needless_kicks"});
	row.tun_reads += d({"tun_io", "tun_syscalls", "read"});
	row.tun_writes += d({"tun_io", "tun_syscalls", "write"});
	row.polls += d({"tun_io", "polls"});
	row.poll_waits += d({"tun_io", "poll_waits"});
}

double ratio(uint64_t n, uint64_t d) noexcept { return d ? double(n) / double(d) : 0; }

std::string fmt(const char* f, double v) {
	char buf[32];
	std::snprintf(buf, sizeof buf, f, v);
	return buf;
}

/// The raw fields of a row, in JSON and in this order.
Json raw_json(const PhaseCounts& r) {
	Json j{{"mode", r.mode},
	       {"phase", r.phase},
	       {"to_tun", r.to_tun},
	       {"from_tun", r.from_tun},
	       {"tx_ring", r.tx_ring},
	       {"direct_writes", r.direct_writes},
	       {"rx_ring", r.rx_ring},
	       {"ring_full", r.ring_full},
	       {"tun_reads", r.tun_reads},
	       {"tun_writes", r.tun_writes},
	       {"rx_kicks", r.rx_kicks},
	       {"tx_kicks", r.tx_kicks},
	       {"rx_kicks_suppressed", r.rx_kicks_suppressed},
	       {"tx_kicks_suppressed", r.tx_kicks_suppressed},
	       {"needless_kicks", r.needless_kicks},
	       {"polls", r.polls},
	       {"poll_waits", r.poll_waits}};
	if (!r.accel.empty()) {
		j["accel"] = r.accel;
		j["rtt_p50_ms"] = json_round3(r.rtt_p50_ms);
		j["rtt_p99_ms"] = json_round3(r.rtt_p99_ms);
		j["mbit_s"] = json_round3(r.mbit_s);
	}
	return j;
}

double number_at(const Json& v, std::string_view key) {
	const Json* n = service::json_at(v, {key});
	if (!n || !n->is_number()) throw std::runtime_error("row has no number " + std::string(key));
	return n->get<double>();
}

PhaseCounts read_raw(const Json& v) {
	PhaseCounts r;
	r.mode = service::json_string(service::json_at(v, {"mode"}));
	r.phase = service::json_string(service::json_at(v, {"phase"}));
	auto n = [&](std::string_view k) { return u64_at(v, {k}); };
	r.to_tun = n("to_tun"), r.from_tun = n("from_tun");
	r.tx_ring = n("tx_ring"), r.direct_writes = n("direct_writes");
	r.rx_ring = n("rx_ring"), r.ring_full = n("ring_full");
	r.tun_reads = n("tun_reads"), r.tun_writes = n("tun_writes");
	r.rx_kicks = n("rx_kicks"), r.tx_kicks = n("tx_kicks");
	r.rx_kicks_suppressed = n("rx_kicks_suppressed"), r.tx_kicks_suppressed = n("tx_kicks_suppressed");
	r.needless_kicks = n("needless_kicks");
	r.polls = n("polls"), r.poll_waits = n("poll_waits");
	if (const Json* a = service::json_at(v, {"accel"})) {
		r.accel = service::json_string(a);
		r.rtt_p50_ms = number_at(v, "rtt_p50_ms"), r.rtt_p99_ms = number_at(v, "rtt_p99_ms");
		r.mbit_s = number_at(v, "mbit_s");
	}
	return r;
}

Json read_json_file(const std::string& path) {
	std::ifstream in(path);
	if (!in) throw std::runtime_error("cannot read " + path);
	std::stringstream ss;
	ss << in.rdbuf();
	return parse_json(ss.str());
}

int cmd_snapshot(const std::vector<std::string>& socks) {
	if (socks.empty()) throw UsageError("snapshot needs at least one control socket");
	Json out = Json::array();
	for (const std::string& sock : socks)
		out.push_back(parse_json(service::query_control(sock))); // refuses anything but JSON
	std::printf("%s\n", service::json_text(out).c_str());
	return 0;
}

/// positive() - a check that a value is a positive, finite number
CLI::Validator positive() {
	return CLI::Validator(
	    [](std::string& s) -> std::string {
		    char* end = nullptr;
		    const double v = std::strtod(s.c_str(), &end);
		    if (end == s.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
			    return "wants a positive number, not '" + s + "'";
		    return "";
	    },
	    "");
}

/// The arguments of `row`.
struct RowArgs {
	std::string phase, accel, ping_log;
	double bytes = 0, elapsed_ms = 0;
	std::vector<std::string> files; ///< BEFORE AFTER
};

int cmd_row(const RowArgs& args) {
	const std::string &phase = args.phase, &accel = args.accel, &ping_log = args.ping_log;
	const double bytes = args.bytes, elapsed_ms = args.elapsed_ms;
	const std::vector<std::string>& files = args.files;
	const bool timed = !ping_log.empty() || bytes > 0 || elapsed_ms > 0;
	if (timed && accel.empty()) throw UsageError("timed figures need --accel (tcg, kvm, ...)");
	if ((bytes > 0) != (elapsed_ms > 0)) throw UsageError("--bytes and --elapsed-ms go together");
	PhaseCounts r = phase_counts(read_json_file(files[0]), read_json_file(files[1]), phase);
	r.accel = accel;
	if (!ping_log.empty()) {
		std::ifstream in(ping_log);
		if (!in) throw std::runtime_error("cannot read " + ping_log);
		std::stringstream ss;
		ss << in.rdbuf();
		const std::vector<double> rtts = ping_rtts_ms(ss.str());
		if (rtts.empty()) throw std::runtime_error(ping_log + " has no ping round trips");
		r.rtt_p50_ms = percentile(rtts, 50), r.rtt_p99_ms = percentile(rtts, 99);
	}
	if (bytes > 0) r.mbit_s = bytes * 8 / (elapsed_ms * 1000);
	std::printf("%s\n", service::json_text(raw_json(r)).c_str());
	return 0;
}

/**
 * print_kick_split() - where the vhost rows' TX kicks come from, after the
 * counts table: TX kicks/packet = (TX batches / ring packets) x (kicks /
 * TX batch). The first factor is how many packets one gateway loop
 * iteration had for the ring (the sender's pace against the gateway's), the
 * second how many of those batches found the vhost worker asleep (the
 * worker's pace against the gateway's): both are timing, which is why
 * ring-only mode's kicks per packet is a figure and not a goal. The
 * needless kicks are not timing: 0 in every row.
 */
void print_kick_split(const std::vector<PhaseCounts>& rows) {
	bool any = false;
	for (const PhaseCounts& r : rows)
		any = any || r.mode.rfind("vhost", 0) == 0;
	if (!any) return;
	std::printf("\n%-12s %-13s %8s %8s %8s %8s %8s %8s\n", "mode", "phase", "TX ring", "TX", "pkts",
	            "TX kicks", "TX kicks", "needless");
	std::printf("%-12s %-13s %8s %8s %8s %8s %8s %8s\n", "", "", "pkts", "batches", "/batch", "",
	            "/batch", "kicks");
	for (const PhaseCounts& r : rows) {
		if (r.mode.rfind("vhost", 0) != 0) continue;
		const uint64_t b = r.tx_batches();
		auto cell = [&](double v) { return b ? fmt("%.2f", v) : std::string("-"); };
		std::printf("%-12s %-13s %8llu %8llu %8s %8llu %8s %8llu\n", r.mode.c_str(), r.phase.c_str(),
		            static_cast<unsigned long long>(r.tx_ring), static_cast<unsigned long long>(b),
		            cell(ratio(r.tx_ring, b)).c_str(), static_cast<unsigned long long>(r.tx_kicks),
		            cell(ratio(r.tx_kicks, b)).c_str(),
		            static_cast<unsigned long long>(r.needless_kicks));
	}
}

/// The timed figures of the rows that have them, after the counts table.
void print_timed(const std::vector<PhaseCounts>& rows) {
	bool any = false, emulated = false;
	for (const PhaseCounts& r : rows) {
		any = any || !r.accel.empty();
		emulated = emulated || r.accel == "tcg";
	}
	if (!any) return;
	std::printf("\n%-12s %-13s %-6s %12s %12s %10s\n", "mode", "phase", "accel", "RTT p50 ms",
	            "RTT p99 ms", "Mbit/s");
	for (const PhaseCounts& r : rows) {
		if (r.accel.empty()) continue;
		auto cell = [](double v, const char* f) { return v > 0 ? fmt(f, v) : std::string("-"); };
		std::printf("%-12s %-13s %-6s %12s %12s %10s\n", r.mode.c_str(), r.phase.c_str(),
		            r.accel.c_str(), cell(r.rtt_p50_ms, "%.3f").c_str(),
		            cell(r.rtt_p99_ms, "%.3f").c_str(), cell(r.mbit_s, "%.1f").c_str());
	}
	if (emulated)
		std::printf("NOTE: accel tcg = an emulated CPU: these times are not performance figures\n");
}

void print_table(const std::vector<PhaseCounts>& rows) {
	std::printf("%-12s %-13s %6s %6s %7s %9s %9s %9s %8s %8s %8s\n", "mode", "phase", "to-tun", "direct",
	            "from-tun", "sys/pkt", "sys/pkt", "sys/pkt", "kicks", "pkts", "wakeups");
	std::printf("%-12s %-13s %6s %6s %7s %9s %9s %9s %8s %8s %8s\n", "", "", "pkts", "share", "pkts",
	            "to-tun", "from-tun", "all", "/pkt", "/kick", "/pkt");
	for (const PhaseCounts& r : rows) {
		const std::string per_kick =
		    r.kicks() ? fmt("%.1f", ratio(r.packets(), r.kicks())) : std::string("-");
		std::printf(
		    "%-12s %-13s %6llu %5.1f%% %7llu %9.3f %9.3f %9.3f %8.4f %8s %8.3f\n", r.mode.c_str(),
		    r.phase.c_str(), static_cast<unsigned long long>(r.to_tun),
		    100 * ratio(r.direct_writes, r.to_tun), static_cast<unsigned long long>(r.from_tun),
		    ratio(r.to_tun_syscalls(), r.to_tun), ratio(r.from_tun_syscalls(), r.from_tun),
		    ratio(r.to_tun_syscalls() + r.from_tun_syscalls(), r.packets()),
		    ratio(r.kicks(), r.packets()), per_kick.c_str(), ratio(r.poll_waits, r.packets()));
	}
	print_kick_split(rows);
	print_timed(rows);
}

void print_json(const std::vector<PhaseCounts>& rows) {
	Json out{{"rows", Json::array()}};
	for (const PhaseCounts& r : rows) {
		Json row = raw_json(r);
		row["per_packet"] =
		    Json{{"direct_share", json_round3(ratio(r.direct_writes, r.to_tun))},
		         {"syscalls_to_tun", json_round3(ratio(r.to_tun_syscalls(), r.to_tun))},
		         {"syscalls_from_tun", json_round3(ratio(r.from_tun_syscalls(), r.from_tun))},
		         {"syscalls",
		          json_round3(ratio(r.to_tun_syscalls() + r.from_tun_syscalls(), r.packets()))},
		         {"kicks", json_round3(ratio(r.kicks(), r.packets()))},
		         {"wakeups", json_round3(ratio(r.poll_waits, r.packets()))},
		         {"polls", json_round3(ratio(r.polls, r.packets()))},
		         {"tx_ring_packets_per_batch", json_round3(ratio(r.tx_ring, r.tx_batches()))},
		         {"tx_kicks_per_batch", json_round3(ratio(r.tx_kicks, r.tx_batches()))}};
		Json& goals = row["goals"] = Json::array();
		for (const Goal& g : goals_for(r))
			goals.push_back(Json{{"goal", g.what},
			                     {"met", g.met},
			                     {"measured", g.measured},
			                     {"figure_only", g.figure_only}});
		out["rows"].push_back(std::move(row));
	}
	std::printf("%s\n", service::json_text(out).c_str());
}

/// The arguments of `table`.
struct TableArgs {
	bool json = false, check = false;
	std::string file; ///< ROWS
};

int cmd_table(const TableArgs& args) {
	const bool json = args.json, check = args.check;
	const std::string& file = args.file;
	std::ifstream in(file);
	if (!in) throw std::runtime_error("cannot read " + file);
	std::vector<PhaseCounts> rows;
	for (std::string line; std::getline(in, line);)
		if (line.find_first_not_of(" \t\r") != std::string::npos)
			rows.push_back(read_raw(parse_json(line)));
	if (json)
		print_json(rows);
	else
		print_table(rows);
	bool all_met = true;
	for (const PhaseCounts& r : rows)
		for (const Goal& g : goals_for(r)) {
			if (!g.figure_only) all_met = all_met && g.met;
			if (json) continue;
			if (g.figure_only)
				std::printf("FIGURE (timing, not held) %s: %s (%s)\n",
				            g.met ? "within" : "outside", g.what.c_str(), g.measured.c_str());
			else
				std::printf("GOAL %s: %s (%s)\n", g.met ? "met" : "MISSED", g.what.c_str(),
				            g.measured.c_str());
		}
	return check && !all_met ? 1 : 0;
}

} // namespace

PhaseCounts phase_counts(const Json& before, const Json& after, const std::string& phase) {
	if (!before.is_array() || !after.is_array() || before.size() != after.size() || before.empty())
		throw std::runtime_error("the snapshots must be arrays of the same gateways' status");
	PhaseCounts row;
	row.phase = phase;
	for (size_t i = 0; i < after.size(); i++) {
		const std::string m = mode_of(after[i]);
		if (mode_of(before[i]) != m) throw std::runtime_error("a gateway changed its tun_io mode");
		if (i == 0)
			row.mode = m;
		else if (row.mode != m)
			row.mode += "/" + m;
		add_delta(row, before[i], after[i]);
	}
	return row;
}

std::vector<Goal> goals_for(const PhaseCounts& r) {
	std::vector<Goal> goals;
	if (r.mode.rfind("vhost", 0) != 0) return goals;
	const std::string name = r.mode + " " + r.phase + ": ";
	const bool ring_only = r.mode == "vhost dwm=0";
	// Whatever the pace of sender, gateways and vhost workers: a kick only
	// when the device asked for one (SplitQueue::kick_unasked()).
	goals.push_back({name + "no needless kick", r.needless_kicks == 0,
	                 std::to_string(r.needless_kicks) + " of " + std::to_string(r.kicks()) + " kicks; " +
	                     std::to_string(r.tx_batches()) + " TX batches"});
	if (r.phase == "one-in-flight" && !ring_only) {
		const double share = ratio(r.direct_writes, r.to_tun);
		goals.push_back({name + "direct writes >= 95% of to-tun packets",
		                 r.to_tun > 0 && share >= kMinDirectShare,
		                 fmt("%.1f%%", 100 * share) + " of " + std::to_string(r.to_tun)});
		goals.push_back(
		    {name + "no TX kick", r.tx_kicks == 0, std::to_string(r.tx_kicks) + " TX kicks"});
	}
	if (r.phase == "one-in-flight" && ring_only)
		// One packet at a time cannot fill the ring: a direct write here
		// would mean the mode is not what it says.
		goals.push_back(
		    {name + "every to-tun packet through the TX ring", r.to_tun > 0 && r.direct_writes == 0,
		     std::to_string(r.direct_writes) + " direct writes of " + std::to_string(r.to_tun)});
	if (r.phase == "bulk") {
		if (ring_only)
			// The first packet after the idle time before the phase finds the
			// worker asleep: there is always a kick for the check above to judge.
			goals.push_back({name + "the TX ring was kicked", r.tx_kicks > 0,
			                 std::to_string(r.tx_kicks) + " TX kicks"});
		const double kicks = ratio(r.kicks(), r.packets());
		goals.push_back(
		    {name + "kicks/packet <= 1/32", r.packets() > 0 && kicks <= kMaxBulkKicksPerPacket,
		     std::to_string(r.kicks()) + " kicks / " + std::to_string(r.packets()) + " packets = 1/" +
		         (r.kicks() ? fmt("%.1f", 1 / kicks) : std::string("inf")),
		     ring_only});
		const double sys = ratio(r.to_tun_syscalls() + r.from_tun_syscalls(), r.packets());
		goals.push_back({name + "tun-side system calls/packet <= 0.1",
		                 r.packets() > 0 && sys <= kMaxBulkSyscallsPerPacket, fmt("%.3f", sys),
		                 ring_only});
	}
	return goals;
}

std::vector<double> ping_rtts_ms(std::string_view text) {
	std::vector<double> out;
	constexpr std::string_view kKey = " time=";
	for (size_t at = text.find(kKey); at != std::string_view::npos; at = text.find(kKey, at + 1)) {
		// Only "time=N ms" of a reply line; the summary line says "time 9003ms".
		const std::string num(text.substr(at + kKey.size(), 24));
		char* end = nullptr;
		const double v = std::strtod(num.c_str(), &end);
		if (end != num.c_str() && std::string_view(end).rfind(" ms", 0) == 0 && std::isfinite(v) &&
		    v >= 0)
			out.push_back(v);
	}
	return out;
}

double percentile(std::vector<double> v, double p) {
	if (v.empty()) return 0;
	std::sort(v.begin(), v.end());
	// Nearest rank: the smallest value with at least p% of the values <= it.
	const auto rank = size_t(std::ceil(p / 100 * double(v.size())));
	return v[std::clamp(rank, size_t(1), v.size()) - 1];
}

cli::Verb add_vhost_counts(CLI::App& bench) {
	CLI::App* verb = cli::add_verb(
	    bench, "vhost-counts", "per-packet tun-side cost of a phase from the gateways' counters",
	    "Three steps: snapshot the gateways' status before and after a phase, a row\n"
	    "of counter deltas per phase, a table of the rows (docs/vhost-counts.md).");
	verb->require_subcommand(1);

	auto socks = std::make_shared<std::vector<std::string>>();
	CLI::App* snapshot = cli::add_verb(
	    *verb, "snapshot",
	    "the status of running gateways (their control sockets) as one JSON array on stdout");
	snapshot->add_option("SOCKET", *socks, "a gateway's control socket")->required()->default_str("");

	auto row = std::make_shared<RowArgs>();
	CLI::App* row_verb = cli::add_verb(
	    *verb, "row", "one JSON line: the tun-side counter deltas between two snapshot files",
	    "One JSON line: the tun-side counter deltas between two snapshot files,\n"
	    "summed over the gateways, with their tun_io mode; with --accel also the\n"
	    "phase's ping RTT p50/p99 (from ping's output) or its throughput.");
	row_verb->add_option("--phase", row->phase, "the phase's name")->type_name("NAME")->required();
	row_verb->add_option("--accel", row->accel, "the VM's accelerator, for timed figures")
	    ->type_name("A");
	row_verb->add_option("--ping-log", row->ping_log, "ping's output during the phase")
	    ->type_name("FILE");
	row_verb->add_option("--bytes", row->bytes, "bytes moved in the phase")
	    ->type_name("N")
	    ->check(positive())
	    ->default_str("");
	row_verb->add_option("--elapsed-ms", row->elapsed_ms, "how long the phase took")
	    ->type_name("MS")
	    ->check(positive())
	    ->default_str("");
	row_verb->add_option("BEFORE AFTER", row->files, "the snapshot files")
	    ->expected(2)
	    ->required()
	    ->default_str("");

	auto table = std::make_shared<TableArgs>();
	CLI::App* table_verb =
	    cli::add_verb(*verb, "table", "per-packet system calls, kicks and wake-ups of each row",
	                  "Per-packet system calls, kicks and wake-ups of each row; --check exits 1 when\n"
	                  "a vhost row misses issue 3's goals (phases named one-in-flight and bulk);\n"
	                  "FIGURE lines are reported, not held.");
	table_verb->add_flag("--json", table->json, "JSON instead of the table");
	table_verb->add_flag("--check", table->check, "exit 1 when a goal is missed");
	table_verb->add_option("ROWS", table->file, "the lines written by `row`")->required();

	return {verb, [=] {
		        if (snapshot->parsed())
			        return cli::run_verb(*snapshot, [&] { return cmd_snapshot(*socks); });
		        if (row_verb->parsed())
			        return cli::run_verb(*row_verb, [&] { return cmd_row(*row); });
		        return cli::run_verb(*table_verb, [&] { return cmd_table(*table); });
	        }};
}

} // namespace esptun::bench::vhost_counts
