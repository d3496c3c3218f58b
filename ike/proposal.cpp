// Proposals: see proposal.hpp. Transform IDs are IANA's IKEv2 registry.
#include "ike/proposal.hpp"

#include "base/bytes.hpp"

#include <algorithm>
#include <array>

namespace esptun::ike {
namespace {

/// ESP integrity transform IDs (type 3) for the HMAC suites.
constexpr uint16_t kIntegSha1_96 = 2;
constexpr uint16_t kIntegSha256_128 = 12;
/// ESN transform IDs (type 5).
constexpr uint16_t kEsnNo = 0, kEsnYes = 1;

/// Algorithms a peer may offer that esptun refuses, with the reason. Those
/// with opt_in are accepted for a peer with allow_weak = true (old gear that
/// can do nothing better); the others esptun does not implement at all.
struct Weak {
	std::string_view token;
	std::string_view why;
	bool opt_in = false;
};
constexpr std::array kWeakTokens{
    Weak{"md5", "MD5 is broken"},
    Weak{"sha1", "SHA-1 is too weak for IKE (RFC 8247: MUST- for integrity, SHOULD NOT as PRF)", true},
    Weak{"prfsha1", "SHA-1 is too weak for IKE (RFC 8247: SHOULD NOT as PRF)", true},
    Weak{"modp768", "768-bit MODP is breakable"},
    Weak{"modp1024", "1024-bit MODP is too weak (RFC 8247: SHOULD NOT)", true},
    Weak{"modp1536", "1536-bit MODP is too weak (RFC 8247: SHOULD NOT)"},
    Weak{"3des", "3DES has a 64-bit block (RFC 8247: SHOULD NOT)"},
    Weak{"des", "DES is breakable"},
    Weak{"null", "NULL encryption gives no confidentiality"},
};

std::string_view cipher_token(crypto::Cipher c) noexcept {
	switch (c) {
	case crypto::Cipher::aes128_gcm:
		return "aes128gcm16";
	case crypto::Cipher::aes256_gcm:
		return "aes256gcm16";
	case crypto::Cipher::aes128_cbc_sha1:
		return "aes128-sha1";
	case crypto::Cipher::aes256_cbc_sha1:
		return "aes256-sha1";
	case crypto::Cipher::aes128_cbc_sha256:
		return "aes128-sha256";
	case crypto::Cipher::aes256_cbc_sha256:
		return "aes256-sha256";
	}
	return "?";
}

/// ESP transforms of a cipher suite: encr id, key bits, integ id (0 = none).
struct EspTransforms {
	uint16_t encr, key_bits, integ;
};
EspTransforms esp_transforms(crypto::Cipher c) noexcept {
	switch (c) {
	case crypto::Cipher::aes128_gcm:
		return {uint16_t(EncrId::aes_gcm_16), 128, 0};
	case crypto::Cipher::aes256_gcm:
		return {uint16_t(EncrId::aes_gcm_16), 256, 0};
	case crypto::Cipher::aes128_cbc_sha1:
		return {uint16_t(EncrId::aes_cbc), 128, kIntegSha1_96};
	case crypto::Cipher::aes256_cbc_sha1:
		return {uint16_t(EncrId::aes_cbc), 256, kIntegSha1_96};
	case crypto::Cipher::aes128_cbc_sha256:
		return {uint16_t(EncrId::aes_cbc), 128, kIntegSha256_128};
	case crypto::Cipher::aes256_cbc_sha256:
		return {uint16_t(EncrId::aes_cbc), 256, kIntegSha256_128};
	}
	return {0, 0, 0};
}

std::vector<std::string_view> split_dash(std::string_view text) {
	std::vector<std::string_view> out;
	size_t start = 0;
	for (;;) {
		const size_t dash = text.find('-', start);
		out.push_back(text.substr(start, dash == std::string_view::npos ? dash : dash - start));
		if (dash == std::string_view::npos) break;
		start = dash + 1;
	}
	return out;
}

const Weak* weak_token(std::string_view token) {
	for (const Weak& w : kWeakTokens)
		if (token == w.token) return &w;
	return nullptr;
}

/// refusal() - the message for weak @token: how to opt in, when one can.
std::string refusal(std::string_view token) {
	const Weak* w = weak_token(token);
	std::string out = "'" + std::string(token) + "' is refused: " + std::string(w->why);
	if (w->opt_in)
		out += "; if this peer can do nothing better, set allow_weak = true in its [[peer]] "
		       "table to accept it (esptun then warns at every start)";
	return out;
}

/// The key exchange groups a proposal may name, by token.
std::optional<DhGroup> group_token(std::string_view tok) {
	if (tok == "x25519" || tok == "curve25519") return DhGroup::curve25519;
	for (DhGroup g : {DhGroup::ecp256, DhGroup::ecp384, DhGroup::modp2048, DhGroup::modp3072,
	                  DhGroup::modp4096, DhGroup::modp1024})
		if (tok == dh_name(g)) return g;
	return std::nullopt;
}

bool has(const Proposal& p, TransformType type, uint16_t id, uint16_t key_bits = 0) {
	return std::any_of(p.transforms.begin(), p.transforms.end(), [&](const Transform& t) {
		return t.type == type && t.id == id && t.key_bits == key_bits;
	});
}
bool has_type(const Proposal& p, TransformType type) {
	return std::any_of(p.transforms.begin(), p.transforms.end(),
	                   [&](const Transform& t) { return t.type == type; });
}
/// True when @p offers integrity "none" only (or nothing), as AEAD needs.
bool no_integ(const Proposal& p) {
	return std::all_of(p.transforms.begin(), p.transforms.end(),
	                   [](const Transform& t) { return t.type != TransformType::integ || t.id == 0; });
}

bool ike_matches(const Proposal& p, const IkeSuite& s) {
	if (p.protocol != Protocol::ike) return false;
	if (!has(p, TransformType::encr, uint16_t(s.encr), s.key_bits)) return false;
	if (!has(p, TransformType::prf, uint16_t(s.prf))) return false;
	if (!has(p, TransformType::dh, uint16_t(s.dh))) return false;
	if (s.integ == IntegId::none) return no_integ(p);
	return has(p, TransformType::integ, uint16_t(s.integ));
}

Proposal ike_proposal(const IkeSuite& s, uint8_t number, std::span<const uint8_t> spi) {
	Proposal p;
	p.number = number;
	p.protocol = Protocol::ike;
	p.spi.assign(spi.begin(), spi.end());
	p.transforms.push_back({TransformType::encr, uint16_t(s.encr), s.key_bits});
	p.transforms.push_back({TransformType::prf, uint16_t(s.prf), 0});
	if (s.integ != IntegId::none) p.transforms.push_back({TransformType::integ, uint16_t(s.integ), 0});
	p.transforms.push_back({TransformType::dh, uint16_t(s.dh), 0});
	return p;
}

std::vector<uint8_t> spi_bytes(uint32_t spi) {
	std::vector<uint8_t> b(4);
	store_be32(b.data(), spi);
	return b;
}

/// @dh: the key exchange group's transform ID, 0 for none (no transform).
Proposal esp_proposal(crypto::Cipher c, std::span<const uint16_t> esn_ids, uint16_t dh, uint8_t number,
                      uint32_t spi) {
	const EspTransforms t = esp_transforms(c);
	Proposal p;
	p.number = number;
	p.protocol = Protocol::esp;
	p.spi = spi_bytes(spi);
	p.transforms.push_back({TransformType::encr, t.encr, t.key_bits});
	if (t.integ) p.transforms.push_back({TransformType::integ, t.integ, 0});
	if (dh) p.transforms.push_back({TransformType::dh, dh, 0});
	for (uint16_t e : esn_ids)
		p.transforms.push_back({TransformType::esn, e, 0});
	return p;
}

std::vector<uint16_t> esn_ids(EsnOffer e) {
	switch (e) {
	case EsnOffer::yes:
		return {kEsnYes};
	case EsnOffer::no:
		return {kEsnNo};
	case EsnOffer::both:
		return {kEsnYes, kEsnNo};
	}
	return {};
}

/// The ESN choice @p allows for @ours; nullopt when none fits. A proposal
/// without ESN transforms means no ESN.
std::optional<bool> esn_choice(const Proposal& p, EsnOffer ours) {
	const bool offers_yes = has(p, TransformType::esn, kEsnYes);
	const bool offers_no = has(p, TransformType::esn, kEsnNo) || !has_type(p, TransformType::esn);
	if (ours != EsnOffer::no && offers_yes) return true;
	if (ours != EsnOffer::yes && offers_no) return false;
	return std::nullopt;
}

bool esp_matches(const Proposal& p, const EspSuite& s, ChildExchange ex) {
	if (p.protocol != Protocol::esp || p.spi.size() != 4) return false;
	// IKE_AUTH has no key exchange: groups are ignored there. In
	// CREATE_CHILD_SA our group must be among the proposal's; without one of
	// ours, the proposal must allow none (no group, or "none" (0) among them).
	if (ex == ChildExchange::create_child_sa) {
		if (s.pfs ? !has(p, TransformType::dh, uint16_t(*s.pfs))
		          : has_type(p, TransformType::dh) && !has(p, TransformType::dh, 0))
			return false;
	}
	const crypto::Cipher c = s.cipher;
	const EspTransforms t = esp_transforms(c);
	if (!has(p, TransformType::encr, t.encr, t.key_bits)) return false;
	if (t.integ == 0) return no_integ(p);
	return has(p, TransformType::integ, t.integ);
}

std::string transform_token(const Transform& t) {
	const std::string id = std::to_string(t.id);
	switch (t.type) {
	case TransformType::encr:
		if (t.id == uint16_t(EncrId::aes_cbc)) return "aes" + std::to_string(t.key_bits);
		if (t.id == uint16_t(EncrId::aes_gcm_16)) return "aes" + std::to_string(t.key_bits) + "gcm16";
		if (t.id == 3) return "3des";
		if (t.id == 13) return "aes" + std::to_string(t.key_bits) + "ctr";
		if (t.id == 28) return "chacha20poly1305";
		return "encr#" + id;
	case TransformType::prf:
		if (known_prf(t.id)) return std::string(prf_name(PrfId(t.id)));
		if (t.id == 1) return "prfmd5";
		return "prf#" + id;
	case TransformType::integ:
		if (t.id == 0) return "";
		if (known_integ(t.id)) return std::string(integ_name(IntegId(t.id)));
		if (t.id == 1) return "md5";
		return "integ#" + id;
	case TransformType::dh:
		if (known_dh(t.id)) return std::string(dh_name(DhGroup(t.id)));
		if (t.id == 1) return "modp768";
		if (t.id == 5) return "modp1536";
		if (t.id == 21) return "ecp521";
		return "dh#" + id;
	case TransformType::esn:
		return t.id == kEsnYes ? "esn" : "noesn";
	}
	return "?";
}

} // namespace

std::optional<IkeSuite> parse_ike_proposal(std::string_view text, std::string& error, bool allow_weak) {
	IkeSuite s;
	bool have_encr = false, have_prf = false, have_dh = false, have_integ = false;
	for (std::string_view tok : split_dash(text)) {
		if (const Weak* w = weak_token(tok); w && !(w->opt_in && allow_weak)) {
			error = refusal(tok);
			return std::nullopt;
		}
		if (tok == "aes128" || tok == "aes192" || tok == "aes256") {
			s.encr = EncrId::aes_cbc;
			s.key_bits = uint16_t(tok == "aes128" ? 128 : tok == "aes192" ? 192 : 256);
			have_encr = true;
		} else if (tok == "aes128gcm16" || tok == "aes256gcm16" || tok == "aes128gcm" ||
		           tok == "aes256gcm") {
			s.encr = EncrId::aes_gcm_16;
			s.key_bits = uint16_t(tok.starts_with("aes128") ? 128 : 256);
			have_encr = true;
		} else if (tok == "sha1" || tok == "sha256" || tok == "sha384" || tok == "sha512") {
			s.integ = tok == "sha1"     ? IntegId::hmac_sha1_96
			          : tok == "sha256" ? IntegId::hmac_sha256_128
			          : tok == "sha384" ? IntegId::hmac_sha384_192
			                            : IntegId::hmac_sha512_256;
			have_integ = true;
		} else if (tok == "prfsha1" || tok == "prfsha256" || tok == "prfsha384" ||
		           tok == "prfsha512") {
			s.prf = tok == "prfsha1"     ? PrfId::hmac_sha1
			        : tok == "prfsha256" ? PrfId::hmac_sha256
			        : tok == "prfsha384" ? PrfId::hmac_sha384
			                             : PrfId::hmac_sha512;
			have_prf = true;
		} else if (std::optional<DhGroup> g = group_token(tok)) {
			s.dh = *g;
			have_dh = true;
		} else {
			error = "'" + std::string(tok) +
			        "' is not an IKE algorithm esptun knows (encryption aes128/aes256/"
			        "aes128gcm16/aes256gcm16, integrity sha256/sha384/sha512, PRF "
			        "prfsha256/prfsha384/prfsha512, groups x25519/ecp256/ecp384/modp2048/"
			        "modp3072/modp4096)";
			return std::nullopt;
		}
	}
	if (!have_encr) {
		error = "has no encryption algorithm (e.g. aes128gcm16 or aes256)";
		return std::nullopt;
	}
	if (!have_dh) {
		error = "has no key exchange group (x25519, ecp256, ecp384, modp2048, modp3072 or modp4096)";
		return std::nullopt;
	}
	if (s.encr == EncrId::aes_gcm_16) {
		if (have_integ) {
			error = "combines AES-GCM with an integrity algorithm; GCM authenticates by itself, "
			        "write a PRF instead (e.g. aes128gcm16-prfsha256-x25519)";
			return std::nullopt;
		}
		s.integ = IntegId::none;
	} else if (!have_integ) {
		error = "uses AES-CBC without an integrity algorithm; add sha256, sha384 or sha512";
		return std::nullopt;
	}
	if (!have_prf) {
		// strongSwan's convention: the PRF follows the integrity hash.
		s.prf = s.integ == IntegId::hmac_sha1_96      ? PrfId::hmac_sha1
		        : s.integ == IntegId::hmac_sha384_192 ? PrfId::hmac_sha384
		        : s.integ == IntegId::hmac_sha512_256 ? PrfId::hmac_sha512
		                                              : PrfId::hmac_sha256;
	}
	return s;
}

std::optional<EspSuite> parse_esp_proposal(std::string_view text, std::string& error, bool allow_weak) {
	std::vector<std::string_view> toks = split_dash(text);
	EspSuite s;
	bool have_esn = false;
	// The group and the ESN setting end the proposal, in either order.
	while (!toks.empty()) {
		const std::string_view t = toks.back();
		if (t == "esn" || t == "noesn") {
			if (have_esn) {
				error = "names the ESN setting twice";
				return std::nullopt;
			}
			s.esn = t == "esn" ? EsnOffer::yes : EsnOffer::no;
			have_esn = true;
		} else if (std::optional<DhGroup> g = group_token(t)) {
			if (s.pfs) {
				error = "names two key exchange groups; write one proposal per group "
				        "(e.g. \"aes128gcm16-x25519\", \"aes128gcm16-ecp256\")";
				return std::nullopt;
			}
			if (weak_dh(*g) && !allow_weak) {
				error = refusal(t);
				return std::nullopt;
			}
			s.pfs = *g;
		} else {
			break;
		}
		toks.pop_back();
	}
	std::string name;
	for (std::string_view t : toks) {
		// ESP's HMAC-SHA-1-96 is not weak (RFC 8221: MUST-), unlike IKE's PRF.
		if (const Weak* w = weak_token(t); w && t != "sha1") {
			error = "'" + std::string(t) + "' is refused: " + std::string(w->why);
			return std::nullopt;
		}
		name += (name.empty() ? "" : "-") + std::string(t);
	}
	if (name == "aes128gcm") name = "aes128gcm16";
	if (name == "aes256gcm") name = "aes256gcm16";
	for (const crypto::CipherSpec& c : crypto::all_ciphers()) {
		if (cipher_token(c.id) == name) {
			s.cipher = c.id;
			return s;
		}
	}
	error = "'" + name +
	        "' is not an ESP suite esptun has (aes128gcm16, aes256gcm16, aes128-sha1, "
	        "aes256-sha1, aes128-sha256, aes256-sha256; then optionally a group for perfect "
	        "forward secrecy, x25519, ecp256, ecp384, modp2048, modp3072 or modp4096, and -esn or "
	        "-noesn to insist on one)";
	return std::nullopt;
}

std::vector<std::string_view> weak_algorithms(std::span<const IkeSuite> ike, std::span<const EspSuite> esp) {
	std::vector<std::string_view> out;
	auto add = [&](std::string_view name) {
		if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
	};
	for (const IkeSuite& s : ike) {
		if (weak_integ(s.integ)) add(integ_name(s.integ));
		if (weak_prf(s.prf)) add(prf_name(s.prf));
		if (weak_dh(s.dh)) add(dh_name(s.dh));
	}
	for (const EspSuite& s : esp)
		if (s.pfs && weak_dh(*s.pfs)) add(dh_name(*s.pfs));
	return out;
}

std::string ike_suite_name(const IkeSuite& s) {
	std::string out(encr_name(s.encr, s.key_bits));
	if (s.integ != IntegId::none) out += "-" + std::string(integ_name(s.integ));
	out += "-" + std::string(prf_name(s.prf));
	out += "-" + std::string(dh_name(s.dh));
	return out;
}

std::string esp_suite_name(const EspSuite& s) {
	std::string out(cipher_token(s.cipher));
	if (s.pfs) out += "-" + std::string(dh_name(*s.pfs));
	if (s.esn == EsnOffer::yes) out += "-esn";
	if (s.esn == EsnOffer::no) out += "-noesn";
	return out;
}

std::vector<IkeSuite> default_ike_proposals() {
	return {
	    {EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 256, IntegId::none, PrfId::hmac_sha384, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::ecp256},
	    {EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::ecp256},
	    {EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::modp2048},
	    // What the built-in clients lead with: Apple's defaults (AES-256,
	    // SHA2-256, group 14) and Windows after Set-VpnConnectionIPsecConfiguration
	    // ... -EncryptionMethod AES256 -IntegrityCheckMethod SHA256 -DHGroup Group14.
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::modp2048},
	};
}

