// IKEv2 cryptography through OpenSSL (RFC 7296 sections 2.13-2.18, 3.14):
// Diffie-Hellman, the PRF and prf+, SKEYSEED and the IKE SA keys, CHILD_SA
// key material, PSK authentication, and sealing/opening the SK payload.
// Transform IDs are IANA's "IKEv2 Transform Type N" numbers.
#pragma once

#include "base/secret.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace esptun::ike {

/// Transform type 1 (encryption) IDs esptun implements.
enum class EncrId : uint16_t { aes_cbc = 12, aes_gcm_16 = 20 };
/// Transform type 2 (PRF). hmac_sha1 is weak (RFC 8247 section 2.3: MUST-
/// for the PRF): a peer uses it only with its allow_weak opt-in.
enum class PrfId : uint16_t { hmac_sha1 = 2, hmac_sha256 = 5, hmac_sha384 = 6, hmac_sha512 = 7 };
/// Transform type 3 (integrity); none with AEAD. hmac_sha1_96 is weak for
/// IKE (RFC 8247 section 2.4: MUST-), opt-in only as above.
enum class IntegId : uint16_t {
	none = 0,
	hmac_sha1_96 = 2,
	hmac_sha256_128 = 12,
	hmac_sha384_192 = 13,
	hmac_sha512_256 = 14
};
/// Transform type 4 (key exchange): RFC 3526 MODP (modp1024 is RFC 2409's
/// group 2: weak, RFC 8247 section 2.4 says SHOULD NOT, opt-in only), RFC 5903 ECP, RFC 8031.
enum class DhGroup : uint16_t {
	modp1024 = 2,
	modp2048 = 14,
	modp3072 = 15,
	modp4096 = 16,
	ecp256 = 19,
	ecp384 = 20,
	curve25519 = 31
};

/// True for the algorithms a peer may use only with its allow_weak opt-in.
bool weak_prf(PrfId p) noexcept;
bool weak_integ(IntegId i) noexcept;
bool weak_dh(DhGroup g) noexcept;

/// One negotiated IKE SA suite.
struct IkeSuite {
	EncrId encr = EncrId::aes_gcm_16;
	uint16_t key_bits = 128; ///< 128 or 256 (192 accepted for CBC)
	IntegId integ = IntegId::none;
	PrfId prf = PrfId::hmac_sha256;
	DhGroup dh = DhGroup::curve25519;
	friend bool operator==(const IkeSuite&, const IkeSuite&) = default;
};

/// Names for logs and status ("aes128gcm16", "prfsha256", "x25519", ...).
std::string_view encr_name(EncrId e, uint16_t key_bits) noexcept;
std::string_view prf_name(PrfId p) noexcept;
std::string_view integ_name(IntegId i) noexcept;
std::string_view dh_name(DhGroup g) noexcept;

/// True for IDs this module implements (a peer's other offers are skipped).
/// known_integ(0) is true: NONE is what goes with an AEAD cipher (RFC 5282
/// section 8); whether a combination makes sense is valid_suite()'s question.
bool known_encr(uint16_t id) noexcept;
bool known_prf(uint16_t id) noexcept;
bool known_integ(uint16_t id) noexcept;
bool known_dh(uint16_t id) noexcept;

/// A suite this module can run: a supported key length for the cipher, an
/// integrity transform exactly when the cipher is not AEAD, a known PRF and group.
bool valid_suite(const IkeSuite& s) noexcept;

/// Output (and preferred key) length of the PRF in bytes: 20, 32, 48, 64.
size_t prf_len(PrfId p) noexcept;
/// Integrity key length (20, 32, 48, 64) and truncated ICV length (12, 16, 24, 32); 0 for none.
size_t integ_key_len(IntegId i) noexcept;
size_t integ_icv_len(IntegId i) noexcept;
/// Encryption key material length: CBC key_bits/8; GCM key_bits/8 + 4 (salt, RFC 5282).
/// 0 for a key length esptun does not support (CBC 128/192/256, GCM 128/256).
size_t encr_keymat_len(EncrId e, uint16_t key_bits) noexcept;

/// prf(key, data) (section 2.13). Secret storage: the output is a key (SKEYSEED,
/// prf(PSK, pad)) more often than not.
SecretBytes prf(PrfId p, std::span<const uint8_t> key, std::span<const uint8_t> data);
/// prf+(key, seed) truncated to @len bytes (section 2.13); @len <= 255 * prf_len.
SecretBytes prf_plus(PrfId p, std::span<const uint8_t> key, std::span<const uint8_t> seed, size_t len);

