// AES-CBC + HMAC transform: RFC 3602 section 4 known answers (plain CBC cases
// 1-4 and the full ESP packets of cases 5-8), NIST SP 800-38A for AES-256,
// independent recomputation of the ICV (with and without ESN) and of the
// decryption, and the per-packet IV generator.
#include "crypto/cbc_hmac.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <set>

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

/// ESP trailer (RFC 4303 section 2.4): padding 1, 2, 3..., pad length, next header.
Bytes with_trailer(Bytes payload, uint8_t next_header, size_t align) {
	const size_t pad = (align - (payload.size() + 2) % align) % align;
	for (size_t i = 1; i <= pad; i++)
		payload.push_back(uint8_t(i));
	payload.push_back(uint8_t(pad));
	payload.push_back(next_header);
	return payload;
}

std::span<const uint8_t, kCbcIvLen> iv16(const Bytes& b) {
	REQUIRE(b.size() == kCbcIvLen);
	return std::span<const uint8_t, kCbcIvLen>(b.data(), kCbcIvLen);
}

} // namespace

TEST_CASE("AES-CBC encryption matches RFC 3602 section 4 cases 1-4 and SP 800-38A F.2.5 (AES-256)") {
	struct Case {
		const char* name;
		Cipher cipher;
		const char *key, *iv;
		Bytes pt;
		const char* ct;
	};
	const std::vector<Case> cases = {
	    {"3602-1", Cipher::aes128_cbc_sha1, "06a9214036b8a15b512e03d534120006",
	     "3dafba429d9eb430b422da802c9fac41", ascii("Single block msg"),
	     "e353779c1079aeb82708942dbe77181a"},
	    {"3602-2", Cipher::aes128_cbc_sha1, "c286696d887c9aa0611bbb3e2025a45a",
	     "562e17996d093d28ddb3ba695a2e6f58",
	     hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
	     "d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1"},
	    {"3602-3", Cipher::aes128_cbc_sha256, "6c3ea0477630ce21a2ce334aa746c2cd",
	     "c782dc4c098c66cbd9cd27d825682c81", ascii("This is a 48-byte message (exactly 3 AES blocks)"),
	     "d0a02b3836451753d493665d33f0e8862dea54cdb293abc7506939276772f8d5021c19216bad525c8579695d83ba268"
	     "4"},
	    {"3602-4", Cipher::aes128_cbc_sha256, "56e47a38c5598974bc46903dba290349",
	     "8ce82eefbea0da3c44699ed7db51b7d9",
	     hex("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
	         "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"),
	     "c30e32ffedc0774e6aff6af0869f71aa0f3af07a9a31a9c684db207eb0ef8e4e"
	     "35907aa632c3ffdf868bb7b29d3d46ad83ce9f9a102ee99d49a53e87f4c3da55"},
	    {"SP800-38A-F.2.5", Cipher::aes256_cbc_sha1,
	     "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
	     "000102030405060708090a0b0c0d0e0f",
	     hex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
	         "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710"),
	     "f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d"
	     "39f23369a9d9bacfa530e26304231461b2eb05e2c39be9fcda6c19078c6a9d1b"},
	};
	for (const auto& c : cases) {
		CAPTURE(c.name);
		const CipherSpec& spec = cipher_spec(c.cipher);
		const Bytes auth_key(spec.auth_key_len, 0x11);
		CbcHmacTransform t(spec, hex(c.key), auth_key, false);
		Bytes esp = esp_packet(spec, 0x1234, 1, c.pt);
		t.seal_with_iv(esp, 1, iv16(hex(c.iv)));
		CHECK(to_hex(payload_of(spec, esp)) == to_hex(hex(c.ct)));
		REQUIRE(t.open(esp, 0));
		CHECK(payload_of(spec, esp) == c.pt);
	}
}

