// IKEv2 cryptography on OpenSSL 3.0 (see crypto.hpp): transform tables, the
// HMAC PRF and prf+, the key schedule, PSK AUTH data and the SK payload; the
// three key exchanges are in dh.cpp. Used by the IKE state machine between the message codec
// (ike/message.hpp) and the CHILD_SA keys handed to the ESP data path.
//
// Theory of operation:
//  - Everything here runs at IKE message rate (a handful per SA and minute),
//    so contexts are made per call: simpler, and no state is shared between
//    threads. Every OpenSSL object is owned by a unique_ptr (Owned<T>).
//  - Input from the network reaches two functions before the peer is
//    authenticated: DhKeyPair::shared_secret() (the KE payload) and
//    SkCipher::open() (any encrypted message). Both check every length and
//    range themselves before OpenSSL sees the bytes, and answer nullopt.
//  - Key material (SkCipher keys, SKEYSEED, prf+ output, the keys handed
//    back) is SecretBytes (base/secret.hpp), wiped when freed; fixed-size
//    scratch arrays are wiped with OPENSSL_cleanse (Wipe).
#include "ike/keymat.hpp"

#include "ike/message.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <climits>
#include <stdexcept>
#include <string>

namespace esptun::ike {

using namespace openssl_util;

namespace {

void put_be16(uint8_t* p, size_t v) noexcept {
	p[0] = uint8_t(v >> 8);
	p[1] = uint8_t(v);
}
void put_be32(uint8_t* p, size_t v) noexcept {
	put_be16(p, v >> 16);
	put_be16(p + 2, v & 0xffff);
}
void put_be64(uint8_t* p, uint64_t v) noexcept {
	put_be32(p, size_t(v >> 32));
	put_be32(p + 4, size_t(v & 0xffffffff));
}
size_t get_be16(const uint8_t* p) noexcept { return size_t(p[0]) << 8 | p[1]; }

/// The IKE header's Length field (RFC 7296 section 3.1): the last 4 of its 28 bytes.
constexpr size_t kHeaderLengthOff = 24;

// ---- HMAC (PRF and integrity) -----------------------------------------------

const char* prf_digest(PrfId p) noexcept {
	switch (p) {
	case PrfId::hmac_sha1:
		return "SHA1";
	case PrfId::hmac_sha256:
		return "SHA256";
	case PrfId::hmac_sha384:
		return "SHA384";
	case PrfId::hmac_sha512:
		return "SHA512";
	}
	return nullptr;
}

/// The integrity transforms are HMAC-SHA2 truncated to half (RFC 4868), and
/// HMAC-SHA-1 truncated to 96 bits (RFC 2404).
const char* integ_digest(IntegId i) noexcept {
	switch (i) {
	case IntegId::hmac_sha1_96:
		return "SHA1";
	case IntegId::hmac_sha256_128:
		return "SHA256";
	case IntegId::hmac_sha384_192:
		return "SHA384";
	case IntegId::hmac_sha512_256:
		return "SHA512";
	case IntegId::none:
		break;
	}
	return nullptr;
}

/**
 * Hmac - one keyed HMAC, restartable with the same key.
 * Keys of any length work, including empty ones (an empty PSK is the
 * caller's business, not a crash).
 */
class Hmac {
public:
	/// @digest: OpenSSL digest name; @key: the HMAC key. Throws if OpenSSL fails.
	Hmac(const char* digest, std::span<const uint8_t> key) {
		static const uint8_t kNoKey = 0;
		Owned<EVP_MAC> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
		check(digest != nullptr && mac != nullptr, "HMAC fetch");
		ctx_.reset(EVP_MAC_CTX_new(mac.get()));
		check(ctx_ != nullptr, "EVP_MAC_CTX_new");
		const OSSL_PARAM params[] = {
		    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(digest), 0),
		    OSSL_PARAM_construct_end()};
		// A null key pointer means "keep the old key" to EVP_MAC_init.
		check(EVP_MAC_init(ctx_.get(), key.empty() ? &kNoKey : key.data(), key.size(), params) == 1,
		      "HMAC key set-up");
		len_ = EVP_MAC_CTX_get_mac_size(ctx_.get());
	}

