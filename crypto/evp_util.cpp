// Set-up helpers shared by the EVP-based transforms (see evp_util.hpp).
#include "crypto/evp_util.hpp"

#include <stdexcept>

namespace esptun::crypto::detail {

CipherCtx new_cipher_ctx(const EVP_CIPHER* cipher, const uint8_t* key, bool encrypt) {
	CipherCtx ctx(EVP_CIPHER_CTX_new());
	if (!ctx) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
	if (EVP_CipherInit_ex2(ctx.get(), cipher, key, nullptr, encrypt ? 1 : 0, nullptr) != 1)
		throw std::runtime_error("EVP_CipherInit_ex2 failed");
	// ESP does its own padding (RFC 4303 section 2.4): the caller hands us
	// whole blocks, and OpenSSL must neither add nor strip anything.
	if (EVP_CIPHER_CTX_set_padding(ctx.get(), 0) != 1)
		throw std::runtime_error("EVP_CIPHER_CTX_set_padding failed");
	return ctx;
}

} // namespace esptun::crypto::detail
