// Two-pass AES-CBC + HMAC ESP transform (see cbc_hmac.hpp).
//
// seal: IV -> CBC-encrypt the payload in place -> ICV = HMAC(SPI..ciphertext
//       [|| seq_hi]) truncated.
// open: ICV check first (constant time) -> CBC-decrypt in place.
#include "crypto/cbc_hmac.hpp"

#include <algorithm>
#include <array>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdexcept>

namespace esptun::crypto {

using detail::EspLayout;

CbcIvGenerator::CbcIvGenerator() {
	std::array<uint8_t, 16> key;
	if (RAND_bytes(key.data(), int(key.size())) != 1)
		throw std::runtime_error("RAND_bytes failed for the IV key");
	ecb_ = detail::new_cipher_ctx(EVP_aes_128_ecb(), key.data(), true);
	OPENSSL_cleanse(key.data(), key.size());
}

bool CbcIvGenerator::next(uint64_t seq, std::span<uint8_t, kCbcIvLen> iv) noexcept {
	std::array<uint8_t, kCbcIvLen> block;
	detail::put_be64(block.data(), seq);
	detail::put_be64(block.data() + 8, count_++);
	int n = 0;
	return EVP_EncryptUpdate(ecb_.get(), iv.data(), &n, block.data(), int(block.size())) == 1 &&
	       n == int(kCbcIvLen);
}

namespace {

const CipherSpec& check_cbc_spec(const CipherSpec& spec, std::span<const uint8_t> enc_key,
                                 std::span<const uint8_t> auth_key) {
	if (spec.aead || spec.iv_len != kCbcIvLen) throw std::invalid_argument("not an AES-CBC + HMAC suite");
	if (enc_key.size() != spec.enc_key_len) throw std::invalid_argument("wrong AES-CBC key length");
	if (auth_key.size() != spec.auth_key_len) throw std::invalid_argument("wrong HMAC key length");
	return spec;
}

const EVP_CIPHER* cbc_cipher(size_t key_len) { return key_len == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc(); }

void wipe_after_header(std::span<uint8_t> esp) noexcept {
	if (esp.size() > detail::kEspHeaderLen)
		std::fill(esp.begin() + detail::kEspHeaderLen, esp.end(), uint8_t(0));
}

HmacHash hmac_hash(Cipher c) {
	return c == Cipher::aes128_cbc_sha1 || c == Cipher::aes256_cbc_sha1 ? HmacHash::sha1
	                                                                    : HmacHash::sha256;
}

} // namespace

CbcHmacTransform::CbcHmacTransform(const CipherSpec& spec, std::span<const uint8_t> enc_key,
                                   std::span<const uint8_t> auth_key, bool esn)
    : spec_(cipher_spec(check_cbc_spec(spec, enc_key, auth_key).id)), esn_(esn),
      enc_(detail::new_cipher_ctx(cbc_cipher(enc_key.size()), enc_key.data(), true)),
      dec_(detail::new_cipher_ctx(cbc_cipher(enc_key.size()), enc_key.data(), false)),
      hmac_(hmac_hash(spec.id), auth_key) {}

void CbcHmacTransform::compute_icv(std::span<const uint8_t> authed, uint32_t seq_hi,
                                   std::span<uint8_t> icv) noexcept {
	hmac_.begin();
	hmac_.update(authed);
	if (esn_) {
		// RFC 4303 section 3.3.2.1: with ESN the high-order 32 bits take part
		// in the ICV, placed after the (encrypted) payload; never sent.
		std::array<uint8_t, 4> hi;
		detail::put_be32(hi.data(), seq_hi);
		hmac_.update(hi);
	}
	hmac_.finish(icv);
}

bool CbcHmacTransform::encrypt(std::span<uint8_t> esp, const EspLayout& l) noexcept {
	// The IV is already in the packet. Setting it re-arms the context; the
	// key schedule from construction is kept.
	uint8_t* p = esp.data() + l.payload_off;
	int n = 0;
	return EVP_EncryptInit_ex2(enc_.get(), nullptr, nullptr, esp.data() + l.iv_off, nullptr) == 1 &&
	       EVP_EncryptUpdate(enc_.get(), p, &n, p, int(l.payload_len)) == 1 && size_t(n) == l.payload_len;
}

void CbcHmacTransform::seal(std::span<uint8_t> esp, uint64_t seq) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	bool ok = l.ok && ivgen_.next(seq, std::span<uint8_t, kCbcIvLen>(esp.data() + l.iv_off, kCbcIvLen)) &&
	          encrypt(esp, l);
	if (ok) {
		compute_icv(esp.first(l.icv_off), uint32_t(seq >> 32), esp.subspan(l.icv_off));
		return;
	}
	// Never let a half-encrypted payload out: wipe everything after the header.
	wipe_after_header(esp);
}

void CbcHmacTransform::seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
                                    std::span<const uint8_t, kCbcIvLen> iv) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	if (l.ok) {
		std::copy(iv.begin(), iv.end(), esp.begin() + l.iv_off);
		if (encrypt(esp, l)) {
			compute_icv(esp.first(l.icv_off), uint32_t(seq >> 32), esp.subspan(l.icv_off));
			return;
		}
	}
	wipe_after_header(esp);
}

bool CbcHmacTransform::open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept {
	const EspLayout l(esp.size(), kCbcIvLen, spec_.align, spec_.icv_len);
	if (!l.ok) return false;

	// Verify before decrypting (encrypt-then-MAC, RFC 4303 section 3.4.4.1):
	// a forged packet is then rejected after one HMAC, and no CBC decryption
	// of attacker-chosen ciphertext ever happens, so nothing about padding or
	// inner headers of forged plaintext can leak through timing or errors
	// (the padding-oracle class of attacks needs exactly that). The compare
	// is constant time so the ICV cannot be guessed byte by byte.
	std::array<uint8_t, kMaxHmacLen> icv;
	compute_icv(esp.first(l.icv_off), seq_hi, std::span(icv).first(spec_.icv_len));
	if (CRYPTO_memcmp(icv.data(), esp.data() + l.icv_off, spec_.icv_len) != 0) return false;

	uint8_t* p = esp.data() + l.payload_off;
	int n = 0;
	return EVP_DecryptInit_ex2(dec_.get(), nullptr, nullptr, esp.data() + l.iv_off, nullptr) == 1 &&
	       EVP_DecryptUpdate(dec_.get(), p, &n, p, int(l.payload_len)) == 1 && size_t(n) == l.payload_len;
}

} // namespace esptun::crypto
