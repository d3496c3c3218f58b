// One-pass AES-CBC + HMAC ESP seal (see cbc_hmac_stitched.hpp).
//
// Theory of operation
// -------------------
// ESP is encrypt-then-MAC: the ICV is HMAC over SPI | seq | IV | ciphertext
// [| seq_hi]. OpenSSL's stitched EVP ciphers are TLS MAC-then-encrypt and
// cannot produce it, but the CRYPTOGAMS routine underneath can:
//
//   aesni_cbc_sha1_enc(in, out, blocks, key, iv, ctx, hash_in)
//   aesni_cbc_sha256_enc(in, out, blocks, key, iv, ctx, hash_in)
//
// Contract, read from crypto/aes/asm/aesni-sha{1,256}-x86_64.pl:
//  - @blocks counts 64-byte SHA blocks (`shl $6,$len`), NOT AES blocks. The
//    call CBC-encrypts exactly 64*blocks bytes in -> out and hashes exactly
//    64*blocks bytes from hash_in. blocks == 0 is not allowed (the SHA-NI
//    loops are `dec $len; jnz`, i.e. they would run 2^64 times).
//  - Per 64-byte step k it encrypts in[64k, 64k+64) as four CBC blocks
//    interleaved with one SHA compression of hash_in[64k, 64k+64).
//  - @ctx: only the chaining words are read and written (h0..h4 of SHA_CTX,
//    h[0..7] of SHA256_CTX, at offset 0); Nl/Nh/data/num are untouched.
//    We pass a bare array of those words (ShaWords) starting from the HMAC
//    ipad state (a whole block absorbed) and keep the byte count ourselves.
//  - @iv is read and the last ciphertext block written back (CBC chaining).
//  - @key is the AES_KEY of aesni_set_encrypt_key() (rounds at offset 240).
//  - No alignment requirement (movdqu/movups); nothing is read outside the
//    two ranges above (the AVX2 SHA-256 path points its look-ahead at the
//    stack when there is no next block: `cmove %rsp,%r12`).
//  - The variant is chosen from OPENSSL_ia32cap_P (cpu_features.cpp);
//    aesni_cbc_sha256_enc has no SSSE3 variant and executes ud2 without
//    SHA-NI, XOP or AVX.
//
// Hashing ciphertext in the same pass works because the hash may trail the
// encryption: hash_in = the packet start (SPI), in = out = a later point of
// the payload. The bytes hashed in step k must be final ciphertext before
// the routine reads them, and the routines read ahead differently:
//  - SHA-NI variants (both hashes) load hash_in[64k, 64k+64) at the top of
//    step k and nothing else: the hash must trail the encryption output by
//    at least 64 bytes.
//  - The SSSE3/AVX SHA-1 variants load step k+1's hash block part-way through
//    step k (Xuplast_*_80), and the AVX2 SHA-256 variant loads two hash
//    blocks (k and k+1) at the start of step k: a 128-byte trail covers all
//    of them without depending on instruction order inside a step.
// The trail is 8 (ESP header) + 16 (IV) + head bytes, where the head is
// CBC-encrypted alone before the stitched call: head_len = 64 for SHA-NI
// (trail 88 >= 64), 112 otherwise (trail 136 >= 128), plus the (len -
// head_len) % 64 bytes the whole steps leave over, so that one
// aesni_cbc_encrypt call covers everything the stitched call does not.
// Why 64 and not 48 (trail 72, also enough): measured on the SHA-NI SHA-1
// path, a 72-byte trail costs ~2.7 ns more per step (+57 ns at 1400 bytes),
// every other trail from 64 to 200 the same. Presumably a store-forwarding
// stall: with 72 the hash's last load of block k (bytes 48..63) partly
// overlaps the ciphertext block stored last in step k-1 (bytes 56..71), so
// it cannot take its data from the store buffer and waits for that store to
// reach the cache; with 88 the overlapped stores are an AES block older. The
// AVX/SSSE3 paths show no such effect.
//
// After the call, the unhashed tail (24 + head bytes, then seq_hi with ESN)
// is hashed with the SHA block functions themselves
// (sha{1,256}_block_data_order, dispatched like the stitched routines):
// whole blocks straight from the packet, then one or two padded blocks built
// on the stack (FIPS 180-4 section 5.1.1, the length counting the ipad
// block), then the outer hash as one padded block of the inner digest from
// the opad words: 3 compressions after the loop (4 when the tail with
// seq_hi and padding exceeds two blocks, i.e. a SHA-NI head of 96 or 112
// bytes with ESN), which is the minimum for a trail of 64 bytes or more,
// and none of SHA*_Update/Final's buffering, bookkeeping and context
// copies. open() hashes with the same finish. The finish minds store
// forwarding too, as the compressions after the loop form one dependency
// chain: a 16-byte load of a block that was written with narrower stores
// waits until those reach the cache. So the padded end is written before
// the whole blocks are hashed, and the outer block with 16-byte stores
// (measured: SHA-1 seal -17 ns at 1400 bytes, SHA-256 -40 ns).
//
// Why the low-level aesni_* and SHA block calls: the stitched routine works
// on raw chaining words and AES_KEY, and these avoid EVP's per-call
// overhead (see hmac.cpp). The deprecation suppression (SHA_CTX for the HMAC
// key set-up in hmac_pads.hpp) stays in this file.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "crypto/cbc_hmac_stitched.hpp"

