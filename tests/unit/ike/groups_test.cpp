// Unit tests for the IKE SA algorithms certificate deployments use: ECP-384
// (RFC 5903 section 8.2), MODP-3072 and MODP-4096 (RFC 3526), the weak
// opt-in ones (MODP-1024, RFC 2409 section 6.2; HMAC-SHA-1 as PRF and as
// HMAC-SHA-1-96 integrity), HMAC-SHA-384/512 as PRF against RFC 4868, and
// the proposal spelling of all of them with and without allow_weak.
#include "ike/proposal.hpp"
#include "tests/unit/ike/keymat_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/bn.h>

using namespace esptun::ike;
using namespace esptun::ike::crypto_test;

namespace {

/// prime() - the MODP prime of @g from OpenSSL's RFC tables, big-endian,
/// as long as the group's public value.
Bytes prime(DhGroup g) {
	BIGNUM* p = g == DhGroup::modp1024   ? BN_get_rfc2409_prime_1024(nullptr)
	            : g == DhGroup::modp3072 ? BN_get_rfc3526_prime_3072(nullptr)
	                                     : BN_get_rfc3526_prime_4096(nullptr);
	REQUIRE(p != nullptr);
	Bytes out(DhKeyPair::public_len(g));
	REQUIRE(BN_bn2binpad(p, out.data(), int(out.size())) == int(out.size()));
	BN_free(p);
	return out;
}

/// minus() - the big-endian number @v minus the small @d (no borrow past the front).
Bytes minus(Bytes v, uint8_t d) {
	for (size_t i = v.size(); i-- > 0 && d;) {
		const bool borrow = v[i] < d;
		v[i] = uint8_t(v[i] - d);
		d = borrow ? 1 : 0;
	}
	return v;
}

Bytes small(size_t len, uint8_t v) {
	Bytes b(len, 0);
	b.back() = v;
	return b;
}

} // namespace

TEST_CASE("ECP-384: RFC 5903 section 8.2 test vector, public values x || y and g^ir the x coordinate") {
	const Bytes i = hex("099F3C70 34D4A2C6 99884D73 A375A67F 7624EF7C 6B3C0F16 0647B674 14DCE655"
	                    "E35B5380 41E649EE 3FAEF896 783AB194");
	const Bytes gi = hex("667842D7 D180AC2C DE6F74F3 7551F557 55C7645C 20EF73E3 1634FE72 B4C55EE6"
	                     "DE3AC808 ACB4BDB4 C88732AE E95F41AA"
	                     "9482ED1F C0EEB9CA FC498462 5CCFC23F 65032149 E0E144AD A0241815 35A0F38E"
	                     "EB9FCFF3 C2C947DA E69B4C63 4573A81C");
	const Bytes r = hex("41CB0779 B4BDB85D 47846725 FBEC3C94 30FAB46C C8DC5060 855CC9BD A0AA2942"
	                    "E0308312 916B8ED2 960E4BD5 5A7448FC");
	const Bytes gr = hex("E558DBEF 53EECDE3 D3FCCFC1 AEA08A89 A987475D 12FD950D 83CFA417 32BC509D"
	                     "0D1AC43A 0336DEF9 6FDA41D0 774A3571"
	                     "DCFBEC7A ACF31964 72169E83 8430367F 66EEBE3C 6E70C416 DD5F0C68 759DD1FF"
	                     "F83FA401 42209DFF 5EAAD96D B9E6386C");
	const Bytes gir = hex("11187331 C279962D 93D60424 3FD592CB 9D0A926F 422E4718 7521287E 7156C5C4"
	                      "D6031355 69B9E9D0 9CF5D4A2 70F59746");
	CHECK(DhKeyPair::public_len(DhGroup::ecp384) == 96);
	DhKeyPair ini(DhGroup::ecp384, i), res(DhGroup::ecp384, r);
	CHECK(to_hex(ini.public_value()) == to_hex(gi));
	CHECK(to_hex(res.public_value()) == to_hex(gr));
	auto a = ini.shared_secret(gr), b = res.shared_secret(gi);
	REQUIRE(a);
	REQUIRE(b);
	CHECK(to_hex(*a) == to_hex(gir));
	CHECK(to_hex(*b) == to_hex(gir));
}