	/// restart() - begin a new MAC under the same key.
	void restart() { check(EVP_MAC_init(ctx_.get(), nullptr, 0, nullptr) == 1, "HMAC restart"); }
	void update(std::span<const uint8_t> data) {
		check(EVP_MAC_update(ctx_.get(), data.data(), data.size()) == 1, "HMAC update");
	}
	/// finish() - write the full MAC (size() bytes) to @out.
	void finish(uint8_t* out) {
		size_t n = 0;
		check(EVP_MAC_final(ctx_.get(), out, &n, len_) == 1 && n == len_, "HMAC final");
	}
	size_t size() const noexcept { return len_; }

private:
	Owned<EVP_MAC_CTX> ctx_;
	size_t len_ = 0;
};

/// Largest HMAC output here (SHA-512).
constexpr size_t kMaxMacLen = 64;

} // namespace

// ---- Transform tables -------------------------------------------------------

std::string_view encr_name(EncrId e, uint16_t key_bits) noexcept {
	if (e == EncrId::aes_cbc) {
		switch (key_bits) {
		case 128:
			return "aes128";
		case 192:
			return "aes192";
		case 256:
			return "aes256";
		}
	} else if (e == EncrId::aes_gcm_16) {
		switch (key_bits) {
		case 128:
			return "aes128gcm16";
		case 256:
			return "aes256gcm16";
		}
	}
	return "unknown";
}

std::string_view prf_name(PrfId p) noexcept {
	switch (p) {
	case PrfId::hmac_sha1:
		return "prfsha1";
	case PrfId::hmac_sha256:
		return "prfsha256";
	case PrfId::hmac_sha384:
		return "prfsha384";
	case PrfId::hmac_sha512:
		return "prfsha512";
	}
	return "unknown";
}

std::string_view integ_name(IntegId i) noexcept {
	switch (i) {
	case IntegId::none:
		return "none";
	case IntegId::hmac_sha1_96:
		return "sha1";
	case IntegId::hmac_sha256_128:
		return "sha256";
	case IntegId::hmac_sha384_192:
		return "sha384";
	case IntegId::hmac_sha512_256:
		return "sha512";
	}
	return "unknown";
}

std::string_view dh_name(DhGroup g) noexcept {
	switch (g) {
	case DhGroup::modp1024:
		return "modp1024";
	case DhGroup::modp2048:
		return "modp2048";
	case DhGroup::modp3072:
		return "modp3072";
	case DhGroup::modp4096:
		return "modp4096";
	case DhGroup::ecp256:
		return "ecp256";
	case DhGroup::ecp384:
		return "ecp384";
	case DhGroup::curve25519:
		return "x25519";
	}
	return "unknown";
}

bool known_encr(uint16_t id) noexcept {
	return id == uint16_t(EncrId::aes_cbc) || id == uint16_t(EncrId::aes_gcm_16);
}
bool known_prf(uint16_t id) noexcept { return prf_len(PrfId(id)) != 0; }
bool known_integ(uint16_t id) noexcept {
	return id == uint16_t(IntegId::none) || integ_key_len(IntegId(id)) != 0;
}
bool known_dh(uint16_t id) noexcept { return DhKeyPair::public_len(DhGroup(id)) != 0; }

bool weak_prf(PrfId p) noexcept { return p == PrfId::hmac_sha1; }
bool weak_integ(IntegId i) noexcept { return i == IntegId::hmac_sha1_96; }
bool weak_dh(DhGroup g) noexcept { return g == DhGroup::modp1024; }

bool valid_suite(const IkeSuite& s) noexcept {
	if (encr_keymat_len(s.encr, s.key_bits) == 0 || prf_len(s.prf) == 0 || !known_dh(uint16_t(s.dh)))
		return false;
	// AEAD carries its own ICV; CBC needs an integrity transform (RFC 7296
	// section 3.3.3 and RFC 5282 section 8).
	const bool aead = s.encr == EncrId::aes_gcm_16;
	return aead ? s.integ == IntegId::none : integ_key_len(s.integ) != 0;
}

