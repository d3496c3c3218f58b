// An inbound CHILD_SA's local traffic selectors (tunnel/sa.hpp
// InboundSa::local): decapsulate() forwards an authenticated packet only
// when its inner destination is inside them, and counts the rest as
// dest_policy (RFC 4301 section 5.2: inbound traffic is checked against the
// SA's selectors after it is opened).
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <doctest/doctest.h>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;

/// Fresh random keys for one direction of a CHILD_SA.
tunnel::ChildSaKeys keys_for(uint32_t spi, test::Rng& rng) {
	const crypto::CipherSpec& spec = crypto::cipher_spec(crypto::Cipher::aes128_gcm);
	tunnel::ChildSaKeys k;
	k.spi = spi;
	k.enc_key = secret_copy(rng.bytes(spec.enc_key_len));
	k.auth_key = secret_copy(rng.bytes(spec.auth_key_len));
	return k;
}

/// A keyed at run time towards B, whose inbound SA has local selectors @local.
struct Link {
	tunnel::SaTable a{{test::run_time_peer(kSiteB.name, kSiteB.ep, {kSiteB.v4, kSiteB.v6})}, 1};
	tunnel::SaTable b{{test::run_time_peer(kSiteA.name, kSiteA.ep, {kSiteA.v4, kSiteA.v6})}, 1};

	Link(std::vector<tunnel::AddressRange> local, test::Rng& rng) {
		tunnel::ChildSaKeys k = keys_for(b.allocate_spi(), rng);
		k.local = std::move(local);
		b.install_inbound(*b.peers().at(0), k);
		a.install_outbound(*a.peers().at(0), k);
	}

	/// A's packet @inner, sealed and opened at B.
	tunnel::InboundResult send(const Bytes& inner) {
		test::PacketBuffer buf;
		buf.load(inner);
		const tunnel::OutboundResult out = tunnel::encapsulate(a, buf.mem, inner.size(), 0);
		REQUIRE(out.verdict == tunnel::Verdict::forward);
		dgram.assign(out.datagram.begin(), out.datagram.end());
		return tunnel::decapsulate(b, dgram, kSiteA.ep, 1, 0);
	}
	Bytes dgram;
};

IpAddress addr(const char* text) { return *parse_ip(text); }

} // namespace

TEST_CASE("inbound ESP to a destination outside the CHILD_SA's local selectors is dropped as dest_policy") {
	test::Rng rng(7);
	// B's side of this CHILD_SA: 10.2.5.0-10.2.5.255 only, no IPv6.
	Link link({{addr("10.2.5.0"), addr("10.2.5.255")}}, rng);
	const IpAddress src = kSiteA.host4(9);
	tunnel::InboundResult r = link.send(test::ipv4_packet(src, addr("10.2.5.7"), 80, rng));
	CHECK(r.verdict == tunnel::Verdict::forward);
	r = link.send(test::ipv4_packet(src, addr("10.2.5.255"), 80, rng));
	CHECK(r.verdict == tunnel::Verdict::forward);
	r = link.send(test::ipv4_packet(src, addr("10.2.6.0"), 80, rng));
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(drop_name(r.drop) == "dest_policy");
	r = link.send(test::ipv4_packet(src, addr("10.2.4.255"), 80, rng));
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(r.drop == Drop::dest_policy);
	r = link.send(test::ipv6_packet(kSiteA.host6(9), kSiteB.host6(1), 80, rng));
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(r.drop == Drop::dest_policy);
	CHECK(link.b.sa_info(*link.b.peers().at(0)).totals.rx_packets == 2);
}

TEST_CASE("an inbound CHILD_SA without local selectors takes any destination, both families") {
	test::Rng rng(8);
	Link link({}, rng);
	CHECK(link.send(test::ipv4_packet(kSiteA.host4(9), kSiteB.host4(77), 80, rng)).verdict ==
	      tunnel::Verdict::forward);
	CHECK(link.send(test::ipv6_packet(kSiteA.host6(9), kSiteB.host6(1), 80, rng)).verdict ==
	      tunnel::Verdict::forward);
}

TEST_CASE("address ranges hold their ends, and only addresses of their own family") {
	const tunnel::AddressRange r{addr("fd00::10"), addr("fd00::1f")};
	CHECK(r.contains(addr("fd00::10")));
	CHECK(r.contains(addr("fd00::1f")));
	CHECK_FALSE(r.contains(addr("fd00::20")));
	CHECK_FALSE(r.contains(addr("fd00::f")));
	CHECK_FALSE(r.contains(addr("0.0.0.16")));
}

} // namespace esptun