#include "crypto/cpu_features.hpp"
#include "crypto/evp_util.hpp"
#include "crypto/hmac_pads.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <emmintrin.h>
#include <openssl/aes.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdexcept>

// CRYPTOGAMS routines extracted from libcrypto.a (crypto/CMakeLists.txt);
// prototypes as in OpenSSL's providers/implementations/ciphers/
// cipher_aes_cbc_hmac_sha{1,256}_hw.c and include/crypto/aes_platform.h.
extern "C" {
int aesni_set_encrypt_key(const unsigned char* user_key, int bits, AES_KEY* key);
int aesni_set_decrypt_key(const unsigned char* user_key, int bits, AES_KEY* key);
void aesni_cbc_encrypt(const unsigned char* in, unsigned char* out, size_t length, const AES_KEY* key,
                       unsigned char* ivec, int enc);
// @ctx is SHA_CTX* / SHA256_CTX* there; only its leading chaining words are
// used (see below), so a bare word array is passed.
void aesni_cbc_sha1_enc(const void* inp, void* out, size_t blocks, const AES_KEY* key, unsigned char iv[16],
                        uint32_t* ctx, const void* in0);
int aesni_cbc_sha256_enc(const void* inp, void* out, size_t blocks, const AES_KEY* key, unsigned char iv[16],
                         uint32_t* ctx, const void* in0);
// The SHA block functions behind SHA1_Update/SHA256_Update, from
// sha1-x86_64.o / sha256-x86_64.o (crypto/include/internal/sha.h,
// crypto/sha/sha_local.h): hash @num whole 64-byte blocks from @p into the
// chaining words at the start of @ctx (again SHA_CTX* / SHA256_CTX* there).
// They dispatch on OPENSSL_ia32cap_P like the stitched routines.
void sha1_block_data_order(uint32_t* ctx, const void* p, size_t num);
void sha256_block_data_order(uint32_t* ctx, const void* p, size_t num);
}

