// IKEv2 key exchange on OpenSSL 3.0 (RFC 7296 section 2.14, 3.4): the MODP
// groups 2 (RFC 2409; weak, opt-in only), 14, 15 and 16 (RFC 3526), the ECP
// groups 19 and 20 (RFC 5903) and Curve25519 (RFC 8031).
// DhKeyPair::shared_secret() sees the peer's KE payload before the peer is
// authenticated, so it checks every length and range itself first.
#include "ike/keymat.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/core_names.h>
#include <openssl/dh.h>
#include <openssl/obj_mac.h>

#include <climits>

namespace esptun::ike {

using namespace openssl_util;

namespace {

// ---- Key exchange helpers ---------------------------------------------------

enum class Kind : uint8_t { modp, ecp, x25519 };

/**
 * GroupInfo - what esptun needs to know of one group.
 * @ossl_name: OpenSSL's name for it: "modp_2048" is RFC 3526 group 14 (not
 *             RFC 7919's "ffdhe2048"), "P-256" is RFC 5903 group 19. OpenSSL
 *             does not name RFC 2409's 1024-bit group: nullptr, and its
 *             prime and generator are given instead (ffc_prime).
 * @pub_len:   the KE payload's data length (section 3.4 fixes it per group):
 *             MODP the prime's length, ECP x || y (RFC 5903 section 7)
 * @secret_len: the length of g^ir: MODP the prime's, ECP x only, X25519 32
 */
struct GroupInfo {
	Kind kind;
	const char* ossl_name;
	size_t pub_len;
	size_t secret_len;
	int ec_nid;                    ///< ECP only
	BIGNUM* (*ffc_prime)(BIGNUM*); ///< MODP only
};

std::optional<GroupInfo> group_info(DhGroup g) noexcept {
	switch (g) {
	case DhGroup::modp1024:
		return GroupInfo{Kind::modp, nullptr, 128, 128, 0, BN_get_rfc2409_prime_1024};
	case DhGroup::modp2048:
		return GroupInfo{Kind::modp, "modp_2048", 256, 256, 0, BN_get_rfc3526_prime_2048};
	case DhGroup::modp3072:
		return GroupInfo{Kind::modp, "modp_3072", 384, 384, 0, BN_get_rfc3526_prime_3072};
	case DhGroup::modp4096:
		return GroupInfo{Kind::modp, "modp_4096", 512, 512, 0, BN_get_rfc3526_prime_4096};
	case DhGroup::ecp256:
		return GroupInfo{Kind::ecp, "P-256", 64, 32, NID_X9_62_prime256v1, nullptr};
	case DhGroup::ecp384:
		return GroupInfo{Kind::ecp, "P-384", 96, 48, NID_secp384r1, nullptr};
	case DhGroup::curve25519:
		return GroupInfo{Kind::x25519, nullptr, 32, 32, 0, nullptr};
	}
	return std::nullopt;
}

/// info() - group_info() of a group the constructor accepted (never empty there).
GroupInfo info(DhGroup g) {
	std::optional<GroupInfo> i = group_info(g);
	if (!i) throw std::invalid_argument("DH group not supported");
	return *i;
}

const char* key_type(Kind k) noexcept {
	switch (k) {
	case Kind::modp:
		return "DH";
	case Kind::ecp:
		return "EC";
	case Kind::x25519:
		return "X25519";
	}
	return nullptr;
}

/// from_params() - an EVP_PKEY of group @gi made from @bld; nullptr if OpenSSL
/// refuses them (e.g. a point not on the curve).
Owned<EVP_PKEY> from_params(const GroupInfo& gi, OSSL_PARAM_BLD* bld, int selection) {
	Owned<OSSL_PARAM> params(OSSL_PARAM_BLD_to_param(bld));
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_name(nullptr, key_type(gi.kind), nullptr));
	EVP_PKEY* key = nullptr;
	if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
	    EVP_PKEY_fromdata(ctx.get(), &key, selection, params.get()) != 1)
		return nullptr;
	return Owned<EVP_PKEY>(key);
}

/**
 * ParamBld - an OSSL_PARAM_BLD and the BIGNUMs pushed into it: the builder
 * keeps pointers to them until OSSL_PARAM_BLD_to_param() copies them.
 */
struct ParamBld {
	Owned<OSSL_PARAM_BLD> bld;
	Owned<BIGNUM> p, g;
	OSSL_PARAM_BLD* get() const noexcept { return bld.get(); }
};

