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
//    h[0..7] of SHA256_CTX, at offset 0). Nl/Nh/data/num are untouched, so
//    the caller must start with num == 0 (a whole-block state such as the
//    HMAC ipad state) and add 512*blocks to the bit count afterwards, as
//    OpenSSL's own glue does (cipher_aes_cbc_hmac_sha{1,256}_hw.c).
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
// The trail is 8 (ESP header) + 16 (IV) + head_len bytes, where head_len
// payload bytes are CBC-encrypted alone before the stitched call: 48 for
// SHA-NI (trail 72 >= 64), 112 otherwise (trail 136 >= 128). After the call
// the remaining < 64 payload bytes are encrypted with aesni_cbc_encrypt and
// the unhashed tail (24 + head_len + remainder bytes, then seq_hi with ESN)
// goes through SHA*_Update; the outer hash uses the precomputed opad state.
//
// Why the low-level SHA*_ and aesni_* calls: the stitched routine works on
// raw SHA_CTX/SHA256_CTX and AES_KEY, and these avoid EVP's per-call
// overhead (see hmac.cpp). The deprecation suppression stays in this file.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "crypto/cbc_hmac_stitched.hpp"

#include "crypto/cpu_features.hpp"
#include "crypto/evp_util.hpp"
#include "crypto/hmac_pads.hpp"

#include <algorithm>
#include <array>
#include <cstring>
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
void aesni_cbc_sha1_enc(const void* inp, void* out, size_t blocks, const AES_KEY* key, unsigned char iv[16],
                        SHA_CTX* ctx, const void* in0);
int aesni_cbc_sha256_enc(const void* inp, void* out, size_t blocks, const AES_KEY* key, unsigned char iv[16],
                         SHA256_CTX* ctx, const void* in0);
}