/**
 * DhKeyPair - one ephemeral key exchange (section 3.4, RFC 5903, RFC 8031).
 * Public values on the wire: MODP = the prime's length (128, 256, 384 or
 * 512 bytes) big-endian, zero-padded; ECP = x || y (64 bytes for ECP-256,
 * 96 for ECP-384, no 0x04 prefix); Curve25519 = 32 bytes.
 */
class DhKeyPair {
public:
	/// A fresh key pair; throws std::runtime_error if OpenSSL fails.
	explicit DhKeyPair(DhGroup group);
	/**
	 * DhKeyPair() - a key pair from a known private key, for known-answer tests.
	 * @private_key: MODP: the exponent, big-endian, 1 byte up to the prime's
	 *               length; ECP: the 32- or 48-byte scalar (1 <= d < n);
	 *               Curve25519: the 32-byte scalar.
	 * Throws std::invalid_argument for a key of the wrong size or range.
	 */
	DhKeyPair(DhGroup group, std::span<const uint8_t> private_key);
	~DhKeyPair();
	DhKeyPair(const DhKeyPair&) = delete;
	DhKeyPair& operator=(const DhKeyPair&) = delete;

	DhGroup group() const noexcept { return group_; }
	std::span<const uint8_t> public_value() const noexcept { return public_; }
	/// Expected length of a public value of @group.
	static size_t public_len(DhGroup group) noexcept;
	/**
	 * shared_secret() - g^ir from the peer's public value: MODP zero-padded to
	 * the prime's length, ECP the x coordinate only (RFC 5903 section 7: 32
	 * or 48 bytes), Curve25519 32 bytes.
	 * nullopt for a value of the wrong length, not on the curve, out of range
	 * (1 < y < p-1 for MODP) or giving the all-zero X25519 output.
	 */
	std::optional<SecretBytes> shared_secret(std::span<const uint8_t> peer_public) const;

private:
	DhGroup group_;
	void* pkey_ = nullptr; ///< EVP_PKEY*
	std::vector<uint8_t> public_;
};

/// The seven IKE SA keys (section 2.14), wiped when freed.
struct IkeKeys {
	SecretBytes sk_d, sk_ai, sk_ar, sk_ei, sk_er, sk_pi, sk_pr;
};

/**
 * derive_ike_keys() - SKEYSEED = prf(Ni | Nr, g^ir), then
 * {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr).
 * For the PRF key "Ni | Nr", HMAC takes the whole concatenation as key.
 */
IkeKeys derive_ike_keys(const IkeSuite& suite, std::span<const uint8_t> ni, std::span<const uint8_t> nr,
                        std::span<const uint8_t> g_ir, uint64_t spi_i, uint64_t spi_r);

/**
 * derive_rekeyed_ike_keys() - for a new IKE SA made by CREATE_CHILD_SA
 * (section 2.18): SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr) with the
 * old SA's PRF, then the keys as above with the new suite.
 */
IkeKeys derive_rekeyed_ike_keys(PrfId old_prf, std::span<const uint8_t> old_sk_d, const IkeSuite& suite,
                                std::span<const uint8_t> g_ir, std::span<const uint8_t> ni,
                                std::span<const uint8_t> nr, uint64_t spi_i, uint64_t spi_r);

/**
 * child_keymat() - KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr), @len bytes
 * (section 2.17). The caller splits it: initiator-to-responder encryption
 * key, then its integrity key, then the same for responder-to-initiator.
 */
SecretBytes child_keymat(PrfId p, std::span<const uint8_t> sk_d, std::span<const uint8_t> g_ir,
                         std::span<const uint8_t> ni, std::span<const uint8_t> nr, size_t len);

/**
 * psk_auth() - the AUTH payload data for pre-shared keys (section 2.15):
 *   prf(prf(psk, "Key Pad for IKEv2"), message | nonce | prf(SK_p, id_body))
 * @message: the sender's whole first message (IKE_SA_INIT request or response)
 * @nonce:   the other side's nonce data
 * @sk_p:    the sender's SK_pi (initiator) or SK_pr (responder)
 * @id_body: the sender's ID payload body (IdPayload::body())
 */
std::vector<uint8_t> psk_auth(PrfId p, std::span<const uint8_t> psk, std::span<const uint8_t> message,
                              std::span<const uint8_t> nonce, std::span<const uint8_t> sk_p,
                              std::span<const uint8_t> id_body);