namespace esptun::crypto {

using detail::EspLayout;

namespace {

constexpr size_t kShaBlock = detail::kShaBlockLen;
constexpr size_t kHeadShaNi = 64;  // trail 8 + 16 + 64 = 88 >= 64
constexpr size_t kHeadOther = 112; // trail 8 + 16 + 112 = 136 >= 128
static_assert(detail::kEspHeaderLen + kCbcIvLen + kHeadShaNi >= kShaBlock);
static_assert(detail::kEspHeaderLen + kCbcIvLen + kHeadOther >= 2 * kShaBlock);
static_assert(kHeadShaNi % 16 == 0 && kHeadOther % 16 == 0, "whole AES blocks");
constexpr size_t kAlign = 16; // check_spec() insists on it; a constant spares EspLayout a division

// Chaining words of a SHA-1 (5 used) or SHA-256 (8) state, host order, as
// at the start of SHA_CTX / SHA256_CTX.
using ShaWords = std::array<uint32_t, 8>;

// The hash functions (SHA*_Init/Update/Final, hmac_pads.hpp) with their
// block function and stitched routine.
struct Sha1Ops : detail::Sha1Ops {
	static void block(uint32_t* h, const uint8_t* p, size_t blocks) noexcept {
		sha1_block_data_order(h, p, blocks);
	}
	static void stitch(uint8_t* data, size_t blocks, const AES_KEY* k, uint8_t* iv, uint32_t* h,
	                   const uint8_t* hash_in) noexcept {
		aesni_cbc_sha1_enc(data, data, blocks, k, iv, h, hash_in);
	}
	static ShaWords words(const SHA_CTX& c) noexcept { return {c.h0, c.h1, c.h2, c.h3, c.h4, 0, 0, 0}; }
};

struct Sha256Ops : detail::Sha256Ops {
	static void block(uint32_t* h, const uint8_t* p, size_t blocks) noexcept {
		sha256_block_data_order(h, p, blocks);
	}
	static void stitch(uint8_t* data, size_t blocks, const AES_KEY* k, uint8_t* iv, uint32_t* h,
	                   const uint8_t* hash_in) noexcept {
		(void)aesni_cbc_sha256_enc(data, data, blocks, k, iv, h, hash_in);
	}
	static ShaWords words(const SHA256_CTX& c) noexcept {
		ShaWords w;
		std::copy(std::begin(c.h), std::end(c.h), w.begin());
		return w;
	}
};

/// The ipad/opad states of one HMAC key as bare chaining words; each has
/// absorbed exactly one 64-byte block.
struct KeyWords {
	ShaWords inner;
	ShaWords outer;
};

template <class Ops> KeyWords key_words(std::span<const uint8_t> key) noexcept {
	detail::HmacPads<typename Ops::Ctx> pads;
	detail::set_hmac_pads<Ops>(pads, key);
	const KeyWords kw{Ops::words(pads.inner), Ops::words(pads.outer)};
	OPENSSL_cleanse(&pads, sizeof pads);
	return kw;
}

// finish_icv() - hash the last @n bytes of the ICV input at @p, then seq_hi
// with ESN (RFC 4303 section 3.3.2.1), into @h, which has absorbed @done
// bytes so far (the ipad block included); pad (FIPS 180-4 section 5.1.1),
// run the outer hash from @outer and write the truncated ICV. Whole blocks
// are hashed straight from the packet and the padded end from one stack
// buffer, with the block functions themselves: no SHA_CTX bookkeeping.
template <class Ops> void finish_icv(uint32_t* h, const uint8_t* p, size_t n, uint64_t done, bool esn,
                                     uint32_t seq_hi, const ShaWords& outer, uint8_t* icv,
                                     size_t icv_len) noexcept {
	// Build the padded end before hashing the whole blocks: its stores are
	// narrower than the block function's 16-byte loads, so those loads are
	// not forwarded from the store buffer and wait for the cache, which the
	// stores then reach while the whole blocks are being hashed.
	const size_t whole = n / kShaBlock;
	size_t r = n % kShaBlock;
	// r < 64, plus 4 (seq_hi), 1 (0x80) and 8 (length): at most two blocks.
	alignas(16) std::array<uint8_t, 2 * kShaBlock> last{};
	std::memcpy(last.data(), p + whole * kShaBlock, r);
	if (esn) {
		detail::put_be32(last.data() + r, seq_hi);
		r += 4;
	}
	last[r] = 0x80;
	const size_t blocks = r + 9 <= kShaBlock ? 1 : 2;
	detail::put_be64(last.data() + blocks * kShaBlock - 8, (done + whole * kShaBlock + r) * 8);
	if (whole) Ops::block(h, p, whole);
	Ops::block(h, last.data(), blocks);

	// Outer hash: opad block (absorbed) | inner digest, one padded block,
	// written as four 16-byte stores: the block function loads it 16 bytes
	// at a time, and a load that needs several narrower stores cannot be
	// forwarded from the store buffer, which would put the stores' trip to
	// the cache on the chain of dependent compressions.
	alignas(16) std::array<uint8_t, kShaBlock> ob;
	const auto be = [h](size_t i) { return int(__builtin_bswap32(h[i])); };
	const int bits_be = int(__builtin_bswap32(uint32_t((kShaBlock + Ops::kLen) * 8)));
	auto* v = reinterpret_cast<__m128i*>(ob.data());
	static_assert(Ops::kLen == 20 || Ops::kLen == 32);
	_mm_store_si128(v, _mm_set_epi32(be(3), be(2), be(1), be(0)));
	if constexpr (Ops::kLen == 20) {
		_mm_store_si128(v + 1, _mm_set_epi32(0, 0, 0x80, be(4)));
	} else {
		_mm_store_si128(v + 1, _mm_set_epi32(be(7), be(6), be(5), be(4)));
	}
	_mm_store_si128(v + 2, _mm_set_epi32(0, 0, 0, Ops::kLen == 20 ? 0 : 0x80));
	_mm_store_si128(v + 3, _mm_set_epi32(bits_be, 0, 0, 0));
	ShaWords o = outer;
	Ops::block(o.data(), ob.data(), 1);
	// check_spec(): icv_len is a multiple of 4, at most the digest length.
	for (size_t i = 0; i < icv_len / 4; i++)
		detail::put_be32(icv + 4 * i, o[i]);
}

void wipe_after_header(std::span<uint8_t> esp) noexcept {
	if (esp.size() > detail::kEspHeaderLen)
		std::fill(esp.begin() + detail::kEspHeaderLen, esp.end(), uint8_t(0));
}

} // namespace

struct CbcHmacStitchedTransform::State {
	AES_KEY enc;
	AES_KEY dec;
	bool sha256;
	KeyWords words; // HMAC ipad/opad states, SHA-1 or SHA-256 per sha256

