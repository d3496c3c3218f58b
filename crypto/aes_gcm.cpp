// AES-GCM ESP transform (see aes_gcm.hpp).
//
// seal: explicit IV -> nonce = salt || IV -> AAD -> encrypt payload in place
//       -> tag = ICV.
// open: nonce from the packet -> AAD -> decrypt in place -> tag must verify.
#include "crypto/aes_gcm.hpp"

#include <algorithm>
#include <openssl/crypto.h>
#include <stdexcept>

namespace esptun::crypto {

using detail::EspLayout;

namespace {

const CipherSpec& check_gcm_spec(const CipherSpec& spec, std::span<const uint8_t> key) {
	if (!spec.aead || spec.iv_len != kGcmIvLen || spec.icv_len != kGcmIcvLen)
		throw std::invalid_argument("not an AES-GCM suite");
	if (key.size() != spec.enc_key_len)
		throw std::invalid_argument("wrong AES-GCM key length (key || 4-byte salt)");
	return spec;
}

const EVP_CIPHER* gcm_cipher(size_t aes_key_len) {
	return aes_key_len == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
}

void wipe_after_header(std::span<uint8_t> esp) noexcept {
	if (esp.size() > detail::kEspHeaderLen)
		std::fill(esp.begin() + detail::kEspHeaderLen, esp.end(), uint8_t(0));
}

} // namespace

std::string_view gcm_variant() noexcept { return vaes::supported() ? "vaes" : "evp"; }

AesGcmTransform::AesGcmTransform(const CipherSpec& spec, std::span<const uint8_t> key, bool esn, GcmImpl impl)
    : spec_(cipher_spec(check_gcm_spec(spec, key).id)), esn_(esn) {
	const size_t aes_len = key.size() - kGcmSaltLen;
	std::copy_n(key.begin() + ptrdiff_t(aes_len), kGcmSaltLen, salt_.begin());
	if (impl == GcmImpl::vaes && !vaes::supported())
		throw std::runtime_error("AES-GCM with VAES needs AVX-512 (F, BW, VL), VAES and VPCLMULQDQ, "
		                         "which this CPU or OS does not offer");
	if (impl != GcmImpl::evp && vaes::supported()) {
		auto k = std::make_unique<vaes::GcmKey>();
		if (!vaes::init(*k, key.data(), aes_len)) throw std::invalid_argument("wrong AES key length");
		vaes_ = std::move(k);
		return;
	}
	enc_ = detail::new_cipher_ctx(gcm_cipher(aes_len), key.data(), true);
	dec_ = detail::new_cipher_ctx(gcm_cipher(aes_len), key.data(), false);
	// The default GCM nonce length is 12 bytes, which is salt (4) + IV (8).
}

AesGcmTransform::~AesGcmTransform() { OPENSSL_cleanse(salt_.data(), salt_.size()); }

std::unique_ptr<EspTransform> AesGcmTransform::for_another_worker() const {
	if (!vaes_) return nullptr;
	// A copy of the salt and flags, the same key: seal() and open() keep
	// nothing else between packets.
	std::unique_ptr<AesGcmTransform> t(new AesGcmTransform(spec_, esn_));
	t->salt_ = salt_;
	t->vaes_ = vaes_;
	return t;
}

AesGcmTransform::AesGcmTransform(const CipherSpec& spec, bool esn) : spec_(spec), esn_(esn) {}

size_t AesGcmTransform::build_aad(std::span<const uint8_t> esp, uint32_t seq_hi,
                                  std::array<uint8_t, 12>& aad) const noexcept {
	// RFC 4106 section 5: SPI, then the 64-bit ESN (high half first) or the
	// 32-bit sequence number as it stands in the header.
	std::copy_n(esp.begin(), 4, aad.begin());
	if (!esn_) {
		std::copy_n(esp.begin() + 4, 4, aad.begin() + 4);
		return 8;
	}
	detail::put_be32(aad.data() + 4, seq_hi);
	std::copy_n(esp.begin() + 4, 4, aad.begin() + 8);
	return 12;
}

std::array<uint8_t, 12> AesGcmTransform::nonce(const uint8_t* iv) const noexcept {
	std::array<uint8_t, 12> n;
	std::copy(salt_.begin(), salt_.end(), n.begin());
	std::copy_n(iv, kGcmIvLen, n.begin() + kGcmSaltLen);
	return n;
}

void AesGcmTransform::seal(std::span<uint8_t> esp, uint64_t seq) noexcept {
	std::array<uint8_t, kGcmIvLen> iv;
	detail::put_be64(iv.data(), seq);
	seal_with_iv(esp, seq, iv);
}

void AesGcmTransform::seal_with_iv(std::span<uint8_t> esp, uint64_t seq,
                                   std::span<const uint8_t, kGcmIvLen> iv) noexcept {
	const EspLayout l(esp.size(), kGcmIvLen, spec_.align, kGcmIcvLen);
	if (!l.ok) return wipe_after_header(esp);
	std::copy(iv.begin(), iv.end(), esp.begin() + l.iv_off);

	std::array<uint8_t, 12> aad;
	const size_t aad_len = build_aad(esp, uint32_t(seq >> 32), aad);
	const auto n = nonce(esp.data() + l.iv_off);
	uint8_t* p = esp.data() + l.payload_off;
	if (vaes_)
		return vaes::seal(*vaes_, n.data(), aad.data(), aad_len, p, l.payload_len,
		                  esp.data() + l.icv_off);
	EVP_CIPHER_CTX* c = enc_.get();
	int out = 0, aad_out = 0, fin = 0;
	const bool ok =
	    EVP_EncryptInit_ex2(c, nullptr, nullptr, n.data(), nullptr) == 1 &&
	    EVP_EncryptUpdate(c, nullptr, &aad_out, aad.data(), int(aad_len)) == 1 &&
	    EVP_EncryptUpdate(c, p, &out, p, int(l.payload_len)) == 1 && size_t(out) == l.payload_len &&
	    EVP_EncryptFinal_ex(c, p + out, &fin) == 1 && fin == 0 &&
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, int(kGcmIcvLen), esp.data() + l.icv_off) == 1;
	if (!ok) wipe_after_header(esp);
}

bool AesGcmTransform::open(std::span<uint8_t> esp, uint32_t seq_hi) noexcept {
	const EspLayout l(esp.size(), kGcmIvLen, spec_.align, kGcmIcvLen);
	if (!l.ok) return false;

	std::array<uint8_t, 12> aad;
	const size_t aad_len = build_aad(esp, seq_hi, aad);
	const auto n = nonce(esp.data() + l.iv_off);
	uint8_t* p = esp.data() + l.payload_off;
	if (vaes_)
		return vaes::open(*vaes_, n.data(), aad.data(), aad_len, p, l.payload_len,
		                  esp.data() + l.icv_off);
	EVP_CIPHER_CTX* c = dec_.get();
	int out = 0, aad_out = 0, fin = 0;
	// EVP_DecryptFinal_ex compares the tag in constant time and fails on a
	// mismatch; only then is the packet authentic.
	return EVP_DecryptInit_ex2(c, nullptr, nullptr, n.data(), nullptr) == 1 &&
	       EVP_DecryptUpdate(c, nullptr, &aad_out, aad.data(), int(aad_len)) == 1 &&
	       EVP_DecryptUpdate(c, p, &out, p, int(l.payload_len)) == 1 && size_t(out) == l.payload_len &&
	       EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, int(kGcmIcvLen), esp.data() + l.icv_off) == 1 &&
	       EVP_DecryptFinal_ex(c, p + out, &fin) == 1;
}

} // namespace esptun::crypto
