// The subjects of `esptun-bench crypto`: see subjects.hpp and,
// for what is timed and how, the theory of operation in crypto_bench.cpp.
#include "apps/bench/crypto_bench/subjects.hpp"

#include "apps/bench/lab/sa_keys.hpp"
#include "crypto/aes_gcm.hpp"
#include "crypto/esp_transform.hpp"
#include "tunnel/esp.hpp"
#include "tunnel/sa.hpp"

#include <algorithm>
#include <array>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdexcept>

namespace esptun::bench::crypto_bench {

using namespace lab;
namespace {

using crypto::Cipher;
using crypto::CryptoImpl;

constexpr size_t kTlsExplicitIv = 16; // TLS 1.1+ CBC records start with one (RFC 5246 6.2.3.2)

/**
 * EspSubject - an esptun transform pair (one seals, the other opens) with the
 * keys of a one-peer SaTable, on packets that table built with encapsulate().
 * The pair is built here with make_esp_transform(), as the table builds its
 * own, so the benchmark times the code the data path runs without reaching
 * into the table's SAs.
 * @gcm: for a GCM suite, the AES-GCM code to run instead of the one
 *       make_esp_transform() picks (so both can be measured side by side)
 */
class EspSubject final : public Subject {
public:
	EspSubject(Cipher cipher, CryptoImpl impl, crypto::GcmImpl gcm = crypto::GcmImpl::automatic)
	    : Subject(std::string(crypto::cipher_spec(cipher).name),
	              std::string(crypto::cipher_spec(cipher).name), "", false, false),
	      keys_(make_sa_keys(crypto::cipher_spec(cipher))), table_(params(cipher, impl, keys_)),
	      sa_(*table_.peers().front()->outbound()), sealer_(transform(cipher, impl, gcm, keys_)),
	      opener_(transform(cipher, impl, gcm, keys_)), buf_(tunnel::esp::kBufferSize),
	      inner_(random_bytes(kMaxSize)) {
		impl_ = std::string(sealer_->impl_name());
		pristine_.resize(tunnel::esp::kBufferSize);
		work_.resize(tunnel::esp::kBufferSize);
	}

	void prepare(size_t size) override {
		// An IPv4 header (version, total length, destination) on random bytes:
		// encapsulate() reads the version and routes on the destination.
		uint8_t* in = buf_.data() + tunnel::esp::kHeadroom;
		std::memcpy(in, inner_.data(), size);
		in[0] = 0x45;
		in[2] = uint8_t(size >> 8);
		in[3] = uint8_t(size);
		const uint8_t dst[4] = {10, 99, 0, 2};
		std::memcpy(in + 16, dst, 4);
		sa_.next_seq = kFirstSeq;
		const tunnel::OutboundResult r = tunnel::encapsulate(table_, buf_, size);
		if (r.verdict != tunnel::Verdict::forward)
			throw std::runtime_error("encapsulate() refused the benchmark packet (size " +
			                         std::to_string(size) + ")");
		off_ = size_t(r.datagram.data() - buf_.data());
		len_ = r.datagram.size();
		std::memcpy(pristine_.data() + off_, buf_.data() + off_, len_);
		seq_ = kFirstSeq + 1;
		if (!open_once())
			throw std::runtime_error(suite_ + " " + impl_ + ": the sealed packet does not open");
	}

	void seal(uint64_t n) noexcept override {
		crypto::EspTransform& t = *sealer_;
		const std::span<uint8_t> pkt(buf_.data() + off_, len_);
		for (uint64_t i = 0; i < n; i++)
			t.seal(pkt, seq_++);
	}

	bool can_open() const noexcept override { return true; }
	void copy_open(uint64_t n) noexcept override {
		crypto::EspTransform& t = *opener_;
		const std::span<uint8_t> pkt(work_.data() + off_, len_);
		for (uint64_t i = 0; i < n; i++) {
			std::memcpy(work_.data() + off_, pristine_.data() + off_, len_);
			clobber(work_.data());
			if (!t.open(pkt, uint32_t(kFirstSeq >> 32))) failures_++;
		}
	}

private:
	static std::vector<tunnel::PeerParams> params(Cipher cipher, CryptoImpl impl, const SaKeys& keys) {
		tunnel::PeerParams p;
		p.name = "bench";
		p.endpoint = Endpoint{IpAddress::v4(0xc0000201), tunnel::esp::kNatTPort};
		p.allowed_ips = {IpPrefix{IpAddress::v4(0), 0}};
		p.cipher = cipher;
		p.esn = true;
		p.impl = impl;
		// One SA pair with the same keys both ways: what the outbound side
		// seals, the inbound side opens.
		p.out = tunnel::SaParams{keys.spi, secret_copy(keys.enc_key), secret_copy(keys.auth_key)};
		p.in = tunnel::SaParams{keys.spi, secret_copy(keys.enc_key), secret_copy(keys.auth_key)};
		return {p};
	}

