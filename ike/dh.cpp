// IKEv2 key exchange on OpenSSL 3.0 (RFC 7296 section 2.14, 3.4): MODP
// group 14 (RFC 3526), ECP group 19 (RFC 5903) and Curve25519 (RFC 8031).
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

constexpr size_t kModpLen = 256;    ///< RFC 3526 group 14: 2048 bits
constexpr size_t kEcpCoordLen = 32; ///< RFC 5903 section 7: x and y, 32 bytes each
constexpr size_t kX25519Len = 32;   ///< RFC 8031 section 2

/// OpenSSL's names for the groups: "modp_2048" is RFC 3526 group 14, which
/// is not the RFC 7919 "ffdhe2048" group; "P-256" is RFC 5903 group 19.
const char* group_name(DhGroup g) noexcept { return g == DhGroup::modp2048 ? "modp_2048" : "P-256"; }
const char* key_type(DhGroup g) noexcept {
	switch (g) {
	case DhGroup::modp2048:
		return "DH";
	case DhGroup::ecp256:
		return "EC";
	case DhGroup::curve25519:
		return "X25519";
	}
	return nullptr;
}

/// from_params() - an EVP_PKEY of @g made from @params; nullptr if OpenSSL
/// refuses them (e.g. a point not on the curve).
Owned<EVP_PKEY> from_params(DhGroup g, OSSL_PARAM_BLD* bld, int selection) {
	Owned<OSSL_PARAM> params(OSSL_PARAM_BLD_to_param(bld));
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_name(nullptr, key_type(g), nullptr));
	EVP_PKEY* key = nullptr;
	if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
	    EVP_PKEY_fromdata(ctx.get(), &key, selection, params.get()) != 1)
		return nullptr;
	return Owned<EVP_PKEY>(key);
}

/// new_param_bld() - an OSSL_PARAM_BLD holding the group name of @g.
Owned<OSSL_PARAM_BLD> new_param_bld(DhGroup g) {
	Owned<OSSL_PARAM_BLD> bld(OSSL_PARAM_BLD_new());
	check(bld && OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group_name(g),
	                                             0) == 1,
	      "OSSL_PARAM_BLD");
	return bld;
}

/// bn_param() - a BIGNUM parameter of @key (OSSL_PKEY_PARAM_*); throws if absent.
Owned<BIGNUM> bn_param(const EVP_PKEY* key, const char* name) {
	BIGNUM* bn = nullptr;
	check(EVP_PKEY_get_bn_param(key, name, &bn) == 1, "EVP_PKEY_get_bn_param");
	return Owned<BIGNUM>(bn);
}

/**
 * encode_public() - the KE payload data of @key (section 3.4): MODP
 * zero-padded to 256 bytes (RFC 7296 section 3.4 wants the full length),
 * ECP x || y without the SEC1 0x04 prefix (RFC 5903 section 7), X25519 raw.
 */
std::vector<uint8_t> encode_public(DhGroup g, const EVP_PKEY* key) {
	std::vector<uint8_t> out;
	switch (g) {
	case DhGroup::modp2048: {
		out.resize(kModpLen);
		// bn2binpad places a shorter number right-aligned after zero bytes.
		check(BN_bn2binpad(bn_param(key, OSSL_PKEY_PARAM_PUB_KEY).get(), out.data(), int(kModpLen)) ==
		          int(kModpLen),
		      "MODP public value encoding");
		break;
	}
	case DhGroup::ecp256: {
		std::array<uint8_t, 1 + 2 * kEcpCoordLen> sec1{};
		size_t n = 0;
		check(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, sec1.data(),
		                                      sec1.size(), &n) == 1 &&
		          n == sec1.size() && sec1[0] == POINT_CONVERSION_UNCOMPRESSED,
		      "ECP public value encoding");
		out.assign(sec1.begin() + 1, sec1.end());
		break;
	}
	case DhGroup::curve25519: {
		out.resize(kX25519Len);
		size_t n = out.size();
		check(EVP_PKEY_get_raw_public_key(key, out.data(), &n) == 1 && n == kX25519Len,
		      "X25519 public value encoding");
		break;
	}
	}
	return out;
}

/// generate() - a fresh key pair of group @g.
Owned<EVP_PKEY> generate(DhGroup g) {
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_name(nullptr, key_type(g), nullptr));
	check(ctx && EVP_PKEY_keygen_init(ctx.get()) == 1, "key generation set-up");
	if (g != DhGroup::curve25519) {
		const OSSL_PARAM params[] = {
		    OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
		                                     const_cast<char*>(group_name(g)), 0),
		    OSSL_PARAM_construct_end()};
		check(EVP_PKEY_CTX_set_params(ctx.get(), params) == 1, "key generation group");
	}
	EVP_PKEY* key = nullptr;
	check(EVP_PKEY_generate(ctx.get(), &key) == 1, "key generation");
	return Owned<EVP_PKEY>(key);
}

