// Unit tests for ike/keymat: the transform tables, the PRF against
// RFC 4231, prf+ limits, and the three key exchanges against RFC 7748, RFC
// 5903 and RFC 3526 arithmetic, with every peer-value check RFC 7296, RFC
// 6989 and RFC 8031 ask for. The generated vectors are in crypto_vectors_test.cpp,
// the SK payload in crypto_sk_test.cpp.
#include "tests/unit/ike/keymat_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/bn.h>

#include <set>

using namespace esptun::ike;
using namespace esptun::ike::crypto_test;

namespace {

/// counting() - 0x01, 0x02, ... (RFC 4231 test case 4's key).
Bytes counting(size_t n) {
	Bytes b(n);
	for (size_t i = 0; i < n; i++)
		b[i] = uint8_t(i + 1);
	return b;
}

/// The RFC 3526 group 14 prime as printed in section 3 (independent of OpenSSL's copy).
const char* const kModpP =
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF";

/// modp_plus() - p + @delta (delta may be negative) as 256 big-endian bytes,
/// or all 0xff when it does not fit.
Bytes modp_plus(long delta) {
	Bytes p = hex(kModpP);
	BIGNUM* bn = BN_bin2bn(p.data(), int(p.size()), nullptr);
	REQUIRE(bn != nullptr);
	if (delta >= 0)
		REQUIRE(BN_add_word(bn, static_cast<BN_ULONG>(delta)) == 1);
	else
		REQUIRE(BN_sub_word(bn, static_cast<BN_ULONG>(-delta)) == 1);
	Bytes out(256);
	if (BN_bn2binpad(bn, out.data(), 256) != 256) out.assign(256, 0xff);
	BN_free(bn);
	return out;
}

/// small() - the 256-byte MODP encoding of a small number.
Bytes small(uint8_t v) {
	Bytes b(256, 0);
	b[255] = v;
	return b;
}

} // namespace

TEST_CASE("names are strongSwan's proposal keywords") {
	CHECK(encr_name(EncrId::aes_cbc, 128) == "aes128");
	CHECK(encr_name(EncrId::aes_cbc, 192) == "aes192");
	CHECK(encr_name(EncrId::aes_cbc, 256) == "aes256");
	CHECK(encr_name(EncrId::aes_gcm_16, 128) == "aes128gcm16");
	CHECK(encr_name(EncrId::aes_gcm_16, 256) == "aes256gcm16");
	CHECK(encr_name(EncrId::aes_gcm_16, 192) == "unknown");
	CHECK(encr_name(EncrId::aes_cbc, 64) == "unknown");
	CHECK(integ_name(IntegId::hmac_sha256_128) == "sha256");
	CHECK(integ_name(IntegId::hmac_sha384_192) == "sha384");
	CHECK(integ_name(IntegId::hmac_sha512_256) == "sha512");
	CHECK(integ_name(IntegId::none) == "none");
	CHECK(prf_name(PrfId::hmac_sha256) == "prfsha256");
	CHECK(prf_name(PrfId::hmac_sha384) == "prfsha384");
	CHECK(prf_name(PrfId::hmac_sha512) == "prfsha512");
	CHECK(dh_name(DhGroup::curve25519) == "x25519");
	CHECK(dh_name(DhGroup::ecp256) == "ecp256");
	CHECK(dh_name(DhGroup::modp2048) == "modp2048");
	CHECK(prf_name(PrfId(1)) == "unknown");  // PRF_HMAC_MD5
	CHECK(dh_name(DhGroup(5)) == "unknown"); // MODP-1536
}

TEST_CASE("known_* accept exactly the IANA IDs implemented") {
	std::set<uint16_t> encr, prf_ids, integ, dh;
	for (unsigned id = 0; id < 1024; id++) {
		if (known_encr(uint16_t(id))) encr.insert(uint16_t(id));
		if (known_prf(uint16_t(id))) prf_ids.insert(uint16_t(id));
		if (known_integ(uint16_t(id))) integ.insert(uint16_t(id));
		if (known_dh(uint16_t(id))) dh.insert(uint16_t(id));
	}
	CHECK(encr == std::set<uint16_t>{12, 20});
	CHECK(prf_ids == std::set<uint16_t>{2, 5, 6, 7});
	CHECK(integ == std::set<uint16_t>{0, 2, 12, 13, 14});
	CHECK(dh == std::set<uint16_t>{2, 14, 15, 16, 19, 20, 31});
}

