// Renderings of a comparison run: table, JSON, CSV, SVG.
#include "apps/bench/compare/report.hpp"

#include "service/json_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace esptun::bench::compare {
namespace {

/// fmt() - @v with @prec decimals, or "-" when absent
std::string fmt(const std::optional<double>& v, int prec) {
	if (!v) return "-";
	char buf[32];
	std::snprintf(buf, sizeof buf, "%.*f", prec, *v);
	return buf;
}

/// pair() - "a/b" of two optional figures
std::string pair(const std::optional<double>& a, const std::optional<double>& b, int prec) {
	if (!a && !b) return "-";
	return fmt(a, prec) + "/" + fmt(b, prec);
}

/// json_figure() - @v to six significant digits (as the table's precision
/// allows), or null when absent or not finite
service::Json json_figure(const std::optional<double>& v) {
	if (!v || !std::isfinite(*v)) return nullptr;
	char buf[32];
	std::snprintf(buf, sizeof buf, "%.6g", *v);
	return std::strtod(buf, nullptr);
}

/// under_load() - one latency-under-load result as a JSON object
service::Json under_load(const std::optional<double>& p50, const std::optional<double>& p99, unsigned sent,
                         unsigned received, const std::optional<double>& gbps) {
	return service::Json{{"p50_ms", json_figure(p50)},
	                     {"p99_ms", json_figure(p99)},
	                     {"sent", sent},
	                     {"received", received},
	                     {"load_gbps", json_figure(gbps)}};
}

std::string csv_field(const std::string& s) {
	if (s.find_first_of(",\"\n") == std::string::npos) return s;
	std::string out = "\"";
	for (char c : s)
		out += c == '"' ? std::string("\"\"") : std::string(1, c);
	return out + "\"";
}

std::string xml_escape(const std::string& s) {
	std::string out;
	for (char c : s) {
		switch (c) {
		case '<':
			out += "&lt;";
			break;
		case '>':
			out += "&gt;";
			break;
		case '&':
			out += "&amp;";
			break;
		case '"':
			out += "&quot;";
			break;
		default:
			out += c;
		}
	}
	return out;
}

/// first_line() - @s up to its first newline
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// version_text() - the row's version for the table: "?" when unknown
std::string version_text(const Row& row) { return row.version.empty() ? "?" : row.version; }

const Row* find_row(const Report& r, const std::string& name) {
	for (const auto& row : r.rows)
		if (row.name == name) return &row;
	return nullptr;
}

} // namespace

std::vector<Ratio> Report::ratios() const {
	std::vector<Ratio> out;
	const Row* ref = find_row(*this, reference);
	if (!ref || ref->status != "ok") return out;
	for (const auto& row : rows) {
		if (row.name == reference || row.name == "veth" || row.status != "ok") continue;
		Ratio q{row.name, {}, {}, {}};
		if (ref->tcp1_gbps && row.tcp1_gbps && *row.tcp1_gbps > 0)
			q.tcp1 = *ref->tcp1_gbps / *row.tcp1_gbps;
		if (ref->cpu_s_per_gb && row.cpu_s_per_gb && *row.cpu_s_per_gb > 0)
			q.cpu_per_gb = *ref->cpu_s_per_gb / *row.cpu_s_per_gb;
		if (ref->machine_cpu_s_per_gb && row.machine_cpu_s_per_gb && *row.machine_cpu_s_per_gb > 0)
			q.machine_cpu_per_gb = *ref->machine_cpu_s_per_gb / *row.machine_cpu_s_per_gb;
		out.push_back(q);
	}
	return out;
}