/// modp_keypair() - the MODP pair with exponent @priv: y = 2^x mod p (RFC 3526 section 3).
Owned<EVP_PKEY> modp_keypair(std::span<const uint8_t> priv) {
	if (priv.empty() || priv.size() > kModpLen) throw std::invalid_argument("MODP private key length");
	Owned<BIGNUM> x(BN_bin2bn(priv.data(), int(priv.size()), nullptr));
	Owned<BIGNUM> p(BN_get_rfc3526_prime_2048(nullptr));
	Owned<BIGNUM> g(BN_new()), y(BN_new());
	Owned<BN_CTX> bn_ctx(BN_CTX_new());
	check(x && p && g && y && bn_ctx && BN_set_word(g.get(), 2) == 1, "BIGNUM set-up");
	if (BN_is_zero(x.get()) || BN_cmp(x.get(), p.get()) >= 0)
		throw std::invalid_argument("MODP private key out of range");
	check(BN_mod_exp(y.get(), g.get(), x.get(), p.get(), bn_ctx.get()) == 1, "MODP public value");
	auto bld = new_param_bld(DhGroup::modp2048);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, x.get()) == 1 &&
	          OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(DhGroup::modp2048, bld.get(), EVP_PKEY_KEYPAIR);
	check(key != nullptr, "MODP key import");
	return key;
}

/// ecp_keypair() - the P-256 pair with scalar @priv: Q = d * G.
Owned<EVP_PKEY> ecp_keypair(std::span<const uint8_t> priv) {
	if (priv.size() != kEcpCoordLen) throw std::invalid_argument("ECP-256 private key length");
	Owned<EC_GROUP> group(EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1));
	Owned<BIGNUM> d(BN_bin2bn(priv.data(), int(priv.size()), nullptr));
	Owned<BN_CTX> bn_ctx(BN_CTX_new());
	check(group && d && bn_ctx, "EC set-up");
	if (BN_is_zero(d.get()) || BN_cmp(d.get(), EC_GROUP_get0_order(group.get())) >= 0)
		throw std::invalid_argument("ECP-256 private key out of range");
	Owned<EC_POINT> q(EC_POINT_new(group.get()));
	std::array<uint8_t, 1 + 2 * kEcpCoordLen> sec1{};
	check(q && EC_POINT_mul(group.get(), q.get(), d.get(), nullptr, nullptr, bn_ctx.get()) == 1 &&
	          EC_POINT_point2oct(group.get(), q.get(), POINT_CONVERSION_UNCOMPRESSED, sec1.data(),
	                             sec1.size(), bn_ctx.get()) == sec1.size(),
	      "ECP public value");
	auto bld = new_param_bld(DhGroup::ecp256);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, d.get()) == 1 &&
	          OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, sec1.data(),
	                                           sec1.size()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(DhGroup::ecp256, bld.get(), EVP_PKEY_KEYPAIR);
	check(key != nullptr, "ECP key import");
	return key;
}

/**
 * modp_peer() - the peer's MODP public value as a key, or nullptr when it is
 * outside 1 < y < p-1 (RFC 6989 section 2.1 requires this check for the
 * MODP groups; it updates IKEv2). 0, 1 and p-1 would force
 * the shared secret into {0, 1, p-1}. The safe-prime groups need no subgroup
 * check (RFC 6989 section 2.2), so none is made: it would cost a full
 * 2048-bit exponentiation per KE payload.
 */
Owned<EVP_PKEY> modp_peer(const EVP_PKEY* own, std::span<const uint8_t> peer) {
	Owned<BIGNUM> y(BN_bin2bn(peer.data(), int(peer.size()), nullptr));
	Owned<BIGNUM> p_minus_1 = bn_param(own, OSSL_PKEY_PARAM_FFC_P);
	check(y && BN_sub_word(p_minus_1.get(), 1) == 1, "BIGNUM set-up");
	if (BN_cmp(y.get(), BN_value_one()) <= 0 || BN_cmp(y.get(), p_minus_1.get()) >= 0) return nullptr;
	auto bld = new_param_bld(DhGroup::modp2048);
	check(OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) == 1, "OSSL_PARAM_BLD");
	return from_params(DhGroup::modp2048, bld.get(), EVP_PKEY_PUBLIC_KEY);
}

/**
 * ecp_peer() - the peer's x || y as a key, or nullptr when the point is not
 * on the curve or a coordinate is not below p (RFC 6989 section 2.3): OpenSSL
 * checks both when it decodes the SEC1 form; EVP_PKEY_public_check_quick()
 * repeats it (and excludes infinity, which x || y cannot encode anyway).
 */
