// encapsulate(): every reason an outbound packet is dropped, and that a drop
// does not use up a sequence number.
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <doctest/doctest.h>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;

void check_out_drop(const tunnel::OutboundResult& r, Drop expected, const tunnel::Peer* peer) {
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(drop_name(r.drop) == drop_name(expected));
	CHECK(r.peer == peer);
	CHECK(r.datagram.empty());
}

tunnel::OutboundResult encap(const tunnel::SaTable& t, const Bytes& inner) {
	static test::PacketBuffer buf; // big: keep it off the stack and reuse it
	buf.load(inner);
	return tunnel::encapsulate(t, buf.mem, inner.size());
}

TEST_CASE("encapsulate: an inner destination no peer's allowed_ips cover is no_route") {
	test::Link link = test::make_link({});
	test::Rng rng(1);
	check_out_drop(encap(link.a, test::ipv4_packet(kSiteA.host4(1), test::ip4(10, 9, 0, 1), 60, rng)),
	               Drop::no_route, nullptr);
	check_out_drop(encap(link.a, test::ipv6_packet(kSiteA.host6(1), test::ip6(0xfd00, 9, 0, 1), 60, rng)),
	               Drop::no_route, nullptr);
	// Its own networks are not routed into the tunnel either.
	check_out_drop(encap(link.a, test::packet_v4(kSiteB, kSiteA, 60, rng)), Drop::no_route, nullptr);
	// A v4-mapped IPv6 destination is not the IPv4 address.
	IpAddress mapped = test::ip6(0, 0, 0, 0);
	mapped.bytes[10] = mapped.bytes[11] = 0xff;
	mapped.bytes[12] = 10;
	mapped.bytes[13] = 2;
	mapped.bytes[15] = 7;
	check_out_drop(encap(link.a, test::ipv6_packet(kSiteA.host6(1), mapped, 60, rng)), Drop::no_route,
	               nullptr);
	CHECK(link.b_at_a().out.next_seq == 1);
}

TEST_CASE("encapsulate: a peer without an endpoint is no_endpoint, and no sequence number is used") {
	test::LinkOptions opt;
	opt.endpoint_known = false;
	test::Link link = test::make_link(opt);
	test::Rng rng(2);
	check_out_drop(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)), Drop::no_endpoint,
	               &link.b_at_a());
	check_out_drop(encap(link.a, test::packet_v6(kSiteA, kSiteB, 60, rng)), Drop::no_endpoint,
	               &link.b_at_a());
	CHECK(link.b_at_a().out.next_seq == 1);
	CHECK(link.b_at_a().out.packets.get() == 0);
}

TEST_CASE("encapsulate: anything that is not an IPv4 or IPv6 packet is malformed") {
	test::Link link = test::make_link({});
	test::Rng rng(3);
	Bytes v4 = test::packet_v4(kSiteA, kSiteB, 60, rng);
	Bytes v6 = test::packet_v6(kSiteA, kSiteB, 60, rng);
	check_out_drop(encap(link.a, {}), Drop::malformed, nullptr);
	for (int version : {0, 1, 5, 7, 15}) {
		Bytes p = v4;
		p[0] = uint8_t(version << 4 | 5);
		INFO("version ", version);
		check_out_drop(encap(link.a, p), Drop::malformed, nullptr);
	}
	// Too short to hold the header the version announces.
	check_out_drop(encap(link.a, Bytes(v4.begin(), v4.begin() + 19)), Drop::malformed, nullptr);
	check_out_drop(encap(link.a, Bytes(v6.begin(), v6.begin() + 39)), Drop::malformed, nullptr);
	check_out_drop(encap(link.a, Bytes{0x45}), Drop::malformed, nullptr);
	CHECK(link.b_at_a().out.next_seq == 1);
	// The smallest headers are fine.
	CHECK(encap(link.a, Bytes(v4.begin(), v4.begin() + 20)).verdict == tunnel::Verdict::forward);
	CHECK(encap(link.a, Bytes(v6.begin(), v6.begin() + 40)).verdict == tunnel::Verdict::forward);
}

