// `esptun-bench compare`: the results and their four renderings: an aligned
// table for the terminal, JSON, CSV, and a hand-written SVG chart.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace esptun::bench::compare {

/// Row - one subject's results; a missing figure is std::nullopt ("-").
struct Row {
	std::string name, detail;
	std::string version;       ///< of what is measured: "v0.0.20250522", "linux 6.1.0"; "" unknown
	std::string program;       ///< path of the program doing the tunnel work; "" for the kernel
	std::string status = "ok"; ///< ok | not installed | skipped | failed
	std::string reason;        ///< why not ok
	std::optional<double> tcp1_gbps, tcp4_gbps, udp_gbps, udp_loss_pct;
	std::optional<double> ping_p50_ms, ping_p99_ms, rr_p50_ms, rr_p99_ms;
	std::optional<double> cpu_s_per_gb;
	/// The whole machine's CPU time over the same test per GB (every subject,
	/// veth included): what the tunnel costs wherever the kernel does its
	/// work, in the tunnel's threads or in the transfer's own processes.
	std::optional<double> machine_cpu_s_per_gb;
	unsigned ping_sent = 0, ping_received = 0, rr_sent = 0, rr_received = 0;
	/// Ping while one TCP stream (load1) / four TCP streams and a paced UDP
	/// flow (load4) run through the tunnel, and what the TCP streams moved.
	std::optional<double> load1_p50_ms, load1_p99_ms, load1_gbps;
	std::optional<double> load4_p50_ms, load4_p99_ms, load4_gbps;
	unsigned load1_sent = 0, load1_received = 0, load4_sent = 0, load4_received = 0;
	std::vector<std::string> errors; ///< tests that failed: "tcp1: ..."
};

/// Ratio - esptun's figure divided by a peer's, from the same run.
struct Ratio {
	std::string peer;
	std::optional<double> tcp1;               ///< esptun TCP-1 / peer TCP-1 (higher is better)
	std::optional<double> cpu_per_gb;         ///< esptun CPU/GB / peer CPU/GB (lower is better)
	std::optional<double> machine_cpu_per_gb; ///< the same for the machine's CPU/GB
};

/// Report - everything one run measured.
struct Report {
	std::string started; ///< UTC, ISO 8601
	std::string command; ///< the command line
	std::string host;    ///< "N cores, kernel X"
	bool quick = false;
	unsigned duration_s = 0;
	unsigned pings = 0, rr_requests = 0;
	double measure_s = 0;                    ///< wall-clock seconds the tests took (start-up excluded)
	std::string reference = "esptun-direct"; ///< the esptun row ratios are taken from
	std::vector<Row> rows;

	/// ratios() - the reference row against every other tunnel row
	std::vector<Ratio> ratios() const;
};

/// table_text() - the aligned terminal table, the ratios and the notes
std::string table_text(const Report& r);
/// json_text() - the report as a JSON document
std::string json_text(const Report& r);
/// csv_text() - a header line and one line per subject
std::string csv_text(const Report& r);
/**
 * svg_text() - a standalone SVG: one row per subject (a <g class="subject">
 * each), TCP-1/TCP-4 throughput bars on a log scale on the left, ping
 * p50/p99 bars on the right
 */
std::string svg_text(const Report& r);

} // namespace esptun::bench::compare