Owned<EVP_PKEY> ecp_peer(std::span<const uint8_t> peer) {
	std::array<uint8_t, 1 + 2 * kEcpCoordLen> sec1{};
	sec1[0] = POINT_CONVERSION_UNCOMPRESSED;
	std::copy(peer.begin(), peer.end(), sec1.begin() + 1);
	auto bld = new_param_bld(DhGroup::ecp256);
	check(OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, sec1.data(),
	                                       sec1.size()) == 1,
	      "OSSL_PARAM_BLD");
	auto key = from_params(DhGroup::ecp256, bld.get(), EVP_PKEY_PUBLIC_KEY);
	if (!key) return nullptr;
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
	check(ctx != nullptr, "EVP_PKEY_CTX_new");
	if (EVP_PKEY_public_check_quick(ctx.get()) != 1) return nullptr;
	return key;
}

/// derive() - the raw agreement of @own with @peer, or nullopt if OpenSSL refuses.
std::optional<SecretBytes> derive(DhGroup g, EVP_PKEY* own, EVP_PKEY* peer) {
	Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, own, nullptr));
	check(ctx && EVP_PKEY_derive_init(ctx.get()) == 1, "key agreement set-up");
	// MODP: keep leading zero bytes (RFC 7296 section 2.14: g^ir is as long
	// as p). OpenSSL's padded mode also computes them without the data-
	// dependent length that stripping would leak (the "Raccoon" attack).
	if (g == DhGroup::modp2048) check(EVP_PKEY_CTX_set_dh_pad(ctx.get(), 1) == 1, "DH padding");
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
	if (!known_dh(uint16_t(group))) throw std::invalid_argument("DH group not supported");
	Owned<EVP_PKEY> key = generate(group);
	public_ = encode_public(group, key.get());
	pkey_ = key.release();
}

DhKeyPair::DhKeyPair(DhGroup group, std::span<const uint8_t> private_key) : group_(group) {
	Owned<EVP_PKEY> key;
	switch (group) {
	case DhGroup::modp2048:
		key = modp_keypair(private_key);
		break;
	case DhGroup::ecp256:
		key = ecp_keypair(private_key);
		break;
	case DhGroup::curve25519:
		if (private_key.size() != kX25519Len)
			throw std::invalid_argument("X25519 private key length");
		key.reset(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(),
		                                       private_key.size()));
		check(key != nullptr, "X25519 key import");
		break;
	default:
		throw std::invalid_argument("DH group not supported");
	}
	public_ = encode_public(group, key.get());
	pkey_ = key.release();
}

/// ~DhKeyPair() - EVP_PKEY_free clears the private key (BN_clear_free / cleanse).
DhKeyPair::~DhKeyPair() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

size_t DhKeyPair::public_len(DhGroup group) noexcept {
	switch (group) {
	case DhGroup::modp2048:
		return kModpLen;
	case DhGroup::ecp256:
		return 2 * kEcpCoordLen;
	case DhGroup::curve25519:
		return kX25519Len;
	}
	return 0;
}

/**
 * shared_secret() - see crypto.hpp. The length check comes first (section
 * 3.4 fixes the length of each group's value), then the group's own checks,
 * then the agreement. An all-zero result is refused for every group: for
 * X25519 it means the peer sent a small-order point (RFC 8031 section 2,
 * recipient tests, requires the check; RFC 7748 section 6.1 describes it);
 * for the others the range checks already make it impossible.
 */
std::optional<SecretBytes> DhKeyPair::shared_secret(std::span<const uint8_t> peer_public) const {
	if (peer_public.size() != public_len(group_)) return std::nullopt;
	auto* own = static_cast<EVP_PKEY*>(pkey_);
	Owned<EVP_PKEY> peer;
	switch (group_) {
	case DhGroup::modp2048:
		peer = modp_peer(own, peer_public);
		break;
	case DhGroup::ecp256:
		peer = ecp_peer(peer_public);
		break;
	case DhGroup::curve25519:
		peer.reset(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(),
		                                       peer_public.size()));
		break;
	}
	std::optional<SecretBytes> secret;
	if (peer) secret = derive(group_, own, peer.get());
	// A refused peer value leaves errors in this thread's queue; they are
	// expected input, not failures, so drop them.
	ERR_clear_error();
	const size_t want = group_ == DhGroup::ecp256 ? kEcpCoordLen : public_len(group_);
	if (!secret || secret->size() != want) return std::nullopt;
	uint8_t any = 0;
	for (uint8_t b : *secret)
		any |= b;
	if (any == 0) return std::nullopt;
	return secret;
}

} // namespace esptun::ike