std::vector<EspSuite> default_esp_proposals() {
	return {
	    {crypto::Cipher::aes128_gcm, EsnOffer::both, std::nullopt},
	    {crypto::Cipher::aes256_gcm, EsnOffer::both, std::nullopt},
	    {crypto::Cipher::aes128_cbc_sha256, EsnOffer::both, std::nullopt},
	    {crypto::Cipher::aes256_cbc_sha256, EsnOffer::both, std::nullopt},
	    {crypto::Cipher::aes128_cbc_sha1, EsnOffer::both, std::nullopt},
	    {crypto::Cipher::aes256_cbc_sha1, EsnOffer::both, std::nullopt},
	};
}

SaPayload ike_offer(std::span<const IkeSuite> suites, std::span<const uint8_t> spi) {
	SaPayload sa;
	uint8_t n = 1;
	for (const IkeSuite& s : suites)
		sa.proposals.push_back(ike_proposal(s, n++, spi));
	return sa;
}

SaPayload esp_offer(std::span<const EspSuite> suites, uint32_t spi, ChildExchange ex) {
	SaPayload sa;
	uint8_t n = 1;
	for (size_t i = 0; i < suites.size(); i++) {
		const EspSuite& s = suites[i];
		if (ex == ChildExchange::ike_auth &&
		    std::any_of(suites.begin(), suites.begin() + long(i),
		                [&](const EspSuite& e) { return e.cipher == s.cipher && e.esn == s.esn; }))
			continue; // the same as an earlier one once the groups are gone
		const std::vector<uint16_t> ids = esn_ids(s.esn);
		const uint16_t dh = ex == ChildExchange::create_child_sa && s.pfs ? uint16_t(*s.pfs) : 0;
		sa.proposals.push_back(esp_proposal(s.cipher, ids, dh, n++, spi));
	}
	return sa;
}