size_t prf_len(PrfId p) noexcept {
	switch (p) {
	case PrfId::hmac_sha1:
		return 20;
	case PrfId::hmac_sha256:
		return 32;
	case PrfId::hmac_sha384:
		return 48;
	case PrfId::hmac_sha512:
		return 64;
	}
	return 0;
}

/// RFC 4868 section 2: the key is the hash's output length, the ICV half of
/// it; RFC 2404: HMAC-SHA-1-96 has a 20-byte key and a 12-byte ICV.
size_t integ_key_len(IntegId i) noexcept {
	switch (i) {
	case IntegId::hmac_sha1_96:
		return 20;
	case IntegId::hmac_sha256_128:
		return 32;
	case IntegId::hmac_sha384_192:
		return 48;
	case IntegId::hmac_sha512_256:
		return 64;
	case IntegId::none:
		break;
	}
	return 0;
}

size_t integ_icv_len(IntegId i) noexcept { return i == IntegId::hmac_sha1_96 ? 12 : integ_key_len(i) / 2; }

size_t encr_keymat_len(EncrId e, uint16_t key_bits) noexcept {
	switch (e) {
	case EncrId::aes_cbc:
		return key_bits == 128 || key_bits == 192 || key_bits == 256 ? key_bits / 8 : 0;
	case EncrId::aes_gcm_16:
		// RFC 5282 section 7.1: the key, then a 4-byte salt for the nonce.
		return key_bits == 128 || key_bits == 256 ? key_bits / 8 + 4 : 0;
	}
	return 0;
}

// ---- PRF and prf+ (section 2.13) --------------------------------------------

SecretBytes prf(PrfId p, std::span<const uint8_t> key, std::span<const uint8_t> data) {
	Hmac mac(prf_digest(p), key);
	mac.update(data);
	SecretBytes out(mac.size());
	mac.finish(out.data());
	return out;
}

/**
 * prf_plus() - T1 = prf(K, S | 0x01), Tn = prf(K, Tn-1 | S | n), output
 * T1 | T2 | ... cut to @len. The counter is one byte, hence the limit of
 * 255 blocks (section 2.13); asking for more is a programming error.
 */
SecretBytes prf_plus(PrfId p, std::span<const uint8_t> key, std::span<const uint8_t> seed, size_t len) {
	Hmac mac(prf_digest(p), key);
	const size_t block = mac.size();
	if (len > 255 * block) throw std::invalid_argument("prf+: more than 255 blocks requested");
	SecretBytes out;
	out.reserve(len); // one buffer: no unwiped copy is left by growing
	std::array<uint8_t, kMaxMacLen> t{};
	Wipe wipe_t{t};
	size_t t_len = 0; // T0 is empty
	for (unsigned n = 1; out.size() < len; n++) {
		const uint8_t counter = uint8_t(n);
		if (n > 1) mac.restart();
		mac.update(std::span(t).first(t_len));
		mac.update(seed);
		mac.update(std::span(&counter, 1));
		mac.finish(t.data());
		t_len = block;
		const size_t take = std::min(block, len - out.size());
		out.insert(out.end(), t.begin(), t.begin() + std::ptrdiff_t(take));
	}
	return out;
}

// ---- Key schedule (sections 2.14, 2.17, 2.18) -------------------------------