/// new_param_bld() - a builder holding the domain of @gi: its name, or for
/// the unnamed MODP group its prime and generator 2 (RFC 2409 section 6.2).
ParamBld new_param_bld(const GroupInfo& gi) {
	ParamBld b{Owned<OSSL_PARAM_BLD>(OSSL_PARAM_BLD_new()), nullptr, nullptr};
	check(b.bld != nullptr, "OSSL_PARAM_BLD");
	if (gi.ossl_name) {
		check(OSSL_PARAM_BLD_push_utf8_string(b.get(), OSSL_PKEY_PARAM_GROUP_NAME, gi.ossl_name, 0) ==
		          1,
		      "OSSL_PARAM_BLD");
		return b;
	}
	b.p.reset(gi.ffc_prime(nullptr));
	b.g.reset(BN_new());
	check(b.p && b.g && BN_set_word(b.g.get(), 2) == 1 &&
	          OSSL_PARAM_BLD_push_BN(b.get(), OSSL_PKEY_PARAM_FFC_P, b.p.get()) == 1 &&
	          OSSL_PARAM_BLD_push_BN(b.get(), OSSL_PKEY_PARAM_FFC_G, b.g.get()) == 1,
	      "OSSL_PARAM_BLD");
	return b;
}

/// bn_param() - a BIGNUM parameter of @key (OSSL_PKEY_PARAM_*); throws if absent.
Owned<BIGNUM> bn_param(const EVP_PKEY* key, const char* name) {
	BIGNUM* bn = nullptr;
	check(EVP_PKEY_get_bn_param(key, name, &bn) == 1, "EVP_PKEY_get_bn_param");
	return Owned<BIGNUM>(bn);
}

/**
 * encode_public() - the KE payload data of @key (section 3.4): MODP
 * zero-padded to the prime's length (RFC 7296 section 3.4 wants the full
 * length), ECP x || y without the SEC1 0x04 prefix (RFC 5903 section 7),
 * X25519 raw.
 */
std::vector<uint8_t> encode_public(const GroupInfo& gi, const EVP_PKEY* key) {
	std::vector<uint8_t> out(gi.pub_len);
	switch (gi.kind) {
	case Kind::modp:
		// bn2binpad places a shorter number right-aligned after zero bytes.
		check(BN_bn2binpad(bn_param(key, OSSL_PKEY_PARAM_PUB_KEY).get(), out.data(),
		                   int(gi.pub_len)) == int(gi.pub_len),
		      "MODP public value encoding");
		break;
	case Kind::ecp: {
		std::vector<uint8_t> sec1(1 + gi.pub_len);
		size_t n = 0;
		check(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, sec1.data(),
		                                      sec1.size(), &n) == 1 &&
		          n == sec1.size() && sec1[0] == POINT_CONVERSION_UNCOMPRESSED,
		      "ECP public value encoding");
		std::copy(sec1.begin() + 1, sec1.end(), out.begin());
		break;
	}
	case Kind::x25519: {
		size_t n = out.size();
		check(EVP_PKEY_get_raw_public_key(key, out.data(), &n) == 1 && n == gi.pub_len,
		      "X25519 public value encoding");
		break;
	}
	}
	return out;
}

/// generate() - a fresh key pair of group @gi: X25519 directly, the others
/// from a parameters-only key of the group (named, or RFC 2409's p and g).
Owned<EVP_PKEY> generate(const GroupInfo& gi) {
	Owned<EVP_PKEY_CTX> ctx;
	if (gi.kind == Kind::x25519) {
		ctx.reset(EVP_PKEY_CTX_new_from_name(nullptr, "X25519", nullptr));
	} else {
		auto bld = new_param_bld(gi);
		Owned<EVP_PKEY> domain = from_params(gi, bld.get(), EVP_PKEY_KEY_PARAMETERS);
		check(domain != nullptr, "key generation group");
		ctx.reset(EVP_PKEY_CTX_new_from_pkey(nullptr, domain.get(), nullptr));
	}
	check(ctx && EVP_PKEY_keygen_init(ctx.get()) == 1, "key generation set-up");
	EVP_PKEY* key = nullptr;
	check(EVP_PKEY_generate(ctx.get(), &key) == 1, "key generation");
	return Owned<EVP_PKEY>(key);
}

