// AES-GCM on 512-bit vectors: VAES for the counter-mode encryption and
// VPCLMULQDQ for GHASH, four blocks per instruction. OpenSSL 3.0 (Debian 12)
// has no such code path: its fastest AES-GCM uses 128-bit AES-NI and PCLMUL,
// which is where a bulk TCP transfer spent ~15% of the sending gateway's
// time (docs/throughput.md). This is a plain GCM (NIST SP 800-38D) core with
// a 12-byte nonce and a 16-byte tag; crypto/aes_gcm.cpp builds the RFC 4106
// ESP transform on it and checks it against OpenSSL's EVP AES-GCM.
//
// Only call into it where supported() says yes; the code is compiled for
// AVX-512 (F, BW, VL), VAES and VPCLMULQDQ.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace esptun::crypto::vaes {

/**
 * supported() - whether this CPU and the OS run this code: AVX-512 F/BW/VL
 * with the ZMM state enabled, VAES, VPCLMULQDQ and AES-NI. Computed once.
 */
bool supported() noexcept;

/// An expanded key: the AES round keys (16 bytes each, broadcast to the four
/// 128-bit lanes as they are loaded: a broadcast load costs what a plain one
/// does, and a key repeated four times in memory made each SA's transform
/// 1,280 bytes instead of 576), and the GHASH key's powers H^16..H^1 in the order the GHASH loop
/// multiplies by them, then three zero blocks (a run of n < 16 blocks loads
/// its powers from block 16 - n on, past H^1 for lanes it leaves empty).
/// Allocate with new (it is 64-byte aligned).
struct alignas(64) GcmKey {
	std::array<uint8_t, 15 * 16> round_keys{}; ///< rounds + 1 used
	std::array<uint8_t, 19 * 16> h_powers{};
	int rounds = 0; ///< 10 (AES-128) or 14 (AES-256)
	~GcmKey();      ///< wipes the key material
};
// Every SA direction holds one (shared by the workers' copies): keep it small.
static_assert(sizeof(GcmKey) <= 576);

/// init() - expand a 16- or 32-byte AES key into @k. Returns false for any
/// other length (nothing is written then).
bool init(GcmKey& k, const uint8_t* aes_key, size_t key_len) noexcept;

/**
 * seal() - encrypt @len bytes at @data in place and compute the tag
 * @nonce: the 12-byte GCM nonce (J0 = nonce || 0x00000001)
 * @aad:   @aad_len bytes of additional data (any length)
 * @tag:   the 16-byte tag out
 */
void seal(const GcmKey& k, const uint8_t* nonce, const uint8_t* aad, size_t aad_len, uint8_t* data,
          size_t len, uint8_t* tag) noexcept;

/**
 * open() - check @tag (16 bytes, compared in constant time) and decrypt @len
 * bytes at @data in place. Return: true when the tag matched; on false
 * @data holds the decryption anyway (the caller discards it).
 */
bool open(const GcmKey& k, const uint8_t* nonce, const uint8_t* aad, size_t aad_len, uint8_t* data,
          size_t len, const uint8_t* tag) noexcept;

} // namespace esptun::crypto::vaes
