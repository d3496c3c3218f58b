// Helpers for the crypto unit tests: random bytes, an ESP packet in the
// layout EspTransform works on, and OpenSSL one-shot references to check it.
#pragma once

#include "crypto/esp_transform.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace esptun::crypto::test {

// Bytes, hex(), to_hex() and ascii() are every test's (support/bytes_test_util.hpp).
using ::esptun::test::ascii;
using ::esptun::test::Bytes;
using ::esptun::test::hex;
using ::esptun::test::to_hex;

/// A deterministic generator per test, so a failure reproduces.
inline Bytes random_bytes(std::mt19937_64& rng, size_t n) {
	Bytes b(n);
	for (auto& x : b)
		x = uint8_t(rng());
	return b;
}

inline void put_be32(uint8_t* p, uint32_t v) {
	p[0] = uint8_t(v >> 24);
	p[1] = uint8_t(v >> 16);
	p[2] = uint8_t(v >> 8);
	p[3] = uint8_t(v);
}

/// esp_packet() - [SPI][seq low 32][IV space][payload][ICV space], the layout
/// EspTransform::seal() expects (IV and ICV zero-filled).
inline Bytes esp_packet(const CipherSpec& spec, uint32_t spi, uint64_t seq, const Bytes& payload) {
	Bytes p(8 + spec.iv_len + payload.size() + spec.icv_len, 0);
	put_be32(p.data(), spi);
	put_be32(p.data() + 4, uint32_t(seq));
	std::copy(payload.begin(), payload.end(), p.begin() + ptrdiff_t(8 + spec.iv_len));
	return p;
}

/// The payload part (between IV and ICV) of an ESP packet.
inline Bytes payload_of(const CipherSpec& spec, const Bytes& esp) {
	return Bytes(esp.begin() + ptrdiff_t(8 + spec.iv_len), esp.end() - ptrdiff_t(spec.icv_len));
}

/// reference_icv() - the ICV recomputed with OpenSSL's one-shot EVP_Q_mac,
/// independent of crypto/'s HMAC code; with @esn the high sequence bits are
/// appended for the computation (RFC 4303 section 3.3.2.1).
inline Bytes reference_icv(const CipherSpec& spec, const Bytes& auth_key, const Bytes& esp, bool esn,
                           uint32_t seq_hi) {
	Bytes authed(esp.begin(), esp.end() - ptrdiff_t(spec.icv_len));
	if (esn) {
		uint8_t hi[4];
		put_be32(hi, seq_hi);
		authed.insert(authed.end(), hi, hi + 4);
	}
	const char* md = spec.xfrm_auth == "hmac(sha1)" ? "SHA1" : "SHA256";
	uint8_t mac[EVP_MAX_MD_SIZE];
	size_t mac_len = 0;
	REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, md, nullptr, auth_key.data(), auth_key.size(),
	                  authed.data(), authed.size(), mac, sizeof mac, &mac_len) != nullptr);
	REQUIRE(mac_len >= spec.icv_len);
	return Bytes(mac, mac + spec.icv_len);
}

/// reference_decrypt() - AES-CBC decryption of the packet's payload in a
/// fresh EVP context (header 8 bytes, IV 16 bytes, then ciphertext).
inline Bytes reference_decrypt(const Bytes& enc_key, const Bytes& esp, size_t icv_len) {
	const EVP_CIPHER* c = enc_key.size() == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc();
	EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
	REQUIRE(ctx);
	Bytes ct(esp.begin() + 24, esp.end() - ptrdiff_t(icv_len));
	Bytes pt(ct.size() + 16);
	int n = 0, fin = 0;
	REQUIRE(EVP_DecryptInit_ex2(ctx, c, enc_key.data(), esp.data() + 8, nullptr) == 1);
	EVP_CIPHER_CTX_set_padding(ctx, 0);
	REQUIRE(EVP_DecryptUpdate(ctx, pt.data(), &n, ct.data(), int(ct.size())) == 1);
	REQUIRE(EVP_DecryptFinal_ex(ctx, pt.data() + n, &fin) == 1);
	EVP_CIPHER_CTX_free(ctx);
	pt.resize(size_t(n + fin));
	return pt;
}

} // namespace esptun::crypto::test
