// HMAC-SHA1 / HMAC-SHA256 (RFC 2104) with the keyed inner and outer hash
// states computed once per SA, so each packet costs no key processing, no
// allocation and no OpenSSL provider look-up. Used by cbc_hmac.cpp for the
// ESP ICV; the stitched CBC+HMAC transform will start from the same states.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace esptun::crypto {

enum class HmacHash : uint8_t { sha1, sha256 };

/// Largest full HMAC output (SHA-256).
inline constexpr size_t kMaxHmacLen = 32;

/**
 * Hmac - one keyed HMAC, reused for every message.
 *
 * Usage per message: begin(), update() any number of times, finish(). Not
 * thread-safe (one working state). Keys of any length are accepted; keys
 * longer than the 64-byte block are hashed first (RFC 2104 section 2).
 */
class Hmac {
public:
	/// Throws std::bad_alloc only (the hash primitives cannot fail).
	Hmac(HmacHash hash, std::span<const uint8_t> key);
	~Hmac();
	Hmac(const Hmac&) = delete;
	Hmac& operator=(const Hmac&) = delete;

	HmacHash hash() const noexcept { return hash_; }
	/// Full output length: 20 (SHA-1) or 32 (SHA-256).
	size_t size() const noexcept;

	/// begin() - start a new message from the precomputed keyed inner state.
	void begin() noexcept;
	void update(std::span<const uint8_t> data) noexcept;
	/**
	 * finish() - complete the MAC and write its first @out.size() bytes
	 * (truncation as in RFC 2104 section 5; at most size() bytes are written).
	 */
	void finish(std::span<uint8_t> out) noexcept;

private:
	struct State;
	HmacHash hash_;
	std::unique_ptr<State> st_;
};

} // namespace esptun::crypto