/// modp_keypair() - the MODP pair with exponent @priv: y = 2^x mod p (RFC 3526 section 3).
Owned<EVP_PKEY> modp_keypair(const GroupInfo& gi, std::span<const uint8_t> priv) {
	if (priv.empty() || priv.size() > gi.pub_len) throw std::invalid_argument("MODP private key length");
	Owned<BIGNUM> x(BN_bin2bn(priv.data(), int(priv.size()), nullptr));
	Owned<BIGNUM> p(gi.ffc_prime(nullptr));
	Owned<BIGNUM> g(BN_new()), y(BN_new());
	Owned<BN_CTX> bn_ctx(BN_CTX_new());
	check(x && p && g && y && bn_ctx && BN_set_word(g.get(), 2) == 1, "BIGNUM set-up");
	if (BN_is_zero(x.get()) || BN_cmp(x.get(), p.get()) >= 0)
		throw std::invalid_argument("MODP private key out of range");
	check(BN_mod_exp(y.get(), g.get(), x.get(), p.get(), bn_ctx.get()) == 1, "MODP public value");
	auto bld = new_param_bld(gi);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, x.get()) == 1 &&
	          OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(gi, bld.get(), EVP_PKEY_KEYPAIR);
	check(key != nullptr, "MODP key import");
	return key;
}

/// ecp_keypair() - the ECP pair with scalar @priv: Q = d * G.
Owned<EVP_PKEY> ecp_keypair(const GroupInfo& gi, std::span<const uint8_t> priv) {
	if (priv.size() != gi.secret_len) throw std::invalid_argument("ECP private key length");
	Owned<EC_GROUP> group(EC_GROUP_new_by_curve_name(gi.ec_nid));
	Owned<BIGNUM> d(BN_bin2bn(priv.data(), int(priv.size()), nullptr));
	Owned<BN_CTX> bn_ctx(BN_CTX_new());
	check(group && d && bn_ctx, "EC set-up");
	if (BN_is_zero(d.get()) || BN_cmp(d.get(), EC_GROUP_get0_order(group.get())) >= 0)
		throw std::invalid_argument("ECP private key out of range");
	Owned<EC_POINT> q(EC_POINT_new(group.get()));
	std::vector<uint8_t> sec1(1 + gi.pub_len);
	check(q && EC_POINT_mul(group.get(), q.get(), d.get(), nullptr, nullptr, bn_ctx.get()) == 1 &&
	          EC_POINT_point2oct(group.get(), q.get(), POINT_CONVERSION_UNCOMPRESSED, sec1.data(),
	                             sec1.size(), bn_ctx.get()) == sec1.size(),
	      "ECP public value");
	auto bld = new_param_bld(gi);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, d.get()) == 1 &&
	          OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, sec1.data(),
	                                           sec1.size()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(gi, bld.get(), EVP_PKEY_KEYPAIR);
	check(key != nullptr, "ECP key import");
	return key;
}

/**
 * modp_peer() - the peer's MODP public value as a key, or nullptr when it is
 * outside 1 < y < p-1 (RFC 6989 section 2.1 requires this check for the
 * MODP groups; it updates IKEv2). 0, 1 and p-1 would force
 * the shared secret into {0, 1, p-1}. The safe-prime groups need no subgroup
 * check (RFC 6989 section 2.2), so none is made: it would cost a full
 * exponentiation per KE payload.
 */
Owned<EVP_PKEY> modp_peer(const GroupInfo& gi, std::span<const uint8_t> peer) {
	Owned<BIGNUM> y(BN_bin2bn(peer.data(), int(peer.size()), nullptr));
	Owned<BIGNUM> p_minus_1(gi.ffc_prime(nullptr));
	check(y && p_minus_1 && BN_sub_word(p_minus_1.get(), 1) == 1, "BIGNUM set-up");
	if (BN_cmp(y.get(), BN_value_one()) <= 0 || BN_cmp(y.get(), p_minus_1.get()) >= 0) return nullptr;
	auto bld = new_param_bld(gi);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) == 1, "OSSL_PARAM_BLD");
	return from_params(gi, bld.get(), EVP_PKEY_PUBLIC_KEY);
}

/**
 * ecp_peer() - the peer's x || y as a key, or nullptr when the point is not
 * on the curve or a coordinate is not below p (RFC 6989 section 2.3): OpenSSL
 * checks both when it decodes the SEC1 form; EVP_PKEY_public_check_quick()
 * repeats it (and excludes infinity, which x || y cannot encode anyway).
 */
