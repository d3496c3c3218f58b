// Two-pass AES-CBC + HMAC ESP transform (RFC 3602 + RFC 2404 / RFC 4868):
// encrypt, then MAC SPI..ciphertext. Built by make_esp_transform() for the
// *-cbc-hmac-* suites; the stitched one-pass variant will be a sibling class
// reusing CbcIvGenerator and Hmac, and must produce the same bytes.
#pragma once

#include "crypto/esp_transform.hpp"
#include "crypto/evp_util.hpp"
#include "crypto/hmac.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace esptun::crypto {

inline constexpr size_t kCbcIvLen = 16;

/**
 * CbcIvGenerator - unpredictable per-packet CBC IVs without a syscall.
 *
 * RFC 3602 section 3 (and RFC 4303 section 3.3.2) require the CBC IV to be
 * unpredictable to an attacker; a counter or the previous ciphertext block
 * would allow chosen-plaintext attacks on the first block. Calling the CSPRNG
 * per packet costs a lock and possibly a getrandom() syscall, so instead:
 *
 *   IV = AES-128-ECB(K_iv, seq (8, big-endian) || n (8, big-endian))
 *
 * with K_iv drawn once from RAND_bytes() when the SA is set up, and n a
 * per-generator counter. AES under a secret random key is a pseudorandom
 * permutation: as long as every input block is distinct, its outputs are
 * indistinguishable from random blocks (apart from never repeating, which at
 * most 2^64 packets per SA makes irrelevant), so nobody without K_iv can
 * predict the next IV. The counter n makes every input distinct even if a
 * caller sealed twice with the same sequence number. K_iv is separate from
 * the encryption key so IVs never expose encryption-key outputs.
 * This is the "encrypted unique counter" construction; cost: one AES block.
 */
class CbcIvGenerator {
public:
	/// Throws std::runtime_error when RAND_bytes or the cipher set-up fails.
	CbcIvGenerator();

	/// next() - write the IV for the packet with sequence number @seq.
	/// Return: false only if OpenSSL fails (not expected).
	bool next(uint64_t seq, std::span<uint8_t, kCbcIvLen> iv) noexcept;

private:
	detail::CipherCtx ecb_;
	uint64_t count_ = 0;
};

/**
 * CbcHmacTransform - AES-CBC encryption plus HMAC-SHA1-96 or HMAC-SHA256-128
 * in two passes over the packet, all through preallocated contexts.
 *
 * ICV input (RFC 4303 sections 2.8 and 3.3.2.1): SPI, sequence number (low
 * 32 bits), IV and ciphertext exactly as on the wire, and with ESN the high
 * 32 bits of the sequence number appended after the ciphertext (hashed,
 * never sent).
 *
 * Failure handling (OpenSSL errors on the packet path are not expected):
 * seal() then zeroes the payload and ICV, so no plaintext leaves and the
 * packet fails verification at the peer; open() returns false.
 */
class CbcHmacTransform final : public EspTransform {
public:
	/// Throws std::invalid_argument on wrong key lengths or a GCM @spec,
	/// std::runtime_error when OpenSSL set-up fails.
	CbcHmacTransform(const CipherSpec& spec, std::span<const uint8_t> enc_key,
	                 std::span<const uint8_t> auth_key, bool esn);

	const CipherSpec& spec() const noexcept override { return spec_; }
	std::string_view impl_name() const noexcept override { return "two-pass"; }
	void seal(std::span<uint8_t> esp, uint64_t seq) noexcept override;
	bool open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept override;

	/**
	 * seal_with_iv() - seal() with a caller-chosen IV instead of a generated
	 * one. For known-answer tests (RFC 3602 fixes the IV) and for comparing
	 * another implementation's output byte for byte. Never on the packet
	 * path: a chosen IV is predictable.
	 */
	void seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
	                  std::span<const uint8_t, kCbcIvLen> iv) noexcept;

private:
	void compute_icv(std::span<const uint8_t> authed, uint32_t seq_hi, std::span<uint8_t> icv) noexcept;
	bool encrypt(std::span<uint8_t> esp, const detail::EspLayout& l) noexcept;

	const CipherSpec& spec_; // the static table entry, whatever @spec pointed to
	bool esn_;
	detail::CipherCtx enc_;
	detail::CipherCtx dec_;
	Hmac hmac_;
	CbcIvGenerator ivgen_;
};

} // namespace esptun::crypto