std::string table_text(const Report& r) {
	std::ostringstream t;
	char line[640];
	// Columns as wide as the longest name, description and version (a
	// variant such as esptun-direct-nowakepoll is longer than the usual ones).
	int nw = 14, dw = 38, vw = 7;
	for (const auto& row : r.rows) {
		nw = std::max(nw, int(row.name.size()));
		dw = std::max(dw, int(row.detail.size()));
		vw = std::max(vw, int(version_text(row).size()));
	}
	std::snprintf(line, sizeof line, "%-*s %-*s %-*s %7s %7s %14s %13s %13s %9s %9s %13s %13s\n", nw,
	              "subject", dw, "cipher / mode", vw, "version", "TCP-1", "TCP-4", "UDP-1400",
	              "ping p50/p99", "UDP-RR", "CPU/GB", "all CPU", "ping +TCP-1", "ping +TCP-4+U");
	t << line;
	std::snprintf(line, sizeof line, "%-*s %-*s %-*s %7s %7s %14s %13s %13s %9s %9s %13s %13s\n", nw, "",
	              dw, "", vw, "", "Gbit/s", "Gbit/s", "Gbit/s (loss)", "ms", "p50/p99 ms", "s", "s/GB",
	              "p50/p99 ms", "p50/p99 ms");
	t << line;
	for (const auto& row : r.rows) {
		if (row.status != "ok") {
			std::snprintf(line, sizeof line, "%-*s %-*s %-*s %s: %s\n", nw, row.name.c_str(), dw,
			              row.detail.c_str(), vw, version_text(row).c_str(), row.status.c_str(),
			              first_line(row.reason).c_str());
			t << line;
			continue;
		}
		std::string udp =
		    row.udp_gbps ? fmt(row.udp_gbps, 2) + " (" + fmt(row.udp_loss_pct, 0) + "%)" : "-";
		std::snprintf(line, sizeof line, "%-*s %-*s %-*s %7s %7s %14s %13s %13s %9s %9s %13s %13s\n",
		              nw, row.name.c_str(), dw, row.detail.c_str(), vw, version_text(row).c_str(),
		              fmt(row.tcp1_gbps, 2).c_str(), fmt(row.tcp4_gbps, 2).c_str(), udp.c_str(),
		              pair(row.ping_p50_ms, row.ping_p99_ms, 3).c_str(),
		              pair(row.rr_p50_ms, row.rr_p99_ms, 3).c_str(), fmt(row.cpu_s_per_gb, 1).c_str(),
		              fmt(row.machine_cpu_s_per_gb, 1).c_str(),
		              pair(row.load1_p50_ms, row.load1_p99_ms, 2).c_str(),
		              pair(row.load4_p50_ms, row.load4_p99_ms, 2).c_str());
		t << line;
	}
	auto ratios = r.ratios();
	if (!ratios.empty()) {
		t << "\n"
		  << r.reference
		  << " relative to each peer (same run; TCP-1 higher is better, CPU/GB and all CPU lower):\n";
		for (const auto& q : ratios) {
			std::snprintf(line, sizeof line, "  vs %-*s TCP-1 x%-8s CPU/GB x%-8s all CPU x%s\n",
			              nw, q.peer.c_str(), fmt(q.tcp1, 2).c_str(),
			              fmt(q.cpu_per_gb, 2).c_str(), fmt(q.machine_cpu_per_gb, 2).c_str());
			t << line;
		}
	}
	bool notes = false;
	for (const auto& row : r.rows) {
		for (const auto& e : row.errors) {
			if (!notes) t << "\nproblems:\n";
			notes = true;
			t << "  " << row.name << " " << first_line(e) << "\n";
		}
		if ((row.ping_sent && row.ping_received < row.ping_sent) ||
		    (row.rr_sent && row.rr_received < row.rr_sent)) {
			if (!notes) t << "\nproblems:\n";
			notes = true;
			t << "  " << row.name << ": lost " << row.ping_sent - row.ping_received << "/"
			  << row.ping_sent << " pings, " << row.rr_sent - row.rr_received << "/"
			  << row.rr_sent << " UDP requests\n";
		}
	}
	// Under load a lost probe is part of the figure (a queue overflowed), not a fault.
	bool lost = false;
	for (const auto& row : r.rows)
		if (row.load1_received < row.load1_sent || row.load4_received < row.load4_sent) {
			if (!lost) t << "\npings lost under load (no reply within 1 s):\n";
			lost = true;
			t << "  " << row.name << ": " << row.load1_sent - row.load1_received << "/"
			  << row.load1_sent << " beside TCP-1, " << row.load4_sent - row.load4_received << "/"
			  << row.load4_sent << " beside TCP-4+UDP\n";
		}
	return t.str();
}