	/// transform() - a transform with @keys: AES-GCM with @gcm's code, else
	/// what the table's SAs use (make_esp_transform() with @impl)
	static std::unique_ptr<crypto::EspTransform> transform(Cipher cipher, CryptoImpl impl,
	                                                       crypto::GcmImpl gcm, const SaKeys& keys) {
		const crypto::CipherSpec& spec = crypto::cipher_spec(cipher);
		if (spec.aead && gcm != crypto::GcmImpl::automatic)
			return std::make_unique<crypto::AesGcmTransform>(spec, keys.enc_key, true, gcm);
		return crypto::make_esp_transform(cipher, keys.enc_key, keys.auth_key, true, impl);
	}

	// The check in prepare(): the pristine copy must open with the ESN high half.
	bool open_once() {
		std::memcpy(work_.data() + off_, pristine_.data() + off_, len_);
		return opener_->open(std::span(work_.data() + off_, len_), uint32_t(kFirstSeq >> 32));
	}

	SaKeys keys_;
	tunnel::SaTable table_;
	tunnel::OutboundSa& sa_; ///< the table's: encapsulate() numbers packets from it
	std::unique_ptr<crypto::EspTransform> sealer_, opener_;
	std::vector<uint8_t> buf_;
	std::vector<uint8_t> inner_;
	uint64_t seq_ = kFirstSeq;
};

struct CipherCtxFree {
	void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};
struct CipherFree {
	void operator()(EVP_CIPHER* c) const noexcept { EVP_CIPHER_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;
using FetchedCipher = std::unique_ptr<EVP_CIPHER, CipherFree>;

FetchedCipher fetch_cipher(const char* name) {
	FetchedCipher c(EVP_CIPHER_fetch(nullptr, name, nullptr));
	if (!c) throw std::runtime_error(std::string("OpenSSL has no cipher ") + name);
	return c;
}

CipherCtx keyed_ctx(const EVP_CIPHER* cipher, bool enc) {
	CipherCtx ctx(EVP_CIPHER_CTX_new());
	const auto key = random_bytes(size_t(EVP_CIPHER_get_key_length(cipher)));
	const auto iv = random_bytes(size_t(std::max(EVP_CIPHER_get_iv_length(cipher), 1)));
	if (!ctx || EVP_CipherInit_ex2(ctx.get(), cipher, key.data(), iv.data(), enc ? 1 : 0, nullptr) != 1 ||
	    EVP_CIPHER_CTX_set_padding(ctx.get(), 0) != 1)
		throw std::runtime_error(std::string("cannot set up ") + EVP_CIPHER_get0_name(cipher));
	return ctx;
}

/**
 * TlsStitchedCeiling - OpenSSL's stitched "AES-128-CBC-HMAC-SHA1" (and
 * friends) driven as libssl's tls1_enc() drives it for one TLS 1.2 record:
 * EVP_CTRL_AEAD_TLS1_AAD with the 13-byte pseudo-header (it answers how
 * many bytes of MAC and padding follow), then one EVP_Cipher() over
 * explicit IV || plaintext || room for MAC and padding. The cipher hashes
 * and encrypts the plaintext in one pass (MAC-then-encrypt), finishes the
 * HMAC, pads, and encrypts the rest. Encrypt only: that is all TLS stitches.
 * The record layer's random explicit IV is not part of it.
 */
class TlsStitchedCeiling final : public Subject {
public:
	TlsStitchedCeiling(std::string group, const char* evp_name, size_t mac_key_len)
	    : Subject(std::move(group), evp_name, "evp-tls", true, true), cipher_(fetch_cipher(evp_name)),
	      ctx_(keyed_ctx(cipher_.get(), true)) {
		auto mac_key = random_bytes(mac_key_len);
		if (EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_AEAD_SET_MAC_KEY, int(mac_key.size()),
		                        mac_key.data()) <= 0)
			throw std::runtime_error(std::string(evp_name) +
			                         ": EVP_CTRL_AEAD_SET_MAC_KEY failed");
		rec_ = random_bytes(kTlsExplicitIv + kMaxSize + 2 * EVP_MAX_BLOCK_LENGTH + EVP_MAX_MD_SIZE);
	}

	void prepare(size_t size) override { size_ = size; }

	void seal(uint64_t n) noexcept override {
		for (uint64_t i = 0; i < n; i++) {
			// seq (8) | type 23 | version 3.3 | length: explicit IV + plaintext.
			uint8_t aad[EVP_AEAD_TLS1_AAD_LEN] = {};
			const uint64_t seq = seq_++;
			for (int b = 0; b < 8; b++)
				aad[b] = uint8_t(seq >> (56 - 8 * b));
			aad[8] = 23;
			aad[9] = 3;
			aad[10] = 3;
			const size_t len = kTlsExplicitIv + size_;
			aad[11] = uint8_t(len >> 8);
			aad[12] = uint8_t(len);
			const int pad =
			    EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_AEAD_TLS1_AAD, sizeof aad, aad);
			if (pad <= 0 || EVP_Cipher(ctx_.get(), rec_.data(), rec_.data(),
			                           unsigned(len + size_t(pad))) <= 0)
				failures_++;
		}
	}

private:
	FetchedCipher cipher_;
	CipherCtx ctx_;
	std::vector<uint8_t> rec_;
	size_t size_ = 0;
	uint64_t seq_ = 0;
};

/**
 * StreamStitchedCeiling - the same EVP cipher driven as `openssl speed -evp
 * aes-128-cbc-hmac-sha1` does (apps/speed.c EVP_Update_loop): one
 * EVP_EncryptUpdate() per buffer, no TLS AAD, so the cipher only encrypts
 * and feeds the running hash; no HMAC is ever finished. An upper bound no
 * per-packet MAC can reach; shown for reference, not used for the ratios.
 */
class StreamStitchedCeiling final : public Subject {
public:
	StreamStitchedCeiling(std::string group, const char* evp_name)
	    : Subject(std::move(group), evp_name, "evp-stream", true, false), cipher_(fetch_cipher(evp_name)),
	      ctx_(keyed_ctx(cipher_.get(), true)), buf_(random_bytes(kMaxSize + 2 * EVP_MAX_BLOCK_LENGTH)) {}

