// The ESP cipher suites and the per-SA transform that seals (encrypts and
// computes the ICV) and opens (verifies and decrypts) one ESP packet in place.
// Used by tunnel/esp.cpp between sequence numbering and the UDP send.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

namespace esptun::crypto {

enum class Cipher : uint8_t {
	aes128_gcm,
	aes256_gcm,
	aes128_cbc_sha1,
	aes256_cbc_sha1,
	aes128_cbc_sha256,
	aes256_cbc_sha256,
};

/// Everything the packet path and the config need to know about a suite.
struct CipherSpec {
	Cipher id;
	std::string_view name;      ///< config name, e.g. "aes128-cbc-hmac-sha1"
	bool aead;                  ///< GCM: one key (key || 4-byte salt), no auth key
	size_t enc_key_len;         ///< bytes; GCM includes the 4-byte salt (RFC 4106 section 8.1)
	size_t auth_key_len;        ///< bytes; 0 for GCM
	size_t iv_len;              ///< 16 for CBC (RFC 3602), 8 for GCM (RFC 4106)
	size_t align;               ///< payload+trailer length must be a multiple: 16 CBC, 4 GCM
	size_t icv_len;             ///< 12 HMAC-SHA1-96, 16 HMAC-SHA256-128, 16 GCM
	std::string_view xfrm_enc;  ///< `ip xfrm` algorithm name: "cbc(aes)" or "rfc4106(gcm(aes))"
	std::string_view xfrm_auth; ///< "hmac(sha1)", "hmac(sha256)", or empty for GCM
	unsigned xfrm_trunc_bits;   ///< ICV bits for `ip xfrm ... auth-trunc`/`aead`: 96 or 128
};

/// All suites, in enum order.
std::span<const CipherSpec> all_ciphers() noexcept;
const CipherSpec& cipher_spec(Cipher c) noexcept;
/// Looks a suite up by its config name; nullptr when unknown.
const CipherSpec* find_cipher(std::string_view name) noexcept;

/// Largest possible IV and ICV over all suites: packet buffers reserve this.
inline constexpr size_t kMaxIvLen = 16;
inline constexpr size_t kMaxIcvLen = 16;
inline constexpr size_t kMaxAlign = 16;

/**
 * EspTransform - one direction of one SA's cryptography.
 *
 * Packet layout both methods work on (RFC 4303 section 2):
 *   esp = [SPI 4][Seq 4][IV iv_len][payload ... pad, padlen, next header][ICV icv_len]
 * The payload part is a multiple of spec().align bytes; the caller builds
 * header, payload, padding and trailer and reserves the IV and ICV space.
 *
 * Not thread-safe: each data-path worker owns its transforms. No allocation
 * and no system call per packet.
 */
class EspTransform {
public:
	virtual ~EspTransform() = default;
	virtual const CipherSpec& spec() const noexcept = 0;

	/**
	 * seal() - write a fresh IV, encrypt the payload in place and write the ICV.
	 * @esp: the whole ESP packet as laid out above
	 * @seq: the full 64-bit sequence number; the low 32 bits are already in the
	 *       header. With ESN the high 32 bits enter the ICV (RFC 4303 3.3.2.1,
	 *       RFC 4106 section 5); GCM uses @seq as its 8-byte explicit IV, which
	 *       is unique per SA as RFC 4106 section 3.1 requires.
	 */
	virtual void seal(std::span<uint8_t> esp, uint64_t seq) noexcept = 0;

	/**
	 * open() - verify the ICV and decrypt the payload in place.
	 * @esp:    the whole ESP packet (length already checked against the
	 *          minimum for this suite and the alignment)
	 * @seq_hi: the inferred high 32 bits of the sequence number (used only
	 *          with ESN)
	 * Return: false when the ICV does not verify; the payload must then be
	 * treated as garbage.
	 */
	virtual bool open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept = 0;