std::string json_text(const Report& r) {
	service::Json j{{"tool", "esptun-bench compare"},
	                {"started", r.started},
	                {"command", r.command},
	                {"host", r.host},
	                {"quick", r.quick},
	                {"duration_s", r.duration_s},
	                {"pings", r.pings},
	                {"udp_rr_requests", r.rr_requests},
	                {"measure_s", json_figure(r.measure_s)}};
	service::Json& subjects = j["subjects"] = service::Json::array();
	for (const Row& row : r.rows)
		subjects.push_back(service::Json{
		    {"name", row.name},
		    {"detail", row.detail},
		    {"version", row.version},
		    {"program", row.program},
		    {"status", row.status},
		    {"reason", row.reason},
		    {"tcp1_gbps", json_figure(row.tcp1_gbps)},
		    {"tcp4_gbps", json_figure(row.tcp4_gbps)},
		    {"udp1400_gbps", json_figure(row.udp_gbps)},
		    {"udp1400_loss_pct", json_figure(row.udp_loss_pct)},
		    {"ping_p50_ms", json_figure(row.ping_p50_ms)},
		    {"ping_p99_ms", json_figure(row.ping_p99_ms)},
		    {"ping_sent", row.ping_sent},
		    {"ping_received", row.ping_received},
		    {"udp_rr_p50_ms", json_figure(row.rr_p50_ms)},
		    {"udp_rr_p99_ms", json_figure(row.rr_p99_ms)},
		    {"udp_rr_sent", row.rr_sent},
		    {"udp_rr_received", row.rr_received},
		    {"cpu_s_per_gb", json_figure(row.cpu_s_per_gb)},
		    {"machine_cpu_s_per_gb", json_figure(row.machine_cpu_s_per_gb)},
		    {"ping_under_tcp1", under_load(row.load1_p50_ms, row.load1_p99_ms, row.load1_sent,
		                                   row.load1_received, row.load1_gbps)},
		    {"ping_under_tcp4_udp", under_load(row.load4_p50_ms, row.load4_p99_ms, row.load4_sent,
		                                       row.load4_received, row.load4_gbps)},
		    {"errors", row.errors}});
	service::Json peers = service::Json::array();
	for (const Ratio& ratio : r.ratios())
		peers.push_back(service::Json{{"peer", ratio.peer},
		                              {"tcp1", json_figure(ratio.tcp1)},
		                              {"cpu_per_gb", json_figure(ratio.cpu_per_gb)},
		                              {"machine_cpu_per_gb", json_figure(ratio.machine_cpu_per_gb)}});
	j["ratios"] = service::Json{{"reference", r.reference}, {"peers", std::move(peers)}};
	// Indented: a person reads this file too.
	return j.dump(2, ' ', false, service::Json::error_handler_t::replace) + "\n";
}

std::string csv_text(const Report& r) {
	std::ostringstream c;
	c << "subject,detail,version,program,status,"
	     "tcp1_gbps,tcp4_gbps,udp1400_gbps,udp1400_loss_pct,"
	     "ping_p50_ms,ping_p99_ms,udp_rr_p50_ms,udp_rr_p99_ms,"
	     "cpu_s_per_gb,machine_cpu_s_per_gb,"
	     "ping_tcp1_p50_ms,ping_tcp1_p99_ms,ping_tcp4_udp_p50_ms,ping_tcp4_udp_p99_ms,"
	     "reason\n";
	auto num = [](const std::optional<double>& v) { return v ? fmt(v, 4) : std::string(); };
	for (const auto& row : r.rows)
		c << csv_field(row.name) << "," << csv_field(row.detail) << "," << csv_field(row.version)
		  << "," << csv_field(row.program) << "," << csv_field(row.status) << ","
		  << num(row.tcp1_gbps) << "," << num(row.tcp4_gbps) << "," << num(row.udp_gbps) << ","
		  << num(row.udp_loss_pct) << "," << num(row.ping_p50_ms) << "," << num(row.ping_p99_ms)
		  << "," << num(row.rr_p50_ms) << "," << num(row.rr_p99_ms) << "," << num(row.cpu_s_per_gb)
		  << "," << num(row.machine_cpu_s_per_gb) << "," << num(row.load1_p50_ms) << ","
		  << num(row.load1_p99_ms) << "," << num(row.load4_p50_ms) << "," << num(row.load4_p99_ms)
		  << "," << csv_field(first_line(row.reason)) << "\n";
	return c.str();
}