	// As many bytes as the ESP payload of the same inner packet.
	void prepare(size_t size) override { len_ = esp_payload_len(size, 16); }

	void seal(uint64_t n) noexcept override {
		for (uint64_t i = 0; i < n; i++) {
			int out = 0;
			if (EVP_EncryptUpdate(ctx_.get(), buf_.data(), &out, buf_.data(), int(len_)) != 1 ||
			    size_t(out) != len_)
				failures_++;
		}
	}

private:
	FetchedCipher cipher_;
	CipherCtx ctx_;
	std::vector<uint8_t> buf_;
};

/**
 * GcmCeiling - EVP AES-GCM per packet as `openssl speed -aead` drives it
 * (new IV, AAD, update, final), plus taking (or, to open, setting and
 * checking) the 16-byte tag, over as many bytes as the ESP payload, with
 * the 12-byte AAD of ESP with ESN.
 */
class GcmCeiling final : public Subject {
public:
	GcmCeiling(std::string group, const char* evp_name)
	    : Subject(std::move(group), evp_name, "evp-gcm", true, true), cipher_(fetch_cipher(evp_name)),
	      enc_(keyed_ctx(cipher_.get(), true)), dec_(keyed_ctx(cipher_.get(), false)),
	      buf_(random_bytes(kMaxSize + 16)) {
		// One key for both directions: what the encryptor seals, the decryptor opens.
		const auto key = random_bytes(size_t(EVP_CIPHER_get_key_length(cipher_.get())));
		if (EVP_EncryptInit_ex2(enc_.get(), nullptr, key.data(), nullptr, nullptr) != 1 ||
		    EVP_DecryptInit_ex2(dec_.get(), nullptr, key.data(), nullptr, nullptr) != 1)
			throw std::runtime_error(std::string(evp_name) + ": cannot set the key");
		pristine_.resize(kMaxSize + 16);
		work_.resize(kMaxSize + 16);
		const auto salt = random_bytes(4);
		std::copy(salt.begin(), salt.end(), nonce_.begin());
	}

	void prepare(size_t size) override {
		plen_ = esp_payload_len(size, 4);
		off_ = 0;
		len_ = plen_ + 16; // the copies for open() include the tag
		std::memcpy(pristine_.data(), buf_.data(), plen_);
		if (!encrypt(pristine_.data(), pristine_.data() + plen_, 0))
			throw std::runtime_error(suite_ + ": encryption failed");
		std::memcpy(work_.data(), pristine_.data(), len_);
		if (!decrypt(work_.data(), 0)) throw std::runtime_error(suite_ + ": the tag does not verify");
	}