TEST_CASE("ECP-384 refuses points off the curve, unreduced coordinates and wrong lengths") {
	DhKeyPair a(DhGroup::ecp384);
	DhKeyPair b(DhGroup::ecp384);
	const Bytes good(b.public_value().begin(), b.public_value().end());
	REQUIRE(a.shared_secret(good));
	Bytes off = good;
	off[95] ^= 1; // y changed: no longer on the curve
	CHECK_FALSE(a.shared_secret(off));
	CHECK_FALSE(a.shared_secret(Bytes(96, 0)));
	CHECK_FALSE(a.shared_secret(Bytes(96, 0xff))); // both coordinates >= p
	// A P-256 sized value, and x alone: wrong lengths.
	CHECK_FALSE(a.shared_secret(Bytes(good.begin(), good.begin() + 64)));
	CHECK_FALSE(a.shared_secret(Bytes(good.begin(), good.begin() + 48)));
	Bytes longer = good;
	longer.push_back(0);
	CHECK_FALSE(a.shared_secret(longer));
	CHECK(a.shared_secret(good)); // still works after the refusals
	// The P-384 base point's x with a P-256 key pair: the curves differ.
	CHECK_THROWS_AS(DhKeyPair(DhGroup::ecp384, Bytes(32, 1)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::ecp384, Bytes(48, 0)), std::invalid_argument);
}

TEST_CASE("MODP-3072, MODP-4096 and MODP-1024: two of our key pairs agree; 0, 1, p-1, p refused") {
	for (DhGroup g : {DhGroup::modp3072, DhGroup::modp4096, DhGroup::modp1024}) {
		CAPTURE(dh_name(g));
		const size_t len = g == DhGroup::modp1024 ? 128 : g == DhGroup::modp3072 ? 384 : 512;
		CHECK(DhKeyPair::public_len(g) == len);
		DhKeyPair a(g), b(g);
		CHECK(a.public_value().size() == len);
		CHECK(b.public_value().size() == len);
		CHECK(to_hex(a.public_value()) != to_hex(b.public_value()));
		auto sa = a.shared_secret(b.public_value()), sb = b.shared_secret(a.public_value());
		REQUIRE(sa);
		REQUIRE(sb);
		CHECK(sa->size() == len);
		CHECK(to_hex(*sa) == to_hex(*sb));

		const Bytes p = prime(g);
		CHECK_FALSE(a.shared_secret(small(len, 0)));
		CHECK_FALSE(a.shared_secret(small(len, 1)));
		CHECK_FALSE(a.shared_secret(minus(p, 1)));
		CHECK_FALSE(a.shared_secret(p));
		CHECK_FALSE(a.shared_secret(Bytes(len, 0xff)));
		CHECK_FALSE(a.shared_secret(Bytes(len - 1, 0x42)));
		// p-2, the largest value in range, comes back as itself for x = 1:
		// the group's prime is the RFC's.
		DhKeyPair one(g, Bytes{1});
		auto s = one.shared_secret(minus(p, 2));
		REQUIRE(s);
		CHECK(to_hex(*s) == to_hex(minus(p, 2)));
		// y = 2 is the generator: 2^x is our own public value.
		auto gen = a.shared_secret(small(len, 2));
		REQUIRE(gen);
		CHECK(to_hex(*gen) == to_hex(a.public_value()));
	}
}

TEST_CASE("names and lengths of the new transforms") {
	CHECK(dh_name(DhGroup::ecp384) == "ecp384");
	CHECK(dh_name(DhGroup::modp3072) == "modp3072");
	CHECK(dh_name(DhGroup::modp4096) == "modp4096");
	CHECK(dh_name(DhGroup::modp1024) == "modp1024");
	CHECK(prf_name(PrfId::hmac_sha1) == "prfsha1");
	CHECK(integ_name(IntegId::hmac_sha1_96) == "sha1");
	for (uint16_t id : std::initializer_list<uint16_t>{2, 14, 15, 16, 19, 20, 31})
		CHECK(known_dh(id));
	CHECK_FALSE(known_dh(21));
	CHECK(prf_len(PrfId::hmac_sha1) == 20);
	CHECK(integ_key_len(IntegId::hmac_sha1_96) == 20);
	CHECK(integ_icv_len(IntegId::hmac_sha1_96) == 12); // RFC 2404: 96 bits, not half of 160
	CHECK(weak_dh(DhGroup::modp1024));
	CHECK(weak_prf(PrfId::hmac_sha1));
	CHECK(weak_integ(IntegId::hmac_sha1_96));
	for (DhGroup g : {DhGroup::modp2048, DhGroup::modp3072, DhGroup::modp4096, DhGroup::ecp384})
		CHECK_FALSE(weak_dh(g));
	CHECK_FALSE(weak_prf(PrfId::hmac_sha384));
	CHECK_FALSE(weak_integ(IntegId::hmac_sha512_256));
}