std::optional<IkeChoice> choose_ike(const SaPayload& offered, std::span<const IkeSuite> ours) {
	for (const Proposal& p : offered.proposals)
		for (const IkeSuite& s : ours)
			if (ike_matches(p, s)) return IkeChoice{s, ike_proposal(s, p.number, p.spi)};
	return std::nullopt;
}

std::optional<EspChoice> choose_esp(const SaPayload& offered, std::span<const EspSuite> ours,
                                    ChildExchange ex) {
	for (const Proposal& p : offered.proposals) {
		for (const EspSuite& s : ours) {
			if (!esp_matches(p, s, ex)) continue;
			const std::optional<bool> esn = esn_choice(p, s.esn);
			if (!esn) continue;
			EspChoice c;
			c.cipher = s.cipher;
			c.esn = *esn;
			if (ex == ChildExchange::create_child_sa) c.pfs = s.pfs;
			c.peer_spi = load_be32(p.spi.data());
			const uint16_t id = *esn ? kEsnYes : kEsnNo;
			c.reply = esp_proposal(s.cipher, std::span(&id, 1), c.pfs ? uint16_t(*c.pfs) : 0,
			                       p.number, 0);
			return c;
		}
	}
	return std::nullopt;
}

std::optional<DhGroup> rekey_group(std::span<const EspSuite> ours, std::optional<DhGroup> current) {
	if (current &&
	    std::any_of(ours.begin(), ours.end(), [&](const EspSuite& s) { return s.pfs == current; }))
		return current;
	for (const EspSuite& s : ours)
		if (s.pfs) return s.pfs;
	return std::nullopt;
}