/**
 * SkCipher - one direction of the SK payload (section 3.14; RFC 5282 for GCM).
 *
 * CBC + HMAC: [generic header 4][IV 16][AES-CBC(inner | padding | pad length)][ICV],
 *   the ICV over the whole message from the IKE header to the end of the ciphertext.
 * GCM: [generic header 4][IV 8][AES-GCM(inner | padding | pad length)][tag 16],
 *   nonce = salt (last 4 bytes of the key material) | IV, AAD = the IKE header
 *   and everything up to and including the SK generic header.
 */
class SkCipher {
public:
	/// @enc_keymat: SK_e (GCM: key || salt); @integ_key: SK_a (empty for GCM).
	SkCipher(const IkeSuite& suite, std::span<const uint8_t> enc_keymat,
	         std::span<const uint8_t> integ_key);
	~SkCipher();
	SkCipher(const SkCipher&) = delete;
	SkCipher& operator=(const SkCipher&) = delete;

	/**
	 * seal() - append the SK payload to @msg and fix up the lengths.
	 * @msg:   the IKE header (28 bytes, next payload = SK) and any unencrypted
	 *         payloads before it; the header's length field is rewritten
	 * @first: the inner chain's first payload type (the SK generic header's Next Payload)
	 * @inner: the encoded inner payload chain (must not point into @msg)
	 * Throws std::invalid_argument for a @msg shorter than the IKE header,
	 * std::length_error when the result would exceed kMaxMessageLen, and
	 * std::runtime_error if OpenSSL fails; @msg is then unchanged.
	 */
	void seal(std::vector<uint8_t>& msg, uint8_t first, std::span<const uint8_t> inner) const;

	/**
	 * open() - verify and decrypt the SK payload of a received message.
	 * @msg:       the whole message
	 * @sk_offset: where the SK generic header starts (SkPayload::offset); the
	 *             SK payload must run to the end of @msg
	 * Return: the inner payload chain (padding removed), or nullopt when the
	 * ICV does not verify or the lengths or padding are wrong.
	 */
	std::optional<std::vector<uint8_t>> open(std::span<const uint8_t> msg, size_t sk_offset) const;

	/// Bytes the SK payload adds around an inner chain of @inner_len (for size checks).
	size_t overhead(size_t inner_len) const noexcept;

	/**
	 * seal_fragment() - append one Encrypted Fragment payload (SKF, RFC 7383
	 * section 2.5) to @msg: generic header, Fragment Number @number and Total
	 * Fragments @total (both authenticated, not encrypted), then IV,
	 * ciphertext and ICV as in seal(), each fragment with an IV of its own.
	 * @first: the first inner payload type in fragment 1, 0 in the others
	 * @inner: this fragment's piece of the encoded inner chain
	 * @number, @total are written as given, valid or not (the receiver
	 * checks them: ike/engine_fragments.cpp; its tests send wrong ones).
	 * Throws like seal().
	 */
	void seal_fragment(std::vector<uint8_t>& msg, uint8_t first, uint16_t number, uint16_t total,
	                   std::span<const uint8_t> inner) const;

	/**
	 * open_fragment() - verify and decrypt the SKF payload at @skf_offset,
	 * which runs to the end of @msg. Return: this fragment's piece of the
	 * inner chain, or nullopt as for open(). Fragment Number and Total
	 * Fragments are covered by the check but not interpreted here.
	 */
	std::optional<std::vector<uint8_t>> open_fragment(std::span<const uint8_t> msg,
	                                                  size_t skf_offset) const;

	/// The most inner bytes one SKF payload of at most @skf_len bytes can carry (0: none).
	size_t fragment_capacity(size_t skf_len) const noexcept;

	/// Fragment Number and Total Fragments: the SKF fields after its generic header.
	static constexpr size_t kFragmentFieldsLen = 4;

private:
	void seal_payload(std::vector<uint8_t>& msg, uint8_t first, std::span<const uint8_t> fields,
	                  std::span<const uint8_t> inner) const;
	std::optional<std::vector<uint8_t>> open_payload(std::span<const uint8_t> msg, size_t sk_offset,
	                                                 size_t head_len) const;

	IkeSuite suite_;
	SecretBytes key_, salt_, integ_key_;
};

/// Cryptographically random bytes (RAND_bytes); throws if the generator fails.
void random_bytes(std::span<uint8_t> out);

} // namespace esptun::ike