TEST_CASE("PRF-HMAC-SHA-384 and PRF-HMAC-SHA-512: RFC 4868 section 2.7.1 test cases PRF-1 and PRF-2") {
	// RFC 4868 keys are as long as the PRF's output (unlike RFC 4231's).
	CHECK(to_hex(prf(PrfId::hmac_sha384, Bytes(48, 0x0b), ascii("Hi There"))) ==
	      "b6a8d5636f5c6a7224f9977dcf7ee6c7fb6d0c48cbdee9737a959796489bddbc"
	      "4c5df61d5b3297b4fb68dab9f1b582c2");
	CHECK(to_hex(prf(PrfId::hmac_sha512, Bytes(64, 0x0b), ascii("Hi There"))) ==
	      "637edc6e01dce7e6742a99451aae82df23da3e92439e590e43e761b33e910fb8"
	      "ac2878ebd5803f6f0b61dbce5e251ff8789a4722c1be65aea45fd464e89f8f5b");
	Bytes jefe48;
	for (int k = 0; k < 12; k++)
		for (char c : std::string("Jefe"))
			jefe48.push_back(uint8_t(c));
	CHECK(to_hex(prf(PrfId::hmac_sha384, jefe48, ascii("what do ya want for nothing?"))) ==
	      "2c7353974f1842fd66d53c452ca42122b28c0b594cfb184da86a368e9b8e16f5"
	      "349524ca4e82400cbde0686d403371c9");
}

TEST_CASE("PRF-HMAC-SHA-1 (RFC 2202 test case 1) and prf+ over it") {
	CHECK(to_hex(prf(PrfId::hmac_sha1, Bytes(20, 0x0b), ascii("Hi There"))) ==
	      "b617318655057264e28bc0b6fb378c8ef146be00");
	// prf+ T1 = prf(K, S | 0x01): its first block is one PRF call.
	const Bytes k(20, 0x0b), s = ascii("seed");
	Bytes s1 = s;
	s1.push_back(1);
	const auto plus = prf_plus(PrfId::hmac_sha1, k, s, 30);
	REQUIRE(plus.size() == 30);
	CHECK(to_hex(Bytes(plus.begin(), plus.begin() + 20)) == to_hex(prf(PrfId::hmac_sha1, k, s1)));
}

TEST_CASE("an SK payload with HMAC-SHA-1-96 carries a 12-byte ICV and opens") {
	const IkeSuite suite{EncrId::aes_cbc, 128, IntegId::hmac_sha1_96, PrfId::hmac_sha1,
	                     DhGroup::modp1024};
	REQUIRE(valid_suite(suite));
	const Bytes ek(16, 0x11), ak(20, 0x22);
	SkCipher c(suite, ek, ak);
	std::vector<uint8_t> msg(28, 0);
	msg[16] = 46; // next payload: SK
	const Bytes inner = ascii("an inner payload chain");
	c.seal(msg, 41, inner);
	// header 28 + SK header 4 + IV 16 + ciphertext (blocks) + ICV 12
	CHECK((msg.size() - 28 - 4 - 16 - 12) % 16 == 0);
	auto opened = c.open(msg, 28);
	REQUIRE(opened);
	CHECK(to_hex(*opened) == to_hex(inner));
	msg.back() ^= 1;
	CHECK_FALSE(c.open(msg, 28));
}