TEST_CASE("transform lengths follow RFC 4868 and RFC 5282") {
	CHECK(prf_len(PrfId::hmac_sha256) == 32);
	CHECK(prf_len(PrfId::hmac_sha384) == 48);
	CHECK(prf_len(PrfId::hmac_sha512) == 64);
	CHECK(integ_key_len(IntegId::hmac_sha256_128) == 32);
	CHECK(integ_icv_len(IntegId::hmac_sha256_128) == 16);
	CHECK(integ_key_len(IntegId::hmac_sha384_192) == 48);
	CHECK(integ_icv_len(IntegId::hmac_sha384_192) == 24);
	CHECK(integ_key_len(IntegId::hmac_sha512_256) == 64);
	CHECK(integ_icv_len(IntegId::hmac_sha512_256) == 32);
	CHECK(integ_key_len(IntegId::none) == 0);
	CHECK(integ_icv_len(IntegId::none) == 0);
	CHECK(encr_keymat_len(EncrId::aes_cbc, 128) == 16);
	CHECK(encr_keymat_len(EncrId::aes_cbc, 192) == 24);
	CHECK(encr_keymat_len(EncrId::aes_cbc, 256) == 32);
	CHECK(encr_keymat_len(EncrId::aes_gcm_16, 128) == 20);
	CHECK(encr_keymat_len(EncrId::aes_gcm_16, 256) == 36);
	CHECK(encr_keymat_len(EncrId::aes_gcm_16, 192) == 0);
	CHECK(encr_keymat_len(EncrId::aes_cbc, 0) == 0);
	CHECK(DhKeyPair::public_len(DhGroup::modp2048) == 256);
	CHECK(DhKeyPair::public_len(DhGroup::ecp256) == 64);
	CHECK(DhKeyPair::public_len(DhGroup::curve25519) == 32);
}

TEST_CASE("valid_suite wants integrity exactly when the cipher is not AEAD") {
	const IkeSuite gcm{EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519};
	const IkeSuite cbc{EncrId::aes_cbc, 256, IntegId::hmac_sha256_128, PrfId::hmac_sha384,
	                   DhGroup::ecp256};
	CHECK(valid_suite(gcm));
	CHECK(valid_suite(cbc));
	auto with = [](IkeSuite s, auto change) {
		change(s);
		return s;
	};
	CHECK_FALSE(valid_suite(with(gcm, [](IkeSuite& s) { s.integ = IntegId::hmac_sha256_128; })));
	CHECK_FALSE(valid_suite(with(cbc, [](IkeSuite& s) { s.integ = IntegId::none; })));
	CHECK_FALSE(valid_suite(with(gcm, [](IkeSuite& s) { s.key_bits = 192; })));
	CHECK_FALSE(valid_suite(with(cbc, [](IkeSuite& s) { s.key_bits = 512; })));
	CHECK_FALSE(valid_suite(with(cbc, [](IkeSuite& s) { s.prf = PrfId(1); })));
	CHECK_FALSE(valid_suite(with(cbc, [](IkeSuite& s) { s.dh = DhGroup(5); })));
	CHECK_FALSE(valid_suite(with(cbc, [](IkeSuite& s) { s.encr = EncrId(3); })));
}