namespace {

/// The parts one after another; secret storage, as a part may be g^ir.
SecretBytes concat(std::initializer_list<std::span<const uint8_t>> parts) {
	SecretBytes out;
	for (auto part : parts)
		out.insert(out.end(), part.begin(), part.end());
	return out;
}

/**
 * split_keys() - {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} =
 * prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) with the lengths of @suite
 * (section 2.14): SK_d and SK_p* the PRF's preferred key length, which for
 * HMAC-SHA2 is its output length (RFC 4868 section 2); SK_a* the
 * integrity key; SK_e* the cipher's key material (GCM: key and salt).
 */
IkeKeys split_keys(const IkeSuite& suite, std::span<const uint8_t> skeyseed, std::span<const uint8_t> ni,
                   std::span<const uint8_t> nr, uint64_t spi_i, uint64_t spi_r) {
	std::array<uint8_t, 16> spis{};
	put_be64(spis.data(), spi_i);
	put_be64(spis.data() + 8, spi_r);
	const SecretBytes seed = concat({ni, nr, spis});
	const size_t pl = prf_len(suite.prf), il = integ_key_len(suite.integ),
	             el = encr_keymat_len(suite.encr, suite.key_bits);
	const SecretBytes keymat = prf_plus(suite.prf, skeyseed, seed, 3 * pl + 2 * il + 2 * el);
	IkeKeys k;
	size_t off = 0;
	auto take = [&](SecretBytes& dst, size_t n) {
		dst.assign(keymat.begin() + std::ptrdiff_t(off), keymat.begin() + std::ptrdiff_t(off + n));
		off += n;
	};
	take(k.sk_d, pl);
	take(k.sk_ai, il);
	take(k.sk_ar, il);
	take(k.sk_ei, el);
	take(k.sk_er, el);
	take(k.sk_pi, pl);
	take(k.sk_pr, pl);
	return k;
}

void require_valid(const IkeSuite& suite) {
	if (!valid_suite(suite)) throw std::invalid_argument("IKE suite not supported");
}

} // namespace

/**
 * derive_ike_keys() - see crypto.hpp. With an HMAC PRF the whole Ni | Nr is
 * the key (only AES-XCBC/CMAC PRFs cut it, section 2.14).
 */
IkeKeys derive_ike_keys(const IkeSuite& suite, std::span<const uint8_t> ni, std::span<const uint8_t> nr,
                        std::span<const uint8_t> g_ir, uint64_t spi_i, uint64_t spi_r) {
	require_valid(suite);
	const SecretBytes ni_nr = concat({ni, nr});
	const SecretBytes skeyseed = prf(suite.prf, ni_nr, g_ir);
	return split_keys(suite, skeyseed, ni, nr, spi_i, spi_r);
}

/**
 * derive_rekeyed_ike_keys() - see crypto.hpp. Section 2.18: SKEYSEED uses
 * the old SA's PRF (the exchange belongs to the old SA); prf+ then uses the
 * new suite's PRF, and SPIi/SPIr are the new SA's.
 */
IkeKeys derive_rekeyed_ike_keys(PrfId old_prf, std::span<const uint8_t> old_sk_d, const IkeSuite& suite,
                                std::span<const uint8_t> g_ir, std::span<const uint8_t> ni,
                                std::span<const uint8_t> nr, uint64_t spi_i, uint64_t spi_r) {
	require_valid(suite);
	const SecretBytes data = concat({g_ir, ni, nr});
	const SecretBytes skeyseed = prf(old_prf, old_sk_d, data);
	return split_keys(suite, skeyseed, ni, nr, spi_i, spi_r);
}

SecretBytes child_keymat(PrfId p, std::span<const uint8_t> sk_d, std::span<const uint8_t> g_ir,
                         std::span<const uint8_t> ni, std::span<const uint8_t> nr, size_t len) {
	const SecretBytes seed = concat({g_ir, ni, nr});
	return prf_plus(p, sk_d, seed, len);
}

/**
 * psk_auth() - see crypto.hpp. The pad string is the 17 ASCII bytes
 * "Key Pad for IKEv2" without a terminator (section 2.15).
 */