std::string svg_text(const Report& r) {
	// Layout: a label column, then the throughput panel (log10 scale from
	// 0.1 to the next power of ten above the largest figure), then the
	// latency panel (linear, 0 to the largest p99 rounded up).
	constexpr double kPanelW = 330, kGap = 40, kRowH = 40, kTop = 70, kBarH = 13;
	// The label column fits the longest name (bold 12 px: about 7.5 px a
	// character) and, below it in 10 px, the version.
	double label_w = 150;
	for (const auto& row : r.rows)
		label_w = std::max({label_w, 20 + 7.5 * static_cast<double>(row.name.size()),
		                    20 + 5.5 * static_cast<double>(version_text(row).size())});
	const double kLabelW = std::ceil(label_w);
	const double tx = kLabelW, lx = kLabelW + kPanelW + kGap;
	const double height = kTop + kRowH * static_cast<double>(r.rows.size()) + 60;
	const double width = lx + kPanelW + 30;
	double max_gbps = 1, max_ms = 0.1;
	for (const auto& row : r.rows) {
		for (const auto& v : {row.tcp1_gbps, row.tcp4_gbps})
			if (v) max_gbps = std::max(max_gbps, *v);
		for (const auto& v : {row.ping_p50_ms, row.ping_p99_ms})
			if (v) max_ms = std::max(max_ms, *v);
	}
	const double lo_exp = -1, hi_exp = std::ceil(std::log10(max_gbps) + 1e-9);
	auto gx = [&](double gbps) {
		double e = std::log10(std::max(gbps, 0.1));
		return kPanelW * (e - lo_exp) / (hi_exp - lo_exp);
	};
	// Latency axis: a "nice" upper bound (1, 2 or 5 times a power of ten).
	double step = std::pow(10, std::floor(std::log10(max_ms)));
	double ms_top = step;
	int ms_ticks = 5;
	for (double m : {1.0, 2.0, 5.0, 10.0})
		if (m * step >= max_ms) {
			ms_top = m * step;
			ms_ticks = m == 2.0 ? 4 : 5;
			break;
		}
	auto mx = [&](double ms) { return kPanelW * std::min(ms, ms_top) / ms_top; };

	std::ostringstream s;
	char buf[512];
	s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
	std::snprintf(
	    buf, sizeof buf,
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
	    "%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
	    width, height, width, height);
	s << buf;
	s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
	std::snprintf(buf, sizeof buf,
	              "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">esptun-bench compare: "
	              "%s%s</text>\n",
	              xml_escape(r.started).c_str(), r.quick ? " (quick)" : "");
	s << buf;
	std::snprintf(buf, sizeof buf,
	              "<text x=\"10\" y=\"36\" fill=\"#555\">%s; iperf3 %u s per test</text>\n",
	              xml_escape(r.host).c_str(), r.duration_s);
	s << buf;
	std::snprintf(
	    buf, sizeof buf,
	    "<text x=\"%.0f\" y=\"58\" font-weight=\"bold\">TCP throughput, Gbit/s (log scale)</text>\n"
	    "<text x=\"%.0f\" y=\"58\" font-weight=\"bold\">ping latency, ms</text>\n",
	    tx, lx);
	s << buf;
	// Grid lines and axis labels.
	const double grid_bottom = kTop + kRowH * static_cast<double>(r.rows.size());
	s << "<g class=\"grid\" stroke=\"#ddd\">\n";
	for (double e = lo_exp; e <= hi_exp; e++) {
		std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>\n",
		              tx + gx(std::pow(10, e)), kTop - 6, tx + gx(std::pow(10, e)), grid_bottom);
		s << buf;
	}
	for (int i = 0; i <= ms_ticks; i++) {
		double x = lx + kPanelW * i / ms_ticks;
		std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>\n", x,
		              kTop - 6, x, grid_bottom);
		s << buf;
	}
	s << "</g>\n<g class=\"axis\" fill=\"#555\" font-size=\"11\" text-anchor=\"middle\">\n";
	for (double e = lo_exp; e <= hi_exp; e++) {
		std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.0f\">%g</text>\n",
		              tx + gx(std::pow(10, e)), grid_bottom + 14, std::pow(10, e));
		s << buf;
	}
	for (int i = 0; i <= ms_ticks; i++) {
		std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.0f\">%g</text>\n",
		              lx + kPanelW * i / ms_ticks, grid_bottom + 14, ms_top * i / ms_ticks);
		s << buf;
	}
	s << "</g>\n";

	for (size_t i = 0; i < r.rows.size(); i++) {
		const Row& row = r.rows[i];
		const double y = kTop + kRowH * static_cast<double>(i);
		std::snprintf(buf, sizeof buf,
		              "<g class=\"subject\" data-subject=\"%s\" data-status=\"%s\">\n",
		              xml_escape(row.name).c_str(), xml_escape(row.status).c_str());
		s << buf;
		std::snprintf(buf, sizeof buf,
		              "<text x=\"10\" y=\"%.0f\" font-weight=\"bold\">%s</text>\n"
		              "<text class=\"version\" x=\"10\" y=\"%.0f\" font-size=\"10\" "
		              "fill=\"#555\">%s</text>\n",
		              y + 16, xml_escape(row.name).c_str(), y + 29,
		              xml_escape(version_text(row)).c_str());
		s << buf;
		if (row.status != "ok") {
			std::snprintf(buf, sizeof buf,
			              "<text x=\"%.0f\" y=\"%.0f\" fill=\"#999\">%s: %s</text>\n</g>\n",
			              tx + 4, y + 18, xml_escape(row.status).c_str(),
			              xml_escape(first_line(row.reason).substr(0, 90)).c_str());
			s << buf;
			continue;
		}
		const struct {
			const char* cls;
			std::optional<double> v;
			const char* color;
			const char* label;
			double dy;
			bool gbit;
		} bars[] = {{"tcp1", row.tcp1_gbps, "#1f77b4", "TCP-1", 3, true},
		            {"tcp4", row.tcp4_gbps, "#9ecae1", "TCP-4", 3 + kBarH + 2, true},
		            {"p50", row.ping_p50_ms, "#d62728", "p50", 3, false},
		            {"p99", row.ping_p99_ms, "#f4a6a6", "p99", 3 + kBarH + 2, false}};
		for (const auto& b : bars) {
			double x0 = b.gbit ? tx : lx;
			double w = b.v ? (b.gbit ? gx(*b.v) : mx(*b.v)) : 0;
			std::snprintf(buf, sizeof buf,
			              "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
			              "height=\"%.0f\" fill=\"%s\">"
			              "<title>%s %s %s</title></rect>\n",
			              b.cls, x0, y + b.dy, w, kBarH, b.color, xml_escape(row.name).c_str(),
			              b.label, fmt(b.v, b.gbit ? 2 : 3).c_str());
			s << buf;
			// A long bar carries its label inside, so it cannot run into
			// the next panel.
			const bool inside = w > kPanelW * 0.7;
			std::snprintf(buf, sizeof buf,
			              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\"%s>%s %s</text>\n",
			              inside ? x0 + w - 4 : x0 + w + 4, y + b.dy + 10,
			              inside ? " text-anchor=\"end\" fill=\"white\"" : "", b.label,
			              fmt(b.v, b.gbit ? 2 : 3).c_str());
			s << buf;
		}
		s << "</g>\n";
	}
	std::snprintf(
	    buf, sizeof buf,
	    "<text x=\"10\" y=\"%.0f\" fill=\"#555\" font-size=\"11\">dark bars: TCP 1 stream / ping p50; "
	    "light bars: TCP 4 streams / ping p99. Shared 2-core machine: noisy.</text>\n",
	    height - 12);
	s << buf << "</svg>\n";
	return s.str();
}

} // namespace esptun::bench::compare
