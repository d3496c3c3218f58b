// The config loader: parses TOML with toml++ and validates it into the plain
// structs of config.hpp. Every problem is a ConfigError naming the line and
// saying how to fix it. The [[peer]] tables are in config_peers.cpp, the keys
// of IKE peers in config_ike.cpp.
#include "conf/config.hpp"

#include "conf/checks.hpp"
#include "conf/loader.hpp"
#include "ike/engine.hpp"
#include "tunnel/address_pool.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sys/stat.h>
#include <tuple>

namespace esptun::conf {

namespace fs = std::filesystem;

ConfigError::ConfigError(const std::string& source, int line, const std::string& message)
    : std::runtime_error(line > 0 ? source + ":" + std::to_string(line) + ": " + message
                                  : source + ": " + message),
      source_(source), message_(message), line_(line) {}

std::string_view tun_io_name(TunIo io) noexcept {
	switch (io) {
	case TunIo::automatic:
		return "auto";
	case TunIo::vhost:
		return "vhost";
	case TunIo::direct:
		return "direct";
	}
	return "?";
}

namespace detail {

constexpr std::string_view kTopKeys[] = {"tunnel", "peer", "redirect"};
// clang-format off
constexpr std::string_view kTunnelKeys[] = {
    "interface",   "addresses",         "listen",          "mtu",
    "tun_io",      "control_socket",    "route_all",       "direct_write_max",
    "crypto_impl", "udp_gso",           "socket_buffer",   "busy_poll_us",
    "state_dir",   "tun_offload",       "workers",         "io_engine",
    "udp_gro",     "ike_port",          "local_id",        "address_pool",
    "dns",         "wake_poll_us",      "kill_switch",     "drop_privileges",
    "user",        "ike_fragment_size", "queue_target_us", "queue_interval_ms",
    "worker_priority"};
// clang-format on
constexpr uint32_t kMinMtu = 576;      // RFC 791: every IPv4 host takes 576-byte datagrams
constexpr uint32_t kMinMtuIpv6 = 1280; // RFC 8200 section 5
constexpr uint32_t kMaxMtu = 65535;
constexpr size_t kSunPathMax = 107; // sizeof(sockaddr_un::sun_path) - 1

/**
 * check_ascii() - refuse non-ASCII text except in whole-line comments.
 * toml++ 3.3.0 (Debian's) reaches __builtin_unreachable() in its Unicode
 * whitespace tables for many non-ASCII code points (U+00A1..U+0499 among
 * them) in keys, after values and after a backslash: undefined behaviour
 * that libFuzzer found within a minute (upstream issues #190 and #295).
 * Every value esptun reads is ASCII, so only comments need more; a comment
 * line is passed through unless a backslash precedes the non-ASCII byte.
 */
void check_ascii(std::string_view text, const std::string& source) {
	if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3); // UTF-8 byte order mark
	int line = 1;
	bool comment_line = false, line_start = true;
	for (size_t i = 0, col = 1; i < text.size(); i++, col++) {
		char c = text[i];
		if (c == '\n') {
			line++;
			col = 0;
			comment_line = false;
			line_start = true;
			continue;
		}
		if (line_start && c != ' ' && c != '\t') {
			line_start = false;
			comment_line = c == '#';
		}
		const auto u = static_cast<unsigned char>(c);
		// TOML 1.0 allows no control character but tab, LF and CR (before
		// LF) anywhere, comments included; they are refused here, before
		// toml++ sees them (its parser asserts on some of them in a key).
		if ((u < 0x20 && c != '\t' && c != '\r') || u == 0x7f)
			throw ConfigError(source, line,
			                  "control character 0x" +
			                      std::string(1, "0123456789abcdef"[u >> 4]) +
			                      std::string(1, "0123456789abcdef"[u & 15]) + " at column " +
			                      std::to_string(col) + "; TOML allows only tab and line ends");
		if (u < 0x80) continue;
		if (comment_line && text[i - 1] != '\\') continue;
		throw ConfigError(
		    source, line,
		    "non-ASCII character at column " + std::to_string(col) +
		        "; esptun configs are plain ASCII (other text is allowed only in whole-line "
		        "# comments)");
	}
}

namespace {

/// wipe_strings() - zero every string value in @n and below. The parsed
/// tree holds a copy of each inline key and PSK; toml++ frees it unwiped.
void wipe_strings(toml::node& n) noexcept {
	if (auto* t = n.as_table()) {
		for (auto&& [k, v] : *t)
			wipe_strings(v);
	} else if (auto* a = n.as_array()) {
		for (toml::node& v : *a)
			wipe_strings(v);
	} else if (auto* s = n.as_string()) {
		std::string& text = s->get();
		secure_wipe(text.data(), text.capacity());
	}
}

} // namespace

Config Loader::load(std::string_view text) {
	check_ascii(text, source_);
	toml::table root;
	struct WipeTree {
		toml::table& root;
		~WipeTree() { wipe_strings(root); }
	} wipe_tree{root}; // also when a check below throws
	try {
		root = toml::parse(text, source_);
	} catch (const toml::parse_error& e) {
		const auto& where = e.source().begin;
		fail(static_cast<int>(where.line), "TOML syntax error at column " +
		                                       std::to_string(where.column) + ": " +
		                                       std::string(e.description()));
	}
	config_.source = source_;
	config_.role = role_;
	check_keys(root, kTopKeys, "the top level");

	config_.tunnel.listen = Endpoint{IpAddress::v4(0), kDefaultPort};
	// Real-time workers cost a gateway of many peers CPU per GB (docs/latency-under-load.md).
	config_.tunnel.realtime_workers = role_ == Role::client;
	if (const toml::node* n = typed(root, "tunnel", "the top level", toml::node_type::table,
	                                "write the tunnel settings under a [tunnel] header")) {
		tunnel_line_ = line_of(*n);
		parse_tunnel(*n->as_table());
	}
	if (config_.tunnel.control_socket.empty())
		config_.tunnel.control_socket = default_control_socket(config_.tunnel.interface);

	if (const toml::node* n = root.get("peer")) parse_peers(*n);
	check_role(tunnel_line_ > 0 ? tunnel_line_ : 1);
	if (const toml::node* n = typed(root, "redirect", "the top level", toml::node_type::table,
	                                "write the redirect settings under a [redirect] header"))
		parse_redirect(*n->as_table(), line_of(*n));
	check_key_reuse();
	check_user_overlaps();
	return std::move(config_);
}

void Loader::check_keys(const toml::table& t, std::span<const std::string_view> allowed,
                        std::string_view where) {
	for (auto&& [key, value] : t) {
		std::string_view k = key.str();
		if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
		std::string msg = "unknown key " + q(k) + " in " + std::string(where);
		std::string_view guess = closest_match(k, allowed);
		if (!guess.empty()) {
			msg += "; did you mean " + q(guess) + "?";
		} else {
			msg += "; known keys are";
			for (size_t i = 0; i < allowed.size(); i++)
				msg += (i ? ", " : " ") + std::string(allowed[i]);
		}
		fail(line_of(key), msg);
	}
}

/// The node at @key when it has type @want; nullptr when absent; an error otherwise.
const toml::node* Loader::typed(const toml::table& t, std::string_view key, std::string_view where,
                                toml::node_type want, std::string_view hint) {
	const toml::node* n = t.get(key);
	if (!n) return nullptr;
	if (n->type() != want) {
		std::string msg = q(key) + " in " + std::string(where) + " must be " +
		                  std::string(type_name(want)) + ", not " + std::string(type_name(n->type()));
		if (!hint.empty()) msg += "; " + std::string(hint);
		fail(line_of(*n), msg);
	}
	return n;
}

std::optional<Found<std::string>> Loader::get_string(const toml::table& t, std::string_view key,
                                                     std::string_view where) {
	const toml::node* n = typed(t, key, where, toml::node_type::string, "put the value in double quotes");
	if (!n) return std::nullopt;
	return Found<std::string>{**n->as_string(), line_of(*n)};
}

std::optional<Found<SecretString>> Loader::get_secret(const toml::table& t, std::string_view key,
                                                      std::string_view where) {
	const toml::node* n = typed(t, key, where, toml::node_type::string, "put the value in double quotes");
	if (!n) return std::nullopt;
	const int line = line_of(*n);
	if (inline_secret_line_ == 0) inline_secret_line_ = line;
	return Found<SecretString>{SecretString(std::string_view(**n->as_string())), line};
}

SecretString Loader::secret_text(std::optional<Found<SecretString>>& inline_value,
                                 const std::optional<Found<std::string>>& file, const std::string& file_desc,
                                 int& line, fs::path& path) {
	path.clear();
	if (inline_value) {
		line = inline_value->line;
		return std::move(inline_value->value);
	}
	line = file->line;
	if (file->value.empty() || file->value.find('\0') != std::string::npos)
		fail(line, file_desc + " must name a file");
	path = fs::path(file->value).is_absolute() ? fs::path(file->value) : base_dir_ / file->value;
	SecretString text;
	if (auto err = read_key_file(path, text, files_); !err.empty()) fail(line, err);
	return text;
}

std::optional<Found<int64_t>> Loader::get_int(const toml::table& t, std::string_view key,
                                              std::string_view where, std::string_view hint) {
	const toml::node* n = typed(t, key, where, toml::node_type::integer, hint);
	if (!n) return std::nullopt;
	return Found<int64_t>{**n->as_integer(), line_of(*n)};
}

std::optional<Found<bool>> Loader::get_bool(const toml::table& t, std::string_view key,
                                            std::string_view where) {
	const toml::node* n =
	    typed(t, key, where, toml::node_type::boolean, "write true or false, without quotes");
	if (!n) return std::nullopt;
	return Found<bool>{**n->as_boolean(), line_of(*n)};
}

/// An array of strings; @line gets the array's own line (0 when absent).
std::vector<Found<std::string>> Loader::get_strings(const toml::table& t, std::string_view key,
                                                    std::string_view where, int* line) {
	std::vector<Found<std::string>> out;
	*line = 0;
	const toml::node* n =
	    typed(t, key, where, toml::node_type::array,
	          "write a list in brackets, e.g. " + std::string(key) + " = [\"10.0.0.0/24\"]");
	if (!n) return out;
	*line = line_of(*n);
	for (const toml::node& item : *n->as_array()) {
		const auto* s = item.as_string();
		if (!s)
			fail(line_of(item) > 0 ? line_of(item) : *line,
			     "every entry of " + q(key) + " in " + std::string(where) +
			         " must be a string, not " + std::string(type_name(item.type())) +
			         "; put each entry in double quotes");
		out.push_back({**s, line_of(item) > 0 ? line_of(item) : *line});
	}
	return out;
}

void Loader::parse_tunnel(const toml::table& t) {
	constexpr std::string_view where = "[tunnel]";
	TunnelConfig& tc = config_.tunnel;
	check_keys(t, kTunnelKeys, where);

	if (auto v = get_string(t, "interface", where)) {
		if (auto err = check_interface_name(v->value); !err.empty()) fail(v->line, err);
		tc.interface = v->value;
	}

	int line = 0;
	for (const auto& a : get_strings(t, "addresses", where, &line)) {
		auto p = parse_prefix(a.value);
		if (!p)
			fail(a.line,
			     "addresses entry " + q(a.value) +
			         " is not an address with prefix length; write e.g. \"10.99.0.1/24\" or "
			         "\"fd99::1/64\"");
		if (auto err = check_interface_address(*p); !err.empty()) fail(a.line, err);
		if (std::find(tc.addresses.begin(), tc.addresses.end(), *p) != tc.addresses.end())
			fail(a.line, "address " + a.value + " is listed twice in addresses; remove one");
		if (p->addr.family == Family::v6) has_ipv6_address_ = true;
		tc.addresses.push_back(*p);
	}

	if (auto v = get_string(t, "listen", where)) {
		auto e = parse_endpoint(v->value, kDefaultPort);
		if (!e)
			fail(v->line, "listen " + q(v->value) +
			                  " is not a UDP address; write e.g. \"0.0.0.0:4500\" or "
			                  "\"[::]:4500\" (IPv6 in "
			                  "brackets; the port defaults to 4500, 1..65535)");
		tc.listen = *e;
		listen_line_ = v->line;
	}

	if (auto v = get_int(t, "ike_port", where)) {
		if (v->value < 0 || v->value > 65535)
			fail(
			    v->line,
			    "ike_port " + std::to_string(v->value) +
			        " is not a UDP port; use 1..65535, or 0 to take IKE only on the listen port");
		tc.ike_port = static_cast<uint16_t>(v->value);
	}
	tc.ike_fragment_size = parse_fragment_size(t, where, tc.ike_fragment_size);
	for (const auto& a : get_strings(t, "address_pool", where, &address_pool_line_)) {
		auto p = parse_prefix(a.value);
		if (!p || p->network() != *p)
			fail(a.line, "address_pool entry " + q(a.value) +
			                 " is not a network; write e.g. \"10.77.0.0/24\" (host bits clear)");
		if (p->addr.max_prefix() - p->len > tunnel::AddressPool::kMaxHostBits)
			fail(a.line, "address_pool entry " + q(a.value) + " is larger than " +
			                 (p->addr.family == Family::v4 ? "a /16" : "a /112") +
			                 " (2^16 addresses); split off a smaller network for clients");
		for (const IpPrefix& other : tc.address_pool)
			if (other.overlaps(*p))
				fail(a.line, "address_pool entry " + q(a.value) + " overlaps " +
				                 q(to_string(other)) + "; list each network once");
		tc.address_pool.push_back(*p);
	}
	for (const auto& a : get_strings(t, "dns", where, &dns_line_)) {
		auto ip = parse_ip(a.value);
		if (!ip) fail(a.line, "dns entry " + q(a.value) + " is not an IP address");
		tc.dns.push_back(*ip);
	}
	if (auto v = get_string(t, "local_id", where)) {
		if (!ike::parse_identity(v->value))
			fail(v->line,
			     "local_id is empty; write an FQDN (\"gw.example.com\"), an e-mail style ID "
			     "or an IP address, or leave it out for the host name");
		tc.local_id = v->value;
	}

	if (auto v = get_int(t, "mtu", where)) {
		mtu_line_ = v->line;
		if (v->value != 0 && (v->value < kMinMtu || v->value > kMaxMtu))
			fail(v->line, "mtu " + std::to_string(v->value) +
			                  " is out of range; use 0 (derive it from the " +
			                  "underlay and cipher) or " + std::to_string(kMinMtu) + ".." +
			                  std::to_string(kMaxMtu));
		tc.mtu = static_cast<uint32_t>(v->value);
	}
	if (has_ipv6_address_ && tc.mtu != 0 && tc.mtu < kMinMtuIpv6)
		fail(mtu_line_,
		     "mtu " + std::to_string(tc.mtu) + " is below " + std::to_string(kMinMtuIpv6) +
		         ", the IPv6 minimum (RFC 8200 section 5), and the tunnel has an IPv6 address; "
		         "use 0 or at least 1280");

	if (auto v = get_string(t, "tun_io", where)) {
		if (v->value == "auto")
			tc.tun_io = TunIo::automatic;
		else if (v->value == "vhost")
			tc.tun_io = TunIo::vhost;
		else if (v->value == "direct")
			tc.tun_io = TunIo::direct;
		else
			fail(v->line,
			     "tun_io " + q(v->value) + " is unknown; use \"auto\", \"vhost\" or \"direct\"");
	}

	if (auto v = get_int(t, "direct_write_max", where)) {
		if (v->value < 0 || v->value > kMaxDirectWriteMax)
			fail(v->line, "direct_write_max " + std::to_string(v->value) +
			                  " is out of range; use 0 (always the vhost ring) up to " +
			                  std::to_string(kMaxDirectWriteMax) + " (default " +
			                  std::to_string(kDefaultDirectWriteMax) + ")");
		tc.direct_write_max = static_cast<uint32_t>(v->value);
	}

	if (auto v = get_string(t, "crypto_impl", where)) {
		auto impl = crypto::parse_crypto_impl(v->value);
		if (!impl)
			fail(v->line, "crypto_impl " + q(v->value) +
			                  " is unknown; use \"auto\", \"stitched\" or \"two-pass\"");
		tc.crypto_impl = *impl;
	}

	if (auto v = get_string(t, "worker_priority", where)) {
		if (v->value != "realtime" && v->value != "normal")
			fail(v->line, "worker_priority " + q(v->value) +
			                  " is unknown; use \"realtime\" or \"normal\" (the default for a "
			                  "client is realtime, for a gateway normal)");
		tc.realtime_workers = v->value == "realtime";
	}

	if (auto v = get_string(t, "state_dir", where)) {
		if (v->value.empty() || v->value[0] != '/' || v->value.find('\0') != std::string::npos)
			fail(v->line, "state_dir must be an absolute path, e.g. \"/var/lib/esptun\"");
		tc.state_dir = v->value;
	}

	if (auto v = get_string(t, "control_socket", where)) {
		if (v->value.empty() || v->value[0] != '/')
			fail(v->line, "control_socket must be an absolute path, e.g. \"/run/esptun/" +
			                  tc.interface + ".sock\"");
		if (v->value.size() > kSunPathMax || v->value.find('\0') != std::string::npos)
			fail(v->line,
			     "control_socket path is longer than " + std::to_string(kSunPathMax) +
			         " bytes (the unix socket limit) or holds a NUL; use a shorter path");
		tc.control_socket = v->value;
	}

	if (auto v = get_bool(t, "drop_privileges", where)) tc.drop_privileges = v->value;
	if (auto v = get_string(t, "user", where)) {
		if (v->value.empty() ||
		    v->value.find_first_of(std::string_view(":/\0\n", 4)) != std::string::npos)
			fail(v->line, "user " + q(v->value) + " is not a user name; use e.g. \"nobody\"");
		tc.user = v->value;
	}
	if (auto v = get_bool(t, "udp_gso", where)) tc.udp_gso = v->value;
	if (auto v = get_bool(t, "udp_gro", where)) tc.udp_gro = v->value;
	if (auto v = get_bool(t, "tun_offload", where)) tc.tun_offload = v->value;
	if (auto v = get_string(t, "io_engine", where)) {
		if (v->value == "auto")
			tc.io_engine = IoEngine::automatic;
		else if (v->value == "uring")
			tc.io_engine = IoEngine::uring;
		else if (v->value == "mmsg")
			tc.io_engine = IoEngine::mmsg;
		else
			fail(v->line,
			     "io_engine " + q(v->value) + " is unknown; use \"auto\", \"uring\" or \"mmsg\"");
	}
	if (auto v = get_int(t, "workers", where)) {
		if (v->value < 0 || v->value > kMaxWorkers)
			fail(v->line, "workers " + std::to_string(v->value) +
			                  " is out of range; use 0 (one per CPU) up to " +
			                  std::to_string(kMaxWorkers));
		tc.workers = static_cast<uint32_t>(v->value);
	}
	if (auto v = get_int(t, "socket_buffer", where)) {
		if (v->value < kMinSocketBuffer || v->value > kMaxSocketBuffer)
			fail(v->line, "socket_buffer " + std::to_string(v->value) + " is out of range; use " +
			                  std::to_string(kMinSocketBuffer) + " (64 KiB) up to " +
			                  std::to_string(kMaxSocketBuffer) + " (1 GiB) bytes (default " +
			                  std::to_string(kDefaultSocketBuffer) + ")");
		tc.socket_buffer = static_cast<uint32_t>(v->value);
	}

	// Polling windows, in microseconds: 0 (off) up to kMaxPollUs.
	for (auto [key, field, def] : {std::tuple{"busy_poll_us", &tc.busy_poll_us, kDefaultBusyPollUs},
	                               std::tuple{"wake_poll_us", &tc.wake_poll_us, kDefaultWakePollUs}}) {
		if (auto v = get_int(t, key, where)) {
			if (v->value < 0 || v->value > kMaxPollUs)
				fail(v->line, std::string(key) + " " + std::to_string(v->value) +
				                  " is out of range; use 0 (off) up to " +
				                  std::to_string(kMaxPollUs) + " microseconds (default " +
				                  std::to_string(def) + ")");
			*field = static_cast<uint32_t>(v->value);
		}
	}

	// The receive queue limit: target 0 (off) up to 100 ms, interval 1 ms up to 1 s.
	int queue_line = 0;
	if (auto v = get_int(t, "queue_target_us", where)) {
		queue_line = v->line;
		if (v->value < 0 || v->value > kMaxQueueTargetUs)
			fail(v->line, "queue_target_us " + std::to_string(v->value) +
			                  " is out of range; use 0 (no limit) up to " +
			                  std::to_string(kMaxQueueTargetUs) + " microseconds (default " +
			                  std::to_string(kDefaultQueueTargetUs) + ")");
		tc.queue_target_us = static_cast<uint32_t>(v->value);
	}
	if (auto v = get_int(t, "queue_interval_ms", where)) {
		queue_line = v->line;
		if (v->value < 1 || v->value > kMaxQueueIntervalMs)
			fail(v->line, "queue_interval_ms " + std::to_string(v->value) +
			                  " is out of range; use 1 up to " +
			                  std::to_string(kMaxQueueIntervalMs) + " milliseconds (default " +
			                  std::to_string(kDefaultQueueIntervalMs) + ")");
		tc.queue_interval_ms = static_cast<uint32_t>(v->value);
	}
	if (uint64_t(tc.queue_target_us) >= uint64_t(tc.queue_interval_ms) * 1000 && tc.queue_target_us)
		fail(queue_line, "queue_target_us (" + std::to_string(tc.queue_target_us) +
		                     ") must be shorter than queue_interval_ms (" +
		                     std::to_string(tc.queue_interval_ms) + " ms)");

	if (auto v = get_bool(t, "route_all", where)) {
		tc.route_all = v->value;
		route_all_line_ = v->line;
	}
	if (auto v = get_bool(t, "kill_switch", where)) {
		tc.kill_switch = v->value;
		kill_switch_line_ = v->line;
	}
}

void Loader::check_role(int top_line) {
	const TunnelConfig& tc = config_.tunnel;
	auto& peers = config_.peers;
	if (role_ == Role::gateway) {
		if (peers.empty())
			fail(top_line, "a gateway config needs at least one [[peer]]; add one [[peer]] table "
			               "per site or "
			               "client");
		if (tc.route_all)
			fail(route_all_line_,
			     "route_all is only for a client (it sends all traffic to its gateway); "
			     "remove it from the gateway config");
		if (tc.kill_switch)
			fail(kill_switch_line_, "kill_switch is only for a client with route_all; remove it "
			                        "from the gateway config");
		if (!tc.dns.empty() && tc.address_pool.empty())
			fail(dns_line_, "dns is handed out with virtual addresses; add address_pool (e.g. "
			                "address_pool = [\"10.77.0.0/24\"]) or remove dns");
		return;
	}
	if (!tc.address_pool.empty() || !tc.dns.empty())
		fail(address_pool_line_ ? address_pool_line_ : dns_line_,
		     "address_pool and dns are for a gateway that hands out client addresses; a client "
		     "asks for its address by leaving [tunnel] addresses out");

	if (peers.empty())
		fail(top_line,
		     "a client config needs exactly one [[peer]]: its gateway; add a [[peer]] table");
	if (peers.size() > 1)
		fail(peers[1].line,
		     "a client config has exactly one [[peer]] (its gateway), but this is a second one; "
		     "remove it, or run the gateway program for several peers");
	const PeerConfig& gw = peers[0];
	if (!gw.endpoint)
		fail(gw.line, "peer " + q(gw.name) +
		                  " has no endpoint; a client must know where its gateway is: " +
		                  "add endpoint = \"198.51.100.7:4500\"");
	if (tc.kill_switch && !tc.route_all)
		fail(kill_switch_line_,
		     "kill_switch = true blocks all traffic outside the tunnel, which needs route_all = "
		     "true (all traffic into the tunnel); add route_all = true or remove kill_switch");
	if (!tc.route_all) return;
	auto has = [&](std::string_view text) {
		return std::find(gw.allowed_ips.begin(), gw.allowed_ips.end(), *parse_prefix(text)) !=
		       gw.allowed_ips.end();
	};
	if (!has("0.0.0.0/0"))
		fail(route_all_line_, "route_all = true sends all traffic through the tunnel, so peer " +
		                          q(gw.name) + " (line " + std::to_string(gw.line) +
		                          ") must accept it: add \"0.0.0.0/0\" to its allowed_ips");
	if (has_ipv6_address_ && !has("::/0"))
		fail(route_all_line_,
		     "route_all = true and the tunnel has an IPv6 address, so peer " + q(gw.name) +
		         " (line " + std::to_string(gw.line) +
		         ") must accept all IPv6 traffic too: add \"::/0\" to its allowed_ips");
}

} // namespace detail