	void seal(uint64_t n) noexcept override {
		for (uint64_t i = 0; i < n; i++)
			if (!encrypt(buf_.data(), tag_.data(), ++seq_)) failures_++;
	}

	bool can_open() const noexcept override { return true; }
	void copy_open(uint64_t n) noexcept override {
		for (uint64_t i = 0; i < n; i++) {
			std::memcpy(work_.data(), pristine_.data(), len_);
			clobber(work_.data());
			if (!decrypt(work_.data(), 0)) failures_++;
		}
	}

private:
	bool encrypt(uint8_t* p, uint8_t* tag, uint64_t seq) noexcept {
		set_nonce(seq);
		int out = 0, aad_out = 0, fin = 0;
		EVP_CIPHER_CTX* c = enc_.get();
		return EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce_.data()) == 1 &&
		       EVP_EncryptUpdate(c, nullptr, &aad_out, aad_.data(), int(aad_.size())) == 1 &&
		       EVP_EncryptUpdate(c, p, &out, p, int(plen_)) == 1 &&
		       EVP_EncryptFinal_ex(c, p + out, &fin) == 1 &&
		       EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
	}
	// @p: ciphertext followed by its tag.
	bool decrypt(uint8_t* p, uint64_t seq) noexcept {
		set_nonce(seq);
		int out = 0, aad_out = 0, fin = 0;
		EVP_CIPHER_CTX* c = dec_.get();
		return EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce_.data()) == 1 &&
		       EVP_DecryptUpdate(c, nullptr, &aad_out, aad_.data(), int(aad_.size())) == 1 &&
		       EVP_DecryptUpdate(c, p, &out, p, int(plen_)) == 1 &&
		       EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, p + plen_) == 1 &&
		       EVP_DecryptFinal_ex(c, p + out, &fin) == 1;
	}
	void set_nonce(uint64_t seq) noexcept {
		for (int b = 0; b < 8; b++)
			nonce_[4 + size_t(b)] = uint8_t(seq >> (56 - 8 * b));
	}

	FetchedCipher cipher_;
	CipherCtx enc_, dec_;
	std::vector<uint8_t> buf_;
	std::array<uint8_t, 12> nonce_{}; ///< salt (4) || seq (8), as RFC 4106 builds it
	std::array<uint8_t, 12> aad_{0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 0, 0, 0, 1}; ///< SPI, ESN
	std::array<uint8_t, 16> tag_{};
	size_t plen_ = 0;
	uint64_t seq_ = 0;
};

} // namespace

std::vector<std::unique_ptr<Subject>> make_subjects() {
	std::vector<std::unique_ptr<Subject>> v;
	const bool stitched = crypto::stitched_supported();
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		if (spec.aead) {
			v.push_back(std::make_unique<EspSubject>(spec.id, CryptoImpl::automatic,
			                                         crypto::GcmImpl::evp));
			if (crypto::vaes::supported())
				v.push_back(std::make_unique<EspSubject>(spec.id, CryptoImpl::automatic,
				                                         crypto::GcmImpl::vaes));
			continue;
		}
		v.push_back(std::make_unique<EspSubject>(spec.id, CryptoImpl::two_pass));
		if (stitched) v.push_back(std::make_unique<EspSubject>(spec.id, CryptoImpl::stitched));
	}
	v.push_back(
	    std::make_unique<TlsStitchedCeiling>("aes128-cbc-hmac-sha1", "AES-128-CBC-HMAC-SHA1", 20));
	v.push_back(
	    std::make_unique<TlsStitchedCeiling>("aes256-cbc-hmac-sha1", "AES-256-CBC-HMAC-SHA1", 20));
	v.push_back(
	    std::make_unique<TlsStitchedCeiling>("aes128-cbc-hmac-sha256", "AES-128-CBC-HMAC-SHA256", 32));
	v.push_back(
	    std::make_unique<TlsStitchedCeiling>("aes256-cbc-hmac-sha256", "AES-256-CBC-HMAC-SHA256", 32));
	v.push_back(std::make_unique<StreamStitchedCeiling>("aes128-cbc-hmac-sha1", "AES-128-CBC-HMAC-SHA1"));
	v.push_back(
	    std::make_unique<StreamStitchedCeiling>("aes128-cbc-hmac-sha256", "AES-128-CBC-HMAC-SHA256"));
	v.push_back(std::make_unique<GcmCeiling>("aes128-gcm", "AES-128-GCM"));
	v.push_back(std::make_unique<GcmCeiling>("aes256-gcm", "AES-256-GCM"));
	return v;
}

} // namespace esptun::bench::crypto_bench
