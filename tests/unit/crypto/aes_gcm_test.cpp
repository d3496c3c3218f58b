// AES-GCM transform: the ESP test cases of draft-mcgrew-gcm-test-01 (the
// RFC 4106 test vectors: SPI, sequence number, IV, salt), with 12-byte ESN
// AAD and 8-byte AAD, AES-128 and AES-256; and the explicit IV being the
// sequence number, checked with an independent EVP decryption.
#include "crypto/aes_gcm.hpp"
#include "crypto/evp_util.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

struct GcmCase {
	const char* name;
	Cipher cipher;
	const char* key_and_salt;
	uint32_t spi;
	uint64_t seq;
	bool esn;
	const char* iv;
	const char* plain;
	const char* cipher_and_tag;
};

// Source: draft-mcgrew-gcm-test-01 section 4 ("Test Cases for the use of GCM
// and GMAC in IPsec ESP"). The plaintexts already end with the ESP trailer.
const std::vector<GcmCase> kCases = {
    {"AES-128, ESN, 72-byte UDP packet", Cipher::aes128_gcm, "4c80cdefbb5d10da906ac73c3613a634 2e443b68",
     0x00004321, 0x8765432100000000ull, true, "4956ed7e3b244cfe",
     "45000048699a000080114db7c0a80102c0a801010a9bf15638d3010000010000"
     "00000000045f736970045f756470037369700963796265726369747902646b00"
     "0021000101020201",
     "fecf537e729d5b07dc30df528dd22b768d1b98736696a6fd348509fa13ceac34"
     "cfa2436f14a3f3cf65925bf1f4a13c5d15b21e1884f5ff6247aeabb786b93bce"
     "61bc17d768fd9732459018148f6cbe722fd04796562dfdb4"},
    {"AES-128, ESN, 64-byte ICMP packet", Cipher::aes128_gcm, "3de09874b388e6491988d0c3607eae1f 57690e43",
     0x42f67e3f, 0x1010101010101010ull, true, "4e280000a2fca1a3",
     "4500003c99c300008001cb7c40679318010101010800085c0200430061626364"
     "65666768696a6b6c6d6e6f707172737475767761626364656667686901020201",
     "fba2caa4853cf9f0f22cb10d86dd83b0fec75691cf1a04b00d1138ec9c357917"
     "65acbd8701ad79845bf9fe3fba487bc91755e6662b4c8d0d1f5e22739530320a"
     "e0d731cc978ecafaeae88f00e80d6e48"},
    {"AES-128, ESN, 76-byte DNS packet", Cipher::aes128_gcm, "abbccddef00112233445566778899aab decaf888",
     0x00000100, 1, true, "cafedebaceface74",
     "4500004933ba00007f119106c3fb1d10c2b1d326c02831ce0035dd7b800302d5"
     "00004e20001e8c18d75b81dc91baa0476b91b924b280389d92c963bac046ec95"
     "9b6266c04722b14923010101",
     "18a6fd42f72cbf4ab2a2ea901f73d814e3e7f243d95412e1c349c1d2fbec168f"
     "9190feebaf2cb01984e65863965d7472b79da345e0e780191f0d2f0e0f496c22"
     "6f2127b27db35724e7845d68651f57e65f354f75ff17015769623436"},
    {"AES-256, ESN, 40-byte TCP packet", Cipher::aes256_gcm,
     "abbccddef00112233445566778899aababbccddef00112233445566778899aab 73616c74", 0x17405e67,
     0x156f3126dd0db99bull, true, "616e640169766563",
     "45080028732c00004006e9f90a0106120a01038f06b88023dd6bafbecb712602"
     "50101f646d540001",
     "f2d69ecdbd5a0d5b8d5ef38bad4da58d1f278fde98ef67549d524a3018d9a57f"
     "f4d3a31ce673119e451626c2415771e3b7eebca614c89b35"},
    {"AES-256, ESN, sequence number 2^64-1", Cipher::aes256_gcm,
     "6c6567616c697a656d6172696a75616e61616e64646f69746265666f72656961 7475726e", 0x796b6963,
     0xffffffffffffffffull, true, "333021696765746d",
     "45000030da3a00008001df3bc0a80005c0a800010800c6cd0200070061626364"
     "65666768696a6b6c6d6e6f707172737401020201",
     "f97ab2aa356d8edce17644ac8c78e25dd24dedbb29ebf1b64a274b39b49c3a86"
     "4cd3d78ca4ae68a32b42458fb57dbe821dcc63b9d0937ba2945f669368661a32"
     "9fb4c053"},
    {"AES-256, 32-bit seq, 52-byte TCP SYN", Cipher::aes256_gcm,
     "abbccddef00112233445566778899aababbccddef00112233445566778899aab 11223344", 0x4a2cbfe3, 2, false,
     "0102030405060708",
     "4500003069a6400080062690c0a801029389155e0a9e008b2dc57ee000000000"
     "7002400020bf0000020405b40101040201020201",
     "ff425c9b724599df7a3bcd510194e00d6a78107f1b0b1cbf06efae9d65a5d763"
     "748a637985771d347f0545659f14e99def842d8eb335f4eecfdbf831824b4c49"
     "15956c96"},
    {"AES-128, 32-bit seq, all-zero key and IV", Cipher::aes128_gcm,
     "00000000000000000000000000000000 00000000", 0, 1, false, "0000000000000000",
     "4500003c99c500008001cb7a40679318010101010800075c0200440061626364"
     "65666768696a6b6c6d6e6f707172737475767761626364656667686901020201",
     "4688daf2f973a392732909c331d56d60f694abaa414b5e7ff5fdcdfff5e9a284"
     "456476492719ffb64de7d9dca1e1d894bc3bd57873ed4d181d19d4d5c8c18af3"
     "f821d496eeb096e98ad2b69e4799c71d"},
    {"AES-128, 32-bit seq 2^32-1, 4-byte payload", Cipher::aes128_gcm,
     "7d773d00c144c525ac619d18c84a3f47 d9664267", 0x335467ae, 0xffffffffull, false, "43457e9182443bc6",
     "01020201", "437f866bcb3f699fe9b0822bac961c4504bef270"},
};