/// True when @p names exactly one transform of each type it uses.
static bool single_choice(const Proposal& p) {
	std::array<int, 6> count{};
	for (const Transform& t : p.transforms)
		if (size_t(t.type) < count.size() && ++count[size_t(t.type)] > 1) return false;
	return true;
}

std::optional<IkeSuite> accept_ike(const SaPayload& reply, std::span<const IkeSuite> ours) {
	if (reply.proposals.size() != 1 || !single_choice(reply.proposals[0])) return std::nullopt;
	const Proposal& p = reply.proposals[0];
	for (const IkeSuite& s : ours)
		if (ike_matches(p, s)) return s;
	return std::nullopt;
}

std::optional<EspChoice> accept_esp(const SaPayload& reply, std::span<const EspSuite> ours,
                                    ChildExchange ex) {
	if (reply.proposals.size() != 1 || !single_choice(reply.proposals[0])) return std::nullopt;
	return choose_esp(reply, ours, ex);
}

std::string describe_offer(const SaPayload& offered) {
	std::string out;
	for (const Proposal& p : offered.proposals) {
		std::string one;
		for (TransformType type : {TransformType::encr, TransformType::integ, TransformType::prf,
		                           TransformType::dh, TransformType::esn}) {
			std::string alts;
			for (const Transform& t : p.transforms) {
				if (t.type != type) continue;
				std::string tok = transform_token(t);
				if (tok.empty()) continue;
				alts += (alts.empty() ? "" : "/") + tok;
			}
			if (!alts.empty()) one += (one.empty() ? "" : "-") + alts;
		}
		out += (out.empty() ? "" : ", ") + one;
	}
	return out.empty() ? "(no proposals)" : out;
}