TEST_CASE("CBC seal reproduces the RFC 3602 section 4 ESP packets of cases 5-8 byte for byte") {
	// Each expected packet is SPI | seq | IV | ciphertext as printed in the RFC
	// (the RFC's cases carry no ICV; ours is checked against EVP_Q_mac).
	struct Case {
		const char* name;
		const char* key;
		uint32_t spi, seq;
		const char* iv;
		const char* payload;
		uint8_t next_header;
		const char* packet;
	};
	const std::vector<Case> cases = {
	    {"3602-5 (transport, ICMP, 64 bytes)", "90d382b410eeba7ad938c46cec1a82bf", 0x4321, 1,
	     "e96e8c08ab465763fd098d45dd3ff893",
	     "08000ebda70a00008e9c083db95b070008090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	     "202122232425262728292a2b2c2d2e2f3031323334353637",
	     1,
	     "0000432100000001e96e8c08ab465763fd098d45dd3ff893f663c25d325c18c6a9453e194e120849"
	     "a4870b66cc6b9965330013b4898dc856a4699e523a55db080b59ec3a8e4b7e52775b07d1db34ed9c"
	     "538ab50c551b874aa269add047ad2d5913ac19b7cfbad4a6"},
	    {"3602-6 (transport, ICMP, 28 bytes)", "90d382b410eeba7ad938c46cec1a82bf", 0x4321, 8,
	     "69d08df7d203329db093fc4924e5bd80", "0800b5e8a80a0500a69c083d0b660e00777777777777777777777777",
	     1,
	     "000043210000000869d08df7d203329db093fc4924e5bd80f51995881ec4e0c4488987ce742e8109"
	     "689bb379d2d750c0d915dca346a89f75"},
	    {"3602-7 (tunnel, 84 bytes)", "0123456789abcdef0123456789abcdef", 0x8765, 2,
	     "f4e765244f6407adf13dc1380f673f37",
	     "45000054090400004001f988c0a87b03c0a87bc808009f76a90a0100b49c083d02a2040008090a0b"
	     "0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f30313233"
	     "34353637",
	     4,
	     "0000876500000002f4e765244f6407adf13dc1380f673f37773b5241a4c449225e4f3ce5ed611b0c"
	     "237ca96cf74a93013c1b0ea1a0cf70f8e4ecaec78ac53aad7a0f022b859243c647752e94a859352b"
	     "8a4d4d2decd136e5c177f132ad3fbfb2201ac9904c74ee0a109e0ca1e4dfe9d5a100b842f1c22f0d"},
	    {"3602-8 (tunnel, 68 bytes)", "0123456789abcdef0123456789abcdef", 0x8765, 5,
	     "85d47224b5f3dd5d2101d4ea8dffab22",
	     "45000044090c00004001f990c0a87b03c0a87bc80800d63caa0a0200c69c083da3de0300ffffffff"
	     "ffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	     4,
	     "000087650000000585d47224b5f3dd5d2101d4ea8dffab2215b92683819596a8047232cc00f7048f"
	     "e45318e11f8a0f62ede3c3fc61203bb50f980a08c9843fd3a1b06d5c07ff9639b7eb7dfb3512e5de"
	     "435e7207ed971ef3d2726d9b5ef6affc6d17a0decbb13892"},
	};
	for (Cipher cipher : {Cipher::aes128_cbc_sha1, Cipher::aes128_cbc_sha256}) {
		const CipherSpec& spec = cipher_spec(cipher);
		for (const auto& c : cases) {
			CAPTURE(spec.name);
			CAPTURE(c.name);
			const Bytes auth_key(spec.auth_key_len, 0x5a);
			CbcHmacTransform t(spec, hex(c.key), auth_key, false);
			const Bytes plain = with_trailer(hex(c.payload), c.next_header, spec.align);
			Bytes esp = esp_packet(spec, c.spi, c.seq, plain);
			t.seal_with_iv(esp, c.seq, iv16(hex(c.iv)));

			const Bytes want = hex(c.packet);
			REQUIRE(esp.size() == want.size() + spec.icv_len);
			CHECK(to_hex(esp.data(), want.size()) == to_hex(want));
			CHECK(to_hex(esp.data() + want.size(), spec.icv_len) ==
			      to_hex(reference_icv(spec, auth_key, esp, false, 0)));

			REQUIRE(t.open(esp, 0));
			CHECK(payload_of(spec, esp) == plain);
		}
	}
}

TEST_CASE("CBC seal output verifies and decrypts with independent OpenSSL calls, ESN high bits in the ICV") {
	std::mt19937_64 rng(3602);
	for (const auto& spec : all_ciphers()) {
		if (spec.aead) continue;
		for (bool esn : {false, true}) {
			CAPTURE(spec.name);
			CAPTURE(esn);
			const Bytes enc_key = random_bytes(rng, spec.enc_key_len);
			const Bytes auth_key = random_bytes(rng, spec.auth_key_len);
			CbcHmacTransform t(spec, enc_key, auth_key, esn);
			for (size_t len : {0u, 16u, 48u, 1024u, 1440u}) {
				const uint64_t seq = 0x0000000700000000ull + len; // seq_hi = 7
				const Bytes plain = random_bytes(rng, len);
				Bytes esp = esp_packet(spec, 0xc0ffee, seq, plain);
				t.seal(esp, seq);
				CHECK(to_hex(esp.data() + esp.size() - spec.icv_len, spec.icv_len) ==
				      to_hex(reference_icv(spec, auth_key, esp, esn, 7)));
				CHECK(reference_decrypt(enc_key, esp, spec.icv_len) == plain);
			}
		}
	}
}

TEST_CASE("CbcIvGenerator never repeats an IV, even for a repeated sequence number") {
	CbcIvGenerator a, b;
	std::set<std::vector<uint8_t>> seen;
	std::array<uint8_t, kCbcIvLen> iv;
	for (uint64_t seq = 1; seq <= 5000; seq++) {
		REQUIRE(a.next(seq, iv));
		CHECK(seen.insert({iv.begin(), iv.end()}).second);
		REQUIRE(a.next(seq, iv)); // the same seq again
		CHECK(seen.insert({iv.begin(), iv.end()}).second);
	}
	// A second generator has its own random key: no overlap with the first.
	for (uint64_t seq = 1; seq <= 1000; seq++) {
		REQUIRE(b.next(seq, iv));
		CHECK(seen.count({iv.begin(), iv.end()}) == 0);
	}
}