/// The implementations this CPU runs (gcm_vaes_test.cpp checks the detection).
std::vector<GcmImpl> impls() {
	std::vector<GcmImpl> v{GcmImpl::evp};
	if (vaes::supported()) v.push_back(GcmImpl::vaes);
	return v;
}

} // namespace

TEST_CASE("GCM seal and open match the draft-mcgrew-gcm-test-01 ESP test cases (ESN and 32-bit AAD)") {
	for (GcmImpl impl : impls())
		for (const auto& c : kCases) {
			CAPTURE(c.name);
			const CipherSpec& spec = cipher_spec(c.cipher);
			AesGcmTransform t(spec, hex(c.key_and_salt), c.esn, impl);
			CAPTURE(t.impl_name());
			const Bytes plain = hex(c.plain);
			const Bytes want = hex(c.cipher_and_tag);
			REQUIRE(want.size() == plain.size() + kGcmIcvLen);

			Bytes esp = esp_packet(spec, c.spi, c.seq, plain);
			const Bytes iv = hex(c.iv);
			t.seal_with_iv(esp, c.seq, std::span<const uint8_t, kGcmIvLen>(iv.data(), kGcmIvLen));
			CHECK(to_hex(esp.data() + 8, kGcmIvLen) == to_hex(iv));
			CHECK(to_hex(esp.data() + 8 + kGcmIvLen, want.size()) == to_hex(want));

			// A receiver with the same key opens the vector's packet.
			AesGcmTransform rx(spec, hex(c.key_and_salt), c.esn, impl);
			Bytes wire = esp;
			REQUIRE(rx.open(wire, uint32_t(c.seq >> 32)));
			CHECK(payload_of(spec, wire) == plain);
		}
}

