// make_esp_transform(): picks the implementation for a suite. The two-pass
// EVP transforms for now; the stitched AES-CBC+HMAC one slots in here.
#include "crypto/esp_transform.hpp"

#include "crypto/aes_gcm.hpp"
#include "crypto/cbc_hmac.hpp"

#include <stdexcept>
#include <string>

namespace esptun::crypto {

std::unique_ptr<EspTransform> make_esp_transform(Cipher cipher, std::span<const uint8_t> enc_key,
                                                 std::span<const uint8_t> auth_key, bool esn) {
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
	return std::make_unique<CbcHmacTransform>(spec, enc_key, auth_key, esn);
}

} // namespace esptun::crypto