TEST_CASE("prf() is HMAC-SHA2: RFC 4231 test cases 1, 2, 3, 4, 6 and 7") {
	struct Case {
		const char* name;
		Bytes key, data;
		const char *sha256, *sha384, *sha512;
	};
	const Bytes big_key(131, 0xaa);
	const std::vector<Case> cases = {
	    {"1", Bytes(20, 0x0b), ascii("Hi There"),
	     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
	     "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb"
	     "6",
	     "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e"
	     "4"
	     "be9d914eeb61f1702e696c203a126854"},
	    {"2", ascii("Jefe"), ascii("what do ya want for nothing?"),
	     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
	     "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab2164"
	     "9",
	     "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6f"
	     "d"
	     "caeab1a34d4a6b4b636e070a38bce737"},
	    {"3", Bytes(20, 0xaa), Bytes(50, 0xdd),
	     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
	     "88062608d3e6ad8a0aa2ace014c8a86f0aa635d947ac9febe83ef4e55966144b2a5ab39dc13814b94e3ab6e101a34f2"
	     "7",
	     "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39bf3e848279a722c806b485a47e67c80"
	     "7"
	     "b946a337bee8942674278859e13292fb"},
	    {"4", counting(25), Bytes(50, 0xcd),
	     "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
	     "3e8a69b7783c25851933ab6290af6ca77a9981480850009cc5577c6e1f573b4e6801dd23c4a7d679ccf8a386c674cff"
	     "b",
	     "b0ba465637458c6990e5a8c5f61d4af7e576d97ff94b872de76f8050361ee3dba91ca5c11aa25eb4d679275cc578806"
	     "3"
	     "a5f19741120c4f2de2adebeb10a298dd"},
	    {"6", big_key, ascii("Test Using Larger Than Block-Size Key - Hash Key First"),
	     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
	     "4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f4495"
	     "2",
	     "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e5"
	     "2"
	     "95e64f73f63f0aec8b915a985d786598"},
	    {"7", big_key,
	     ascii("This is a test using a larger than block-size key and a larger than block-size data. The "
	           "key "
	           "needs to be hashed before being used by the HMAC algorithm."),
	     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
	     "6617178e941f020d351e2f254e8fd32c602420feb0b8fb9adccebb82461e99c5a678cc31e799176d3860e6110c46523"
	     "e",
	     "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944b6022cac3c4982b10d5eeb55c3e4de1"
	     "5"
	     "134676fb6de0446065c97440fa8c6a58"},
	};
	for (const auto& c : cases) {
		CAPTURE(c.name);
		CHECK(to_hex(prf(PrfId::hmac_sha256, c.key, c.data)) == c.sha256);
		CHECK(to_hex(prf(PrfId::hmac_sha384, c.key, c.data)) == c.sha384);
		CHECK(to_hex(prf(PrfId::hmac_sha512, c.key, c.data)) == c.sha512);
	}
}

TEST_CASE("prf() takes an empty key and refuses an unknown PRF") {
	// HMAC with an empty key is the key of all zero bytes (RFC 2104 pads it).
	CHECK(prf(PrfId::hmac_sha256, {}, ascii("x")) == prf(PrfId::hmac_sha256, Bytes(64, 0), ascii("x")));
	CHECK_THROWS(prf(PrfId(1), ascii("k"), ascii("x")));
}

TEST_CASE("prf+ chains T1 = prf(K, S | 1), T2 = prf(K, T1 | S | 2) and stops at 255 blocks") {
	const Bytes k = ascii("key"), s = ascii("seed");
	const Bytes t1 = declassify(prf(PrfId::hmac_sha256, k, ascii("seed\x01")));
	Bytes in2 = t1;
	in2.insert(in2.end(), s.begin(), s.end());
	in2.push_back(2);
	const Bytes t2 = declassify(prf(PrfId::hmac_sha256, k, in2));
	Bytes want = t1;
	want.insert(want.end(), t2.begin(), t2.begin() + 8);
	CHECK(to_hex(prf_plus(PrfId::hmac_sha256, k, s, 40)) == to_hex(want));
	CHECK(prf_plus(PrfId::hmac_sha256, k, s, 0).empty());
	CHECK(prf_plus(PrfId::hmac_sha512, k, s, 255 * 64).size() == 255 * 64);
	CHECK_THROWS_AS(prf_plus(PrfId::hmac_sha256, k, s, 255 * 32 + 1), std::invalid_argument);
	CHECK_THROWS_AS(prf_plus(PrfId::hmac_sha384, k, s, 255 * 48 + 1), std::invalid_argument);
}

