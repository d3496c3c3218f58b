// The config loader, statically keyed peers: the [peer.out] and [peer.in]
// tables of a peer whose SAs come from the config, their keys (inline or
// from key files, hex), and the rule that no key serves two SAs (see
// config.hpp; IKE peers are in config_ike.cpp).
#include "conf/checks.hpp"
#include "conf/loader.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

namespace esptun::conf::detail {

/// The keys of a [peer.out] / [peer.in] table.
constexpr std::string_view kSaKeys[] = {"spi",          "key",      "key_file",     "enc_key",
                                        "enc_key_file", "auth_key", "auth_key_file"};

SaConfig Loader::parse_sa(const toml::table& peer_table, const PeerConfig& peer, std::string_view dir,
                          const crypto::CipherSpec& spec) {
	const bool out = dir == "out";
	const std::string where = "[peer." + std::string(dir) + "]";
	const char* role = out ? "the SA this side sends with" : "the SA this side receives with";
	const toml::node* n = peer_table.get(dir);
	if (!n)
		fail(peer.line, "peer " + q(peer.name) + " has no " + where + " table (" + role + "); add " +
		                    where + " with spi and keys after the peer's other keys");
	const toml::table* t = n->as_table();
	if (!t)
		fail(line_of(*n), q(dir) + " in [[peer]] must be a table, not " +
		                      std::string(type_name(n->type())) + "; write it under its own " +
		                      where + " header");
	const int line = line_of(*t) > 0 ? line_of(*t) : peer.line;
	check_keys(*t, kSaKeys, where);

	SaConfig sa;
	auto spi = get_int(*t, "spi", where, "write it as a number without quotes, e.g. spi = 0x1001");
	if (!spi) fail(line, where + " of peer " + q(peer.name) + " has no spi; add e.g. spi = 0x1001");
	if (auto err = check_spi(spi->value); !err.empty()) fail(spi->line, err);
	sa.spi = static_cast<uint32_t>(spi->value);
	// Inbound SPIs select the SA for a received packet (RFC 4303 section
	// 4.1), so they must be unique here; outbound ones are unique too, as
	// they are the peers' inbound SPIs and a shared one is a copy-paste slip.
	auto& claims = out ? out_spis_ : in_spis_;
	if (auto [it, fresh] = claims.emplace(sa.spi, Claim{peer.name, spi->line}); !fresh) {
		char hex[16];
		std::snprintf(hex, sizeof(hex), "0x%x", static_cast<unsigned>(sa.spi));
		fail(spi->line, "spi " + std::string(hex) + " in " + where + " is already used by peer " +
		                    q(it->second.peer) + " (line " + std::to_string(it->second.line) +
		                    "); every " + (out ? "outbound" : "inbound") + " SPI must be unique");
	}

	if (spec.aead) {
		for (std::string_view k : {"enc_key", "enc_key_file", "auth_key", "auth_key_file"})
			if (const toml::node* bad = t->get(k))
				fail(
				    line_of(*bad),
				    q(k) + " is for CBC ciphers; cipher " + q(spec.name) +
				        " takes one 'key': the AES key followed by the 4-byte salt, as `ip " +
				        "xfrm ... aead rfc4106(gcm(aes)) 0x... 128` takes it");
		sa.enc_key = parse_key(*t, line, where, "key", spec.enc_key_len, spec);
	} else {
		for (std::string_view k : {"key", "key_file"})
			if (const toml::node* bad = t->get(k))
				fail(line_of(*bad), q(k) + " is for GCM ciphers; cipher " + q(spec.name) +
				                        " takes 'enc_key' (" +
				                        std::to_string(spec.enc_key_len) +
				                        " bytes) and 'auth_key' (" +
				                        std::to_string(spec.auth_key_len) + " bytes)");
		sa.enc_key = parse_key(*t, line, where, "enc_key", spec.enc_key_len, spec);
		sa.auth_key = parse_key(*t, line, where, "auth_key", spec.auth_key_len, spec);
	}
	return sa;
}

SecretBytes Loader::parse_key(const toml::table& t, int table_line, std::string_view where,
                              std::string_view name, size_t want_len, const crypto::CipherSpec& spec) {
	const std::string file_key = std::string(name) + "_file";
	const std::string w(where);
	const std::string size_text =
	    std::to_string(want_len) + " bytes (0x followed by " + std::to_string(want_len * 2) +
	    " hex digits" +
	    (spec.aead ? ": the " + std::to_string(want_len - 4) + "-byte AES key, then the 4-byte salt)"
	               : ")");
	auto inline_key = get_secret(t, name, where);
	auto file = get_string(t, file_key, where);
	if (inline_key && file)
		fail(file->line, "give either " + q(name) + " or " + q(file_key) + " in " + w + ", not both");
	if (!inline_key && !file)
		fail(table_line, w + " has no " + q(name) + "; add " + std::string(name) +
		                     " = \"0x...\" with " + size_text + ", or " + file_key +
		                     " = \"path\" naming a file that holds it");

	int line = 0;
	std::filesystem::path path;
	const SecretString text = secret_text(inline_key, file, q(file_key) + " in " + w, line, path);
	const std::string what = path.empty()
	                             ? q(name) + " in " + w
	                             : "the key in " + path.string() + " (" + q(file_key) + " in " + w + ")";

	SecretBytes key;
	if (auto err = decode_hex_key(text.view(), key); !err.empty()) fail(line, what + " " + err);
	if (key.size() != want_len)
		fail(line, what + " is " + std::to_string(key.size()) + " bytes, but cipher " + q(spec.name) +
		               " needs " + size_text);
	return key;
}

void Loader::check_key_reuse() const {
	// One static key, one SA: in both directions or in two SAs, AES-GCM would
	// seal with the same nonces from two counters (RFC 4106 section 8.1), and
	// one side's packets could be replayed as the other's. The message names
	// the SAs, never the key.
	// Sorted by key, equal keys sit side by side: O(n log n) for 10,000
	// peers where comparing each SA with every earlier one was quadratic.
	// The pointers are sorted, no copy of a key is made.
	struct Use {
		const PeerConfig* peer;
		const char* dir;
		const SaConfig* sa;
		size_t order; // in the config: the error names the later use
	};
	std::vector<Use> uses;
	for (const PeerConfig& peer : config_.peers) {
		if (peer.ike) continue;
		for (const auto& [dir, sa] : {std::pair{"out", &peer.out}, std::pair{"in", &peer.in}})
			uses.push_back({&peer, dir, sa, uses.size()});
	}
	std::sort(uses.begin(), uses.end(), [](const Use& a, const Use& b) {
		return std::tie(a.sa->enc_key, a.sa->auth_key, a.order) <
		       std::tie(b.sa->enc_key, b.sa->auth_key, b.order);
	});
	// Of all second uses of a key, the first in the config, as a scan in
	// config order would have stopped there.
	const Use* again = nullptr;
	const Use* first = nullptr;
	for (size_t i = 1; i < uses.size(); i++) {
		const Use &prev = uses[i - 1], &u = uses[i];
		if (prev.sa->enc_key != u.sa->enc_key || prev.sa->auth_key != u.sa->auth_key) continue;
		if (!again || u.order < again->order) {
			again = &u;
			first = &prev;
		}
	}
	if (again)
		fail(again->peer->line, "peer " + q(again->peer->name) + " [peer." + again->dir +
		                            "] uses the same key as peer " + q(first->peer->name) +
		                            " [peer." + first->dir + "] (line " +
		                            std::to_string(first->peer->line) +
		                            "); give every SA its own key (esptun-gateway "
		                            "genpair --cipher C makes a pair)");
}

} // namespace esptun::conf::detail