TEST_CASE("the new IKE proposal names parse and print back the same") {
	std::string err;
	for (const char* text : {"aes256-sha384-prfsha384-ecp384", "aes256gcm16-prfsha512-modp4096",
	                         "aes128gcm16-prfsha384-modp3072", "aes256-sha512-prfsha512-ecp384",
	                         "aes128-sha256-prfsha256-modp3072", "aes256gcm16-prfsha384-ecp384"}) {
		CAPTURE(std::string(text));
		auto s = parse_ike_proposal(text, err);
		REQUIRE(s);
		CHECK(valid_suite(*s));
		CHECK(ike_suite_name(*s) == text);
		CHECK(weak_algorithms(std::span(&*s, 1), {}).empty());
	}
	auto s = parse_ike_proposal("aes256-sha384-ecp384", err);
	REQUIRE(s);
	CHECK(s->integ == IntegId::hmac_sha384_192);
	CHECK(s->prf == PrfId::hmac_sha384);
	CHECK(s->dh == DhGroup::ecp384);
	// The SA payload offer names them by IANA number and describes them back.
	const SaPayload offer = ike_offer(std::span(&*s, 1));
	CHECK(describe_offer(offer) == "aes256-sha384-prfsha384-ecp384");
	auto chosen = choose_ike(offer, std::span(&*s, 1));
	REQUIRE(chosen);
	CHECK(chosen->suite == *s);
	// ESP PFS groups.
	for (const char* text : {"aes128gcm16-ecp384", "aes256-sha256-modp3072", "aes128gcm16-modp4096"}) {
		CAPTURE(std::string(text));
		auto e = parse_esp_proposal(text, err);
		REQUIRE(e);
		CHECK(esp_suite_name(*e) == text);
	}
}

TEST_CASE("modp1024, sha1 and prfsha1 need allow_weak: refused with how to opt in, accepted with it") {
	std::string err;
	for (const char* text : {"aes128-sha1-modp2048", "aes128-sha256-modp1024",
	                         "aes128gcm16-prfsha1-x25519", "aes256-sha1-modp1024"}) {
		CAPTURE(std::string(text));
		err.clear();
		CHECK_FALSE(parse_ike_proposal(text, err));
		CHECK(err.find("is refused") != std::string::npos);
		CHECK(err.find("allow_weak = true") != std::string::npos);
		auto s = parse_ike_proposal(text, err, true);
		REQUIRE(s);
		CHECK(valid_suite(*s));
		// The printed name (with the PRF written out) reads back as the same suite.
		auto again = parse_ike_proposal(ike_suite_name(*s), err, true);
		REQUIRE(again);
		CHECK(*again == *s);
	}
	auto s = parse_ike_proposal("aes256-sha1-modp1024", err, true);
	REQUIRE(s);
	CHECK(s->integ == IntegId::hmac_sha1_96);
	CHECK(s->prf == PrfId::hmac_sha1); // strongSwan's convention: the PRF follows the integrity hash
	CHECK(s->dh == DhGroup::modp1024);
	CHECK(ike_suite_name(*s) == "aes256-sha1-prfsha1-modp1024");
	const std::vector<std::string_view> weak = weak_algorithms(std::span(&*s, 1), {});
	CHECK(weak == std::vector<std::string_view>{"sha1", "prfsha1", "modp1024"});
	// What esptun does not implement stays refused, opt-in or not, and without the hint.
	for (const char* text : {"3des-sha256-modp2048", "aes128-md5-modp2048", "aes128-sha256-modp1536"}) {
		CAPTURE(std::string(text));
		err.clear();
		CHECK_FALSE(parse_ike_proposal(text, err, true));
		CHECK(err.find("is refused") != std::string::npos);
		CHECK(err.find("allow_weak") == std::string::npos);
	}
	// ESP: modp1024 for PFS likewise; ESP's own HMAC-SHA-1-96 is not weak.
	CHECK_FALSE(parse_esp_proposal("aes128gcm16-modp1024", err));
	CHECK(err.find("allow_weak = true") != std::string::npos);
	auto e = parse_esp_proposal("aes128gcm16-modp1024", err, true);
	REQUIRE(e);
	CHECK(weak_algorithms({}, std::span(&*e, 1)) == std::vector<std::string_view>{"modp1024"});
	CHECK(parse_esp_proposal("aes128-sha1", err));
}

TEST_CASE("a responder without the weak suites answers an offer of only weak ones with no choice") {
	std::string err;
	auto weak = parse_ike_proposal("aes128-sha1-modp1024", err, true);
	REQUIRE(weak);
	const SaPayload offer = ike_offer(std::span(&*weak, 1));
	CHECK(describe_offer(offer) == "aes128-sha1-prfsha1-modp1024");
	CHECK_FALSE(choose_ike(offer, default_ike_proposals()));
	auto chosen = choose_ike(offer, std::span(&*weak, 1));
	REQUIRE(chosen);
	CHECK(chosen->suite == *weak);
	// The defaults name nothing weak.
	CHECK(weak_algorithms(default_ike_proposals(), default_esp_proposals()).empty());
}
