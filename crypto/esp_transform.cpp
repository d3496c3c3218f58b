// make_esp_transform(): picks the implementation for a suite: GCM, or for the
// CBC-HMAC suites the two-pass EVP transform or the stitched one-pass one
// (CryptoImpl). Set-up time only.
#include "crypto/esp_transform.hpp"

#include "crypto/aes_gcm.hpp"
#include "crypto/cbc_hmac.hpp"
#include "crypto/cbc_hmac_stitched.hpp"

#include <stdexcept>
#include <string>

namespace esptun::crypto {

std::string_view crypto_impl_name(CryptoImpl impl) noexcept {
	switch (impl) {
	case CryptoImpl::automatic:
		return "auto";
	case CryptoImpl::stitched:
		return "stitched";
	case CryptoImpl::two_pass:
		return "two-pass";
	}
	return "unknown";
}

std::optional<CryptoImpl> parse_crypto_impl(std::string_view name) noexcept {
	for (CryptoImpl i : {CryptoImpl::automatic, CryptoImpl::stitched, CryptoImpl::two_pass})
		if (crypto_impl_name(i) == name) return i;
	return std::nullopt;
}

std::unique_ptr<EspTransform> make_esp_transform(Cipher cipher, std::span<const uint8_t> enc_key,
                                                 std::span<const uint8_t> auth_key, bool esn) {
	return make_esp_transform(cipher, enc_key, auth_key, esn, CryptoImpl::two_pass);
}

std::unique_ptr<EspTransform> make_esp_transform(Cipher cipher, std::span<const uint8_t> enc_key,
                                                 std::span<const uint8_t> auth_key, bool esn,
                                                 CryptoImpl impl) {
	if (static_cast<size_t>(cipher) >= all_ciphers().size())
		throw std::invalid_argument("unknown cipher suite");
	const CipherSpec& spec = cipher_spec(cipher);
	if (enc_key.size() != spec.enc_key_len)
		throw std::invalid_argument(std::string(spec.name) + ": encryption key must be " +
		                            std::to_string(spec.enc_key_len) + " bytes");
	if (auth_key.size() != spec.auth_key_len)
		throw std::invalid_argument(std::string(spec.name) + ": authentication key must be " +
		                            std::to_string(spec.auth_key_len) + " bytes");
	if (spec.aead) return std::make_unique<AesGcmTransform>(spec, enc_key, esn);
	switch (impl) {
	case CryptoImpl::stitched:
		if (!stitched_supported())
			throw std::runtime_error(std::string(spec.name) +
			                         ": crypto_impl \"stitched\" is not supported on this CPU (" +
			                         stitched_unsupported_reason() +
			                         "); use \"auto\" or \"two-pass\"");
		return std::make_unique<CbcHmacStitchedTransform>(spec, enc_key, auth_key, esn);
	case CryptoImpl::automatic:
		if (stitched_supported())
			return std::make_unique<CbcHmacStitchedTransform>(spec, enc_key, auth_key, esn);
		break;
	case CryptoImpl::two_pass:
		break;
	}
	return std::make_unique<CbcHmacTransform>(spec, enc_key, auth_key, esn);
}

} // namespace esptun::crypto
