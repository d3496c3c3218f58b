// AddressPool: leases of client addresses, and the host routes they make in
// the SA table (tunnel/address_pool.hpp).
#include "tests/unit/tunnel/tunnel_test_util.hpp"
#include "tunnel/address_pool.hpp"
#include "tunnel/sa.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <stdexcept>
#include <thread>
#include <vector>

namespace esptun {
namespace {

using test::ip4;
using test::ip6;
using test::prefix;
using test::run_time_peer;

std::string str(const std::optional<IpAddress>& a) { return a ? to_string(*a) : "none"; }

TEST_CASE("AddressPool hands out free addresses round robin, skipping reserved ones") {
	// 10.77.0.0/29: .0 (network) and .7 (broadcast) never; .1 is the
	// gateway's, .3 a fixed client's.
	tunnel::AddressPool pool({prefix(ip4(10, 77, 0, 0), 29)},
	                         {prefix(ip4(10, 77, 0, 1), 32), prefix(ip4(10, 77, 0, 3), 32)});
	REQUIRE(pool.usage().size() == 1);
	CHECK(pool.usage()[0].usable == 4);
	tunnel::Peer a, b, c, d, e;
	CHECK(str(pool.lease(a, Family::v4)) == "10.77.0.2");
	CHECK(str(pool.lease(a, Family::v4)) == "10.77.0.2"); // the one it holds
	CHECK(str(pool.lease(b, Family::v4)) == "10.77.0.4");
	CHECK(str(pool.lease(c, Family::v4)) == "10.77.0.5");
	CHECK(str(pool.lease(d, Family::v4)) == "10.77.0.6");
	CHECK(pool.usage()[0].leased == 4);
	CHECK(!pool.lease(e, Family::v4)); // full
	CHECK(!pool.lease(e, Family::v6)); // no IPv6 pool at all
	CHECK(pool.lookup(ip4(10, 77, 0, 4)) == &b);
	CHECK(pool.lookup(ip4(10, 77, 0, 3)) == nullptr);
	CHECK(pool.lookup(ip4(10, 78, 0, 4)) == nullptr);

	pool.release(b);
	CHECK(pool.lookup(ip4(10, 77, 0, 4)) == nullptr);
	CHECK(pool.leases(b).empty());
	CHECK(str(pool.lease(e, Family::v4)) == "10.77.0.4"); // the only free one
	pool.release(a);
	pool.release(e);
	// b comes back: its previous address .4 is free again, so it gets it.
	CHECK(str(pool.lease(b, Family::v4)) == "10.77.0.4");
	// The search goes on after the last address handed out: .2 is free.
	CHECK(str(pool.lease(e, Family::v4)) == "10.77.0.2");
	pool.release(c);
	// a's previous .2 is taken now: it gets the next free one.
	CHECK(str(pool.lease(a, Family::v4)) == "10.77.0.5");
	CHECK(pool.usage()[0].leased == 4);
}

TEST_CASE("AddressPool IPv6: every address of the prefix is usable, both families per peer") {
	tunnel::AddressPool pool({prefix(ip6(0xfd77, 0, 0, 0), 126), prefix(ip4(10, 77, 1, 0), 30)}, {});
	tunnel::Peer a;
	CHECK(str(pool.lease(a, Family::v6)) == "fd77::");
	CHECK(str(pool.lease(a, Family::v4)) == "10.77.1.1");
	CHECK(pool.leases(a).size() == 2);
	CHECK(pool.lookup(ip6(0xfd77, 0, 0, 0)) == &a);
	CHECK(pool.usage()[0].usable == 4);
	CHECK(pool.usage()[1].usable == 2);
	pool.release(a);
	CHECK(pool.lookup(ip6(0xfd77, 0, 0, 0)) == nullptr);
	CHECK(pool.lookup(ip4(10, 77, 1, 1)) == nullptr);
}

TEST_CASE("AddressPool refuses pools that are too large or overlap; covering prefixes reserve nothing") {
	CHECK_THROWS_AS(tunnel::AddressPool({prefix(ip4(10, 0, 0, 0), 15)}, {}), std::invalid_argument);
	CHECK_THROWS_AS(tunnel::AddressPool({prefix(ip6(0xfd00, 0, 0, 0), 111)}, {}), std::invalid_argument);
	CHECK_THROWS_AS(
	    tunnel::AddressPool({prefix(ip4(10, 0, 0, 0), 24), prefix(ip4(10, 0, 0, 128), 25)}, {}),
	    std::invalid_argument);
	tunnel::AddressPool big({prefix(ip4(10, 0, 0, 0), 16)}, {prefix(ip4(10, 0, 0, 0), 8)});
	CHECK(big.usage()[0].usable == 65534);
}

TEST_CASE("a lease is a host route in the SA table, ahead of allowed_ips, checked both ways") {
	// A static site peer claims 10.77.0.0/24 as a whole; a dynamic client
	// leases 10.77.0.9 out of the pool inside it.
	tunnel::PeerParams site = run_time_peer("site", std::nullopt, {prefix(ip4(10, 77, 0, 0), 24)});
	tunnel::PeerParams client = run_time_peer("client", std::nullopt, {});
	tunnel::SaTable table({site, client});
	table.set_address_pool(tunnel::AddressPool({prefix(ip4(10, 77, 0, 8), 29)}, {}));
	tunnel::Peer& s = *table.peers()[0];
	tunnel::Peer& c = *table.peers()[1];
	CHECK(table.route(ip4(10, 77, 0, 9)) == &s);
	CHECK(str(table.address_pool().lease(c, Family::v4)) == "10.77.0.9");
	CHECK(table.route(ip4(10, 77, 0, 9)) == &c);
	CHECK(table.route(ip4(10, 77, 0, 10)) == &s);
	table.address_pool().release(c);
	CHECK(table.route(ip4(10, 77, 0, 9)) == &s);
}

TEST_CASE("RouteCache answers as the table did for the same address until cleared") {
	tunnel::PeerParams site = run_time_peer("site", std::nullopt, {prefix(ip4(10, 77, 0, 0), 24)});
	tunnel::PeerParams other = run_time_peer("other", std::nullopt, {prefix(ip4(10, 78, 0, 0), 16)});
	tunnel::PeerParams client = run_time_peer("client", std::nullopt, {});
	tunnel::SaTable table({site, other, client});
	table.set_address_pool(tunnel::AddressPool({prefix(ip4(10, 77, 0, 8), 29)}, {}));
	tunnel::Peer& s = *table.peers()[0];
	tunnel::Peer& o = *table.peers()[1];
	tunnel::Peer& c = *table.peers()[2];
	tunnel::RouteCache cache;
	// Each new address is looked up: alternating ones never get a stale answer.
	for (int i = 0; i < 3; i++) {
		CHECK(cache.route(table, ip4(10, 77, 0, 9)) == &s);
		CHECK(cache.route(table, ip4(10, 78, 3, 4)) == &o);
		CHECK(cache.route(table, ip4(10, 79, 0, 1)) == nullptr);
		CHECK(cache.route(table, ip6(0xfd00, 9, 0, 1)) == nullptr);
	}
	CHECK(cache.route(table, ip4(10, 77, 0, 9)) == &s);
	REQUIRE(str(table.address_pool().lease(c, Family::v4)) == "10.77.0.9");
	// Within a pass the cache keeps the answer it had; the next pass clears it.
	CHECK(cache.route(table, ip4(10, 77, 0, 9)) == &s);
	cache.clear();
	CHECK(cache.route(table, ip4(10, 77, 0, 9)) == &c);
	CHECK(cache.route(table, ip4(10, 77, 0, 10)) == &s);
}

TEST_CASE("readers see a lease whole or not at all while it changes") {
	tunnel::AddressPool pool({prefix(ip4(10, 77, 0, 0), 28)}, {});
	tunnel::Peer peers[4];
	std::atomic<bool> stop{false};
	std::atomic<long> wrong{0}, seen{0};
	std::thread reader([&] {
		while (!stop.load(std::memory_order_relaxed))
			for (uint8_t i = 0; i < 16; i++) {
				tunnel::Peer* p = pool.lookup(ip4(10, 77, 0, i));
				if (!p) continue;
				seen++;
				if (p < &peers[0] || p > &peers[3]) wrong++;
			}
	});
	// Until the reader has seen enough leases (it may start late).
	for (long round = 0; round < 20000 || (seen < 1000 && round < 50000000); round++) {
		tunnel::Peer& p = peers[round % 4];
		REQUIRE(pool.lease(p, Family::v4));
		if (round % 3 == 0) pool.release(peers[(round + 1) % 4]);
	}
	stop = true;
	reader.join();
	CHECK(wrong == 0);
	CHECK(seen > 0);
}

} // namespace
} // namespace esptun
