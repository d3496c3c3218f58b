// HMAC key set-up shared by the two-pass HMAC (hmac.cpp) and the stitched
// transform (cbc_hmac_stitched.cpp): the SHA-1/SHA-256 block functions behind
// one interface and the ipad/opad hash states of a key (RFC 2104 section 2).
// Internal to crypto/: it uses OpenSSL's low-level SHA API, deprecated in
// 3.0, for the reasons given at the top of hmac.cpp.
#pragma once

#ifndef OPENSSL_SUPPRESS_DEPRECATED
#error "define OPENSSL_SUPPRESS_DEPRECATED before including crypto/hmac_pads.hpp (see hmac.cpp)"
#endif

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <span>

namespace esptun::crypto::detail {

inline constexpr size_t kShaBlockLen = 64; // SHA-1 and SHA-256 both hash 64-byte blocks

struct Sha1Ops {
	using Ctx = SHA_CTX;
	static constexpr size_t kLen = SHA_DIGEST_LENGTH;
	static void init(Ctx* c) noexcept { SHA1_Init(c); }
	static void update(Ctx* c, const void* p, size_t n) noexcept { SHA1_Update(c, p, n); }
	static void final(uint8_t* out, Ctx* c) noexcept { SHA1_Final(out, c); }
};

struct Sha256Ops {
	using Ctx = SHA256_CTX;
	static constexpr size_t kLen = SHA256_DIGEST_LENGTH;
	static void init(Ctx* c) noexcept { SHA256_Init(c); }
	static void update(Ctx* c, const void* p, size_t n) noexcept { SHA256_Update(c, p, n); }
	static void final(uint8_t* out, Ctx* c) noexcept { SHA256_Final(out, c); }
};

/// The two precomputed states of one HMAC key.
template <class Ctx> struct HmacPads {
	Ctx inner; ///< after hashing key ^ ipad: a whole block, so no partial data buffered
	Ctx outer; ///< after hashing key ^ opad
};

/// set_hmac_pads() - hash key ^ ipad and key ^ opad; keys longer than a
/// block are hashed first (RFC 2104 section 2).
template <class Ops>
void set_hmac_pads(HmacPads<typename Ops::Ctx>& pads, std::span<const uint8_t> key) noexcept {
	std::array<uint8_t, kShaBlockLen> block{};
	if (key.size() > kShaBlockLen) {
		typename Ops::Ctx c;
		Ops::init(&c);
		Ops::update(&c, key.data(), key.size());
		Ops::final(block.data(), &c);
		OPENSSL_cleanse(&c, sizeof c);
	} else {
		std::copy(key.begin(), key.end(), block.begin());
	}
	for (auto& b : block)
		b ^= 0x36;
	Ops::init(&pads.inner);
	Ops::update(&pads.inner, block.data(), block.size());
	for (auto& b : block)
		b ^= 0x36 ^ 0x5c;
	Ops::init(&pads.outer);
	Ops::update(&pads.outer, block.data(), block.size());
	OPENSSL_cleanse(block.data(), block.size());
}

} // namespace esptun::crypto::detail