	/**
	 * impl_name() - which implementation this is, for status and start-up
	 * logs: "gcm-vaes" or "gcm-evp" (crypto/aes_gcm.hpp), "two-pass" (EVP
	 * AES-CBC then HMAC) or "stitched" (one-pass AES-CBC+HMAC,
	 * crypto/cbc_hmac_stitched.hpp).
	 */
	virtual std::string_view impl_name() const noexcept = 0;

	/**
	 * for_another_worker() - a transform of the same SA direction for
	 * another data-path thread: it shares this one's key material, which
	 * seal() and open() only read (AES round keys, GHASH powers, HMAC pad
	 * states; wiped when the last sharer goes), and has mutable state of
	 * its own (the CBC IV generator). An SA used by N workers then holds
	 * its key material once, not N times: most of what a client costs a
	 * gateway (issue 19).
	 * Return: nullptr where this implementation keeps everything in
	 * per-thread OpenSSL contexts (then build another from the keys).
	 */
	virtual std::unique_ptr<EspTransform> for_another_worker() const { return nullptr; }
};

/// How to implement the AES-CBC + HMAC suites (GCM: GcmImpl, crypto/aes_gcm.hpp).
/// Config spelling: crypto_impl = "auto" | "stitched" | "two-pass".
enum class CryptoImpl : uint8_t {
	automatic, ///< stitched where stitched_supported(), else two-pass
	stitched,  ///< one-pass AES-CBC+HMAC encryption; fails where unsupported
	two_pass,  ///< EVP AES-CBC, then HMAC
};

/// "auto", "stitched" or "two-pass".
std::string_view crypto_impl_name(CryptoImpl impl) noexcept;
/// The inverse of crypto_impl_name(); nullopt for anything else.
std::optional<CryptoImpl> parse_crypto_impl(std::string_view name) noexcept;

/**
 * stitched_supported() - whether this CPU runs the stitched transform for all
 * four CBC suites: AES-NI and SSSE3, plus SHA extensions or AVX (OS-enabled)
 * for the SHA-256 routine, which has no plain-SSSE3 variant. Computed once
 * from CPUID.
 */
bool stitched_supported() noexcept;

/**
 * stitched_variant() - the code path the stitched routines take here, e.g.
 * "sha-ni" or "avx2/avx" (SHA-1 path / SHA-256 path when they differ), or
 * "none". For status output next to impl_name().
 */
std::string_view stitched_variant() noexcept;

/**
 * make_esp_transform() - build the transform for one SA direction (the
 * two-pass implementation for CBC suites; see the overload below).
 * @enc_key:  AES key (CBC) or AES key || salt (GCM), length as in the spec
 * @auth_key: HMAC key (CBC-HMAC), empty for GCM
 * @esn:      extended sequence numbers negotiated for this SA
 * Throws std::invalid_argument on wrong key lengths, std::runtime_error when
 * OpenSSL cannot set the cipher up. Never called on the packet path.
 */
std::unique_ptr<EspTransform> make_esp_transform(Cipher cipher, std::span<const uint8_t> enc_key,
                                                 std::span<const uint8_t> auth_key, bool esn);

/**
 * make_esp_transform() - the same, choosing the CBC-HMAC implementation.
 * @impl: automatic = stitched where stitched_supported(), else two-pass;
 *        ignored for GCM suites.
 * Throws as above, and std::runtime_error for CryptoImpl::stitched on a CPU
 * without the features (the message names what is missing).
 */
std::unique_ptr<EspTransform> make_esp_transform(Cipher cipher, std::span<const uint8_t> enc_key,
                                                 std::span<const uint8_t> auth_key, bool esn,
                                                 CryptoImpl impl);

/// Minimum length of a valid ESP packet for @spec: header, IV, one aligned
/// payload unit and the ICV.
inline size_t min_esp_len(const CipherSpec& spec) noexcept {
	return 8 + spec.iv_len + spec.align + spec.icv_len;
}

} // namespace esptun::crypto
