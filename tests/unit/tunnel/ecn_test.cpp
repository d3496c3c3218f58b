// ECN through the tunnel (RFC 6040 normal mode): encapsulate() hands the
// inner ECN field to the outer header, decapsulate() combines the outer mark
// with the inner field by RFC 6040's table, and the IPv4 header checksum
// stays right. The table is written out here from the RFC, cell by cell,
// not derived from tunnel/ecn.hpp.
#include "tests/unit/tunnel/tunnel_test_util.hpp"
#include "tunnel/ecn.hpp"

#include <doctest/doctest.h>

#include <string>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;

constexpr uint8_t kNot = 0, kE1 = 1, kE0 = 2, kCE = 3;
constexpr int kDrop = -1;
const char* const kName[] = {"Not-ECT", "ECT(1)", "ECT(0)", "CE"};

/// RFC 6040 section 4.2, Figure 4: the inner field after decapsulation,
/// [inner][outer], or kDrop.
constexpr int kTable[4][4] = {
    //            outer: Not-ECT ECT(1) ECT(0) CE
    /* Not-ECT */ {kNot, kNot, kNot, kDrop},
    /* ECT(1)  */ {kE1, kE1, kE1, kCE},
    /* ECT(0)  */ {kE0, kE1, kE0, kCE},
    /* CE      */ {kCE, kCE, kCE, kCE},
};

/// @p with its ECN field set to @ecn, other bits of the TOS / traffic class
/// as given (a DSCP that must survive), IPv4 checksum recomputed in full.
Bytes marked(Bytes p, uint8_t ecn, uint8_t dscp) {
	const uint8_t tc = uint8_t(dscp << 2 | ecn);
	if ((p[0] >> 4) == 4) {
		p[1] = tc;
		p[10] = p[11] = 0;
		const uint16_t sum = test::ipv4_checksum(std::span(p).first(20));
		p[10] = uint8_t(sum >> 8);
		p[11] = uint8_t(sum);
	} else {
		p[0] = uint8_t(0x60 | tc >> 4);
		p[1] = uint8_t((p[1] & 0x0f) | (tc & 0x0f) << 4);
	}
	return p;
}

TEST_CASE("every cell of RFC 6040's decapsulation table, IPv4 and IPv6 inner packets") {
	constexpr int64_t kNow = 1'700'000'000'000;
	test::Link link = test::make_link(test::LinkOptions{});
	test::Rng rng(6040);
	for (int family : {4, 6}) {
		for (uint8_t inner_ecn = 0; inner_ecn < 4; inner_ecn++) {
			for (uint8_t outer_ecn = 0; outer_ecn < 4; outer_ecn++) {
				INFO("IPv", family, " inner ", kName[inner_ecn], " outer ", kName[outer_ecn]);
				const uint8_t dscp = 46; // EF: must come out as it went in
				const Bytes inner =
				    marked(family == 4 ? test::packet_v4(kSiteA, kSiteB, 300, rng)
				                       : test::packet_v6(kSiteA, kSiteB, 300, rng),
				           inner_ecn, dscp);
				test::PacketBuffer buf;
				buf.load(inner);
				const tunnel::OutboundResult out =
				    tunnel::encapsulate(link.a, buf.mem, inner.size());
				REQUIRE(out.verdict == tunnel::Verdict::forward);
				// Encapsulation copies the field, CE included (section 4.1).
				CHECK(int(out.ecn) == int(inner_ecn));

				const tunnel::InboundResult in = tunnel::decapsulate(
				    link.b, out.datagram, kSiteA.ep, kNow, 0, nullptr, outer_ecn);
				const int want = kTable[inner_ecn][outer_ecn];
				if (want == kDrop) {
					CHECK(in.verdict == tunnel::Verdict::drop);
					CHECK(in.drop == Drop::ce_not_ect);
					CHECK(in.peer == &link.a_at_b());
					continue;
				}
				REQUIRE(in.verdict == tunnel::Verdict::forward);
				const Bytes got(in.inner.begin(), in.inner.end());
				// Exactly the inner packet with the new field: DSCP, the
				// rest of the header and the payload untouched, and for IPv4
				// a header checksum equal to a full recomputation.
				CHECK(got == marked(inner, uint8_t(want), dscp));
				CHECK(int(tunnel::ecn::field(got)) == want);
				if (family == 4) CHECK(test::ipv4_checksum(std::span(got).first(20)) == 0);
			}
		}
	}
}

TEST_CASE("the incremental IPv4 checksum update equals a full recomputation for every TOS and checksum") {
	// Every old TOS and new ECN field over headers whose checksums cover the
	// whole range, the one's complement corner cases (0x0000, 0xffff) included.
	test::Rng rng(1624);
	int checked = 0;
	for (int round = 0; round < 200; round++) {
		Bytes p = test::ipv4_packet(test::ip4(10, 1, 0, 5), test::ip4(10, 2, 0, 7), 60, rng);
		// Vary the ID so that the checksum takes many values.
		p[4] = uint8_t(rng.u32() >> 8);
		p[5] = uint8_t(round);
		for (int tos = 0; tos < 256; tos++) {
			for (uint8_t ecn = 0; ecn < 4; ecn++) {
				p[1] = uint8_t(tos);
				p[10] = p[11] = 0;
				uint16_t sum = test::ipv4_checksum(std::span(p).first(20));
				p[10] = uint8_t(sum >> 8);
				p[11] = uint8_t(sum);
				Bytes q = p;
				tunnel::ecn::set_field(q, ecn);
				REQUIRE(q[1] == uint8_t((tos & 0xfc) | ecn));
				REQUIRE(test::ipv4_checksum(std::span(q).first(20)) == 0);
				checked++;
			}
		}
	}
	CHECK(checked == 200 * 256 * 4);
}

TEST_CASE("ECN helpers leave packets too short to hold the field alone") {
	Bytes one{0x45};
	tunnel::ecn::set_field(one, kCE);
	CHECK(one == Bytes{0x45});
	CHECK(tunnel::ecn::field(one) == kNot);
	Bytes short_v4{0x45, 0x02, 0, 20}; // an IPv4 header cut at 4 bytes: no checksum to fix
	tunnel::ecn::set_field(short_v4, kCE);
	CHECK(short_v4 == Bytes{0x45, 0x02, 0, 20});
}

} // namespace
} // namespace esptun
