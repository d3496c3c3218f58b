// AES-GCM with VAES and VPCLMULQDQ on 512-bit vectors (see gcm_vaes.hpp).
//
// Counter mode: each 128-bit lane of a 512-bit register holds one counter
// block, so one vaesenc advances four blocks by a round; the bulk loop keeps
// four registers (16 blocks, 256 bytes) in flight.
//
// GHASH works on byte-reversed blocks, where carry-less multiplication
// matches polynomial multiplication in GCM's bit order up to one factor x,
// which the key absorbs: the stored powers are H^i * x. A run of n blocks
// B1..Bn updates the accumulator Y to (Y ^ B1)*H^n ^ B2*H^(n-1) ^ ... ^
// Bn*H, summed over the lanes before one reduction per run (the reduction
// folds the low half twice by the constant 0xc2000000000000000000000000000001,
// GCM's polynomial in this bit order).
//
// The loops over a handful of registers carry "GCC unroll": without it GCC 12
// at -O2 keeps the registers in a stack array and stores every AES round.
//
// Everything between the target pragmas is compiled for AVX-512; callers
// check supported() first. No standard library templates are instantiated
// there and the file's own templates live in an anonymous namespace, so no
// AVX-512 copy of an inline function can leak into other code.
#include "crypto/gcm_vaes.hpp"

#include "crypto/cpu_features.hpp"

#include <cstring>
#include <openssl/crypto.h>

// GCC 12's AVX-512 intrinsics start some results from a deliberately
// undefined vector (`__m512i __Y = __Y;`), which -Wuninitialized reports at
// the header's lines once inlined here; the pattern is GCC's own idiom for
// "any value", so the warning is off for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace esptun::crypto::vaes {

bool supported() noexcept { return cpu::vaes_avx512(); }

GcmKey::~GcmKey() {
	OPENSSL_cleanse(round_keys.data(), round_keys.size());
	OPENSSL_cleanse(h_powers.data(), h_powers.size());
}

// GCC takes a target pragma; clang (the fuzzing build) an attribute applied
// to every function up to the matching pop.
#if defined(__clang__)
#pragma clang attribute push(                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,vaes,vpclmulqdq,aes,pclmul,sse4.1"))),                  \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,vaes,vpclmulqdq,aes,pclmul,sse4.1")
#endif

