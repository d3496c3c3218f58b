// ike/keymat against strongSwan 5.9 itself: tests/data/ike/crypto_strongswan.txt
// holds, for four IKE suites, the keys charon logged (g^ir, SK_*, CHILD_SA
// keys) and the messages it sent and received (capture-strongswan-keys.sh).
// From strongSwan's g^ir, nonces and SPIs esptun must derive strongSwan's
// SK_*; with them it must open strongSwan's IKE_AUTH messages to the
// plaintext strongSwan logged, compute the AUTH values strongSwan put in them,
// and derive the CHILD_SA keys strongSwan installed.
#include "tests/unit/ike/keymat_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun::ike;
using namespace esptun::ike::crypto_test;

namespace {

/// Found - one payload of an inner chain: its type and its body (after the generic header).
struct Found {
	uint8_t type;
	Bytes body;
};

/// walk() - the payloads of a decrypted inner chain, starting with type @first.
std::vector<Found> walk(uint8_t first, const Bytes& chain) {
	std::vector<Found> out;
	size_t off = 0;
	uint8_t type = first;
	while (type != 0) {
		REQUIRE(off + 4 <= chain.size());
		const size_t len = size_t(chain[off + 2]) << 8 | chain[off + 3];
		REQUIRE(len >= 4);
		REQUIRE(off + len <= chain.size());
		out.push_back({type, Bytes(chain.begin() + std::ptrdiff_t(off + 4),
		                           chain.begin() + std::ptrdiff_t(off + len))});
		type = chain[off];
		off += len;
	}
	CHECK(off == chain.size());
	return out;
}

const Bytes& body_of(const std::vector<Found>& chain, uint8_t type) {
	for (const auto& p : chain)
		if (p.type == type) return p.body;
	FAIL("no payload of type ", int(type));
	static const Bytes none;
	return none;
}

} // namespace

TEST_CASE("esptun derives strongSwan's keys, opens its IKE_AUTH messages and computes its AUTH values") {
	const auto all = of_kind(read_vectors("crypto_strongswan.txt"), "strongswan");
	CHECK(all.size() >= 4);
	for (const auto& r : all) {
		CAPTURE(r.str("name"));
		const IkeSuite s = suite_of(r);
		REQUIRE(valid_suite(s));
		const Bytes g_ir = r.bytes("g_ir");
		CHECK(g_ir.size() == (s.dh == DhGroup::ecp256 ? 32u : DhKeyPair::public_len(s.dh)));

		// Section 2.14: SKEYSEED and the seven keys.
		const Bytes ni = r.bytes("ni"), nr = r.bytes("nr");
		const IkeKeys k = derive_ike_keys(s, ni, nr, g_ir, r.num("spi_i", 16), r.num("spi_r", 16));
		check_keys(k, r);

		// Section 3.14 / RFC 5282: strongSwan's SK payloads, each direction.
		SkCipher from_i(s, k.sk_ei, k.sk_ai), from_r(s, k.sk_er, k.sk_ar);
		const Bytes req = r.bytes("auth_request"), resp = r.bytes("auth_response");
		const size_t req_off = r.num("auth_request_sk"), resp_off = r.num("auth_response_sk");
		auto req_plain = from_i.open(req, req_off);
		auto resp_plain = from_r.open(resp, resp_off);
		REQUIRE(req_plain);
		REQUIRE(resp_plain);
		CHECK(to_hex(*req_plain) == r.str("auth_request_plain"));
		CHECK(to_hex(*resp_plain) == r.str("auth_response_plain"));
		CHECK_FALSE(from_r.open(req, req_off)); // the other direction's keys

		// Section 2.15: the AUTH payloads strongSwan sent (method 2 = PSK).
		const Bytes psk = r.bytes("psk");
		const auto req_chain = walk(req[req_off], *req_plain),
		           resp_chain = walk(resp[resp_off], *resp_plain);
		const Bytes& auth_i = body_of(req_chain, 39);
		const Bytes& auth_r = body_of(resp_chain, 39);
		REQUIRE(auth_i.size() == 4 + prf_len(s.prf));
		REQUIRE(auth_r.size() == 4 + prf_len(s.prf));
		CHECK(auth_i[0] == 2);
		const auto want_i =
		    psk_auth(s.prf, psk, r.bytes("init_request"), nr, k.sk_pi, body_of(req_chain, 35));
		const auto want_r =
		    psk_auth(s.prf, psk, r.bytes("init_response"), ni, k.sk_pr, body_of(resp_chain, 36));
		CHECK(to_hex(want_i) == to_hex(Bytes(auth_i.begin() + 4, auth_i.end())));
		CHECK(to_hex(want_r) == to_hex(Bytes(auth_r.begin() + 4, auth_r.end())));

		// Section 2.17: the CHILD_SA created with IKE_AUTH (no KE): encryption
		// key material each way (AES-GCM: key and salt), no integrity keys.
		const Bytes child = r.bytes("child_keymat");
		CHECK(to_hex(child_keymat(s.prf, k.sk_d, {}, ni, nr, child.size())) == to_hex(child));
	}
}