bool weak_suite(const IkeSuite& s) noexcept {
	return weak_integ(s.integ) || weak_prf(s.prf) || weak_dh(s.dh);
}

std::optional<IkeSuite> implemented_ike_suite(const SaPayload& offered) {
	std::optional<IkeSuite> weak;
	for (const Proposal& p : offered.proposals) {
		if (p.protocol != Protocol::ike) continue;
		// Per transform type, the first algorithm we implement that is not
		// weak, else the first weak one: one pass over the transforms.
		std::optional<PrfId> prf;
		std::optional<IntegId> integ;
		std::optional<DhGroup> dh;
		auto pick = [](auto& slot, auto value, auto is_weak) {
			if (!slot || (is_weak(*slot) && !is_weak(value))) slot = value;
		};
		for (const Transform& t : p.transforms) {
			if (t.type == TransformType::prf && known_prf(t.id)) pick(prf, PrfId(t.id), weak_prf);
			if (t.type == TransformType::integ && t.id != 0 && known_integ(t.id))
				pick(integ, IntegId(t.id), weak_integ);
			if (t.type == TransformType::dh && known_dh(t.id)) pick(dh, DhGroup(t.id), weak_dh);
		}
		if (!prf || !dh) continue;
		for (const Transform& t : p.transforms) {
			if (t.type != TransformType::encr || !known_encr(t.id)) continue;
			IkeSuite s{EncrId(t.id), t.key_bits, IntegId::none, *prf, *dh};
			if (s.encr == EncrId::aes_gcm_16 ? !no_integ(p) : !integ) continue;
			if (s.encr != EncrId::aes_gcm_16) s.integ = *integ;
			if (!valid_suite(s)) continue;
			if (!weak_suite(s)) return s;
			if (!weak) weak = s;
		}
	}
	return weak;
}

} // namespace esptun::ike
