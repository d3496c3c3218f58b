// show and the Prometheus export: see show.hpp.
//
// Both read only the status JSON (service/status.cpp writes it; README.md's
// "Status JSON" documents it), so they work on a running endpoint without
// its config, and a field this version does not know is simply not shown.
#include "apps/cli/show.hpp"

#include "conf/config.hpp"

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

using service::JsonValue;

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
std::string str(const JsonValue& v, std::initializer_list<std::string_view> path,
                std::string_view fallback = "") {
	const JsonValue* x = v.at(path);
	return x ? x->as_string(fallback) : std::string(fallback);
}

/// num() - the number at @path, or @fallback
double num(const JsonValue& v, std::initializer_list<std::string_view> path, double fallback = 0) {
	const JsonValue* x = v.at(path);
	return x && x->kind == JsonValue::Kind::number ? x->number : fallback;
}

/// u64() - the non-negative integer at @path, or 0
uint64_t u64(const JsonValue& v, std::initializer_list<std::string_view> path) {
	const JsonValue* x = v.at(path);
	return x ? x->as_u64() : 0;
}

/// strings() - an array of strings joined with @sep
std::string strings(const JsonValue* arr, const char* sep = ", ") {
	std::string out;
	if (!arr) return out;
	for (const JsonValue& item : arr->items)
		out += (out.empty() ? "" : sep) + item.as_string();
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

/// nonzero() - "name n, name n" for the non-zero members of object @obj
std::string nonzero(const JsonValue* obj) {
	std::string out;
	if (!obj) return out;
	for (const service::JsonMember& m : obj->members)
		if (m.value.kind == JsonValue::Kind::number && m.value.number != 0)
			out += (out.empty() ? "" : ", ") + m.key + " " + m.value.text;
	return out;
}

/// line() - "  label: text\n"
std::string line(const Paint& p, const char* label, const std::string& text) {
	return "  " + p.label(std::string(label) + ":") + " " + text + "\n";
}

/// show_children() - the CHILD_SAs of one IKE SA, one line each
std::string show_children(const JsonValue& sa, const Paint& p) {
	std::string out;
	const JsonValue* children = sa.get("children");
	if (!children) return out;
	for (const JsonValue& c : children->items) {
		std::string t = str(c, {"spi_in"}) + "/" + str(c, {"spi_out"}) + " " + str(c, {"cipher"});
		if (!str(c, {"pfs"}).empty()) t += " pfs " + str(c, {"pfs"});
		t += ", " + strings(c.get("local_ts")) + " === " + strings(c.get("remote_ts"));
		t += ", up " + duration_text(int64_t(num(c, {"age_s"})));
		if (const JsonValue* s = c.get("sending");
		    s && s->kind == JsonValue::Kind::boolean && !s->boolean)
			t += " (inbound only: rekeyed)";
		out += "    " + p.label("child:") + " " + t + "\n";
	}
	return out;
}

/// show_ike_sa() - one IKE SA of a peer and its CHILD_SAs
std::string show_ike_sa(const JsonValue& sa, const Paint& p) {
	const std::string state = str(sa, {"state"});
	std::string t = state == "established" ? p.good(state) : p.bad(state);
	const JsonValue* init = sa.get("initiator");
	t += init && init->boolean ? " (we initiated)" : " (peer initiated)";
	t += ", " + str(sa, {"suite"}) + ", " + str(sa, {"remote"});
	if (const JsonValue* nat = sa.get("behind_nat"); nat && nat->boolean) t += " behind NAT";
	t += ", up " + duration_text(int64_t(num(sa, {"age_s"})));
	if (num(sa, {"rekey_in_s"}, -1) >= 0)
		t += ", rekey in " + duration_text(int64_t(num(sa, {"rekey_in_s"})));
	std::string out = line(p, "ike sa", t);
	if (const JsonValue* ips = sa.get("virtual_ips"); ips && !ips->items.empty())
		out += line(p, "virtual ips", strings(ips));
	if (const JsonValue* dns = sa.get("dns"); dns && !dns->items.empty())
		out += line(p, "dns", strings(dns));
	if (!str(sa, {"peer_auth"}).empty()) out += line(p, "peer auth", str(sa, {"peer_auth"}));
	if (!str(sa, {"peer_subject"}).empty())
		out += line(p, "peer cert",
		            str(sa, {"peer_subject"}) + " (issuer " + str(sa, {"peer_issuer"}) + ")");
	return out + show_children(sa, p);
}

/// show_peer() - one entry of "peers", with the IKE SAs of that name
std::string show_peer(const JsonValue& peer, const JsonValue& status, const Paint& p, int64_t now_ms) {
	const std::string name = str(peer, {"name"});
	std::string out = "\n" + p.peer("peer: " + name) + "\n";
	const JsonValue* ep = peer.get("endpoint");
	out += line(p, "endpoint",
	            ep && ep->kind == JsonValue::Kind::string
	                ? ep->text + " (" + str(peer, {"endpoint_source"}) + ")"
	                : std::string("none yet"));
	std::string keying = str(peer, {"keying"}, "static");
	const std::string cipher = str(peer, {"cipher"});
	keying += cipher.empty() ? ", no SA yet" : ", " + cipher;
	if (const JsonValue* esn = peer.get("esn");
	    esn && esn->kind == JsonValue::Kind::boolean && esn->boolean)
		keying += " with ESN";
	out += line(p, "keying", keying);
	out += line(p, "allowed ips", strings(peer.get("allowed_ips")));
	const int64_t last = int64_t(num(peer, {"last_rx_unix_ms"}));
	out += line(p, "latest packet",
	            last > 0 ? duration_text((now_ms - last) / 1000) + " ago" : std::string("never"));
	const JsonValue* totals = peer.get("totals");
	const uint64_t rx = totals ? u64(*totals, {"rx_bytes"}) : u64(peer, {"sa_in", "bytes"});
	const uint64_t tx = totals ? u64(*totals, {"tx_bytes"}) : u64(peer, {"sa_out", "bytes"});
	out += line(p, "transfer", bytes_text(rx) + " received, " + bytes_text(tx) + " sent");
	if (const JsonValue* o = peer.get("sa_out"); o && o->kind == JsonValue::Kind::object) {
		std::string t =
		    "out " + str(*o, {"spi_hex"}) + " (seq " + std::to_string(u64(*o, {"last_seq"})) + ")";
		if (const JsonValue* i = peer.get("sa_in"); i && i->kind == JsonValue::Kind::object)
			t += ", in " + str(*i, {"spi_hex"}) + " (highest " +
			     std::to_string(u64(*i, {"highest_seq"})) + ")";
		out += line(p, "esp sas", t);
	}
	if (const std::string drops = nonzero(peer.get("drops")); !drops.empty())
		out += line(p, "drops", p.bad(drops));
	if (const JsonValue* sas = status.at({"ike", "sas"}))
		for (const JsonValue& sa : sas->items)
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

/// Metrics - families in the order first added, so output is stable.
class Metrics {
public:
	void add(const std::string& name, const char* type, const char* help, const std::string& labels,
	         double value) {
		auto [it, fresh] = families_.try_emplace(name);
		if (fresh) {
			order_.push_back(name);
			it->second.help = help;
			it->second.type = type;
		}
		char buf[64];
		if (value == std::floor(value) && std::fabs(value) < 9e15)
			std::snprintf(buf, sizeof buf, "%.0f", value);
		else
			std::snprintf(buf, sizeof buf, "%.17g", value);
		it->second.samples.push_back("{" + labels + "} " + buf);
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

/// one_endpoint() - the metrics of one endpoint's status
void one_endpoint(Metrics& m, const JsonValue& s) {
	const std::string ifl = "interface=\"" + label_value(str(s, {"interface"})) + "\"";
	m.add("esptun_up", "gauge", "1 while the endpoint answers on its control socket.", ifl, 1);
	m.add("esptun_uptime_seconds", "gauge", "Seconds since the endpoint started.", ifl,
	      num(s, {"uptime_s"}));
	if (const JsonValue* c = s.get("counters"))
		for (const service::JsonMember& x : c->members)
			m.add("esptun_packets_total", "counter",
			      "Packets by path (tun_rx, tun_tx, udp_rx, udp_tx, udp_gro_buffers).",
			      ifl + ",path=\"" + label_value(x.key.substr(0, x.key.rfind("_packets"))) + "\"",
			      x.value.number);
	if (const JsonValue* d = s.get("drops"))
		for (const service::JsonMember& x : d->members)
			m.add("esptun_drops_total", "counter",
			      "Packets dropped, by reason (README: Status JSON).",
			      ifl + ",reason=\"" + label_value(x.key) + "\"", x.value.number);
	if (const JsonValue* d = s.get("ignored"))
		for (const service::JsonMember& x : d->members)
			m.add("esptun_ignored_total", "counter",
			      "Datagrams on the ESP port that are not ESP (keepalives, IKE, dummy packets).",
			      ifl + ",kind=\"" + label_value(x.key) + "\"", x.value.number);
	if (const JsonValue* peers = s.get("peers"))
		for (const JsonValue& p : peers->items) {
			const std::string pl = ifl + ",peer=\"" + label_value(str(p, {"name"})) + "\"";
			const JsonValue* t = p.get("totals");
			const JsonValue& tot = t ? *t : p;
			m.add("esptun_peer_rx_bytes_total", "counter", "Inner bytes received from the peer.",
			      pl, num(tot, {"rx_bytes"}));
			m.add("esptun_peer_tx_bytes_total", "counter", "Inner bytes sent to the peer.", pl,
			      num(tot, {"tx_bytes"}));
			m.add("esptun_peer_rx_packets_total", "counter", "Packets received from the peer.",
			      pl, num(tot, {"rx_packets"}));
			m.add("esptun_peer_tx_packets_total", "counter", "Packets sent to the peer.", pl,
			      num(tot, {"tx_packets"}));
			m.add("esptun_peer_last_rx_timestamp_seconds", "gauge",
			      "Unix time of the peer's last authenticated packet; 0 = never.", pl,
			      num(p, {"last_rx_unix_ms"}) / 1000);
			if (const JsonValue* d = p.get("drops"))
				for (const service::JsonMember& x : d->members)
					m.add("esptun_peer_drops_total", "counter",
					      "The peer's packets dropped, by reason (README: Status JSON).",
					      pl + ",reason=\"" + label_value(x.key) + "\"", x.value.number);
		}
	if (const JsonValue* c = s.at({"ike", "counters"}))
		for (const service::JsonMember& x : c->members)
			m.add("esptun_ike_events_total", "counter",
			      "IKE messages and events, by kind (README: Status JSON, ike.counters).",
			      ifl + ",event=\"" + label_value(x.key) + "\"", x.value.number);
	if (const JsonValue* sas = s.at({"ike", "sas"})) {
		std::map<std::string, uint64_t> states;
		for (const JsonValue& sa : sas->items)
			states[str(sa, {"state"})]++;
		for (const auto& [state, n] : states)
			m.add("esptun_ike_sas", "gauge", "IKE SAs by state.",
			      ifl + ",state=\"" + label_value(state) + "\"", double(n));
	}
}

} // namespace

std::string render_show(const JsonValue& s, bool colour, int64_t now_unix_ms) {
	const Paint p{colour};
	std::string out = p.head("interface: " + str(s, {"interface"})) + "\n";
	out +=
	    line(p, "program", str(s, {"program"}) + ", up " + duration_text(int64_t(num(s, {"uptime_s"}))));
	std::string listen = str(s, {"listen"});
	if (const JsonValue* port = s.at({"ike", "port"}); port && port->number != 0)
		listen += ", IKE also on port " + port->text;
	out += line(p, "listening", listen);
	out += line(p, "tun",
	            str(s, {"tun_io", "mode"}) + " I/O, mtu " + std::to_string(u64(s, {"mtu"})) + ", " +
	                std::to_string(u64(s, {"workers"})) + " worker(s)");
	const std::string drops = nonzero(s.get("drops"));
	out += line(p, "drops", drops.empty() ? std::string("none") : p.bad(drops));
	if (const JsonValue* c = s.at({"ike", "counters"})) {
		std::string ike = std::to_string(u64(*c, {"received"})) + " messages received, " +
		                  std::to_string(u64(*c, {"sent"})) + " sent";
		JsonValue rest = *c;
		std::erase_if(rest.members, [](const service::JsonMember& m) {
			return m.key == "received" || m.key == "sent";
		});
		if (const std::string r = nonzero(&rest); !r.empty()) ike += "; " + r;
		out += line(p, "ike", ike);
	}
	if (const JsonValue* peers = s.get("peers"))
		for (const JsonValue& peer : peers->items)
			out += show_peer(peer, s, p, now_unix_ms);
	return out;
}

std::string render_prometheus(const std::vector<EndpointStatus>& endpoints) {
	Metrics m;
	for (const EndpointStatus& e : endpoints)
		one_endpoint(m, e.json);
	return m.text();
}

namespace {

/// listening() - false when nothing listens on the socket at @path any more:
/// an endpoint that ran without the privilege to remove its socket on exit
/// (it runs as an unprivileged user, /run/esptun is root's) leaves it behind
/// until the next start with that interface replaces it.
bool listening(const std::string& path) {
	sockaddr_un sa{};
	sa.sun_family = AF_UNIX;
	if (path.size() >= sizeof sa.sun_path) return false;
	path.copy(sa.sun_path, path.size());
	const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return true; // cannot tell: let the query say what is wrong
	const bool refused = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 &&
	                     (errno == ECONNREFUSED || errno == ENOENT);
	::close(fd);
	return !refused;
}

} // namespace

std::vector<std::string> running_sockets() {
	std::vector<std::string> out;
	std::error_code ec;
	for (const auto& entry : std::filesystem::directory_iterator(conf::kControlSocketDir, ec))
		if (entry.is_socket(ec) && entry.path().extension() == ".sock" && listening(entry.path()))
			out.push_back(entry.path());
	std::sort(out.begin(), out.end());
	return out;
}

} // namespace esptun::cli
