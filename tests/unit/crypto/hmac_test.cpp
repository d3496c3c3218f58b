// Known-answer tests for crypto::Hmac (the ESP ICV engine): RFC 2202
// (HMAC-SHA1), RFC 4231 (HMAC-SHA256), RFC 4868 section 2.7.2.1
// (HMAC-SHA256-128 with 32-byte keys), plus a cross-check against OpenSSL's
// independent EVP_Q_mac path.
#include "crypto/hmac.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

struct Kat {
	const char* name;
	Bytes key;
	Bytes data;
	const char* mac_hex; // as printed in the RFC (possibly already truncated)
};

Bytes mac_of(HmacHash h, const Bytes& key, const Bytes& data, size_t out_len) {
	Hmac mac(h, key);
	mac.begin();
	mac.update(data);
	Bytes out(out_len);
	mac.finish(out);
	return out;
}

Bytes counting_key(size_t n) { // 0x01, 0x02, ... as in RFC 2202/4231 test case 4
	Bytes k(n);
	for (size_t i = 0; i < n; i++)
		k[i] = uint8_t(i + 1);
	return k;
}

void check_kats(HmacHash h, const std::vector<Kat>& kats) {
	for (const auto& k : kats) {
		CAPTURE(k.name);
		const Bytes want = hex(k.mac_hex);
		CHECK(to_hex(mac_of(h, k.key, k.data, want.size())) == to_hex(want));
	}
}

} // namespace

TEST_CASE("HMAC-SHA1 matches the RFC 2202 test cases, including the 96-bit truncation") {
	check_kats(
	    HmacHash::sha1,
	    {
	        {"2202-1", Bytes(20, 0x0b), ascii("Hi There"), "b617318655057264e28bc0b6fb378c8ef146be00"},
	        {"2202-2", ascii("Jefe"), ascii("what do ya want for nothing?"),
	         "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"},
	        {"2202-3", Bytes(20, 0xaa), Bytes(50, 0xdd), "125d7342b9ac11cd91a39af48aa17b4f63f175d3"},
	        {"2202-4", counting_key(25), Bytes(50, 0xcd), "4c9007f4026250c6bc8414f9bf50c86c2d7235da"},
	        {"2202-5", Bytes(20, 0x0c), ascii("Test With Truncation"),
	         "4c1a03424b55e07fe7f27be1d58bb9324a9a5a04"},
	        // RFC 2202 test case 5 also lists HMAC-SHA-1-96, the ESP ICV size.
	        {"2202-5-96", Bytes(20, 0x0c), ascii("Test With Truncation"), "4c1a03424b55e07fe7f27be1"},
	        {"2202-6", Bytes(80, 0xaa), ascii("Test Using Larger Than Block-Size Key - Hash Key First"),
	         "aa4ae5e15272d00e95705637ce8a3b55ed402112"},
	        {"2202-7", Bytes(80, 0xaa),
	         ascii("Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data"),
	         "e8e99d0f45237d786d6bbaa7965c7808bbff1a91"},
	    });
}

TEST_CASE("HMAC-SHA256 matches the RFC 4231 test cases, including the 128-bit truncation") {
	check_kats(
	    HmacHash::sha256,
	    {
	        {"4231-1", Bytes(20, 0x0b), ascii("Hi There"),
	         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
	        {"4231-2", ascii("Jefe"), ascii("what do ya want for nothing?"),
	         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
	        {"4231-3", Bytes(20, 0xaa), Bytes(50, 0xdd),
	         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
	        {"4231-4", counting_key(25), Bytes(50, 0xcd),
	         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
	        {"4231-5", Bytes(20, 0x0c), ascii("Test With Truncation"),
	         "a3b6167473100ee06e0c796c2955552b"},
	        {"4231-6", Bytes(131, 0xaa), ascii("Test Using Larger Than Block-Size Key - Hash Key First"),
	         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
	        {"4231-7", Bytes(131, 0xaa),
	         ascii("This is a test using a larger than block-size key and a larger than block-size "
	               "data. The key needs to be hashed before being used by the HMAC algorithm."),
	         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	    });
}

TEST_CASE("HMAC-SHA256-128 with 32-byte keys matches RFC 4868 AUTH256 test cases 1-4") {
	// RFC 4868 section 2.7.2.1: the ESP ICV is the first 128 bits.
	Bytes jefe;
	for (int i = 0; i < 8; i++) {
		const Bytes j = ascii("Jefe");
		jefe.insert(jefe.end(), j.begin(), j.end());
	}
	check_kats(HmacHash::sha256,
	           {
	               {"AUTH256-1", Bytes(32, 0x0b), ascii("Hi There"), "198a607eb44bfbc69903a0f1cf2bbdc5"},
	               {"AUTH256-2", jefe, ascii("what do ya want for nothing?"),
	                "167f928588c5cc2eef8e3093caa0e87c"},
	               {"AUTH256-3", Bytes(32, 0xaa), Bytes(50, 0xdd), "cdcb1220d1ecccea91e53aba3092f962"},
	               {"AUTH256-4", counting_key(32), Bytes(50, 0xcd), "372efcf9b40b35c2115b1346903d2ef4"},
	           });
}

TEST_CASE("Hmac gives EVP_Q_mac's answer for any split of the message and reuses its key across messages") {
	std::mt19937_64 rng(2202);
	for (HmacHash h : {HmacHash::sha1, HmacHash::sha256}) {
		const char* md = h == HmacHash::sha1 ? "SHA1" : "SHA256";
		for (size_t key_len : {1u, 20u, 32u, 64u, 65u, 200u}) {
			const Bytes key = random_bytes(rng, key_len);
			Hmac mac(h, key);
			for (size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u, 4099u}) {
				CAPTURE(md);
				CAPTURE(key_len);
				CAPTURE(len);
				const Bytes msg = random_bytes(rng, len);
				uint8_t want[EVP_MAX_MD_SIZE];
				size_t want_len = 0;
				REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, md, nullptr, key.data(),
				                  key.size(), msg.data(), msg.size(), want, sizeof want,
				                  &want_len) != nullptr);
				REQUIRE(want_len == mac.size());

				// Three pieces at arbitrary split points, like header | payload | seq_hi.
				const size_t a = len ? rng() % (len + 1) : 0,
				             b = a + (len - a ? rng() % (len - a + 1) : 0);
				Bytes got(mac.size());
				mac.begin();
				mac.update(std::span(msg).first(a));
				mac.update(std::span(msg).subspan(a, b - a));
				mac.update(std::span(msg).subspan(b));
				mac.finish(got);
				CHECK(to_hex(got) == to_hex(want, want_len));
			}
		}
	}
}
