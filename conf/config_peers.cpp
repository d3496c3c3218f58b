// The config loader, [[peer]] tables: the keys every peer may have, which of
// them belong to statically keyed peers and which to IKE peers, a peer's
// endpoint and its allowed_ips (see config.hpp; the static SAs are in
// config_static.cpp, the IKE keys in config_ike.cpp).
#include "conf/checks.hpp"
#include "conf/loader.hpp"

#include <algorithm>
#include <string>

namespace esptun::conf::detail {

constexpr std::string_view kPeerKeys[] = {"name",
                                          "endpoint",
                                          "allowed_ips",
                                          "cipher",
                                          "esn",
                                          "replay_window",
                                          "out",
                                          "in",
                                          "psk",
                                          "psk_file",
                                          "local_id",
                                          "remote_id",
                                          "ike_proposals",
                                          "esp_proposals",
                                          "initiate",
                                          "dpd_interval",
                                          "rekey_time",
                                          "ike_rekey_time",
                                          "local_ts",
                                          "rekey_bytes",
                                          "rekey_packets",
                                          "allow_weak",
                                          "ike_fragment_size",
                                          "cert_file",
                                          "private_key_file",
                                          "cert_chain_file",
                                          "ca_dir",
                                          "crl_files",
                                          "auth",
                                          "users_file",
                                          "eap_identity",
                                          "eap_password",
                                          "eap_password_file",
                                          "rsa_pss"};
/// Keys of a statically keyed peer that an IKE peer negotiates instead.
constexpr std::string_view kStaticOnlyKeys[] = {"cipher", "esn", "out", "in"};
/// Keys that only mean something with IKE.
constexpr std::string_view kIkeOnlyKeys[] = {
    "local_id",          "remote_id",        "ike_proposals",   "esp_proposals",
    "initiate",          "dpd_interval",     "rekey_time",      "ike_rekey_time",
    "local_ts",          "rekey_bytes",      "rekey_packets",   "allow_weak",
    "ike_fragment_size", "private_key_file", "cert_chain_file", "ca_dir",
    "crl_files",         "users_file",       "eap_identity",    "eap_password",
    "eap_password_file", "rsa_pss"};

void Loader::parse_peers(const toml::node& n) {
	if (n.is_table())
		fail(line_of(n),
		     "'peer' must be a list of tables: write the header as [[peer]], with double brackets");
	const toml::array* arr = n.as_array();
	if (!arr)
		fail(line_of(n),
		     "'peer' must be a list of [[peer]] tables, not " + std::string(type_name(n.type())));
	for (const toml::node& item : *arr) {
		const toml::table* t = item.as_table();
		if (!t)
			fail(line_of(item) > 0 ? line_of(item) : line_of(n),
			     "every 'peer' entry must be a table; write each peer under a [[peer]] header");
		config_.peers.push_back(parse_peer(*t));
	}
}

PeerConfig Loader::parse_peer(const toml::table& t) {
	constexpr std::string_view where = "[[peer]]";
	PeerConfig peer;
	peer.line = line_of(t);
	check_keys(t, kPeerKeys, where);

	auto name = get_string(t, "name", where);
	if (!name) fail(peer.line, "[[peer]] has no name; add name = \"site-b\" (any short unique name)");
	if (auto err = check_peer_name(name->value); !err.empty()) fail(name->line, err);
	peer.name = name->value;
	if (auto [it, fresh] = names_.emplace(peer.name, name->line); !fresh)
		fail(name->line, "peer name " + q(peer.name) + " is already used on line " +
		                     std::to_string(it->second) + "; give every peer its own name");

	const bool ike =
	    t.contains("psk") || t.contains("psk_file") || t.contains("cert_file") || t.contains("auth");
	if (ike) {
		for (std::string_view k : kStaticOnlyKeys)
			if (const toml::node* bad = t.get(k))
				fail(line_of(*bad),
				     q(k) + " is for a statically keyed peer, but peer " + q(peer.name) +
				         " has a pre-shared key and negotiates its SAs with IKEv2; " +
				         (k == "cipher" || k == "esn"
				              ? std::string(
				                    "list the ESP suites in esp_proposals instead, e.g. "
				                    "esp_proposals = [\"aes128gcm16\"]")
				              : "remove the [peer." + std::string(k) + "] table"));
	} else {
		for (std::string_view k : kIkeOnlyKeys)
			if (const toml::node* bad = t.get(k))
				fail(line_of(*bad),
				     q(k) + " only applies to a peer keyed by IKEv2; add psk = \"...\" " +
				         "(or psk_file, or cert_file for certificates) to peer " +
				         q(peer.name) + ", or remove " + q(k));
	}
	const crypto::CipherSpec* spec = nullptr;
	if (!ike) {
		auto cipher = get_string(t, "cipher", where);
		std::string names;
		for (const auto& c : crypto::all_ciphers())
			names += (names.empty() ? "" : ", ") + std::string(c.name);
		if (!cipher)
			fail(peer.line,
			     "peer " + q(peer.name) + " has no cipher; add cipher = one of " + names);
		spec = crypto::find_cipher(cipher->value);
		if (!spec) {
			std::vector<std::string_view> known;
			for (const auto& c : crypto::all_ciphers())
				known.push_back(c.name);
			std::string_view guess = closest_match(cipher->value, known);
			fail(cipher->line, "cipher " + q(cipher->value) + " is unknown" +
			                       (guess.empty() ? "" : "; did you mean " + q(guess) + "?") +
			                       " (supported: " + names + ")");
		}
		peer.cipher = spec->id;
	}

	parse_endpoint_key(t, peer);
	// A client of a gateway with an address pool may have no allowed_ips:
	// its address is then leased from the pool when it connects. A template
	// (remote_id with '*') has none; check_template() says what it needs.
	const toml::node* remote = t.get("remote_id");
	const bool tmpl = ike && role_ == Role::gateway && remote && remote->is_string() &&
	                  remote->as_string()->get().find('*') != std::string::npos;
	parse_allowed_ips(t, peer,
	                  tmpl || (ike && role_ == Role::gateway && !config_.tunnel.address_pool.empty()));

	if (auto v = get_bool(t, "esn", where)) peer.esn = v->value;
	if (auto v = get_int(t, "replay_window", where)) {
		if (v->value < 0 || v->value > kMaxReplayWindow)
			fail(v->line, "replay_window " + std::to_string(v->value) +
			                  " is out of range; use 0 (no replay " + "check) up to " +
			                  std::to_string(kMaxReplayWindow) + "; the default is " +
			                  std::to_string(kDefaultReplayWindow));
		peer.replay_window = static_cast<uint32_t>(v->value);
	}

	if (ike) {
		peer.ike = parse_ike_peer(t, peer);
	} else {
		peer.out = parse_sa(t, peer, "out", *spec);
		peer.in = parse_sa(t, peer, "in", *spec);
	}
	return peer;
}

void Loader::parse_endpoint_key(const toml::table& t, PeerConfig& peer) {
	constexpr std::string_view where = "[[peer]]";
	if (auto v = get_string(t, "endpoint", where)) {
		auto e = parse_endpoint(v->value, kDefaultPort);
		if (!e)
			fail(v->line,
			     "endpoint " + q(v->value) +
			         " is not a UDP address; write e.g. \"198.51.100.7:4500\" or "
			         "\"[2001:db8::7]:4500\" (IPv6 in brackets; the port defaults to 4500)");
		if (e->addr.is_unspecified())
			fail(v->line, "endpoint " + q(v->value) +
			                  " is the unspecified address; give the peer's real address, or "
			                  "leave endpoint "
			                  "out on a gateway to learn it");
		const Endpoint& listen = config_.tunnel.listen;
		if (e->addr.family == Family::v6 && listen.addr.family == Family::v4)
			fail(v->line, "endpoint " + q(v->value) + " is IPv6 but [tunnel] listen is IPv4 (" +
			                  to_string(listen) +
			                  "); set listen = \"[::]:" + std::to_string(listen.port) + "\"");
		if (e->addr.family == Family::v4 && listen.addr.family == Family::v6 &&
		    !listen.addr.is_unspecified())
			fail(v->line, "endpoint " + q(v->value) +
			                  " is IPv4 but [tunnel] listen is the IPv6 address " +
			                  to_string(listen) + "; listen on an IPv4 address or on [::]");
		peer.endpoint = *e;
	}
}

void Loader::parse_allowed_ips(const toml::table& t, PeerConfig& peer, bool may_be_empty) {
	int line = 0;
	auto entries = get_strings(t, "allowed_ips", "[[peer]]", &line);
	if (entries.empty() && !may_be_empty)
		fail(line > 0 ? line : peer.line,
		     "peer " + q(peer.name) +
		         " needs allowed_ips: the inner addresses routed to it and accepted " +
		         "from it, e.g. allowed_ips = [\"10.99.0.2/32\", \"192.168.50.0/24\"]" +
		         ((t.contains("psk") || t.contains("psk_file") || t.contains("cert_file") ||
		           t.contains("auth")) &&
		                  role_ == Role::gateway
		              ? " (or, for a client that gets its address from the pool, an "
		                "address_pool in [tunnel])"
		              : ""));
	for (const auto& a : entries) {
		auto p = parse_prefix(a.value);
		if (!p)
			fail(a.line, "allowed_ips entry " + q(a.value) +
			                 " is not an address or prefix; write e.g. \"192.168.50.0/24\" or "
			                 "\"10.99.0.2/32\"");
		if (p->network() != *p)
			fail(a.line,
			     "allowed_ips entry " + q(a.value) + " has host bits set; did you mean " +
			         q(to_string(p->network())) + " (the network) or " +
			         q(to_string(IpPrefix{p->addr, static_cast<uint8_t>(p->addr.max_prefix())})) +
			         " (just that host)?");
		if (const auto* hit = route_index_.first_overlap(*p)) {
			const auto& [other, claim] = routes_[hit->value];
			std::string owner =
			    claim.peer == peer.name ? "this same peer" : "peer " + q(claim.peer);
			fail(a.line, "allowed_ips entry " + q(a.value) + " overlaps " + q(to_string(other)) +
			                 " of " + owner + " (line " + std::to_string(claim.line) +
			                 "); each inner address must belong to exactly one peer, so remove "
			                 "or narrow one");
		}
		route_index_.insert(*p, routes_.size());
		routes_.push_back({*p, Claim{peer.name, a.line}});
		peer.allowed_ips.push_back(*p);
	}
}

} // namespace esptun::conf::detail