std::vector<uint8_t> psk_auth(PrfId p, std::span<const uint8_t> psk, std::span<const uint8_t> message,
                              std::span<const uint8_t> nonce, std::span<const uint8_t> sk_p,
                              std::span<const uint8_t> id_body) {
	static constexpr std::string_view kKeyPad = "Key Pad for IKEv2";
	const auto pad = std::span(reinterpret_cast<const uint8_t*>(kKeyPad.data()), kKeyPad.size());
	const SecretBytes auth_key = prf(p, psk, pad);
	const SecretBytes mac_id = prf(p, sk_p, id_body);
	Hmac mac(prf_digest(p), auth_key);
	mac.update(message);
	mac.update(nonce);
	mac.update(mac_id);
	std::vector<uint8_t> out(mac.size());
	mac.finish(out.data());
	return out;
}

// ---- SkCipher (section 3.14, RFC 5282) ---------------------------------------

namespace {

constexpr size_t kCbcBlock = 16;
constexpr size_t kCbcIvLen = 16; ///< section 3.14: one cipher block
constexpr size_t kGcmIvLen = 8;  ///< RFC 5282: the explicit IV on the wire
constexpr size_t kGcmSaltLen = 4;
constexpr size_t kGcmIcvLen = 16; ///< the "16" in ENCR_AES_GCM_16
constexpr size_t kPadLenLen = 1;  ///< the Pad Length octet

const EVP_CIPHER* cipher_of(EncrId e, size_t key_len) noexcept {
	if (e == EncrId::aes_gcm_16) return key_len == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
	switch (key_len) {
	case 16:
		return EVP_aes_128_cbc();
	case 24:
		return EVP_aes_192_cbc();
	default:
		return EVP_aes_256_cbc();
	}
}

/// SkLayout - the sizes of one SK payload body: IV, ciphertext, ICV.
struct SkLayout {
	size_t iv_len, icv_len, align;
};

SkLayout layout_of(const IkeSuite& s) noexcept {
	if (s.encr == EncrId::aes_gcm_16) return {kGcmIvLen, kGcmIcvLen, 1};
	return {kCbcIvLen, integ_icv_len(s.integ), kCbcBlock};
}

/**
 * pad_len_for() - the Padding length seal() uses for an inner chain of @n.
 * Section 3.14: the sender SHOULD use the least padding that makes inner |
 * Padding | Pad Length a multiple of the cipher's block size. AES-CBC: 16.
 * AES-GCM is a counter mode with no block alignment (RFC 5282 adds no
 * alignment rule of its own for the SK payload), so the least is zero
 * Padding bytes, only the Pad Length octet; strongSwan sends the same (its
 * GCM block size is 1) and accepts any length on receipt.
 */
size_t pad_len_for(size_t align, size_t n) noexcept { return (align - (n + kPadLenLen) % align) % align; }

/// cbc_crypt() - one-shot AES-CBC over @in into @out; the SK payload does its
/// own padding, so OpenSSL's is off.
bool cbc_crypt(bool enc, const EVP_CIPHER* cipher, std::span<const uint8_t> key, const uint8_t* iv,
               std::span<const uint8_t> in, uint8_t* out) noexcept {
	Owned<EVP_CIPHER_CTX> ctx(EVP_CIPHER_CTX_new());
	int n = 0, fin = 0;
	return ctx && EVP_CipherInit_ex2(ctx.get(), cipher, key.data(), iv, enc ? 1 : 0, nullptr) == 1 &&
	       EVP_CIPHER_CTX_set_padding(ctx.get(), 0) == 1 &&
	       EVP_CipherUpdate(ctx.get(), out, &n, in.data(), int(in.size())) == 1 &&
	       EVP_CipherFinal_ex(ctx.get(), out + n, &fin) == 1 && size_t(n + fin) == in.size();
}

/**
 * gcm_crypt() - AES-GCM with nonce = salt | IV (RFC 5282 section 4) and AAD
 * @aad. Sealing writes the tag to @tag; opening checks it (OpenSSL compares
 * in constant time) and fails on a mismatch.
 */
bool gcm_crypt(bool enc, const EVP_CIPHER* cipher, std::span<const uint8_t> key,
               std::span<const uint8_t> salt, const uint8_t* iv, std::span<const uint8_t> aad,
               std::span<const uint8_t> in, uint8_t* out, uint8_t* tag) noexcept {
	std::array<uint8_t, kGcmSaltLen + kGcmIvLen> nonce{};
	std::copy(salt.begin(), salt.end(), nonce.begin());
	std::copy(iv, iv + kGcmIvLen, nonce.begin() + kGcmSaltLen);
	Owned<EVP_CIPHER_CTX> ctx(EVP_CIPHER_CTX_new());
	int n = 0, fin = 0, aad_n = 0;
	// The default GCM nonce length is 12 bytes, which is what salt | IV is.
	bool ok =
	    ctx &&
	    EVP_CipherInit_ex2(ctx.get(), cipher, key.data(), nonce.data(), enc ? 1 : 0, nullptr) == 1 &&
	    EVP_CipherUpdate(ctx.get(), nullptr, &aad_n, aad.data(), int(aad.size())) == 1;
	if (ok && !enc) ok = EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_SET_TAG, int(kGcmIcvLen), tag) == 1;
	ok = ok && EVP_CipherUpdate(ctx.get(), out, &n, in.data(), int(in.size())) == 1 &&
	     EVP_CipherFinal_ex(ctx.get(), out + n, &fin) == 1 && size_t(n + fin) == in.size();
	if (ok && enc) ok = EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, int(kGcmIcvLen), tag) == 1;
	return ok;
}