namespace {

// ---- small helpers --------------------------------------------------------

inline __m128i bswap128(__m128i x) {
	return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

inline __m512i bswap512(__m512i x) {
	const __m512i m =
	    _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	return _mm512_shuffle_epi8(x, m);
}

inline __m128i poly() { return _mm_set_epi64x(int64_t(0xc200000000000000ull), 1); }

/// One folding step: the low 64 bits times the polynomial's high half, plus
/// the two halves swapped.
inline __m128i fold(__m128i x) {
	const __m128i t = _mm_clmulepi64_si128(x, poly(), 0x10);
	return _mm_xor_si128(_mm_shuffle_epi32(x, 0x4e), t);
}

/// (lo, hi): a 256-bit carry-less product with the middle terms already
/// added in, reduced to 128 bits.
inline __m128i reduce(__m128i lo, __m128i hi) { return _mm_xor_si128(fold(fold(lo)), hi); }

/// a * b for one block (b one of the stored H^i * x).
inline __m128i gf_mul(__m128i a, __m128i b) {
	__m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
	__m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
	__m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
	lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
	hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
	return reduce(lo, hi);
}

inline __m128i xor_lanes(__m512i v) {
	const __m256i a = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
	return _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

/// The unreduced products of one register of byte-reversed blocks with one
/// register of key powers, added into lo/mid/hi.
inline void mul_acc(__m512i d, __m512i h, __m512i& lo, __m512i& mid, __m512i& hi) {
	lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(d, h, 0x00));
	hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(d, h, 0x11));
	mid = _mm512_ternarylogic_epi64(mid, _mm512_clmulepi64_epi128(d, h, 0x01),
	                                _mm512_clmulepi64_epi128(d, h, 0x10), 0x96);
}

/// Sums the lanes of lo/mid/hi and reduces.
inline __m128i finish(__m512i lo, __m512i mid, __m512i hi) {
	lo = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
	hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
	return reduce(xor_lanes(lo), xor_lanes(hi));
}

/// The lanes of a 64-byte register that hold the first @n bytes (all for n >= 64).
inline __mmask64 byte_mask(size_t n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; }

/// GHASH of a run of @nblocks (1..16) blocks held in ceil(nblocks / 4)
/// registers in memory order, the lanes past the run zero: block j is
/// multiplied by H^(nblocks - j), which the power table holds contiguously
/// from block 16 - nblocks on (and zero blocks after H^1 for empty lanes).
inline __m128i ghash_run(__m128i y, const __m512i* d, size_t nblocks, const GcmKey& k) {
	__m512i lo = _mm512_setzero_si512(), mid = lo, hi = lo;
	const uint8_t* powers = k.h_powers.data() + (16 - nblocks) * 16;
#pragma GCC unroll 4
	for (size_t i = 0; i * 4 < nblocks; i++) {
		__m512i b = bswap512(d[i]);
		if (i == 0) b = _mm512_xor_si512(b, _mm512_zextsi128_si512(y));
		mul_acc(b, _mm512_loadu_si512(powers + 64 * i), lo, mid, hi);
	}
	return finish(lo, mid, hi);
}

/// GHASH over @len bytes of any length, the last block zero-padded.
__m128i ghash_bytes(__m128i y, const uint8_t* p, size_t len, const GcmKey& k) {
	__m512i d[4];
	while (len) {
		const size_t n = len < 256 ? len : 256;
#pragma GCC unroll 4
		for (size_t i = 0; i * 64 < n; i++)
			d[i] = _mm512_maskz_loadu_epi8(byte_mask(n - 64 * i), p + 64 * i);
		y = ghash_run(y, d, (n + 15) / 16, k);
		p += n;
		len -= n;
	}
	return y;
}

// ---- AES ------------------------------------------------------------------

inline __m128i round_key128(const GcmKey& k, int r) {
	return _mm_load_si128(reinterpret_cast<const __m128i*>(k.round_keys.data() + size_t(r) * 16));
}

/// Round key @r in all four lanes: one broadcast load (vbroadcasti32x4 from memory).
inline __m512i round_key(const GcmKey& k, int r) { return _mm512_broadcast_i32x4(round_key128(k, r)); }

/// Encrypts @N registers of counter blocks (4N blocks) side by side.
template <size_t N> inline void aes_regs(const GcmKey& k, __m512i* x) {
	const __m512i k0 = round_key(k, 0);
#pragma GCC unroll 4
	for (size_t i = 0; i < N; i++)
		x[i] = _mm512_xor_si512(x[i], k0);
	for (int r = 1; r < k.rounds; r++) {
		const __m512i kr = round_key(k, r);
#pragma GCC unroll 4
		for (size_t i = 0; i < N; i++)
			x[i] = _mm512_aesenc_epi128(x[i], kr);
	}
	const __m512i kl = round_key(k, k.rounds);
#pragma GCC unroll 4
	for (size_t i = 0; i < N; i++)
		x[i] = _mm512_aesenclast_epi128(x[i], kl);
}

inline __m128i aes1(const GcmKey& k, __m128i x) {
	x = _mm_xor_si128(x, round_key128(k, 0));
	for (int r = 1; r < k.rounds; r++)
		x = _mm_aesenc_si128(x, round_key128(k, r));
	return _mm_aesenclast_si128(x, round_key128(k, k.rounds));
}

/// One step of the AES key schedule: @t is aeskeygenassist's word, broadcast.
inline __m128i expand_step(__m128i key, __m128i t) {
	key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
	key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
	key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
	return _mm_xor_si128(key, t);
}

void store_round_key(GcmKey& k, int r, __m128i v) {
	_mm_store_si128(reinterpret_cast<__m128i*>(k.round_keys.data() + size_t(r) * 16), v);
}

// aeskeygenassist takes its round constant as an immediate.
#define ESPTUN_AES128_STEP(r, rcon)                                                                          \
	key = expand_step(key, _mm_shuffle_epi32(_mm_aeskeygenassist_si128(key, rcon), 0xff));               \
	store_round_key(k, r, key)

void expand128(GcmKey& k, const uint8_t* user) {
	__m128i key = _mm_loadu_si128(reinterpret_cast<const __m128i*>(user));
	store_round_key(k, 0, key);
	ESPTUN_AES128_STEP(1, 0x01);
	ESPTUN_AES128_STEP(2, 0x02);
	ESPTUN_AES128_STEP(3, 0x04);
	ESPTUN_AES128_STEP(4, 0x08);
	ESPTUN_AES128_STEP(5, 0x10);
	ESPTUN_AES128_STEP(6, 0x20);
	ESPTUN_AES128_STEP(7, 0x40);
	ESPTUN_AES128_STEP(8, 0x80);
	ESPTUN_AES128_STEP(9, 0x1b);
	ESPTUN_AES128_STEP(10, 0x36);
	k.rounds = 10;
}

// AES-256: even round keys come from the rotating step on the previous odd
// key, odd ones from the SubWord-only step (word 2, shuffle 0xaa) on the new
// even key.
#define ESPTUN_AES256_STEP(r, rcon)                                                                          \
	a = expand_step(a, _mm_shuffle_epi32(_mm_aeskeygenassist_si128(b, rcon), 0xff));                     \
	store_round_key(k, r, a);                                                                            \
	if ((r) < 14) {                                                                                      \
		b = expand_step(b, _mm_shuffle_epi32(_mm_aeskeygenassist_si128(a, 0), 0xaa));                \
		store_round_key(k, (r) + 1, b);                                                              \
	}

void expand256(GcmKey& k, const uint8_t* user) {
	__m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(user));
	__m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(user + 16));
	store_round_key(k, 0, a);
	store_round_key(k, 1, b);
	ESPTUN_AES256_STEP(2, 0x01);
	ESPTUN_AES256_STEP(4, 0x02);
	ESPTUN_AES256_STEP(6, 0x04);
	ESPTUN_AES256_STEP(8, 0x08);
	ESPTUN_AES256_STEP(10, 0x10);
	ESPTUN_AES256_STEP(12, 0x20);
	ESPTUN_AES256_STEP(14, 0x40);
	k.rounds = 14;
}

