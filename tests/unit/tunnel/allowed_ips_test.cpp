// AllowedIps: the longest-prefix match that routes outbound packets and
// checks inbound sources.
#include "tests/unit/tunnel/tunnel_test_util.hpp"
#include "tunnel/allowed_ips.hpp"

#include <doctest/doctest.h>

namespace esptun {
namespace {

using test::ip4;
using test::ip6;
using test::prefix;

// Only the pointer identity matters: the table never dereferences a peer.
tunnel::Peer* tag(uintptr_t n) { return reinterpret_cast<tunnel::Peer*>(n * 64); }

TEST_CASE("AllowedIps IPv4: the longest matching prefix wins") {
	tunnel::AllowedIps t;
	// Inserted out of order on purpose.
	REQUIRE(t.insert(prefix(ip4(10, 1, 2, 0), 24), tag(24)));
	REQUIRE(t.insert(prefix(ip4(0, 0, 0, 0), 0), tag(0)));
	REQUIRE(t.insert(prefix(ip4(10, 1, 2, 3), 32), tag(32)));
	REQUIRE(t.insert(prefix(ip4(10, 0, 0, 0), 8), tag(8)));

	CHECK(t.lookup(ip4(10, 1, 2, 3)) == tag(32));
	CHECK(t.lookup(ip4(10, 1, 2, 4)) == tag(24));
	CHECK(t.lookup(ip4(10, 1, 2, 255)) == tag(24));
	CHECK(t.lookup(ip4(10, 1, 3, 3)) == tag(8));
	CHECK(t.lookup(ip4(10, 255, 255, 255)) == tag(8));
	CHECK(t.lookup(ip4(11, 1, 2, 3)) == tag(0));
	CHECK(t.lookup(ip4(192, 0, 2, 1)) == tag(0));
	CHECK(t.lookup(ip4(9, 255, 255, 255)) == tag(0));
}

TEST_CASE("AllowedIps IPv4: no match gives nullptr; host bits of an inserted prefix are ignored") {
	tunnel::AllowedIps t;
	REQUIRE(t.insert(prefix(ip4(10, 1, 2, 77), 24), tag(1))); // host bits set
	REQUIRE(t.insert(prefix(ip4(172, 16, 0, 0), 12), tag(2)));
	CHECK(t.lookup(ip4(10, 1, 2, 0)) == tag(1));
	CHECK(t.lookup(ip4(10, 1, 2, 200)) == tag(1));
	CHECK(t.lookup(ip4(10, 1, 1, 255)) == nullptr);
	CHECK(t.lookup(ip4(10, 1, 3, 0)) == nullptr);
	CHECK(t.lookup(ip4(172, 31, 255, 255)) == tag(2)); // /12 ends at 172.31.255.255
	CHECK(t.lookup(ip4(172, 32, 0, 0)) == nullptr);
	CHECK(t.lookup(ip4(172, 15, 255, 255)) == nullptr);
	CHECK(tunnel::AllowedIps().lookup(ip4(1, 2, 3, 4)) == nullptr);
}

TEST_CASE("AllowedIps IPv6: the longest matching prefix wins") {
	tunnel::AllowedIps t;
	REQUIRE(t.insert(prefix(ip6(0xfd00, 1, 2, 0), 48), tag(48)));
	REQUIRE(t.insert(prefix(ip6(0, 0, 0, 0), 0), tag(0)));
	REQUIRE(t.insert(prefix(ip6(0xfd00, 1, 2, 9), 128), tag(128)));

	CHECK(t.lookup(ip6(0xfd00, 1, 2, 9)) == tag(128));
	CHECK(t.lookup(ip6(0xfd00, 1, 2, 10)) == tag(48));
	IpAddress far_in_48 = ip6(0xfd00, 1, 2, 9);
	far_in_48.bytes[6] = 0xff; // bit 48 onwards: still inside the /48
	CHECK(t.lookup(far_in_48) == tag(48));
	CHECK(t.lookup(ip6(0xfd00, 1, 3, 9)) == tag(0)); // group 3 differs: outside the /48
	CHECK(t.lookup(ip6(0x2001, 0xdb8, 0, 1)) == tag(0));
}

TEST_CASE("AllowedIps IPv6: no match gives nullptr, also for a bit past a /127") {
	tunnel::AllowedIps t;
	REQUIRE(t.insert(prefix(ip6(0xfd00, 1, 2, 8), 127), tag(1)));
	CHECK(t.lookup(ip6(0xfd00, 1, 2, 8)) == tag(1));
	CHECK(t.lookup(ip6(0xfd00, 1, 2, 9)) == tag(1));
	CHECK(t.lookup(ip6(0xfd00, 1, 2, 10)) == nullptr);
	CHECK(t.lookup(ip6(0xfd00, 1, 2, 7)) == nullptr);
}

TEST_CASE("AllowedIps: an IPv4 address never matches an IPv6 prefix and the reverse") {
	tunnel::AllowedIps t;
	REQUIRE(t.insert(prefix(ip6(0, 0, 0, 0), 0), tag(6)));
	// The same 16 bytes (all zero past the first four) in both families.
	CHECK(t.lookup(ip4(10, 1, 2, 3)) == nullptr);
	CHECK(t.lookup(ip4(0, 0, 0, 0)) == nullptr);

	tunnel::AllowedIps t4;
	REQUIRE(t4.insert(prefix(ip4(0, 0, 0, 0), 0), tag(4)));
	CHECK(t4.lookup(ip6(0, 0, 0, 0)) == nullptr);
	IpAddress v6_like_v4; // ::a01:203 would share bytes with 10.1.2.3 if families mixed
	v6_like_v4.family = Family::v6;
	v6_like_v4.bytes[0] = 10;
	v6_like_v4.bytes[1] = 1;
	v6_like_v4.bytes[2] = 2;
	v6_like_v4.bytes[3] = 3;
	CHECK(t4.lookup(v6_like_v4) == nullptr);

	REQUIRE(t.insert(prefix(ip4(10, 0, 0, 0), 8), tag(4)));
	CHECK(t.lookup(v6_like_v4) == tag(6));
	CHECK(t.lookup(ip4(10, 1, 2, 3)) == tag(4));
}

TEST_CASE("AllowedIps: inserting a prefix twice returns false and keeps the first peer") {
	tunnel::AllowedIps t;
	CHECK(t.insert(prefix(ip4(10, 1, 0, 0), 16), tag(1)));
	CHECK_FALSE(t.insert(prefix(ip4(10, 1, 0, 0), 16), tag(2)));
	CHECK_FALSE(t.insert(prefix(ip4(10, 1, 9, 9), 16), tag(3))); // same network, host bits differ
	CHECK(t.insert(prefix(ip4(10, 1, 0, 0), 17), tag(4)));       // another length is another prefix
	CHECK(t.lookup(ip4(10, 1, 200, 1)) == tag(1));
	CHECK(t.lookup(ip4(10, 1, 100, 1)) == tag(4));

	CHECK(t.insert(prefix(ip6(0xfd00, 1, 0, 0), 48), tag(5)));
	CHECK_FALSE(t.insert(prefix(ip6(0xfd00, 1, 0, 0), 48), tag(6)));
	CHECK(t.lookup(ip6(0xfd00, 1, 0, 1)) == tag(5));
}

} // namespace
} // namespace esptun