TEST_CASE("encapsulate without ESN sends 2^32 - 1 and then stops: seq_exhausted (RFC 4303 3.3.3)") {
	test::Rng rng(4);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		opt.esn = false;
		test::Link link = test::make_link(opt);
		tunnel::OutboundSa& sa = link.b_at_a().out;
		sa.next_seq = 0xfffffffe;
		for (uint32_t want : {0xfffffffeu, 0xffffffffu}) {
			Bytes inner = test::packet_v4(kSiteA, kSiteB, 60, rng);
			auto d = test::seal_inner(link.a, inner);
			REQUIRE(d);
			CHECK(((*d)[4] == 0xff && (*d)[5] == 0xff && (*d)[6] == 0xff &&
			       (*d)[7] == uint8_t(want)));
			// The receiver's first packet is far up the space: fine without ESN.
			tunnel::InboundResult r = tunnel::decapsulate(link.b, *d, kSiteA.ep, 1);
			REQUIRE(r.verdict == tunnel::Verdict::forward);
			CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
		}
		for (int i = 0; i < 3; i++)
			check_out_drop(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)),
			               Drop::seq_exhausted, &link.b_at_a());
		CHECK(sa.packets.get() == 2);
		CHECK(sa.last_seq.load() == 0xffffffff);
	}
}

TEST_CASE("encapsulate with ESN goes past 2^32 but stops before the 64-bit counter wraps") {
	test::LinkOptions opt;
	test::Link link = test::make_link(opt);
	test::Rng rng(5);
	tunnel::OutboundSa& sa = link.b_at_a().out;
	sa.next_seq = 0x100000000;
	CHECK(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)).verdict == tunnel::Verdict::forward);
	CHECK(sa.next_seq == 0x100000001);
	sa.next_seq = UINT64_MAX - 1;
	CHECK(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)).verdict == tunnel::Verdict::forward);
	check_out_drop(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)), Drop::seq_exhausted,
	               &link.b_at_a());
	check_out_drop(encap(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)), Drop::seq_exhausted,
	               &link.b_at_a());
	CHECK(sa.next_seq == UINT64_MAX);
}

TEST_CASE("encapsulate: an inner length past the buffer's room, or a buffer without room, is too_big") {
	test::Link link = test::make_link({});
	test::Rng rng(6);
	test::PacketBuffer buf;
	buf.load(test::packet_v4(kSiteA, kSiteB, 60, rng));
	size_t room = tunnel::esp::kBufferSize - tunnel::esp::kHeadroom - tunnel::esp::kTailroom;
	REQUIRE(room == 65535);
	check_out_drop(tunnel::encapsulate(link.a, buf.mem, room + 1), Drop::too_big, nullptr);
	check_out_drop(tunnel::encapsulate(link.a, buf.mem, SIZE_MAX), Drop::too_big, nullptr);
	// A smaller buffer: its own room counts, not kBufferSize.
	std::span<uint8_t> small =
	    std::span(buf.mem).first(tunnel::esp::kHeadroom + 60 + tunnel::esp::kTailroom);
	CHECK(tunnel::encapsulate(link.a, small, 60).verdict == tunnel::Verdict::forward);
	buf.load(test::packet_v4(kSiteA, kSiteB, 61, rng));
	check_out_drop(tunnel::encapsulate(link.a, small, 61), Drop::too_big, nullptr);
	// No room at all for head- and tailroom.
	for (size_t n : {size_t(0), size_t(1), tunnel::esp::kHeadroom,
	                 tunnel::esp::kHeadroom + tunnel::esp::kTailroom - 1})
		check_out_drop(tunnel::encapsulate(link.a, std::span(buf.mem).first(n), 0), Drop::too_big,
		               nullptr);
	CHECK(link.b_at_a().out.next_seq == 2);
}

} // namespace
} // namespace esptun