#undef ESPTUN_AES128_STEP
#undef ESPTUN_AES256_STEP

// ---- GCM ------------------------------------------------------------------

/// The byte-reversed J0 = nonce || 0x00000001: the block counter is then the
/// low 32-bit word, which a vector add can count (modulo 2^32, as GCM's inc32).
inline __m128i counter0(const uint8_t* nonce) {
	alignas(16) uint8_t j0[16];
	memcpy(j0, nonce, 12);
	j0[12] = 0;
	j0[13] = 0;
	j0[14] = 0;
	j0[15] = 1;
	return bswap128(_mm_load_si128(reinterpret_cast<const __m128i*>(j0)));
}

/// The counter blocks after J0, four to a register, in byte order.
struct Counters {
	__m512i next; ///< the next register's counters, byte-reversed

	explicit Counters(__m128i j0)
	    : next(_mm512_add_epi32(_mm512_broadcast_i32x4(j0),
	                            _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1))) {}

	__m512i take() {
		const __m512i c = bswap512(next);
		next =
		    _mm512_add_epi32(next, _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4));
		return c;
	}
};

/// Counter mode over @len bytes in place, hashing the ciphertext: after
/// encryption when @sealing, before decryption otherwise.
__m128i ctr_ghash(const GcmKey& k, __m128i j0, __m128i y, uint8_t* data, size_t len, bool sealing) {
	Counters ctr(j0);
	__m512i s[4], d[4];
	for (; len >= 256; data += 256, len -= 256) {
#pragma GCC unroll 4
		for (size_t i = 0; i < 4; i++)
			s[i] = ctr.take();
		aes_regs<4>(k, s);
#pragma GCC unroll 4
		for (size_t i = 0; i < 4; i++)
			d[i] = _mm512_loadu_si512(data + 64 * i);
		if (!sealing) y = ghash_run(y, d, 16, k);
#pragma GCC unroll 4
		for (size_t i = 0; i < 4; i++) {
			d[i] = _mm512_xor_si512(d[i], s[i]);
			_mm512_storeu_si512(data + 64 * i, d[i]);
		}
		if (sealing) y = ghash_run(y, d, 16, k);
	}
	if (len == 0) return y;
	// The last 1..255 bytes: masked loads and stores touch nothing past
	// @len, and the bytes they leave zero are GHASH's padding.
	const size_t regs = (len + 63) / 64;
#pragma GCC unroll 4
	for (size_t i = 0; i < regs; i++)
		s[i] = ctr.take();
	if (regs > 2)
		aes_regs<4>(k, s);
	else if (regs == 2)
		aes_regs<2>(k, s);
	else
		aes_regs<1>(k, s);
#pragma GCC unroll 4
	for (size_t i = 0; i < regs; i++)
		d[i] = _mm512_maskz_loadu_epi8(byte_mask(len - 64 * i), data + 64 * i);
	if (!sealing) y = ghash_run(y, d, (len + 15) / 16, k);
#pragma GCC unroll 4
	for (size_t i = 0; i < regs; i++) {
		const __mmask64 m = byte_mask(len - 64 * i);
		d[i] = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(d[i], s[i]));
		_mm512_mask_storeu_epi8(data + 64 * i, m, d[i]);
	}
	if (sealing) y = ghash_run(y, d, (len + 15) / 16, k);
	return y;
}