TEST_CASE(
    "GCM seal uses the 64-bit sequence number as the explicit IV, checked by an independent EVP decrypt") {
	std::mt19937_64 rng(4106);
	for (GcmImpl impl : impls())
		for (Cipher cipher : {Cipher::aes128_gcm, Cipher::aes256_gcm}) {
			for (bool esn : {false, true}) {
				const CipherSpec& spec = cipher_spec(cipher);
				CAPTURE(spec.name);
				CAPTURE(esn);
				const Bytes key = random_bytes(rng, spec.enc_key_len);
				AesGcmTransform t(spec, key, esn, impl);
				CAPTURE(t.impl_name());
				const uint64_t seq = esn ? 0x0000000912345678ull : 0x12345678ull;
				const Bytes plain = random_bytes(rng, 100);
				Bytes esp = esp_packet(spec, 0xabcdef01, seq, plain);
				t.seal(esp, seq);
				CHECK(to_hex(esp.data() + 8, 8) ==
				      (esn ? "0000000912345678" : "0000000012345678"));

				// AAD per RFC 4106 section 5.
				Bytes aad(esp.begin(), esp.begin() + 4);
				if (esn) {
					const Bytes hi = hex("00000009");
					aad.insert(aad.end(), hi.begin(), hi.end());
				}
				aad.insert(aad.end(), esp.begin() + 4, esp.begin() + 8);
				Bytes nonce(key.end() - 4, key.end());
				nonce.insert(nonce.end(), esp.begin() + 8, esp.begin() + 16);

				EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
				REQUIRE(ctx);
				const EVP_CIPHER* evp =
				    cipher == Cipher::aes128_gcm ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
				Bytes out(plain.size());
				Bytes tag(esp.end() - 16, esp.end());
				int n = 0, fin = 0;
				REQUIRE(EVP_DecryptInit_ex2(ctx, evp, key.data(), nonce.data(), nullptr) ==
				        1);
				REQUIRE(EVP_DecryptUpdate(ctx, nullptr, &n, aad.data(), int(aad.size())) ==
				        1);
				REQUIRE(EVP_DecryptUpdate(ctx, out.data(), &n, esp.data() + 16,
				                          int(plain.size())) == 1);
				REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag.data()) == 1);
				CHECK(EVP_DecryptFinal_ex(ctx, out.data() + n, &fin) == 1);
				EVP_CIPHER_CTX_free(ctx);
				CHECK(out == plain);
			}
		}
}

TEST_CASE("the EVP transforms run OpenSSL's built-in method tables, not the provider's") {
	// crypto/evp_util.cpp: the provider's per-call parameter passing costs
	// ~150 ns a packet. The checks above compare the output with the
	// provider's ciphers; this one that the fast route is the one taken.
	for (const EVP_CIPHER* c :
	     {EVP_aes_128_gcm(), EVP_aes_256_gcm(), EVP_aes_128_cbc(), EVP_aes_128_ecb()}) {
		CAPTURE(EVP_CIPHER_get0_name(c));
		const EVP_CIPHER* d = esptun::crypto::detail::direct_cipher(c);
		REQUIRE(d != nullptr);
		CHECK(d == esptun::crypto::detail::direct_cipher(c));
		CHECK(EVP_CIPHER_get_nid(d) == EVP_CIPHER_get_nid(c));
		CHECK(EVP_CIPHER_get0_provider(d) == nullptr);
		auto ctx = esptun::crypto::detail::new_cipher_ctx(c, Bytes(32, 7).data(), true);
		CHECK(EVP_CIPHER_CTX_get0_cipher(ctx.get()) == d);
		CHECK(EVP_CIPHER_get0_provider(EVP_CIPHER_CTX_get0_cipher(ctx.get())) == nullptr);
	}
}