Owned<EVP_PKEY> ecp_peer(const GroupInfo& gi, std::span<const uint8_t> peer) {
	std::vector<uint8_t> sec1(1 + gi.pub_len);
	sec1[0] = POINT_CONVERSION_UNCOMPRESSED;
	std::copy(peer.begin(), peer.end(), sec1.begin() + 1);
	auto bld = new_param_bld(gi);
	check(OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, sec1.data(),
	                                       sec1.size()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(gi, bld.get(), EVP_PKEY_PUBLIC_KEY);
	if (!key) return nullptr;
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
	check(ctx != nullptr, "EVP_PKEY_CTX_new");
	if (EVP_PKEY_public_check_quick(ctx.get()) != 1) return nullptr;
	return key;
}

/// derive() - the raw agreement of @own with @peer, or nullopt if OpenSSL refuses.
std::optional<SecretBytes> derive(const GroupInfo& gi, EVP_PKEY* own, EVP_PKEY* peer) {
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, own, nullptr));
	check(ctx && EVP_PKEY_derive_init(ctx.get()) == 1, "key agreement set-up");
	// MODP: keep leading zero bytes (RFC 7296 section 2.14: g^ir is as long
	// as p). OpenSSL's padded mode also computes them without the data-
	// dependent length that stripping would leak (the "Raccoon" attack).
	if (gi.kind == Kind::modp) check(EVP_PKEY_CTX_set_dh_pad(ctx.get(), 1) == 1, "DH padding");
	// The peer was range- or curve-checked by the caller; OpenSSL's full
	// check would add a MODP subgroup exponentiation (see modp_peer()).
	size_t n = 0;
	if (EVP_PKEY_derive_set_peer_ex(ctx.get(), peer, 0) != 1 ||
	    EVP_PKEY_derive(ctx.get(), nullptr, &n) != 1)
		return std::nullopt;
	SecretBytes out(n); // g^ir: wiped when freed, also when refused below
	if (EVP_PKEY_derive(ctx.get(), out.data(), &n) != 1) return std::nullopt;
	out.resize(n);
	return out;
}

} // namespace

// ---- DhKeyPair --------------------------------------------------------------

DhKeyPair::DhKeyPair(DhGroup group) : group_(group) {
	const GroupInfo gi = info(group);
	Owned<EVP_PKEY> key = generate(gi);
	public_ = encode_public(gi, key.get());
	pkey_ = key.release();
}

DhKeyPair::DhKeyPair(DhGroup group, std::span<const uint8_t> private_key) : group_(group) {
	const GroupInfo gi = info(group);
	Owned<EVP_PKEY> key;
	switch (gi.kind) {
	case Kind::modp:
		key = modp_keypair(gi, private_key);
		break;
	case Kind::ecp:
		key = ecp_keypair(gi, private_key);
		break;
	case Kind::x25519:
		if (private_key.size() != gi.secret_len)
			throw std::invalid_argument("X25519 private key length");
		key.reset(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(),
		                                       private_key.size()));
		check(key != nullptr, "X25519 key import");
		break;
	}
	public_ = encode_public(gi, key.get());
	pkey_ = key.release();
}

/// ~DhKeyPair() - EVP_PKEY_free clears the private key (BN_clear_free / cleanse).
DhKeyPair::~DhKeyPair() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

size_t DhKeyPair::public_len(DhGroup group) noexcept {
	const std::optional<GroupInfo> gi = group_info(group);
	return gi ? gi->pub_len : 0;
}

/**
 * shared_secret() - see keymat.hpp. The length check comes first (section
 * 3.4 fixes the length of each group's value), then the group's own checks,
 * then the agreement. An all-zero result is refused for every group: for
 * X25519 it means the peer sent a small-order point (RFC 8031 section 2,
 * recipient tests, requires the check; RFC 7748 section 6.1 describes it);
 * for the others the range checks already make it impossible.
 */
std::optional<SecretBytes> DhKeyPair::shared_secret(std::span<const uint8_t> peer_public) const {
	const GroupInfo gi = info(group_);
	if (peer_public.size() != gi.pub_len) return std::nullopt;
	auto* own = static_cast<EVP_PKEY*>(pkey_);
	Owned<EVP_PKEY> peer;
	switch (gi.kind) {
	case Kind::modp:
		peer = modp_peer(gi, peer_public);
		break;
	case Kind::ecp:
		peer = ecp_peer(gi, peer_public);
		break;
	case Kind::x25519:
		peer.reset(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(),
		                                       peer_public.size()));
		break;
	}
	std::optional<SecretBytes> secret;
	if (peer) secret = derive(gi, own, peer.get());
	// A refused peer value leaves errors in this thread's queue; they are
	// expected input, not failures, so drop them.
	ERR_clear_error();
	if (!secret || secret->size() != gi.secret_len) return std::nullopt;
	uint8_t any = 0;
	for (uint8_t b : *secret)
		any |= b;
	if (any == 0) return std::nullopt;
	return secret;
}

} // namespace esptun::ike
