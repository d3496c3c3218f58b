// The IKEv2 engine back to back (engine_test_util.hpp): CHILD_SA and IKE SA
// rekeys from either side, simultaneous rekeys (RFC 7296 section 2.8.1), and
// perfect forward secrecy for CHILD_SA rekeys (sections 1.3.1 and 1.3).
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

/// Brings @p up, then both sides start a CHILD_SA rekey at the same tick,
/// before either hears from the other; runs both to the end, keys checked.
void collide_child_rekeys(Pair& p) {
	p.a->start(p.now);
	p.pump();
	p.check_mbb = true;
	p.now += std::chrono::seconds(11);
	p.a->tick(p.now);
	p.b->tick(p.now);
	REQUIRE(p.ha.out.size() == 1);
	REQUIRE(p.hb.out.size() == 1);
	p.pump();
	p.advance(std::chrono::seconds(2));
	check_keys_cross(p.ha, p.hb);
}

} // namespace

TEST_CASE("CHILD_SA rekeys by either side replace the SA make-before-break") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? rekey_pair(10, 0, 0, 0) : rekey_pair(0, 0, 10, 0);
		p.a->start(p.now);
		p.pump();
		p.check_mbb = true;
		const uint32_t first_in = p.ha.installed.begin()->first;
		for (int round = 1; round <= 3; round++) {
			p.advance(std::chrono::seconds(11));
			check_keys_cross(p.ha, p.hb);
			CHECK(p.ha.installed.begin()->first != first_in);
			CHECK(p.a->status(p.now)[0].child_rekeys == uint32_t(round));
			CHECK(p.b->status(p.now)[0].child_rekeys == uint32_t(round));
		}
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}