/// integ_icv() - HMAC(@key, @data) truncated to @out.size() (RFC 4868 section 2).
void integ_icv(IntegId i, std::span<const uint8_t> key, std::span<const uint8_t> data,
               std::span<uint8_t> out) {
	Hmac mac(integ_digest(i), key);
	mac.update(data);
	std::array<uint8_t, kMaxMacLen> full{};
	mac.finish(full.data());
	std::copy_n(full.begin(), out.size(), out.begin());
}

} // namespace

SkCipher::SkCipher(const IkeSuite& suite, std::span<const uint8_t> enc_keymat,
                   std::span<const uint8_t> integ_key)
    : suite_(suite) {
	require_valid(suite);
	if (enc_keymat.size() != encr_keymat_len(suite.encr, suite.key_bits))
		throw std::invalid_argument("SK_e has the wrong length for the suite");
	if (integ_key.size() != integ_key_len(suite.integ))
		throw std::invalid_argument("SK_a has the wrong length for the suite");
	const size_t key_len = suite.key_bits / 8u;
	key_.assign(enc_keymat.begin(), enc_keymat.begin() + std::ptrdiff_t(key_len));
	salt_.assign(enc_keymat.begin() + std::ptrdiff_t(key_len), enc_keymat.end());
	integ_key_.assign(integ_key.begin(), integ_key.end());
}

/// ~SkCipher() - the keys are SecretBytes and wipe themselves.
SkCipher::~SkCipher() = default;

size_t SkCipher::overhead(size_t inner_len) const noexcept {
	const SkLayout l = layout_of(suite_);
	return kGenericHeaderLen + l.iv_len + pad_len_for(l.align, inner_len) + kPadLenLen + l.icv_len;
}

/**
 * seal() - see crypto.hpp. Order matters: the lengths are final before the
 * ICV (CBC: over everything from the IKE header to the end of the
 * ciphertext, section 3.14) or the AAD (GCM: the IKE header up to and
 * including the SK generic header, RFC 5282) is computed.
 * IVs are random: CBC needs unpredictable ones (section 3.14); a GCM IV must
 * never repeat under one key, and 64 random bits keep the chance negligible
 * at the few thousand messages an IKE SA carries before it is rekeyed.
 */
void SkCipher::seal(std::vector<uint8_t>& msg, uint8_t first, std::span<const uint8_t> inner) const {
	seal_payload(msg, first, {}, inner);
}

/**
 * seal_fragment() - see keymat.hpp. RFC 7383 section 2.5: Fragment Number
 * and Total Fragments follow the generic header unencrypted but covered by
 * the ICV (CBC) or the AAD (GCM), exactly like the generic header itself.
 */