using detail::Loader;

Config parse_config(std::string_view text, const std::string& source, Role role, const fs::path& base_dir) {
	return Loader(source, role, base_dir).load(text);
}

std::string default_control_socket(std::string_view interface) {
	return std::string(kControlSocketDir) + "/" + std::string(interface) + ".sock";
}

Config load_config(const fs::path& path, Role role) { return load_config(path, role, real_files()); }

Config load_config(const fs::path& path, Role role, FileSource& files) {
	const std::string source = path.string();
	// Only regular files: a path to a FIFO or device must not block or touch it.
	FileFacts st;
	if (auto err = files.stat(path, st); !err.empty())
		throw ConfigError(source, 0, "cannot read config: " + err);
	if (!S_ISREG(st.mode)) throw ConfigError(source, 0, "config is not a regular file");
	if (st.size > kMaxConfigSize)
		throw ConfigError(source, 0, "config is larger than 16 MiB; is this the right file?");
	SecretString text; // may hold inline keys: wiped when freed
	if (auto err = files.read(path, kMaxConfigSize, text, st); !err.empty())
		throw ConfigError(source, 0,
		                  "cannot read config: " + err + "; check the path and its permissions");
	fs::path base = path.parent_path();
	Loader loader(source, role, base.empty() ? fs::path(".") : base, files);
	Config config = loader.load(text.view());
	// Issue 16: a config holding keys or PSKs itself is a key file, and
	// gets the key files' rule (checked on the file actually read).
	if (const int line = loader.inline_secret_line(); line > 0)
		if (auto err = check_secret_mode("config", source, st.mode); !err.empty())
			throw ConfigError(
			    source, line,
			    err + " (it holds a key or psk inline; or move them to key_file/psk_file)");
	return config;
}

} // namespace esptun::conf
