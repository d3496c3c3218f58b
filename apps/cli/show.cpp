// show and the Prometheus export: see show.hpp.
//
// Both read only the status JSON (service/status.cpp writes it; README.md's
// "Status JSON" documents it), so they work on a running endpoint without
// its config, and a field this version does not know is simply not shown.
#include "apps/cli/show.hpp"

#include "conf/config.hpp"
#include "platform/sockaddr.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace esptun::cli {
namespace {

using service::Json;
using service::json_at;

/// Colours, or nothing when colour is off.
struct Paint {
	bool on;
	std::string operator()(const char* code, const std::string& text) const {
		return on ? std::string("\x1b[") + code + "m" + text + "\x1b[0m" : text;
	}
	std::string head(const std::string& t) const { return (*this)("1;32", t); } // bold green
	std::string peer(const std::string& t) const { return (*this)("1;33", t); } // bold yellow
	std::string label(const std::string& t) const { return (*this)("1", t); }   // bold
	std::string good(const std::string& t) const { return (*this)("32", t); }   // green
	std::string bad(const std::string& t) const { return (*this)("31", t); }    // red
};

/// str() - the string at @path, or @fallback
std::string str(const Json& v, std::initializer_list<std::string_view> path, std::string_view fallback = "") {
	return service::json_string(json_at(v, path), fallback);
}

/// num() - the number at @path, or @fallback
double num(const Json& v, std::initializer_list<std::string_view> path, double fallback = 0) {
	return service::json_number(json_at(v, path), fallback);
}

/// u64() - the non-negative integer at @path, or 0
uint64_t u64(const Json& v, std::initializer_list<std::string_view> path) {
	return service::json_u64(json_at(v, path));
}

/// get() - member @key of object @v, or nullptr
const Json* get(const Json& v, std::string_view key) { return json_at(v, {key}); }

/// items() - the elements of @v when it is an array, else none
const Json& items(const Json* v) {
	static const Json kNone = Json::array();
	return v && v->is_array() ? *v : kNone;
}

/// strings() - an array of strings joined with @sep
std::string strings(const Json* arr, const char* sep = ", ") {
	std::string out;
	for (const Json& item : items(arr))
		out += (out.empty() ? "" : sep) + service::json_string(&item);
	return out;
}

/// bytes_text() - 1536 -> "1.50 KiB", as `wg show` prints transfer
std::string bytes_text(uint64_t n) {
	static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = double(n);
	size_t u = 0;
	while (v >= 1024 && u + 1 < std::size(kUnits)) {
		v /= 1024;
		u++;
	}
	char buf[32];
	if (u == 0)
		std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
	else
		std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
	return buf;
}

/// duration_text() - 3725 -> "1 hour, 2 minutes": the two largest units
std::string duration_text(int64_t s) {
	if (s < 0) s = 0;
	struct Unit {
		int64_t secs;
		const char* name;
	};
	static constexpr Unit kUnits[] = {{86400, "day"}, {3600, "hour"}, {60, "minute"}, {1, "second"}};
	std::string out;
	int parts = 0;
	for (const Unit& u : kUnits) {
		const int64_t n = s / u.secs;
		if (n == 0 && !(u.secs == 1 && out.empty())) continue;
		s -= n * u.secs;
		out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + u.name + (n == 1 ? "" : "s");
		if (++parts == 2) break;
	}
	return out;
}

/// nonzero() - "name n, name n" for the non-zero members of object @obj,
/// leaving out the keys in @skip
std::string nonzero(const Json* obj, std::initializer_list<std::string_view> skip = {}) {
	std::string out;
	if (!obj || !obj->is_object()) return out;
	for (const auto& [key, value] : obj->items())
		if (value.is_number() && value != 0 && std::find(skip.begin(), skip.end(), key) == skip.end())
			out += (out.empty() ? "" : ", ") + key + " " + value.dump();
	return out;
}

/// line() - "  label: text\n"
std::string line(const Paint& p, const char* label, const std::string& text) {
	return "  " + p.label(std::string(label) + ":") + " " + text + "\n";
}

/// show_children() - the CHILD_SAs of one IKE SA, one line each
std::string show_children(const Json& sa, const Paint& p) {
	std::string out;
	for (const Json& c : items(get(sa, "children"))) {
		std::string t = str(c, {"spi_in"}) + "/" + str(c, {"spi_out"}) + " " + str(c, {"cipher"});
		if (!str(c, {"pfs"}).empty()) t += " pfs " + str(c, {"pfs"});
		t += ", " + strings(get(c, "local_ts")) + " === " + strings(get(c, "remote_ts"));
		t += ", up " + duration_text(int64_t(num(c, {"age_s"})));
		if (const Json* s = get(c, "sending"); s && s->is_boolean() && !s->get<bool>())
			t += " (inbound only: rekeyed)";
		out += "    " + p.label("child:") + " " + t + "\n";
	}
	return out;
}

/// show_ike_sa() - one IKE SA of a peer and its CHILD_SAs
std::string show_ike_sa(const Json& sa, const Paint& p) {
	const std::string state = str(sa, {"state"});
	std::string t = state == "established" ? p.good(state) : p.bad(state);
	t += service::json_true(get(sa, "initiator")) ? " (we initiated)" : " (peer initiated)";
	t += ", " + str(sa, {"suite"}) + ", " + str(sa, {"remote"});
	if (service::json_true(get(sa, "behind_nat"))) t += " behind NAT";
	t += ", up " + duration_text(int64_t(num(sa, {"age_s"})));
	if (num(sa, {"rekey_in_s"}, -1) >= 0)
		t += ", rekey in " + duration_text(int64_t(num(sa, {"rekey_in_s"})));
	std::string out = line(p, "ike sa", t);
	if (const Json& ips = items(get(sa, "virtual_ips")); !ips.empty())
		out += line(p, "virtual ips", strings(&ips));
	if (const Json& dns = items(get(sa, "dns")); !dns.empty()) out += line(p, "dns", strings(&dns));
	if (!str(sa, {"peer_auth"}).empty()) out += line(p, "peer auth", str(sa, {"peer_auth"}));
	if (!str(sa, {"eap_identity"}).empty()) out += line(p, "eap identity", str(sa, {"eap_identity"}));
	if (!str(sa, {"peer_subject"}).empty())
		out += line(p, "peer cert",
		            str(sa, {"peer_subject"}) + " (issuer " + str(sa, {"peer_issuer"}) + ")");
	return out + show_children(sa, p);
}

/// show_peer() - one entry of "peers", with the IKE SAs of that name
std::string show_peer(const Json& peer, const Json& status, const Paint& p, int64_t now_ms) {
	const std::string name = str(peer, {"name"});
	std::string out = "\n" + p.peer("peer: " + name) + "\n";
	const Json* ep = get(peer, "endpoint");
	out += line(p, "endpoint",
	            ep && ep->is_string()
	                ? service::json_string(ep) + " (" + str(peer, {"endpoint_source"}) + ")"
	                : std::string("none yet"));
	std::string keying = str(peer, {"keying"}, "static");
	const std::string cipher = str(peer, {"cipher"});
	keying += cipher.empty() ? ", no SA yet" : ", " + cipher;
	if (service::json_true(get(peer, "esn"))) keying += " with ESN";
	out += line(p, "keying", keying);
	out += line(p, "allowed ips", strings(get(peer, "allowed_ips")));
	const int64_t last = int64_t(num(peer, {"last_rx_unix_ms"}));
	out += line(p, "latest packet",
	            last > 0 ? duration_text((now_ms - last) / 1000) + " ago" : std::string("never"));
	const Json* totals = get(peer, "totals");
	const uint64_t rx = totals ? u64(*totals, {"rx_bytes"}) : u64(peer, {"sa_in", "bytes"});
	const uint64_t tx = totals ? u64(*totals, {"tx_bytes"}) : u64(peer, {"sa_out", "bytes"});
	out += line(p, "transfer", bytes_text(rx) + " received, " + bytes_text(tx) + " sent");
	if (const Json* o = get(peer, "sa_out"); o && o->is_object()) {
		std::string t =
		    "out " + str(*o, {"spi_hex"}) + " (seq " + std::to_string(u64(*o, {"last_seq"})) + ")";
		if (const Json* i = get(peer, "sa_in"); i && i->is_object())
			t += ", in " + str(*i, {"spi_hex"}) + " (highest " +
			     std::to_string(u64(*i, {"highest_seq"})) + ")";
		out += line(p, "esp sas", t);
	}
	if (const std::string drops = nonzero(get(peer, "drops")); !drops.empty())
		out += line(p, "drops", p.bad(drops));
	for (const Json& sa : items(json_at(status, {"ike", "sas"})))
		if (str(sa, {"peer"}) == name) out += show_ike_sa(sa, p);
	return out;
}

/// Prometheus label values escape backslash, double quote and newline.
std::string label_value(const std::string& v) {
	std::string out;
	for (char c : v) {
		if (c == '\\' || c == '"') out += '\\';
		if (c == '\n') {
			out += "\\n";
			continue;
		}
		out += c;
	}
	return out;
}

/// One metric family: its samples, printed after its HELP and TYPE lines.
struct Family {
	std::string help, type;
	std::vector<std::string> samples; ///< "{labels} value"
};

/// sample_value() - @value as a sample's text: whole numbers without a point
std::string sample_value(double value) {
	char buf[64];
	if (value == std::floor(value) && std::fabs(value) < 9e15)
		std::snprintf(buf, sizeof buf, "%.0f", value);
	else
		std::snprintf(buf, sizeof buf, "%.17g", value);
	return buf;
}

/// sample_value() - the number @v as a sample's text (0 when not a number);
/// an integer is printed from the integer itself, so a counter past 2^53 stays exact
std::string sample_value(const Json* v) {
	if (v && (v->is_number_unsigned() || v->is_number_integer())) return v->dump();
	return sample_value(service::json_number(v));
}

/// Metrics - families in the order first added, so output is stable.
class Metrics {
public:
	void add(const std::string& name, const char* type, const char* help, const std::string& labels,
	         const std::string& value) {
		auto [it, fresh] = families_.try_emplace(name);
		if (fresh) {
			order_.push_back(name);
			it->second.help = help;
			it->second.type = type;
		}
		it->second.samples.push_back("{" + labels + "} " + value);
	}
	std::string text() const {
		std::string out;
		for (const std::string& name : order_) {
			const Family& f = families_.at(name);
			out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
			for (const std::string& s : f.samples)
				out += name + s + "\n";
		}
		return out;
	}

private:
	std::map<std::string, Family> families_;
	std::vector<std::string> order_;
};

/// members() - the key/value pairs of @v when it is an object, else none
const Json& members(const Json* v) {
	static const Json kNone = Json::object();
	return v && v->is_object() ? *v : kNone;
}

/// queue_text() - the "rx queue" line: the limit, what waits now, what it did
std::string queue_text(const Json& q) {
	const Json* on = get(q, "limit");
	std::string t = on && on->is_boolean() && on->get<bool>()
	                    ? "limit " + std::to_string(u64(q, {"target_us"})) + " us target, " +
	                          std::to_string(u64(q, {"interval_ms"})) + " ms interval"
	                    : std::string("no limit");
	t += "; now " + std::to_string(u64(q, {"sojourn_us"})) + " us waiting, " +
	     bytes_text(u64(q, {"queued_bytes"})) + " queued";
	t += "; engaged " + std::to_string(u64(q, {"engaged"})) + " time(s), " +
	     std::to_string(u64(q, {"marks"})) + " marked CE, " + std::to_string(u64(q, {"drops"})) +
	     " dropped";
	return t;
}

/// tx_queue_text() - the "tx queue" line: on or off, what waits now, what it did
std::string tx_queue_text(const Json& q) {
	const Json* on = get(q, "on");
	if (!on || !on->is_boolean() || !on->get<bool>()) return "no flow queue";
	return "flow queue; now " + std::to_string(u64(q, {"sojourn_us"})) + " us waiting, " +
	       bytes_text(u64(q, {"queued_bytes"})) + " in " + std::to_string(u64(q, {"flows"})) +
	       " flow(s); engaged " + std::to_string(u64(q, {"engaged"})) + " time(s), " +
	       std::to_string(u64(q, {"marks"})) + " marked CE, " + std::to_string(u64(q, {"drops"})) +
	       " dropped late, " + std::to_string(u64(q, {"overflow_drops"})) + " dropped full";
}

/// priority_text() - the "workers" line: real-time or not, and its steps
std::string priority_text(const Json& w) {
	if (str(w, {"mode"}) != "realtime") return "ordinary threads (" + str(w, {"reason"}) + ")";
	return "real-time, " + std::to_string(u64(w, {"realtime_now"})) + " now; stepped down " +
	       std::to_string(u64(w, {"lowered"})) + " time(s) for load, up " +
	       std::to_string(u64(w, {"raised"})) + ", refused " + std::to_string(u64(w, {"refused"}));
}

/// redirect_text() - the "redirect" line: where clients are sent, and which
std::string redirect_text(const Json& r) {
	const std::string when = str(r, {"when"});
	std::string t = when + ", to " + strings(get(r, "to"));
	if (when == "capacity")
		t += "; new clients from " + std::to_string(u64(r, {"capacity"})) + " peers on";
	else if (when == "share")
		t += "; " + std::to_string(u64(r, {"share"})) + "% of new clients";
	else if (when == "all")
		t += "; established clients at " + std::to_string(u64(r, {"move_rate"})) + "/s";
	return t;
}

/// one_endpoint() - the metrics of one endpoint's status
void one_endpoint(Metrics& m, const Json& s) {
	const std::string ifl = "interface=\"" + label_value(str(s, {"interface"})) + "\"";
	m.add("esptun_up", "gauge", "1 while the endpoint answers on its control socket.", ifl, "1");
	m.add("esptun_uptime_seconds", "gauge", "Seconds since the endpoint started.", ifl,
	      sample_value(num(s, {"uptime_s"})));
	for (const auto& [key, value] : members(get(s, "counters")).items())
		m.add("esptun_packets_total", "counter",
		      "Packets by path (tun_rx, tun_tx, udp_rx, udp_tx, udp_gro_buffers).",
		      ifl + ",path=\"" + label_value(key.substr(0, key.rfind("_packets"))) + "\"",
		      sample_value(&value));
	for (const auto& [key, value] : members(get(s, "drops")).items())
		m.add("esptun_drops_total", "counter", "Packets dropped, by reason (README: Status JSON).",
		      ifl + ",reason=\"" + label_value(key) + "\"", sample_value(&value));
	for (const auto& [key, value] : members(get(s, "ignored")).items())
		m.add("esptun_ignored_total", "counter",
		      "Datagrams on the ESP port that are not ESP (keepalives, IKE, dummy packets).",
		      ifl + ",kind=\"" + label_value(key) + "\"", sample_value(&value));
	if (const Json* q = get(s, "queue")) {
		m.add("esptun_rx_queue_target_seconds", "gauge",
		      "The receive queue limit's target sojourn time; 0 = no limit.", ifl,
		      sample_value(num(*q, {"target_us"}) / 1e6));
		m.add("esptun_rx_queue_sojourn_seconds", "gauge",
		      "How long the oldest datagram of the last receive batch had waited.", ifl,
		      sample_value(num(*q, {"sojourn_us"}) / 1e6));
		m.add("esptun_rx_queue_bytes", "gauge",
		      "Memory the underlay sockets' receive queues hold now.", ifl,
		      sample_value(get(*q, "queued_bytes")));
		m.add("esptun_rx_queue_engaged_total", "counter",
		      "Times the receive queue limit started signalling.", ifl,
		      sample_value(get(*q, "engaged")));
		m.add("esptun_rx_queue_marks_total", "counter",
		      "ECN-capable packets marked CE by the receive queue limit.", ifl,
		      sample_value(get(*q, "marks")));
	}
	if (const Json* w = get(s, "worker_priority")) {
		m.add("esptun_workers_realtime", "gauge", "Workers running under SCHED_FIFO now.", ifl,
		      sample_value(get(*w, "realtime_now")));
		m.add("esptun_workers_lowered_total", "counter",
		      "Times a worker stepped down from SCHED_FIFO for using most of a CPU.", ifl,
		      sample_value(get(*w, "lowered")));
	}
	if (const Json* q = get(s, "tx_queue")) {
		m.add("esptun_tx_queue_sojourn_seconds", "gauge",
		      "How long the oldest packet sent from the send flow queue in the last pass had waited.",
		      ifl, sample_value(num(*q, {"sojourn_us"}) / 1e6));
		m.add("esptun_tx_queue_bytes", "gauge", "Bytes the send flow queues hold now.", ifl,
		      sample_value(get(*q, "queued_bytes")));
		m.add("esptun_tx_queue_flows", "gauge", "Flows with packets in the send flow queues now.",
		      ifl, sample_value(get(*q, "flows")));
		m.add("esptun_tx_queue_engaged_total", "counter",
		      "Times a flow of the send flow queue started being signalled.", ifl,
		      sample_value(get(*q, "engaged")));
		m.add("esptun_tx_queue_marks_total", "counter",
		      "ECN-capable packets marked CE by the send flow queue.", ifl,
		      sample_value(get(*q, "marks")));
	}
	for (const Json& p : items(get(s, "peers"))) {
		const std::string pl = ifl + ",peer=\"" + label_value(str(p, {"name"})) + "\"";
		const Json* t = get(p, "totals");
		const Json& tot = t ? *t : p;
		m.add("esptun_peer_rx_bytes_total", "counter", "Inner bytes received from the peer.", pl,
		      sample_value(get(tot, "rx_bytes")));
		m.add("esptun_peer_tx_bytes_total", "counter", "Inner bytes sent to the peer.", pl,
		      sample_value(get(tot, "tx_bytes")));
		m.add("esptun_peer_rx_packets_total", "counter", "Packets received from the peer.", pl,
		      sample_value(get(tot, "rx_packets")));
		m.add("esptun_peer_tx_packets_total", "counter", "Packets sent to the peer.", pl,
		      sample_value(get(tot, "tx_packets")));
		m.add("esptun_peer_last_rx_timestamp_seconds", "gauge",
		      "Unix time of the peer's last authenticated packet; 0 = never.", pl,
		      sample_value(num(p, {"last_rx_unix_ms"}) / 1000));
		for (const auto& [key, value] : members(get(p, "drops")).items())
			m.add("esptun_peer_drops_total", "counter",
			      "The peer's packets dropped, by reason (README: Status JSON).",
			      pl + ",reason=\"" + label_value(key) + "\"", sample_value(&value));
	}
	for (const auto& [key, value] : members(json_at(s, {"ike", "counters"})).items())
		m.add("esptun_ike_events_total", "counter",
		      "IKE messages and events, by kind (README: Status JSON, ike.counters).",
		      ifl + ",event=\"" + label_value(key) + "\"", sample_value(&value));
	if (const Json* sas = json_at(s, {"ike", "sas"})) {
		std::map<std::string, uint64_t> states;
		for (const Json& sa : items(sas))
			states[str(sa, {"state"})]++;
		for (const auto& [state, n] : states)
			m.add("esptun_ike_sas", "gauge", "IKE SAs by state.",
			      ifl + ",state=\"" + label_value(state) + "\"", std::to_string(n));
	}
}

} // namespace