void SkCipher::seal_fragment(std::vector<uint8_t>& msg, uint8_t first, uint16_t number, uint16_t total,
                             std::span<const uint8_t> inner) const {
	std::array<uint8_t, kFragmentFieldsLen> fields{};
	put_be16(fields.data(), number);
	put_be16(fields.data() + 2, total);
	seal_payload(msg, first, fields, inner);
}

size_t SkCipher::fragment_capacity(size_t skf_len) const noexcept {
	const SkLayout l = layout_of(suite_);
	const size_t fixed = kGenericHeaderLen + kFragmentFieldsLen + l.iv_len + l.icv_len;
	if (skf_len < fixed + kPadLenLen) return 0;
	// The largest aligned ciphertext that fits, less the Pad Length octet.
	const size_t ct_len = (skf_len - fixed) / l.align * l.align;
	return ct_len < kPadLenLen ? 0 : ct_len - kPadLenLen;
}

/**
 * seal_payload() - seal() and seal_fragment(): the encrypted payload with
 * @fields (none for SK; Fragment Number and Total Fragments for SKF)
 * between its generic header and the IV.
 */
void SkCipher::seal_payload(std::vector<uint8_t>& msg, uint8_t first, std::span<const uint8_t> fields,
                            std::span<const uint8_t> inner) const {
	if (msg.size() < kHeaderLen) throw std::invalid_argument("seal: message shorter than the IKE header");
	const SkLayout l = layout_of(suite_);
	const size_t pad = pad_len_for(l.align, inner.size());
	const size_t ct_len = inner.size() + pad + kPadLenLen;
	const size_t sk_off = msg.size();
	const size_t head_len = kGenericHeaderLen + fields.size();
	const size_t sk_len = head_len + l.iv_len + ct_len + l.icv_len;
	if (sk_len > 0xffff || sk_off + sk_len > kMaxMessageLen)
		throw std::length_error("seal: message would exceed the IKE size limit");

	std::array<uint8_t, 4> old_length{};
	std::copy_n(msg.begin() + kHeaderLengthOff, old_length.size(), old_length.begin());
	msg.resize(sk_off + sk_len);
	uint8_t* sk = msg.data() + sk_off;
	sk[0] = first;
	sk[1] = 0; // critical bit clear, reserved zero (section 3.2)
	put_be16(sk + 2, sk_len);
	std::copy(fields.begin(), fields.end(), sk + kGenericHeaderLen);
	put_be32(msg.data() + kHeaderLengthOff, msg.size());

	uint8_t* iv = sk + head_len;
	uint8_t* ct = iv + l.iv_len;
	uint8_t* icv = ct + ct_len;
	std::copy(inner.begin(), inner.end(), ct);
	std::fill_n(ct + inner.size(), pad, uint8_t(0)); // Padding: any value (section 3.14)
	ct[inner.size() + pad] = uint8_t(pad);
	const auto pt = std::span<const uint8_t>(ct, ct_len);

	// On any failure, never leave plaintext or a half-built payload behind.
	auto undo = [&] {
		OPENSSL_cleanse(sk, sk_len);
		msg.resize(sk_off);
		std::copy(old_length.begin(), old_length.end(), msg.begin() + kHeaderLengthOff);
	};
	bool ok = false;
	try {
		ok = RAND_bytes(iv, int(l.iv_len)) == 1;
		const EVP_CIPHER* cipher = cipher_of(suite_.encr, key_.size());
		if (suite_.encr == EncrId::aes_gcm_16) {
			ok = ok && gcm_crypt(true, cipher, key_, salt_, iv,
			                     std::span(msg).first(sk_off + head_len), pt, ct, icv);
		} else {
			ok = ok && cbc_crypt(true, cipher, key_, iv, pt, ct);
			if (ok)
				integ_icv(suite_.integ, integ_key_,
				          std::span(msg).first(msg.size() - l.icv_len),
				          std::span(icv, l.icv_len));
		}
	} catch (...) {
		undo();
		throw;
	}
	if (!ok) {
		undo();
		fail("SK payload encryption");
	}
}

