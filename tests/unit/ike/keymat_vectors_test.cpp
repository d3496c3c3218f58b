// ike/keymat against tests/data/ike/crypto_vectors.txt, written by
// tests/data/ike/gen_crypto_vectors.py: a Python implementation of prf+, the
// key schedule, PSK AUTH and the SK payload written from the RFCs, with
// cryptography's AES, X25519 and P-256 and its own MODP arithmetic.
#include "tests/unit/ike/keymat_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun::ike;
using namespace esptun::ike::crypto_test;

namespace {

const std::vector<Record>& vectors() {
	static const std::vector<Record> v = read_vectors("crypto_vectors.txt");
	return v;
}

/// from_hex_u64() - an SPI written as 16 hex digits.
uint64_t spi(const Record& r, const char* name) { return r.num(name, 16); }

} // namespace

TEST_CASE("prf+ matches the generated vectors, across block boundaries and up to 255 blocks") {
	for (const auto& r : of_kind(vectors(), "prf_plus")) {
		CAPTURE(r.line);
		const auto out = prf_plus(PrfId(r.num("prf")), r.bytes("key"), r.bytes("seed"), r.num("len"));
		CHECK(to_hex(out) == r.str("out"));
	}
}

TEST_CASE("key exchanges match the generated vectors, both directions, leading zeros kept") {
	size_t modp_leading_zero = 0;
	for (const auto& r : of_kind(vectors(), "dh")) {
		CAPTURE(r.line);
		CAPTURE(r.str("why"));
		const DhGroup g = DhGroup(r.num("group"));
		DhKeyPair a(g, r.bytes("priv_a")), b(g, r.bytes("priv_b"));
		CHECK(to_hex(a.public_value()) == r.str("pub_a"));
		CHECK(to_hex(b.public_value()) == r.str("pub_b"));
		auto sa = a.shared_secret(r.bytes("pub_b")), sb = b.shared_secret(r.bytes("pub_a"));
		REQUIRE(sa);
		REQUIRE(sb);
		CHECK(to_hex(*sa) == r.str("shared"));
		CHECK(to_hex(*sb) == r.str("shared"));
		if (g == DhGroup::modp2048 && r.str("pub_a").starts_with("00") &&
		    r.str("shared").starts_with("00"))
			modp_leading_zero++;
	}
	CHECK(modp_leading_zero == 1); // the padding case is really in the file
}

TEST_CASE("derive_ike_keys matches the generated vectors from the key exchange on") {
	for (const auto& r : of_kind(vectors(), "ike_keys")) {
		CAPTURE(r.line);
		const IkeSuite s = suite_of(r);
		CAPTURE(encr_name(s.encr, s.key_bits));
		CAPTURE(prf_name(s.prf));
		CAPTURE(dh_name(s.dh));
		DhKeyPair i(s.dh, r.bytes("priv_i")), resp(s.dh, r.bytes("priv_r"));
		CHECK(to_hex(i.public_value()) == r.str("pub_i"));
		auto g_ir = i.shared_secret(r.bytes("pub_r"));
		REQUIRE(g_ir);
		CHECK(to_hex(*g_ir) == r.str("g_ir"));
		const IkeKeys k =
		    derive_ike_keys(s, r.bytes("ni"), r.bytes("nr"), *g_ir, spi(r, "spi_i"), spi(r, "spi_r"));
		check_keys(k, r);
	}
}

TEST_CASE("derive_rekeyed_ike_keys matches the generated vectors (old PRF for SKEYSEED, new for prf+)") {
	for (const auto& r : of_kind(vectors(), "rekey")) {
		CAPTURE(r.line);
		const IkeKeys k = derive_rekeyed_ike_keys(PrfId(r.num("old_prf")), r.bytes("old_sk_d"),
		                                          suite_of(r), r.bytes("g_ir"), r.bytes("ni"),
		                                          r.bytes("nr"), spi(r, "spi_i"), spi(r, "spi_r"));
		check_keys(k, r);
	}
}

TEST_CASE("child_keymat matches the generated vectors with and without g^ir") {
	size_t with = 0, without = 0;
	for (const auto& r : of_kind(vectors(), "child_keymat")) {
		CAPTURE(r.line);
		const Bytes g_ir = r.bytes("g_ir");
		(g_ir.empty() ? without : with)++;
		const auto out = child_keymat(PrfId(r.num("prf")), r.bytes("sk_d"), g_ir, r.bytes("ni"),
		                              r.bytes("nr"), r.num("len"));
		CHECK(to_hex(out) == r.str("out"));
	}
	CHECK(with > 0);
	CHECK(without > 0);
}

TEST_CASE("psk_auth matches the generated vectors") {
	for (const auto& r : of_kind(vectors(), "psk_auth")) {
		CAPTURE(r.line);
		const auto out = psk_auth(PrfId(r.num("prf")), r.bytes("psk"), r.bytes("message"),
		                          r.bytes("nonce"), r.bytes("sk_p"), r.bytes("id_body"));
		CHECK(to_hex(out) == r.str("out"));
	}
}

TEST_CASE("open() returns the inner chain of SK payloads sealed by the generator, and no bit flip passes") {
	for (const auto& r : of_kind(vectors(), "sk_open")) {
		CAPTURE(r.line);
		CAPTURE(r.str("why"));
		const IkeSuite s = suite_of(r);
		SkCipher c(s, r.bytes("sk_e"), r.bytes("sk_a"));
		const Bytes msg = r.bytes("msg");
		const size_t off = r.num("sk_offset");
		CHECK(msg[off] == r.num("first"));
		auto inner = c.open(msg, off);
		REQUIRE(inner);
		CHECK(to_hex(*inner) == r.str("inner"));
		size_t accepted = 0;
		for (size_t bit = 0; bit < msg.size() * 8; bit += 3) {
			Bytes bad = msg;
			bad[bit / 8] ^= uint8_t(1u << (bit % 8));
			if (c.open(bad, off)) accepted++;
		}
		CHECK(accepted == 0);
	}
}

TEST_CASE("open() refuses authenticated SK payloads with a bad Pad Length or length field") {
	for (const auto& r : of_kind(vectors(), "sk_reject")) {
		CAPTURE(r.line);
		CAPTURE(r.str("why"));
		SkCipher c(suite_of(r), r.bytes("sk_e"), r.bytes("sk_a"));
		CHECK_FALSE(c.open(r.bytes("msg"), r.num("sk_offset")));
	}
}