std::string render_show(const Json& s, bool colour, int64_t now_unix_ms) {
	const Paint p{colour};
	std::string out = p.head("interface: " + str(s, {"interface"})) + "\n";
	out +=
	    line(p, "program", str(s, {"program"}) + ", up " + duration_text(int64_t(num(s, {"uptime_s"}))));
	std::string listen = str(s, {"listen"});
	if (const uint64_t port = u64(s, {"ike", "port"}); port != 0)
		listen += ", IKE also on port " + std::to_string(port);
	out += line(p, "listening", listen);
	out += line(p, "tun",
	            str(s, {"tun_io", "mode"}) + " I/O, mtu " + std::to_string(u64(s, {"mtu"})) + ", " +
	                std::to_string(u64(s, {"workers"})) + " worker(s)");
	const std::string drops = nonzero(get(s, "drops"));
	out += line(p, "drops", drops.empty() ? std::string("none") : p.bad(drops));
	if (const Json* q = get(s, "queue")) out += line(p, "rx queue", queue_text(*q));
	if (const Json* q = get(s, "tx_queue")) out += line(p, "tx queue", tx_queue_text(*q));
	if (const Json* w = get(s, "worker_priority")) out += line(p, "workers", priority_text(*w));
	if (const Json* c = json_at(s, {"ike", "counters"})) {
		std::string ike = std::to_string(u64(*c, {"received"})) + " messages received, " +
		                  std::to_string(u64(*c, {"sent"})) + " sent";
		if (const std::string r = nonzero(c, {"received", "sent"}); !r.empty()) ike += "; " + r;
		out += line(p, "ike", ike);
	}
	if (const Json* r = json_at(s, {"ike", "redirect"}); r && str(*r, {"when"}, "never") != "never")
		out += line(p, "redirect", redirect_text(*r));
	for (const Json& peer : items(get(s, "peers")))
		out += show_peer(peer, s, p, now_unix_ms);
	return out;
}

std::string render_prometheus(const std::vector<EndpointStatus>& endpoints) {
	Metrics m;
	for (const EndpointStatus& e : endpoints)
		one_endpoint(m, e.json);
	return m.text();
}

std::vector<std::string> running_sockets() {
	std::vector<std::string> out;
	std::error_code ec;
	for (const auto& entry : std::filesystem::directory_iterator(conf::kControlSocketDir, ec))
		if (entry.is_socket(ec) && entry.path().extension() == ".sock" &&
		    platform::unix_socket_listening(entry.path()))
			out.push_back(entry.path());
	std::sort(out.begin(), out.end());
	return out;
}

} // namespace esptun::cli