/**
 * open() - see crypto.hpp. Layout checks first, then authentication, and
 * only then is the plaintext or its padding looked at: a forged message
 * reveals nothing about its plaintext. CBC: the ICV is checked before any
 * decryption (encrypt-then-MAC), comparing with CRYPTO_memcmp (constant
 * time). GCM decrypts and authenticates in one pass; the output is wiped
 * unused when OpenSSL's (constant-time) tag compare fails. Any Pad Length that fits is accepted and
 * the Padding bytes are not checked (section 3.14: the recipient MUST accept
 * any length that results in proper alignment).
 */
std::optional<std::vector<uint8_t>> SkCipher::open(std::span<const uint8_t> msg, size_t sk_offset) const {
	return open_payload(msg, sk_offset, kGenericHeaderLen);
}

/// open_fragment() - see keymat.hpp; the fields are checked by the caller, after this.
std::optional<std::vector<uint8_t>> SkCipher::open_fragment(std::span<const uint8_t> msg,
                                                            size_t skf_offset) const {
	return open_payload(msg, skf_offset, kGenericHeaderLen + kFragmentFieldsLen);
}

/// open_payload() - open() and open_fragment(): @head_len bytes of the
/// payload (generic header and any fields after it) come before the IV.
std::optional<std::vector<uint8_t>> SkCipher::open_payload(std::span<const uint8_t> msg, size_t sk_offset,
                                                           size_t head_len) const {
	const SkLayout l = layout_of(suite_);
	// The SK payload is the last one (section 3.14) and runs to the end;
	// kMaxMessageLen keeps every length inside OpenSSL's int.
	if (msg.size() > kMaxMessageLen || sk_offset < kHeaderLen || sk_offset > msg.size() ||
	    msg.size() - sk_offset < head_len + l.iv_len + l.icv_len + kPadLenLen)
		return std::nullopt;
	const size_t sk_len = msg.size() - sk_offset;
	if (get_be16(msg.data() + sk_offset + 2) != sk_len) return std::nullopt;
	const size_t ct_len = sk_len - head_len - l.iv_len - l.icv_len;
	if (ct_len % l.align != 0) return std::nullopt;

	const uint8_t* iv = msg.data() + sk_offset + head_len;
	const auto ct = std::span(iv + l.iv_len, ct_len);
	const uint8_t* icv = ct.data() + ct_len;
	std::vector<uint8_t> out(ct_len);
	const EVP_CIPHER* cipher = cipher_of(suite_.encr, key_.size());
	bool ok;
	if (suite_.encr == EncrId::aes_gcm_16) {
		std::array<uint8_t, kGcmIcvLen> tag{};
		std::copy_n(icv, tag.size(), tag.begin());
		ok = gcm_crypt(false, cipher, key_, salt_, iv, msg.first(sk_offset + head_len), ct,
		               out.data(), tag.data());
	} else {
		std::array<uint8_t, kMaxMacLen> want{};
		integ_icv(suite_.integ, integ_key_, msg.first(msg.size() - l.icv_len),
		          std::span(want).first(l.icv_len));
		ok = CRYPTO_memcmp(want.data(), icv, l.icv_len) == 0 &&
		     cbc_crypt(false, cipher, key_, iv, ct, out.data());
	}
	ERR_clear_error(); // a forgery is expected input, not an OpenSSL failure to report later
	// Pad Length counts the Padding bytes; with the octet itself they must fit.
	if (ok) ok = size_t(out.back()) + kPadLenLen <= out.size();
	if (!ok) {
		OPENSSL_cleanse(out.data(), out.size());
		return std::nullopt;
	}
	out.resize(out.size() - out.back() - kPadLenLen);
	return out;
}

// ---- Randomness -------------------------------------------------------------

void random_bytes(std::span<uint8_t> out) {
	while (!out.empty()) {
		const size_t n = std::min(out.size(), size_t(INT_MAX));
		check(RAND_bytes(out.data(), int(n)) == 1, "RAND_bytes");
		out = out.subspan(n);
	}
}

} // namespace esptun::ike