TEST_CASE("X25519 matches RFC 7748 section 6.1 (Alice and Bob)") {
	const Bytes alice_priv = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
	const Bytes alice_pub = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
	const Bytes bob_priv = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
	const Bytes bob_pub = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
	const char* shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
	DhKeyPair alice(DhGroup::curve25519, alice_priv), bob(DhGroup::curve25519, bob_priv);
	CHECK(to_hex(alice.public_value()) == to_hex(alice_pub));
	CHECK(to_hex(bob.public_value()) == to_hex(bob_pub));
	auto a = alice.shared_secret(bob_pub), b = bob.shared_secret(alice_pub);
	REQUIRE(a);
	REQUIRE(b);
	CHECK(to_hex(*a) == shared);
	CHECK(to_hex(*b) == shared);
}

TEST_CASE("ECP-256 matches RFC 5903 section 8.1: public values x | y, shared secret x") {
	const Bytes i = hex("C88F01F5 10D9AC3F 70A292DA A2316DE5 44E9AAB8 AFE84049 C62A9C57 862D1433");
	const Bytes gi = hex("DAD0B653 94221CF9 B051E1FE CA5787D0 98DFE637 FC90B9EF 945D0C37 72581180"
	                     "5271A046 1CDB8252 D61F1C45 6FA3E59A B1F45B33 ACCF5F58 389E0577 B8990BB3");
	const Bytes r = hex("C6EF9C5D 78AE012A 011164AC B397CE20 88685D8F 06BF9BE0 B283AB46 476BEE53");
	const Bytes gr = hex("D12DFB52 89C8D4F8 1208B702 70398C34 2296970A 0BCCB74C 736FC755 4494BF63"
	                     "56FBF3CA 366CC23E 8157854C 13C58D6A AC23F046 ADA30F83 53E74F33 039872AB");
	const Bytes gir = hex("D6840F6B 42F6EDAF D13116E0 E1256520 2FEF8E9E CE7DCE03 812464D0 4B9442DE");
	DhKeyPair ini(DhGroup::ecp256, i), res(DhGroup::ecp256, r);
	CHECK(to_hex(ini.public_value()) == to_hex(gi));
	CHECK(to_hex(res.public_value()) == to_hex(gr));
	auto a = ini.shared_secret(gr), b = res.shared_secret(gi);
	REQUIRE(a);
	REQUIRE(b);
	CHECK(to_hex(*a) == to_hex(gir));
	CHECK(to_hex(*b) == to_hex(gir));
}

TEST_CASE("fresh key pairs of every group agree and have the wire lengths") {
	for (DhGroup g : {DhGroup::curve25519, DhGroup::ecp256, DhGroup::modp2048}) {
		CAPTURE(dh_name(g));
		DhKeyPair a(g), b(g);
		CHECK(a.group() == g);
		CHECK(a.public_value().size() == DhKeyPair::public_len(g));
		CHECK(b.public_value().size() == DhKeyPair::public_len(g));
		CHECK(to_hex(a.public_value()) != to_hex(b.public_value()));
		auto sa = a.shared_secret(b.public_value()), sb = b.shared_secret(a.public_value());
		REQUIRE(sa);
		REQUIRE(sb);
		CHECK(sa->size() == (g == DhGroup::ecp256 ? 32u : DhKeyPair::public_len(g)));
		CHECK(to_hex(*sa) == to_hex(*sb));
	}
}

TEST_CASE("MODP public values are 2^x mod p, zero-padded to 256 bytes") {
	// 2^x for x < 2048 is below p, so it is the public value itself: one
	// bit set, and everything in front of it zero padding.
	for (unsigned x : {1u, 7u, 8u, 9u, 255u, 1000u, 2039u, 2040u, 2047u}) {
		CAPTURE(x);
		Bytes priv = {uint8_t(x >> 8), uint8_t(x)};
		DhKeyPair pair(DhGroup::modp2048, priv);
		Bytes want(256, 0);
		want[255 - x / 8] = uint8_t(1u << (x % 8));
		CHECK(to_hex(pair.public_value()) == to_hex(want));
	}
	// The other side computes with the padded value: (2^1)^b = the peer's own public value.
	DhKeyPair one(DhGroup::modp2048, Bytes{1}), b(DhGroup::modp2048);
	auto s1 = b.shared_secret(one.public_value());
	REQUIRE(s1);
	CHECK(to_hex(*s1) == to_hex(b.public_value()));
	// ... and a shared secret keeps its leading zero bytes: 2^(8*k) for x = 8.
	DhKeyPair eight(DhGroup::modp2048, Bytes{8});
	auto s2 = eight.shared_secret(small(2));
	REQUIRE(s2);
	Bytes want(256, 0);
	want[254] = 1; // 2^8 = 0x0100
	CHECK(to_hex(*s2) == to_hex(want));
}

