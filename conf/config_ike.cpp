// The config loader, IKE peers: pre-shared keys, identities, proposals and
// timers of a peer that negotiates its SAs with IKEv2 (see config.hpp).
#include "conf/checks.hpp"
#include "conf/loader.hpp"
#include "ike/engine.hpp"

#include <tuple>

namespace esptun::conf::detail {

static_assert(kDefaultIkeFragmentSize == ike::kDefaultFragmentSize);

IkePeerConfig Loader::parse_ike_peer(const toml::table& t, const PeerConfig& peer) {
	constexpr std::string_view where = "[[peer]]";
	IkePeerConfig ike;
	auto inline_psk = get_secret(t, "psk", where);
	auto file = get_string(t, "psk_file", where);
	if (inline_psk && file)
		fail(file->line, "give either 'psk' or 'psk_file' for peer " + q(peer.name) + ", not both");
	int line = 0;
	std::filesystem::path path;
	const SecretString text =
	    secret_text(inline_psk, file, "'psk_file' of peer " + q(peer.name), line, path);
	// strongSwan's convention: "0x..." is hex, anything else is the key's bytes as written.
	if (text.starts_with("0x") || text.starts_with("0X")) {
		if (auto err = decode_hex_key(text.view(), ike.psk); !err.empty())
			fail(line, "the pre-shared key of peer " + q(peer.name) + " " + err);
	} else {
		ike.psk.assign(text.begin(), text.end());
	}
	if (ike.psk.size() < kMinPskLen)
		fail(line, "the pre-shared key of peer " + q(peer.name) + " is " +
		               std::to_string(ike.psk.size()) + " bytes; use at least " +
		               std::to_string(kMinPskLen) +
		               " (esptun-gateway genpsk makes one of 32 random bytes)");

	auto identity = [&](std::string_view key, std::string fallback) {
		auto v = get_string(t, key, where);
		std::string id = v ? v->value : std::move(fallback);
		if (v && !ike::parse_identity(v->value))
			fail(v->line, q(key) + " of peer " + q(peer.name) +
			                  " is empty; write an FQDN (\"gw.example.com\"), an e-mail style ID "
			                  "(\"alice@example.com\") or an IP address");
		return id;
	};
	ike.local_id = identity("local_id", config_.tunnel.local_id);
	ike.remote_id = identity("remote_id", peer.name);

	if (auto v = get_bool(t, "allow_weak", where)) ike.allow_weak = v->value;
	int list_line = 0;
	auto ike_list = get_strings(t, "ike_proposals", where, &list_line);
	if (t.contains("ike_proposals")) {
		if (ike_list.empty())
			fail(list_line, "ike_proposals is empty; leave it out for the defaults");
		ike.ike_proposals.clear();
		for (const auto& e : ike_list) {
			std::string err;
			auto suite = ike::parse_ike_proposal(e.value, err, ike.allow_weak);
			if (!suite) fail(e.line, "ike_proposals entry " + q(e.value) + ": " + err);
			ike.ike_proposals.push_back(*suite);
		}
	}
	auto esp_list = get_strings(t, "esp_proposals", where, &list_line);
	if (t.contains("esp_proposals")) {
		if (esp_list.empty())
			fail(list_line, "esp_proposals is empty; leave it out for the defaults");
		ike.esp_proposals.clear();
		for (const auto& e : esp_list) {
			std::string err;
			auto suite = ike::parse_esp_proposal(e.value, err, ike.allow_weak);
			if (!suite) fail(e.line, "esp_proposals entry " + q(e.value) + ": " + err);
			ike.esp_proposals.push_back(*suite);
		}
	}
	// local_ts: our side of the peer's CHILD_SAs (RFC 7296 section 2.9
	// narrows the peer's TSr to it); inbound ESP to elsewhere is dropped.
	auto local_list = get_strings(t, "local_ts", where, &list_line);
	if (t.contains("local_ts") && local_list.empty())
		fail(list_line, "local_ts of peer " + q(peer.name) +
		                    " is empty; leave it out to let the peer reach any address");
	for (const auto& e : local_list) {
		auto p = parse_prefix(e.value);
		if (!p)
			fail(e.line, "local_ts entry " + q(e.value) +
			                 " is not an address or prefix; write e.g. \"10.0.0.0/24\"");
		if (p->network() != *p)
			fail(e.line, "local_ts entry " + q(e.value) + " has host bits set; did you mean " +
			                 q(to_string(p->network())) + "?");
		ike.local_ts.push_back(*p);
	}
	if (auto v = get_int(t, "dpd_interval", where)) {
		if (v->value < 0 || v->value > 86400)
			fail(
			    v->line,
			    "dpd_interval " + std::to_string(v->value) +
			        " is out of range; use seconds from 1 to 86400, or 0 for no liveness checks");
		ike.dpd_interval = static_cast<uint32_t>(v->value);
	}
	for (auto [key, field] :
	     {std::pair{"rekey_time", &ike.rekey_time}, std::pair{"ike_rekey_time", &ike.ike_rekey_time}}) {
		auto v = get_int(t, key, where);
		if (!v) continue;
		if (v->value != 0 && (v->value < 5 || v->value > 30 * 86400))
			fail(v->line,
			     std::string(key) + " " + std::to_string(v->value) +
			         " is out of range; use seconds from 5 to 2592000 (30 days), or 0 to leave "
			         "rekeying to the peer");
		*field = static_cast<uint32_t>(v->value);
	}
	// Rekeys by volume; without ESN the engine also rekeys before the
	// sequence numbers run out, whatever these say. A floor keeps a typo
	// from rekeying many times a second.
	for (auto [key, field, floor] : {std::tuple{"rekey_bytes", &ike.rekey_bytes, int64_t(1) << 20},
	                                 std::tuple{"rekey_packets", &ike.rekey_packets, int64_t(1000)}}) {
		auto v = get_int(t, key, where);
		if (!v) continue;
		if (v->value != 0 && v->value < floor)
			fail(v->line, std::string(key) + " " + std::to_string(v->value) +
			                  " is out of range; use " + std::to_string(floor) +
			                  " or more, or 0 for no limit");
		*field = static_cast<uint64_t>(v->value);
	}
	ike.fragment_size = parse_fragment_size(t, where, config_.tunnel.ike_fragment_size);
	ike.initiate = peer.endpoint.has_value();
	if (auto v = get_bool(t, "initiate", where)) {
		if (v->value && !peer.endpoint)
			fail(v->line,
			     "initiate = true needs an endpoint for peer " + q(peer.name) +
			         " (where to send IKE_SA_INIT); add endpoint = \"198.51.100.7:4500\"");
		ike.initiate = v->value;
	}
	return ike;
}

/**
 * parse_fragment_size() - ike_fragment_size: the largest IP datagram an
 * IKE fragment may make (RFC 7383 section 2.5.1 leaves it to the sender).
 * At least ike::kMinFragmentSize, at most the largest IP datagram.
 */
uint32_t Loader::parse_fragment_size(const toml::table& t, std::string_view where, uint32_t fallback) {
	auto v = get_int(t, "ike_fragment_size", where);
	if (!v) return fallback;
	if (v->value < ike::kMinFragmentSize || v->value > 65535)
		fail(v->line, "ike_fragment_size " + std::to_string(v->value) +
		                  " is out of range; use bytes from " +
		                  std::to_string(ike::kMinFragmentSize) +
		                  " to 65535 (the default 1280 passes any path that takes IPv6)");
	return static_cast<uint32_t>(v->value);
}

} // namespace esptun::conf::detail

namespace esptun::conf {

std::vector<std::string> weak_peer_warnings(const Config& config) {
	std::vector<std::string> out;
	for (const PeerConfig& p : config.peers) {
		if (!p.ike) continue;
		const std::vector<std::string_view> weak =
		    ike::weak_algorithms(p.ike->ike_proposals, p.ike->esp_proposals);
		if (weak.empty()) continue;
		std::string names;
		for (std::string_view w : weak)
			names += (names.empty() ? "" : ", ") + std::string(w);
		out.push_back("peer " + p.name + " uses weak algorithms (" + names +
		              ") by its allow_weak = true: RFC 8247 advises against them; move the peer "
		              "to stronger ones when it can");
	}
	return out;
}

} // namespace esptun::conf