	State() = default;
	State(const State&) = delete;
	State& operator=(const State&) = delete;
	~State() { OPENSSL_cleanse(this, sizeof *this); } // key schedules and pad states

	// seal_payload() - encrypt the payload in place and write the ICV; the
	// IV is already in the packet. See the theory of operation at the top.
	template <class Ops> void seal_payload(uint8_t* pkt, const EspLayout& l, size_t head_len, bool esn,
	                                       uint32_t seq_hi, size_t icv_len) const noexcept {
		uint8_t* p = pkt + l.payload_off;
		const size_t len = l.payload_len;
		alignas(16) std::array<uint8_t, kCbcIvLen> iv;
		std::memcpy(iv.data(), pkt + l.iv_off, iv.size());
		ShaWords h = words.inner;

		// The head takes the < 64 bytes the stitched blocks leave over, so
		// one CBC call covers both.
		size_t head = len, blocks = 0;
		if (len >= head_len + kShaBlock) {
			head = head_len + (len - head_len) % kShaBlock;
			blocks = (len - head) / kShaBlock;
		}
		// 1. The head alone, so the hash can trail the encryption.
		if (head) aesni_cbc_encrypt(p, p, head, &enc, iv.data(), 1);
		// 2. One pass: encrypt the rest, 64*blocks bytes, and hash as many
		// from SPI on.
		size_t hashed = 0;
		if (blocks) {
			Ops::stitch(p + head, blocks, &enc, iv.data(), h.data(), pkt);
			hashed = blocks * kShaBlock;
		}
		// 3. The unhashed tail, seq_hi, padding, outer hash.
		finish_icv<Ops>(h.data(), pkt + hashed, l.icv_off - hashed, kShaBlock + hashed, esn, seq_hi,
		                words.outer, pkt + l.icv_off, icv_len);
	}