TEST_CASE("MODP uses the RFC 3526 prime: 2 generates the shared secret y^x, and p-2 is in range") {
	DhKeyPair a(DhGroup::modp2048);
	// y = 2 is the generator: g^x is our own public value.
	auto s = a.shared_secret(small(2));
	REQUIRE(s);
	CHECK(to_hex(*s) == to_hex(a.public_value()));
	// p - 2 is the largest allowed value (1 < y < p-1) and comes back
	// unchanged for x = 1; with p - 1 refused (next test case) this pins
	// the group's p to the RFC 3526 value written out above.
	DhKeyPair one(DhGroup::modp2048, Bytes{1});
	auto s2 = one.shared_secret(modp_plus(-2));
	REQUIRE(s2);
	CHECK(to_hex(*s2) == to_hex(modp_plus(-2)));
}

TEST_CASE("MODP refuses peer values outside 1 < y < p-1 and of the wrong length") {
	DhKeyPair a(DhGroup::modp2048);
	CHECK_FALSE(a.shared_secret(small(0)));
	CHECK_FALSE(a.shared_secret(small(1)));
	CHECK_FALSE(a.shared_secret(modp_plus(-1)));
	CHECK_FALSE(a.shared_secret(modp_plus(0)));
	CHECK_FALSE(a.shared_secret(modp_plus(1)));
	CHECK_FALSE(a.shared_secret(Bytes(256, 0xff)));
	Bytes short_value(a.public_value().begin() + 1, a.public_value().end());
	CHECK_FALSE(a.shared_secret(short_value));
	Bytes long_value(a.public_value().begin(), a.public_value().end());
	long_value.insert(long_value.begin(), 0);
	CHECK_FALSE(a.shared_secret(long_value));
	CHECK_FALSE(a.shared_secret({}));
	// The key pair still works after the refusals.
	DhKeyPair b(DhGroup::modp2048);
	CHECK(a.shared_secret(b.public_value()));
}

TEST_CASE("ECP-256 refuses points off the curve, unreduced coordinates and wrong lengths") {
	DhKeyPair a(DhGroup::ecp256);
	Bytes gi = hex("DAD0B65394221CF9B051E1FECA5787D098DFE637FC90B9EF945D0C3772581180"
	               "5271A0461CDB8252D61F1C456FA3E59AB1F45B33ACCF5F58389E0577B8990BB3");
	REQUIRE(a.shared_secret(gi));
	Bytes off = gi;
	off[63] ^= 1;
	CHECK_FALSE(a.shared_secret(off));
	CHECK_FALSE(a.shared_secret(Bytes(64, 0))); // (0, 0): not on the curve (b != 0)
	// (0, sqrt(b)) is on the curve; the same point with x written as p is not
	// a valid encoding (RFC 6989 section 2.3: coordinates must be below p).
	const Bytes y0 = hex("66485c780e2f83d72433bd5d84a06bb6541c2af31dae871728bf856a174f93f4");
	Bytes zero_x(32, 0);
	zero_x.insert(zero_x.end(), y0.begin(), y0.end());
	CHECK(a.shared_secret(zero_x));
	Bytes p_x = hex("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff");
	p_x.insert(p_x.end(), y0.begin(), y0.end());
	CHECK_FALSE(a.shared_secret(p_x));
	CHECK_FALSE(a.shared_secret(Bytes(gi.begin(), gi.end() - 1)));
	Bytes with_prefix = {0x04};
	with_prefix.insert(with_prefix.end(), gi.begin(), gi.end());
	CHECK_FALSE(a.shared_secret(with_prefix));                        // SEC1 form is not the IKE form
	CHECK_FALSE(a.shared_secret(Bytes(gi.begin(), gi.begin() + 33))); // compressed-size
}