namespace esptun::crypto {

using detail::EspLayout;

namespace {

constexpr size_t kShaBlock = detail::kShaBlockLen;
constexpr size_t kHeadShaNi = 48;  // trail 8 + 16 + 48 = 72 >= 64
constexpr size_t kHeadOther = 112; // trail 8 + 16 + 112 = 136 >= 128
static_assert(detail::kEspHeaderLen + kCbcIvLen + kHeadShaNi >= kShaBlock);
static_assert(detail::kEspHeaderLen + kCbcIvLen + kHeadOther >= 2 * kShaBlock);
static_assert(kHeadShaNi % 16 == 0 && kHeadOther % 16 == 0, "whole AES blocks");

// The hash functions with their stitched AES-CBC routine.
struct Sha1Ops : detail::Sha1Ops {
	static void stitch(uint8_t* data, size_t blocks, const AES_KEY* k, uint8_t* iv, Ctx* c,
	                   const uint8_t* hash_in) noexcept {
		aesni_cbc_sha1_enc(data, data, blocks, k, iv, c, hash_in);
	}
};

struct Sha256Ops : detail::Sha256Ops {
	static void stitch(uint8_t* data, size_t blocks, const AES_KEY* k, uint8_t* iv, Ctx* c,
	                   const uint8_t* hash_in) noexcept {
		(void)aesni_cbc_sha256_enc(data, data, blocks, k, iv, c, hash_in);
	}
};

template <class Ctx> using Pads = detail::HmacPads<Ctx>;

// The stitched routine advanced only the chaining words; account for the
// 64*blocks bytes in the 64-bit bit count (Nh:Nl), as OpenSSL's glue does.
template <class Ctx> void add_hashed_bytes(Ctx& c, size_t bytes) noexcept {
	const uint64_t bits = uint64_t(bytes) * 8;
	const auto lo = static_cast<decltype(c.Nl)>(bits);
	c.Nl += lo;
	c.Nh += static_cast<decltype(c.Nh)>(bits >> 32) + (c.Nl < lo ? 1 : 0);
}

// Appends seq_hi with ESN (RFC 4303 section 3.3.2.1), finishes the inner
// hash, runs the outer one from the opad state and writes the truncated ICV.
template <class Ops> void finish_icv(typename Ops::Ctx& work, const typename Ops::Ctx& outer, bool esn,
                                     uint32_t seq_hi, uint8_t* icv, size_t icv_len) noexcept {
	if (esn) {
		std::array<uint8_t, 4> hi;
		detail::put_be32(hi.data(), seq_hi);
		Ops::update(&work, hi.data(), hi.size());
	}
	std::array<uint8_t, Ops::kLen> inner_hash;
	Ops::final(inner_hash.data(), &work);
	work = outer;
	Ops::update(&work, inner_hash.data(), inner_hash.size());
	std::array<uint8_t, Ops::kLen> mac;
	Ops::final(mac.data(), &work);
	std::memcpy(icv, mac.data(), std::min(icv_len, mac.size()));
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
	Pads<SHA_CTX> sha1;
	Pads<SHA256_CTX> sha256_pads;

	// seal_payload() - encrypt the payload in place and write the ICV; the
	// IV is already in the packet. See the theory of operation at the top.
	template <class Ops> void seal_payload(uint8_t* pkt, const EspLayout& l, size_t head_len, bool esn,
	                                       uint32_t seq_hi, const Pads<typename Ops::Ctx>& pads,
	                                       size_t icv_len) noexcept {
		uint8_t* p = pkt + l.payload_off;
		const size_t len = l.payload_len;
		alignas(16) std::array<uint8_t, kCbcIvLen> iv;
		std::memcpy(iv.data(), pkt + l.iv_off, iv.size());
		typename Ops::Ctx work = pads.inner;

		size_t head = len, blocks = 0;
		if (len >= head_len + kShaBlock) {
			head = head_len;
			blocks = (len - head) / kShaBlock;
		}
		// 1. The head alone, so the hash can trail the encryption.
		if (head) aesni_cbc_encrypt(p, p, head, &enc, iv.data(), 1);
		// 2. One pass: encrypt the next 64*blocks bytes, hash as many from SPI on.
		size_t hashed = 0;
		if (blocks) {
			Ops::stitch(p + head, blocks, &enc, iv.data(), &work, pkt);
			hashed = blocks * kShaBlock;
			add_hashed_bytes(work, hashed);
		}
		// 3. The remaining < 64 payload bytes, then the unhashed tail.
		const size_t done = head + blocks * kShaBlock;
		if (done < len) aesni_cbc_encrypt(p + done, p + done, len - done, &enc, iv.data(), 1);
		Ops::update(&work, pkt + hashed, l.icv_off - hashed);
		finish_icv<Ops>(work, pads.outer, esn, seq_hi, pkt + l.icv_off, icv_len);
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
	                                       const Pads<typename Ops::Ctx>& pads, size_t icv_len) noexcept {
		typename Ops::Ctx work = pads.inner;
		Ops::update(&work, pkt, l.icv_off);
		std::array<uint8_t, Ops::kLen> icv;
		finish_icv<Ops>(work, pads.outer, esn, seq_hi, icv.data(), icv_len);
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
	if (spec.aead || spec.iv_len != kCbcIvLen || spec.align != 16)
		throw std::invalid_argument("not an AES-CBC + HMAC suite");
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
    : spec_(cipher_spec(check_spec(spec, enc_key, auth_key).id)), esn_(esn), head_len_(kHeadOther),
      st_(std::make_unique<State>()) {
	// check_spec() ran cpu::ia32cap_init(), which filled OPENSSL_ia32cap_P
	// before this first call into the assembly.
	const int bits = int(enc_key.size() * 8);
	if (aesni_set_encrypt_key(enc_key.data(), bits, &st_->enc) != 0 ||
	    aesni_set_decrypt_key(enc_key.data(), bits, &st_->dec) != 0)
		throw std::runtime_error("aesni_set_*_key failed");
	st_->sha256 = is_sha256(spec_.id);
	const cpu::StitchPath path = st_->sha256 ? cpu::sha256_stitch_path() : cpu::sha1_stitch_path();
	head_len_ = path == cpu::StitchPath::shaext ? kHeadShaNi : kHeadOther;
	if (st_->sha256)
		detail::set_hmac_pads<Sha256Ops>(st_->sha256_pads, auth_key);
	else
		detail::set_hmac_pads<Sha1Ops>(st_->sha1, auth_key);
}

CbcHmacStitchedTransform::~CbcHmacStitchedTransform() {
	if (st_) OPENSSL_cleanse(st_.get(), sizeof *st_); // key schedules and pad states
}

size_t CbcHmacStitchedTransform::stitched_min_payload() const noexcept { return head_len_ + kShaBlock; }

void CbcHmacStitchedTransform::seal_in_place(std::span<uint8_t> esp, uint64_t seq) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	const auto hi = uint32_t(seq >> 32);
	if (st_->sha256)
		st_->seal_payload<Sha256Ops>(esp.data(), l, head_len_, esn_, hi, st_->sha256_pads,
		                             spec_.icv_len);
	else
		st_->seal_payload<Sha1Ops>(esp.data(), l, head_len_, esn_, hi, st_->sha1, spec_.icv_len);
}

void CbcHmacStitchedTransform::seal(std::span<uint8_t> esp, uint64_t seq) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	if (l.ok && ivgen_.next(seq, std::span<uint8_t, kCbcIvLen>(esp.data() + l.iv_off, kCbcIvLen))) {
		seal_in_place(esp, seq);
		return;
	}
	// Never let plaintext out: wipe everything after the header.
	wipe_after_header(esp);
}

void CbcHmacStitchedTransform::seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
                                            std::span<const uint8_t, kCbcIvLen> iv) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	if (!l.ok) {
		wipe_after_header(esp);
		return;
	}
	std::copy(iv.begin(), iv.end(), esp.begin() + ptrdiff_t(l.iv_off));
	seal_in_place(esp, seq);
}

bool CbcHmacStitchedTransform::open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	if (!l.ok) return false;
	if (st_->sha256)
		return st_->open_payload<Sha256Ops>(esp.data(), l, esn_, seq_hi, st_->sha256_pads,
		                                    spec_.icv_len);
	return st_->open_payload<Sha1Ops>(esp.data(), l, esn_, seq_hi, st_->sha1, spec_.icv_len);
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
