// One-pass ("stitched") AES-CBC + HMAC-SHA1-96 / HMAC-SHA256-128 ESP
// transform: the same bytes as CbcHmacTransform (cbc_hmac.hpp), with the
// encryption and the ICV's inner hash computed in one pass by OpenSSL's
// CRYPTOGAMS aesni_cbc_sha{1,256}_enc routines. Built by make_esp_transform()
// for CryptoImpl::stitched / automatic; sits where CbcHmacTransform does,
// between sequence numbering and the UDP send.
#pragma once

#include "crypto/cbc_hmac.hpp"
#include "crypto/esp_transform.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace esptun::crypto {

/**
 * CbcHmacStitchedTransform - AES-CBC + HMAC for ESP (encrypt-then-MAC,
 * RFC 4303 section 3.3.2 with RFC 3602 and RFC 2404 / RFC 4868) where
 * seal() encrypts and hashes in one pass.
 *
 * ICV input exactly as CbcHmacTransform: SPI, sequence number (low 32 bits),
 * IV, ciphertext, and with ESN the high 32 sequence bits appended (hashed,
 * never sent). IVs come from a CbcIvGenerator (see cbc_hmac.hpp for why
 * they are unpredictable without a syscall per packet).
 *
 * Payloads shorter than stitched_min_payload() are sealed in two passes
 * (plain AES-NI CBC, then the hash) inside this transform; open() is always
 * two-pass (see cbc_hmac_stitched.cpp for why).
 *
 * Needs stitched_supported(). Not thread-safe (one working state per
 * transform); no allocation and no system call per packet.
 */
class CbcHmacStitchedTransform final : public EspTransform {
public:
	/// Throws std::invalid_argument on wrong key lengths or a GCM @spec,
	/// std::runtime_error when the CPU lacks the features
	/// (stitched_unsupported_reason()) or OpenSSL set-up fails.
	CbcHmacStitchedTransform(const CipherSpec& spec, std::span<const uint8_t> enc_key,
	                         std::span<const uint8_t> auth_key, bool esn);
	~CbcHmacStitchedTransform() override;
	/// Shares the AES key schedules and HMAC pad states; a new IV generator.
	std::unique_ptr<EspTransform> for_another_worker() const override;
	CbcHmacStitchedTransform(const CbcHmacStitchedTransform&) = delete;
	CbcHmacStitchedTransform& operator=(const CbcHmacStitchedTransform&) = delete;

	const CipherSpec& spec() const noexcept override { return spec_; }
	void seal(std::span<uint8_t> esp, uint64_t seq) noexcept override;
	bool open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept override;
	std::string_view impl_name() const noexcept override { return "stitched"; }

	/**
	 * seal_with_iv() - seal() with a caller-chosen IV, for known-answer tests
	 * and byte-for-byte comparison with CbcHmacTransform::seal_with_iv().
	 * Never on the packet path: a chosen IV is predictable.
	 */
	void seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
	                  std::span<const uint8_t, kCbcIvLen> iv) noexcept;

	/// Shortest payload (ciphertext bytes between IV and ICV) that goes
	/// through the stitched routine; shorter ones are sealed in two passes.
	size_t stitched_min_payload() const noexcept;

private:
	struct State;
	struct SharedKey {};
	/// for_another_worker(): @o's key material, a new IV generator.
	CbcHmacStitchedTransform(const CbcHmacStitchedTransform& o, SharedKey);
	void seal_in_place(uint8_t* esp, const detail::EspLayout& l, uint64_t seq) noexcept;

	const CipherSpec& spec_;
	bool esn_;
	size_t head_len_;                 // payload bytes CBC-encrypted before the stitched call
	std::shared_ptr<const State> st_; ///< shared with the transforms for_another_worker() made
	CbcIvGenerator ivgen_;
};

/// Empty when stitched_supported(); otherwise which CPU features are missing,
/// as a sentence for the error message.
std::string stitched_unsupported_reason();

} // namespace esptun::crypto
