// CHILD_SA lifetimes by volume (issue 16): a CHILD_SA is rekeyed once
// either direction carried rekey_bytes or rekey_packets, and one without
// ESN always before its 32-bit sequence numbers run out (RFC 4303 section
// 3.3.3), learnt from the host's counters (Host::child_usage()) at each tick.
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;
using namespace std::chrono_literals;

namespace {

EspSuite esp(const char* text) {
	std::string err;
	std::optional<EspSuite> s = parse_esp_proposal(text, err);
	REQUIRE_MESSAGE(s, err);
	return *s;
}

/// An established pair without time rekeys or liveness checks; A has
/// @bytes / @packets limits, both sides the ESP suite @suite.
Pair volume_pair(uint64_t bytes, uint64_t packets, const char* suite = "aes128gcm16") {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.child_rekey_s = pa.ike_rekey_s = pb.child_rekey_s = pb.ike_rekey_s = 0;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	pa.esp_proposals = pb.esp_proposals = {esp(suite)};
	pa.child_rekey_bytes = bytes;
	pa.child_rekey_packets = packets;
	return Pair(pa, pb);
}

/// A's one CHILD_SA, by inbound SPI.
uint32_t a_spi(Pair& p) {
	REQUIRE(p.ha.installed.size() == 1);
	return p.ha.installed.begin()->first;
}

uint32_t rekeys(Pair& p) { return p.a->status(p.now).at(0).child_rekeys; }

} // namespace

TEST_CASE("outbound bytes past rekey_bytes start a CHILD_SA rekey, once") {
	Pair p = volume_pair(1 << 20, 0);
	p.a->start(p.now);
	p.pump();
	const uint32_t old = a_spi(p);
	p.ha.usage[old].out_bytes = (1 << 20) - 1;
	p.advance(2000ms);
	CHECK(rekeys(p) == 0);
	CHECK(p.ha.installed.count(old) == 1);
	p.ha.usage[old].out_bytes = 1 << 20;
	p.advance(2000ms);
	CHECK(rekeys(p) == 1);
	CHECK(p.ha.logged("rekey_bytes reached"));
	CHECK(p.ha.installed.count(old) == 0); // replaced and deleted
	check_keys_cross(p.ha, p.hb);
	// The new CHILD_SA has carried nothing: no further rekey.
	p.advance(5000ms);
	CHECK(rekeys(p) == 1);
}

TEST_CASE("inbound bytes count too, and packets against rekey_packets") {
	SUBCASE("bytes") {
		Pair p = volume_pair(1 << 20, 0);
		p.a->start(p.now);
		p.pump();
		p.ha.usage[a_spi(p)].in_bytes = 5 << 20;
		p.advance(1000ms);
		CHECK(rekeys(p) == 1);
	}
	SUBCASE("packets") {
		Pair p = volume_pair(0, 5000);
		p.a->start(p.now);
		p.pump();
		const uint32_t old = a_spi(p);
		p.ha.usage[old].out_packets = 4999;
		p.ha.usage[old].in_bytes = uint64_t(1) << 40; // no byte limit set
		p.advance(1000ms);
		CHECK(rekeys(p) == 0);
		p.ha.usage[old].in_packets = 5000;
		p.advance(1000ms);
		CHECK(rekeys(p) == 1);
		CHECK(p.ha.logged("rekey_packets reached"));
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("without ESN a CHILD_SA is rekeyed before its sequence numbers wrap, with no limits set") {
	Pair p = volume_pair(0, 0, "aes128gcm16-noesn");
	p.a->start(p.now);
	p.pump();
	const uint32_t old = a_spi(p);
	REQUIRE_FALSE(p.ha.installed.at(old).esn);
	p.ha.usage[old].out_seq = kSeqRekeyAt - 1;
	p.advance(1000ms);
	CHECK(rekeys(p) == 0);
	SUBCASE("outbound") { p.ha.usage[old].out_seq = kSeqRekeyAt; }
	SUBCASE("inbound") { p.ha.usage[old].in_seq = kSeqRekeyAt + 1000; }
	p.advance(1000ms);
	CHECK(rekeys(p) == 1);
	CHECK(p.ha.logged("sequence numbers near their end"));
	check_keys_cross(p.ha, p.hb);
	CHECK(kSeqRekeyAt < (uint64_t(1) << 32));
	CHECK((uint64_t(1) << 32) - kSeqRekeyAt >= (uint64_t(1) << 28));
}

TEST_CASE("with ESN and no limits the sequence number is no reason to rekey, and the host is not asked") {
	Pair p = volume_pair(0, 0, "aes128gcm16-esn");
	p.a->start(p.now);
	p.pump();
	const uint32_t old = a_spi(p);
	REQUIRE(p.ha.installed.at(old).esn);
	p.ha.usage[old].out_seq = (uint64_t(1) << 32) + 5;
	p.ha.usage[old].out_bytes = uint64_t(1) << 40;
	p.advance(3000ms);
	CHECK(rekeys(p) == 0);
	CHECK(p.ha.usage_queries == 0);
	CHECK(p.ha.installed.count(old) == 1);
}