TEST_CASE("IKE SA rekeys by either side keep the CHILD_SAs, and the new IKE SA works") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? rekey_pair(0, 10, 0, 0) : rekey_pair(0, 0, 0, 10);
		p.a->start(p.now);
		p.pump();
		const auto spis_before = p.a->status(p.now)[0];
		const uint32_t child_in = p.ha.installed.begin()->first;
		p.advance(std::chrono::seconds(11));
		auto sa = p.a->status(p.now);
		REQUIRE(sa.size() == 1);
		CHECK(sa[0].ike_rekeys == 1);
		CHECK(sa[0].spi_i != spis_before.spi_i);
		CHECK(sa[0].state == "established");
		REQUIRE(p.b->status(p.now).size() == 1);
		CHECK(p.b->status(p.now)[0].spi_r == sa[0].spi_r);
		CHECK(p.ha.installed.begin()->first == child_in);
		check_keys_cross(p.ha, p.hb);
		// The rekeyed IKE SA carries a second rekey, so its keys agree.
		p.advance(std::chrono::seconds(11));
		CHECK(p.a->status(p.now)[0].ike_rekeys == 2);
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("simultaneous CHILD_SA rekeys leave exactly one new SA on both sides") {
	for (int trial = 0; trial < 8; trial++) {
		CAPTURE(trial);
		Pair p = rekey_pair(10, 0, 10, 0);
		collide_child_rekeys(p);
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}

TEST_CASE("simultaneous IKE SA rekeys end with one IKE SA on both sides") {
	Pair p = rekey_pair(0, 10, 0, 10);
	p.a->start(p.now);
	p.pump();
	p.now += std::chrono::seconds(11);
	p.a->tick(p.now);
	p.b->tick(p.now);
	p.pump();
	p.advance(std::chrono::seconds(15));
	auto sa = p.a->status(p.now);
	REQUIRE(sa.size() == 1);
	REQUIRE(p.b->status(p.now).size() == 1);
	CHECK(sa[0].spi_i == p.b->status(p.now)[0].spi_i);
	CHECK(sa[0].ike_rekeys >= 1);
	check_keys_cross(p.ha, p.hb);
}

namespace {

/// rekey_pair() with these esp_proposals on A and B.
Pair pfs_pair(std::vector<const char*> a_esp, std::vector<const char*> b_esp, uint32_t a_child,
              uint32_t b_child) {
	auto suites = [](const std::vector<const char*>& texts) {
		std::vector<EspSuite> out;
		std::string err;
		for (const char* t : texts) {
			auto s = parse_esp_proposal(t, err);
			REQUIRE_MESSAGE(s, err);
			out.push_back(*s);
		}
		return out;
	};
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.esp_proposals = suites(a_esp);
	pb.esp_proposals = suites(b_esp);
	pa.child_rekey_s = a_child;
	pb.child_rekey_s = b_child;
	pa.ike_rekey_s = pb.ike_rekey_s = 0;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	return Pair(pa, pb);
}

std::string child_pfs(const Engine& e, Clock::time_point now) {
	auto st = e.status(now);
	if (st.empty() || st[0].children.size() != 1) return "?";
	return st[0].children[0].pfs;
}

/// The largest message of one rekey round (10 s timers, 11 s on).
size_t rekey_round_max(Pair& p) {
	p.sizes.clear();
	p.advance(std::chrono::seconds(11));
	return p.sizes.empty() ? 0 : *std::max_element(p.sizes.begin(), p.sizes.end());
}

} // namespace

TEST_CASE("CHILD_SA rekeys with PFS by either side agree on keys and carry a key exchange") {
	for (const char* esp : {"aes128gcm16-x25519", "aes256-sha256-modp2048", "aes128gcm16-ecp256"}) {
		for (int who : {0, 1}) {
			CAPTURE(esp);
			CAPTURE(who);
			Pair p = who == 0 ? pfs_pair({esp}, {esp}, 10, 0) : pfs_pair({esp}, {esp}, 0, 10);
			p.a->start(p.now);
			p.pump();
			p.check_mbb = true;
			REQUIRE(p.a->status(p.now).size() == 1);
			// IKE_AUTH: the first CHILD_SA's keys come from the IKE SA, no PFS.
			CHECK(child_pfs(*p.a, p.now).empty());
			const std::string group = std::string(esp).substr(std::string(esp).rfind('-') + 1);
			SecretBytes last_enc = p.ha.installed.begin()->second.enc_out;
			for (int round = 1; round <= 3; round++) {
				CAPTURE(round);
				const size_t biggest = rekey_round_max(p);
				check_keys_cross(p.ha, p.hb);
				CHECK(p.a->status(p.now)[0].child_rekeys == uint32_t(round));
				CHECK(child_pfs(*p.a, p.now) == group);
				CHECK(child_pfs(*p.b, p.now) == group);
				CHECK(p.ha.installed.begin()->second.enc_out != last_enc);
				last_enc = p.ha.installed.begin()->second.enc_out;
				// The KE payloads make the exchange bigger by at least the public value.
				CHECK(biggest >= (group == "modp2048" ? 256u
				                  : group == "ecp256" ? 64u
				                                      : 32u) +
				                     100u);
			}
			CHECK(p.mbb_violations == 0);
			CHECK(p.ha.reserved.empty());
			CHECK(p.hb.reserved.empty());
			CHECK((who == 0 ? p.ha : p.hb).logged("PFS " + group));
		}
	}
	// The same rekey without PFS is smaller by the two KE payloads.
	Pair plain = pfs_pair({"aes256-sha256"}, {"aes256-sha256"}, 10, 0);
	plain.a->start(plain.now);
	plain.pump();
	Pair pfs = pfs_pair({"aes256-sha256-modp2048"}, {"aes256-sha256-modp2048"}, 10, 0);
	pfs.a->start(pfs.now);
	pfs.pump();
	CHECK(rekey_round_max(pfs) >= rekey_round_max(plain) + 256);
	CHECK(child_pfs(*plain.a, plain.now).empty());
}

TEST_CASE("a KE of another group gets INVALID_KE_PAYLOAD with the wanted group, and the rekey is retried") {
	// A sends x25519 first; B only takes ecp256.
	Pair p = pfs_pair({"aes128gcm16-x25519", "aes128gcm16-ecp256"}, {"aes128gcm16-ecp256"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.a->status(p.now).size() == 1);
	check_keys_cross(p.ha, p.hb);
	p.advance(std::chrono::seconds(11));
	CHECK(p.hb.logged("answering INVALID_KE_PAYLOAD"));
	CHECK(p.ha.logged("wants group ecp256"));
	check_keys_cross(p.ha, p.hb);
	CHECK(child_pfs(*p.a, p.now) == "ecp256");
	CHECK(child_pfs(*p.b, p.now) == "ecp256");
	CHECK(p.a->status(p.now)[0].child_rekeys == 1);
	CHECK(p.ha.reserved.empty());
	// The next rekey starts with the group the CHILD_SA has: no second refusal.
	p.ha.logs.clear();
	p.hb.logs.clear();
	p.advance(std::chrono::seconds(11));
	CHECK(!p.hb.logged("INVALID_KE_PAYLOAD"));
	CHECK(p.a->status(p.now)[0].child_rekeys == 2);
	check_keys_cross(p.ha, p.hb);
}

TEST_CASE("a group the initiator did not offer is not retried") {
	Pair p = pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16-ecp256"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.a->status(p.now).size() == 1); // IKE_AUTH ignores the groups
	const uint32_t first_in = p.ha.installed.begin()->first;
	p.advance(std::chrono::seconds(11));
	// B finds no proposal with its group: NO_PROPOSAL_CHOSEN, the old SA stays.
	CHECK(p.hb.logged("no ESP proposal in common"));
	CHECK(p.ha.logged("CHILD_SA rekey refused: NO_PROPOSAL_CHOSEN"));
	CHECK(p.ha.installed.begin()->first == first_in);
	check_keys_cross(p.ha, p.hb);
	CHECK(p.ha.reserved.empty());
}

TEST_CASE("a PFS-only peer against a policy without PFS: NO_PROPOSAL_CHOSEN with a clear log") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16"}, 10, 0)
		                  : pfs_pair({"aes128gcm16"}, {"aes128gcm16-x25519"}, 0, 10);
		p.a->start(p.now);
		p.pump();
		REQUIRE(p.a->status(p.now).size() == 1);
		const uint32_t first_in = p.ha.installed.begin()->first;
		p.advance(std::chrono::seconds(11));
		FakeHost& responder = who == 0 ? p.hb : p.ha;
		FakeHost& initiator = who == 0 ? p.ha : p.hb;
		CHECK(responder.logged("CHILD_SA rekey from the peer refused: no ESP proposal in common; it "
		                       "offered aes128gcm16-x25519-esn/noesn with a key exchange"));
		CHECK(initiator.logged("CHILD_SA rekey refused: NO_PROPOSAL_CHOSEN"));
		CHECK(p.ha.installed.begin()->first == first_in);
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("mixed proposals: a peer without PFS picks the plain one and the KE is ignored") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? pfs_pair({"aes128gcm16-x25519", "aes128gcm16"}, {"aes128gcm16"}, 10, 0)
		                  : pfs_pair({"aes128gcm16"}, {"aes128gcm16-x25519", "aes128gcm16"}, 0, 10);
		p.a->start(p.now);
		p.pump();
		p.advance(std::chrono::seconds(11));
		check_keys_cross(p.ha, p.hb);
		CHECK(p.a->status(p.now)[0].child_rekeys == 1);
		CHECK(child_pfs(*p.a, p.now).empty());
		CHECK(child_pfs(*p.b, p.now).empty());
	}
	// Both with the mixed list: PFS wins (it comes first).
	Pair p =
	    pfs_pair({"aes128gcm16-x25519", "aes128gcm16"}, {"aes128gcm16-x25519", "aes128gcm16"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	p.advance(std::chrono::seconds(11));
	check_keys_cross(p.ha, p.hb);
	CHECK(child_pfs(*p.b, p.now) == "x25519");
}

TEST_CASE("simultaneous CHILD_SA rekeys with PFS leave one new SA with matching keys") {
	for (int trial = 0; trial < 4; trial++) {
		CAPTURE(trial);
		Pair p = pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16-x25519"}, 10, 10);
		collide_child_rekeys(p);
		CHECK(child_pfs(*p.a, p.now) == "x25519");
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}
