// AES-GCM ESP transform (RFC 4106): one AEAD pass, the 8-byte explicit IV is
// the 64-bit sequence number. Built by make_esp_transform() for aes*-gcm.
#pragma once

#include "crypto/esp_transform.hpp"
#include "crypto/evp_util.hpp"
#include "crypto/gcm_vaes.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace esptun::crypto {

inline constexpr size_t kGcmIvLen = 8;
inline constexpr size_t kGcmSaltLen = 4;
inline constexpr size_t kGcmIcvLen = 16;

/// Which AES-GCM code runs the transform.
enum class GcmImpl : uint8_t {
	automatic, ///< vaes where vaes::supported(), else evp
	vaes,      ///< crypto/gcm_vaes.hpp (512-bit VAES + VPCLMULQDQ)
	evp,       ///< OpenSSL's EVP AES-GCM (AES-NI + PCLMUL), through its method table
};

/// "vaes" or "evp": what GcmImpl::automatic picks on this CPU.
std::string_view gcm_variant() noexcept;

/**
 * AesGcmTransform - AES-128/256-GCM with a 16-byte ICV.
 *
 * Nonce (RFC 4106 section 4): salt (last 4 bytes of the key material) ||
 * explicit IV (8 bytes, sent after the ESP header). seal() uses the 64-bit
 * sequence number as the explicit IV: unique per SA, as section 3.1 requires,
 * and it needs no state. AAD (section 5): SPI || seq (32 bits), or with ESN
 * SPI || seq_hi || seq_lo (12 bytes).
 *
 * Failure handling (OpenSSL errors on the packet path are not expected):
 * seal() then zeroes the payload and ICV so no plaintext leaves and the
 * packet fails verification; open() returns false (the payload is then
 * garbage: GCM decrypts while it authenticates).
 */
class AesGcmTransform final : public EspTransform {
public:
	/// @key: AES key || 4-byte salt (20 or 36 bytes, matching @spec).
	/// @impl: the code to run (tests and the benchmark pick one explicitly).
	/// Throws std::invalid_argument on a wrong length or a non-GCM @spec,
	/// std::runtime_error when OpenSSL set-up fails or @impl is vaes on a
	/// CPU without it.
	AesGcmTransform(const CipherSpec& spec, std::span<const uint8_t> key, bool esn,
	                GcmImpl impl = GcmImpl::automatic);
	~AesGcmTransform() override;
	/// The VAES code shares the expanded key (read-only); the EVP contexts
	/// are not shared (nullptr).
	std::unique_ptr<EspTransform> for_another_worker() const override;

	const CipherSpec& spec() const noexcept override { return spec_; }
	void seal(std::span<uint8_t> esp, uint64_t seq) noexcept override;
	bool open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept override;

	/// "gcm-vaes" or "gcm-evp": the code this transform runs.
	std::string_view impl_name() const noexcept override { return vaes_ ? "gcm-vaes" : "gcm-evp"; }

	/**
	 * seal_with_iv() - seal() with a caller-chosen explicit IV. For
	 * known-answer tests whose IV is not the sequence number. Never on the
	 * packet path: a repeated IV under one key breaks GCM completely.
	 */
	void seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
	                  std::span<const uint8_t, kGcmIvLen> iv) noexcept;

private:
	/// for_another_worker(): everything but the key, which it then shares.
	AesGcmTransform(const CipherSpec& spec, bool esn);
	size_t build_aad(std::span<const uint8_t> esp, uint32_t seq_hi,
	                 std::array<uint8_t, 12>& aad) const noexcept;
	std::array<uint8_t, 12> nonce(const uint8_t* iv) const noexcept;

	const CipherSpec& spec_; // the static table entry, whatever @spec pointed to
	bool esn_;
	std::array<uint8_t, kGcmSaltLen> salt_{};
	/// Set: the VAES code runs and the contexts stay empty. Shared with the
	/// transforms for_another_worker() made; ~GcmKey wipes it.
	std::shared_ptr<const vaes::GcmKey> vaes_;
	detail::CipherCtx enc_;
	detail::CipherCtx dec_;
};

} // namespace esptun::crypto