	// open_payload() - two passes: verify the ICV in constant time, then
	// CBC-decrypt in place. Not stitched, on purpose: (1) ESP verifies before
	// decrypting (RFC 4303 section 3.4.4.1), so a forged packet costs one
	// hash and no attacker-chosen ciphertext is ever decrypted (no padding-
	// oracle style leaks); a stitched decrypt would decrypt while hashing.
	// (2) CBC decryption, unlike encryption, is parallel across blocks and
	// already runs near AES-NI throughput (~0.6-0.9 cycles/byte, see the
	// numbers in aesni-sha1-x86_64.pl), so stitching gains almost nothing
	// there (OpenSSL ships no stitched decrypt for the same reason).
	template <class Ops> bool open_payload(uint8_t* pkt, const EspLayout& l, bool esn, uint32_t seq_hi,
	                                       size_t icv_len) const noexcept {
		ShaWords h = words.inner;
		std::array<uint8_t, Ops::kLen> icv;
		finish_icv<Ops>(h.data(), pkt, l.icv_off, kShaBlock, esn, seq_hi, words.outer, icv.data(),
		                icv_len);
		if (CRYPTO_memcmp(icv.data(), pkt + l.icv_off, icv_len) != 0) return false;
		if (l.payload_len) {
			alignas(16) std::array<uint8_t, kCbcIvLen> iv;
			std::memcpy(iv.data(), pkt + l.iv_off, iv.size());
			uint8_t* p = pkt + l.payload_off;
			aesni_cbc_encrypt(p, p, l.payload_len, &dec, iv.data(), 0);
		}
		return true;
	}
};

namespace {

bool is_sha256(Cipher c) noexcept { return c == Cipher::aes128_cbc_sha256 || c == Cipher::aes256_cbc_sha256; }

const CipherSpec& check_spec(const CipherSpec& spec, std::span<const uint8_t> enc_key,
                             std::span<const uint8_t> auth_key) {
	if (spec.aead || spec.iv_len != kCbcIvLen || spec.align != kAlign)
		throw std::invalid_argument("not an AES-CBC + HMAC suite");
	// finish_icv() writes the ICV in whole 32-bit words of the digest.
	const size_t digest_len = is_sha256(spec.id) ? Sha256Ops::kLen : Sha1Ops::kLen;
	if (spec.icv_len % 4 != 0 || spec.icv_len > digest_len) throw std::invalid_argument("bad ICV length");
	if (enc_key.size() != 16 && enc_key.size() != 32) throw std::invalid_argument("bad AES key length");
	if (enc_key.size() != spec.enc_key_len) throw std::invalid_argument("wrong AES-CBC key length");
	if (auth_key.size() != spec.auth_key_len) throw std::invalid_argument("wrong HMAC key length");
	// Per hash, not stitched_supported(): lets tests run the SHA-1 SSSE3
	// variant (cpu::ScopedCapMask) where the SHA-256 routine has none.
	const cpu::X86Features& f = cpu::ia32cap_init();
	const cpu::StitchPath path = is_sha256(spec.id) ? cpu::sha256_stitch_path() : cpu::sha1_stitch_path();
	if (!f.aesni || !f.ssse3 || path == cpu::StitchPath::none)
		throw std::runtime_error("stitched AES-CBC+HMAC not supported on this CPU: " +
		                         stitched_unsupported_reason());
	return spec;
}

} // namespace

CbcHmacStitchedTransform::CbcHmacStitchedTransform(const CipherSpec& spec, std::span<const uint8_t> enc_key,
                                                   std::span<const uint8_t> auth_key, bool esn)
    : spec_(cipher_spec(check_spec(spec, enc_key, auth_key).id)), esn_(esn), head_len_(kHeadOther) {
	// check_spec() ran cpu::ia32cap_init(), which filled OPENSSL_ia32cap_P
	// before this first call into the assembly.
	auto st = std::make_unique<State>();
	const int bits = int(enc_key.size() * 8);
	if (aesni_set_encrypt_key(enc_key.data(), bits, &st->enc) != 0 ||
	    aesni_set_decrypt_key(enc_key.data(), bits, &st->dec) != 0)
		throw std::runtime_error("aesni_set_*_key failed");
	st->sha256 = is_sha256(spec_.id);
	const cpu::StitchPath path = st->sha256 ? cpu::sha256_stitch_path() : cpu::sha1_stitch_path();
	head_len_ = path == cpu::StitchPath::shaext ? kHeadShaNi : kHeadOther;
	st->words = st->sha256 ? key_words<Sha256Ops>(auth_key) : key_words<Sha1Ops>(auth_key);
	st_ = std::move(st);
}

CbcHmacStitchedTransform::CbcHmacStitchedTransform(const CbcHmacStitchedTransform& o, SharedKey)
    : spec_(o.spec_), esn_(o.esn_), head_len_(o.head_len_), st_(o.st_) {}

// The State wipes itself when its last sharer goes (~State).
CbcHmacStitchedTransform::~CbcHmacStitchedTransform() = default;

std::unique_ptr<EspTransform> CbcHmacStitchedTransform::for_another_worker() const {
	// Its own IV generator (a fresh random key): IVs stay unpredictable and
	// distinct per thread, as RFC 3602 wants of CBC.
	return std::unique_ptr<EspTransform>(new CbcHmacStitchedTransform(*this, SharedKey{}));
}

size_t CbcHmacStitchedTransform::stitched_min_payload() const noexcept { return head_len_ + kShaBlock; }

void CbcHmacStitchedTransform::seal_in_place(uint8_t* esp, const EspLayout& l, uint64_t seq) noexcept {
	const auto hi = uint32_t(seq >> 32);
	if (st_->sha256)
		st_->seal_payload<Sha256Ops>(esp, l, head_len_, esn_, hi, spec_.icv_len);
	else
		st_->seal_payload<Sha1Ops>(esp, l, head_len_, esn_, hi, spec_.icv_len);
}

void CbcHmacStitchedTransform::seal(std::span<uint8_t> esp, uint64_t seq) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, kAlign, spec_.icv_len);
	if (l.ok && ivgen_.next(seq, std::span<uint8_t, kCbcIvLen>(esp.data() + l.iv_off, kCbcIvLen))) {
		seal_in_place(esp.data(), l, seq);
		return;
	}
	// Never let plaintext out: wipe everything after the header.
	wipe_after_header(esp);
}