/// The final GHASH block (bit lengths), then E(J0) xor the hash.
inline void make_tag(const GcmKey& k, __m128i y, __m128i j0, size_t aad_len, size_t len, uint8_t* tag) {
	const __m128i lens = _mm_set_epi64x(int64_t(uint64_t(aad_len) * 8), int64_t(uint64_t(len) * 8));
	const __m128i h1 = _mm_load_si128(reinterpret_cast<const __m128i*>(k.h_powers.data() + 15 * 16));
	y = gf_mul(_mm_xor_si128(y, lens), h1);
	const __m128i t = _mm_xor_si128(aes1(k, bswap128(j0)), bswap128(y));
	_mm_storeu_si128(reinterpret_cast<__m128i*>(tag), t);
}

} // namespace

bool init(GcmKey& k, const uint8_t* aes_key, size_t key_len) noexcept {
	if (key_len == 16)
		expand128(k, aes_key);
	else if (key_len == 32)
		expand256(k, aes_key);
	else
		return false;
	// H = E(0), byte-reversed, times x: shift left by one and, when a bit
	// falls out at the top, add the polynomial.
	__m128i h = bswap128(aes1(k, _mm_setzero_si128()));
	const __m128i carry =
	    _mm_srai_epi32(_mm_shuffle_epi32(h, 0xff), 31); // all ones when the top bit is set
	const __m128i shifted = _mm_or_si128(_mm_slli_epi64(h, 1), _mm_slli_si128(_mm_srli_epi64(h, 63), 8));
	h = _mm_xor_si128(shifted, _mm_and_si128(carry, poly()));
	// Powers H^1..H^16 (each times x), stored so that register r, lane l
	// holds H^(16 - 4r - l).
	__m128i p = h;
	for (int i = 1; i <= 16; i++) {
		_mm_store_si128(reinterpret_cast<__m128i*>(k.h_powers.data() + size_t(16 - i) * 16), p);
		p = gf_mul(p, h);
	}
	return true;
}

void seal(const GcmKey& k, const uint8_t* nonce, const uint8_t* aad, size_t aad_len, uint8_t* data,
          size_t len, uint8_t* tag) noexcept {
	const __m128i j0 = counter0(nonce);
	__m128i y = ghash_bytes(_mm_setzero_si128(), aad, aad_len, k);
	y = ctr_ghash(k, j0, y, data, len, true);
	make_tag(k, y, j0, aad_len, len, tag);
}

bool open(const GcmKey& k, const uint8_t* nonce, const uint8_t* aad, size_t aad_len, uint8_t* data,
          size_t len, const uint8_t* tag) noexcept {
	const __m128i j0 = counter0(nonce);
	__m128i y = ghash_bytes(_mm_setzero_si128(), aad, aad_len, k);
	y = ctr_ghash(k, j0, y, data, len, false);
	alignas(16) uint8_t want[16];
	make_tag(k, y, j0, aad_len, len, want);
	return CRYPTO_memcmp(want, tag, 16) == 0;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

} // namespace esptun::crypto::vaes

#pragma GCC diagnostic pop