TEST_CASE("X25519 refuses small-order points (all-zero shared secret) and wrong lengths") {
	DhKeyPair a(DhGroup::curve25519);
	// Points of order 1, 2, 4 and 8, and their unreduced encodings (p-1, p, p+1).
	for (const char* u : {"0000000000000000000000000000000000000000000000000000000000000000",
	                      "0100000000000000000000000000000000000000000000000000000000000000",
	                      "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
	                      "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
	                      "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	                      "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	                      "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"}) {
		CAPTURE(u);
		CHECK_FALSE(a.shared_secret(hex(u)));
	}
	DhKeyPair b(DhGroup::curve25519);
	Bytes pub(b.public_value().begin(), b.public_value().end());
	CHECK(a.shared_secret(pub));
	CHECK_FALSE(a.shared_secret(Bytes(pub.begin(), pub.end() - 1)));
	pub.push_back(0);
	CHECK_FALSE(a.shared_secret(pub));
}

TEST_CASE("the known-key constructor checks the private key") {
	CHECK_THROWS_AS(DhKeyPair(DhGroup::curve25519, Bytes(31, 1)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::ecp256, Bytes(32, 0)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::ecp256, Bytes(32, 0xff)), std::invalid_argument); // >= n
	CHECK_THROWS_AS(DhKeyPair(DhGroup::ecp256, Bytes(31, 1)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::modp2048, Bytes{}), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::modp2048, Bytes(4, 0)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup::modp2048, Bytes(257, 1)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup(5)), std::invalid_argument);
	CHECK_THROWS_AS(DhKeyPair(DhGroup(21), Bytes(32, 1)), std::invalid_argument);
}

TEST_CASE("derive_ike_keys gives each key the suite's length and refuses bad suites") {
	const Bytes ni(32, 1), nr(32, 2), gir(32, 3);
	const IkeSuite gcm{EncrId::aes_gcm_16, 256, IntegId::none, PrfId::hmac_sha384, DhGroup::ecp256};
	IkeKeys k = derive_ike_keys(gcm, ni, nr, gir, 1, 2);
	CHECK(k.sk_d.size() == 48);
	CHECK(k.sk_ai.empty());
	CHECK(k.sk_ar.empty());
	CHECK(k.sk_ei.size() == 36);
	CHECK(k.sk_er.size() == 36);
	CHECK(k.sk_pi.size() == 48);
	CHECK(k.sk_pr.size() == 48);
	const IkeSuite cbc{EncrId::aes_cbc, 192, IntegId::hmac_sha512_256, PrfId::hmac_sha256,
	                   DhGroup::modp2048};
	k = derive_ike_keys(cbc, ni, nr, gir, 1, 2);
	CHECK(k.sk_d.size() == 32);
	CHECK(k.sk_ai.size() == 64);
	CHECK(k.sk_ei.size() == 24);
	CHECK(k.sk_pr.size() == 32);
	// The SPIs take part: swapping them changes every key.
	IkeKeys swapped = derive_ike_keys(cbc, ni, nr, gir, 2, 1);
	CHECK(swapped.sk_d != k.sk_d);
	IkeSuite bad = gcm;
	bad.integ = IntegId::hmac_sha256_128;
	CHECK_THROWS_AS(derive_ike_keys(bad, ni, nr, gir, 1, 2), std::invalid_argument);
	CHECK_THROWS_AS(derive_rekeyed_ike_keys(PrfId::hmac_sha256, k.sk_d, bad, gir, ni, nr, 1, 2),
	                std::invalid_argument);
}

TEST_CASE("random_bytes fills the buffer with fresh bytes") {
	Bytes a(64, 0), b(64, 0);
	random_bytes(a);
	random_bytes(b);
	CHECK(a != Bytes(64, 0));
	CHECK(a != b);
	random_bytes({}); // nothing to do, no failure
}
