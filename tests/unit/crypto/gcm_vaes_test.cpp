// The VAES/VPCLMULQDQ AES-GCM core against OpenSSL's EVP AES-GCM (an
// independent implementation): every payload length from 0 to 600 bytes and
// some long ones, several AAD lengths, both key sizes, unaligned buffers;
// tags that must fail; and the CPU detection against /proc/cpuinfo.
#include "crypto/aes_gcm.hpp"
#include "crypto/gcm_vaes.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <doctest/doctest.h>
#include <fstream>
#include <openssl/evp.h>
#include <sstream>

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

struct Sealed {
	Bytes data;
	Bytes tag;
};

Sealed evp_seal(const Bytes& key, const Bytes& nonce, const Bytes& aad, const Bytes& plain) {
	EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
	REQUIRE(ctx);
	const EVP_CIPHER* c = key.size() == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
	Sealed s{Bytes(plain.size() + 16), Bytes(16)};
	int n = 0, fin = 0;
	REQUIRE(EVP_EncryptInit_ex2(ctx, c, key.data(), nonce.data(), nullptr) == 1);
	if (!aad.empty()) REQUIRE(EVP_EncryptUpdate(ctx, nullptr, &n, aad.data(), int(aad.size())) == 1);
	REQUIRE(EVP_EncryptUpdate(ctx, s.data.data(), &n, plain.data(), int(plain.size())) == 1);
	REQUIRE(EVP_EncryptFinal_ex(ctx, s.data.data() + n, &fin) == 1);
	s.data.resize(size_t(n + fin));
	REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, s.tag.data()) == 1);
	EVP_CIPHER_CTX_free(ctx);
	return s;
}

/// The flags of the first "flags" line of /proc/cpuinfo.
std::string cpu_flags() {
	std::ifstream in("/proc/cpuinfo");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1) + " ";
	return {};
}

bool has_flag(const std::string& flags, const std::string& f) {
	return flags.find(" " + f + " ") != std::string::npos;
}

} // namespace

TEST_CASE("the VAES code is used exactly where the CPU has what it needs") {
	const std::string flags = cpu_flags();
	REQUIRE(!flags.empty());
	bool want = true;
	for (const char* f : {"avx512f", "avx512bw", "avx512vl", "vaes", "vpclmulqdq", "aes", "pclmulqdq"})
		want = want && has_flag(flags, f);
	MESSAGE("AES-GCM variant on this CPU: " << std::string(gcm_variant()));
	CHECK(vaes::supported() == want);
	CHECK(gcm_variant() == (want ? "vaes" : "evp"));
	const Bytes key(20, 1);
	AesGcmTransform automatic(cipher_spec(Cipher::aes128_gcm), key, false);
	CHECK(automatic.impl_name() == "gcm-" + std::string(gcm_variant()));
	AesGcmTransform evp(cipher_spec(Cipher::aes128_gcm), key, false, GcmImpl::evp);
	CHECK(evp.impl_name() == "gcm-evp");
	if (!want)
		CHECK_THROWS_AS(AesGcmTransform(cipher_spec(Cipher::aes128_gcm), key, false, GcmImpl::vaes),
		                std::runtime_error);
}

TEST_CASE("VAES AES-GCM equals OpenSSL's for every length up to 600 bytes and some longer ones") {
	if (!vaes::supported()) {
		// The detection test above fails if this CPU should have run it.
		MESSAGE("no VAES/AVX-512 here: only the detection is tested");
		return;
	}
	std::mt19937_64 rng(38);
	std::vector<size_t> lengths;
	for (size_t n = 0; n <= 600; n++)
		lengths.push_back(n);
	for (size_t n : {1023u, 1024u, 1400u, 1439u, 4096u, 9000u, 65535u})
		lengths.push_back(n);
	for (size_t key_len : {16u, 32u}) {
		vaes::GcmKey k;
		const Bytes key = random_bytes(rng, key_len);
		REQUIRE(vaes::init(k, key.data(), key.size()));
		for (size_t len : lengths) {
			const size_t aad_len = std::array<size_t, 6>{0, 8, 12, 16, 20, 45}[len % 6];
			const size_t offset = len % 4; // unaligned buffers too
			CAPTURE(key_len);
			CAPTURE(len);
			CAPTURE(aad_len);
			const Bytes nonce = random_bytes(rng, 12);
			const Bytes aad = random_bytes(rng, aad_len);
			const Bytes plain = random_bytes(rng, len);
			const Sealed want = evp_seal(key, nonce, aad, plain);

			Bytes buf(offset + len + 1, 0xa5);
			std::copy(plain.begin(), plain.end(), buf.begin() + ptrdiff_t(offset));
			uint8_t tag[16];
			vaes::seal(k, nonce.data(), aad.data(), aad.size(), buf.data() + offset, len, tag);
			REQUIRE(Bytes(buf.begin() + ptrdiff_t(offset), buf.end() - 1) == want.data);
			REQUIRE(Bytes(tag, tag + 16) == want.tag);
			REQUIRE(buf.back() == 0xa5); // nothing written past the end

			REQUIRE(vaes::open(k, nonce.data(), aad.data(), aad.size(), buf.data() + offset, len,
			                   tag));
			REQUIRE(Bytes(buf.begin() + ptrdiff_t(offset), buf.end() - 1) == plain);
		}
	}
}

TEST_CASE("VAES AES-GCM open rejects a changed byte anywhere: ciphertext, AAD, tag or nonce") {
	if (!vaes::supported()) return; // see the detection test
	std::mt19937_64 rng(4106);
	vaes::GcmKey k;
	const Bytes key = random_bytes(rng, 32);
	REQUIRE(vaes::init(k, key.data(), key.size()));
	const Bytes nonce = random_bytes(rng, 12);
	const Bytes aad = random_bytes(rng, 12);
	const Bytes plain = random_bytes(rng, 300);
	Bytes ct = plain;
	uint8_t tag[16];
	vaes::seal(k, nonce.data(), aad.data(), aad.size(), ct.data(), ct.size(), tag);
	auto opens = [&](Bytes n, Bytes a, Bytes c, Bytes t) {
		return vaes::open(k, n.data(), a.data(), a.size(), c.data(), c.size(), t.data());
	};
	const Bytes t(tag, tag + 16);
	REQUIRE(opens(nonce, aad, ct, t));
	for (size_t i = 0; i < ct.size(); i += 7) {
		Bytes c = ct;
		c[i] ^= 0x01;
		CHECK_FALSE(opens(nonce, aad, c, t));
	}
	for (size_t i = 0; i < 16; i++) {
		Bytes bad = t;
		bad[i] ^= 0x80;
		CHECK_FALSE(opens(nonce, aad, ct, bad));
	}
	for (size_t i = 0; i < aad.size(); i++) {
		Bytes a = aad;
		a[i] ^= 0x10;
		CHECK_FALSE(opens(nonce, a, ct, t));
	}
	Bytes n = nonce;
	n[11] ^= 1;
	CHECK_FALSE(opens(n, aad, ct, t));
	// A truncated ciphertext is a different message.
	CHECK_FALSE(opens(nonce, aad, Bytes(ct.begin(), ct.end() - 1), t));
	CHECK_FALSE(vaes::init(k, key.data(), 24)); // AES-192 is not an ESP suite here
}
