// Small internal helpers for crypto/: an owning EVP_CIPHER_CTX pointer and the
// big-endian stores the ICV/AAD inputs need. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <openssl/evp.h>

namespace esptun::crypto::detail {

struct CipherCtxFree {
	void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};
/// EVP_CIPHER_CTX_free also wipes the expanded key schedule.
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

/// direct_cipher() - OpenSSL's built-in implementation of @cipher as a method
/// table, driven by EVP without the provider's per-call parameter passing
/// (see evp_util.cpp). Same output; created once per cipher, freed at exit.
const EVP_CIPHER* direct_cipher(const EVP_CIPHER* cipher);

/// new_cipher_ctx() - a keyed context for direct_cipher(@cipher) with OpenSSL
/// padding off.
/// Throws std::runtime_error when OpenSSL refuses (set-up time only).
CipherCtx new_cipher_ctx(const EVP_CIPHER* cipher, const uint8_t* key, bool encrypt);

inline void put_be32(uint8_t* p, uint32_t v) noexcept {
	p[0] = uint8_t(v >> 24);
	p[1] = uint8_t(v >> 16);
	p[2] = uint8_t(v >> 8);
	p[3] = uint8_t(v);
}
inline void put_be64(uint8_t* p, uint64_t v) noexcept {
	put_be32(p, uint32_t(v >> 32));
	put_be32(p + 4, uint32_t(v));
}

/// The ESP header (RFC 4303 section 2): SPI 4, sequence number (low 32 bits) 4.
inline constexpr size_t kEspHeaderLen = 8;

/**
 * EspLayout - where IV, payload and ICV sit in one ESP packet for a suite.
 * ok is false when the packet is too short, the payload is not a multiple of
 * the suite's alignment, or it is too long for OpenSSL's int lengths.
 */
struct EspLayout {
	size_t iv_off = kEspHeaderLen;
	size_t payload_off = 0;
	size_t payload_len = 0;
	size_t icv_off = 0;
	bool ok = false;

	EspLayout(size_t esp_len, size_t iv_len, size_t align, size_t icv_len) noexcept {
		const size_t overhead = kEspHeaderLen + iv_len + icv_len;
		if (esp_len < overhead) return;
		payload_off = kEspHeaderLen + iv_len;
		payload_len = esp_len - overhead;
		icv_off = payload_off + payload_len;
		// 1 << 30 is far above any UDP datagram and well inside int.
		ok = payload_len % align == 0 && payload_len < (size_t(1) << 30);
	}
};

} // namespace esptun::crypto::detail