void CbcHmacStitchedTransform::seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
                                            std::span<const uint8_t, kCbcIvLen> iv) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, kAlign, spec_.icv_len);
	if (!l.ok) {
		wipe_after_header(esp);
		return;
	}
	std::copy(iv.begin(), iv.end(), esp.begin() + ptrdiff_t(l.iv_off));
	seal_in_place(esp.data(), l, seq);
}

bool CbcHmacStitchedTransform::open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, kAlign, spec_.icv_len);
	if (!l.ok) return false;
	if (st_->sha256) return st_->open_payload<Sha256Ops>(esp.data(), l, esn_, seq_hi, spec_.icv_len);
	return st_->open_payload<Sha1Ops>(esp.data(), l, esn_, seq_hi, spec_.icv_len);
}

std::string stitched_unsupported_reason() {
	const cpu::X86Features& f = cpu::ia32cap_init();
	std::string missing;
	auto add = [&](const char* what) {
		if (!missing.empty()) missing += ", ";
		missing += what;
	};
	if (!f.aesni) add("AES-NI");
	if (!f.ssse3) add("SSSE3");
	if (cpu::sha256_stitch_path() == cpu::StitchPath::none)
		add("SHA extensions or AVX (enabled by the OS) for the SHA-256 routine");
	return missing.empty() ? std::string() : "missing " + missing;
}

bool stitched_supported() noexcept {
	const cpu::X86Features& f = cpu::ia32cap_init();
	return f.aesni && f.ssse3 && cpu::sha1_stitch_path() != cpu::StitchPath::none &&
	       cpu::sha256_stitch_path() != cpu::StitchPath::none;
}

std::string_view stitched_variant() noexcept {
	if (!stitched_supported()) return "none";
	const cpu::StitchPath a = cpu::sha1_stitch_path(), b = cpu::sha256_stitch_path();
	if (a == b) return cpu::stitch_path_name(a);
	// Two different paths: a fixed set of combinations, so static strings.
	using P = cpu::StitchPath;
	if (a == P::avx && b == P::avx2) return "avx/avx2";
	if (a == P::ssse3 && b == P::avx2) return "ssse3/avx2";
	if (a == P::ssse3 && b == P::avx) return "ssse3/avx";
	if (a == P::ssse3 && b == P::xop) return "ssse3/xop";
	if (a == P::avx && b == P::xop) return "avx/xop";
	return "mixed";
}

} // namespace esptun::crypto
