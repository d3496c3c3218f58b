// tun + rtnetlink, each test in its own network namespace: MTU, link state,
// addresses, routes, route lookups, packets both ways between a UDP socket
// and the tun, NetConfigGuard clean-up, and the text of errors.
#include <algorithm>
#include <array>
#include <doctest/doctest.h>
#include <string>
#include <vector>

#include "base/bytes.hpp"
#include "platform/net_config_guard.hpp"
#include "platform/netlink.hpp"
#include "platform/tun.hpp"
#include "platform/udp_socket.hpp"
#include "tests/unit/platform/platform_test_util.hpp"

#include <unistd.h>

using namespace esptun;
using namespace esptun::platform;
using esptun::SystemError;
using namespace esptun::platform::test;

namespace {

/// A tun "esp0", MTU 1400, up, with 10.99.0.1/24 and fd00:99::1/64.
TunDevice configured_tun() {
	TunDevice tun = open_tun("esp0");
	set_link_mtu(tun.ifindex, 1400);
	set_link_up(tun.ifindex);
	add_address(tun.ifindex, prefix("10.99.0.1/24"));
	add_address(tun.ifindex, prefix("fd00:99::1/64"));
	return tun;
}

/// read_packet() - the first packet from @fd with IP version @version and
/// next protocol UDP, skipping others (IPv6 router solicitations, MLD...)
std::vector<uint8_t> read_udp_packet(int fd, unsigned version) {
	std::array<uint8_t, 2048> buf;
	for (int tries = 0; tries < 50; tries++) {
		if (!wait_readable(fd)) break;
		const IoResult r = tun_read(fd, buf);
		if (!r.ok()) continue;
		const auto n = static_cast<size_t>(r.n);
		if (n < 1 || buf[0] >> 4 != version) continue;
		const uint8_t proto = version == 4 ? buf[9] : buf[6];
		if (n >= 28 && proto == 17) return {buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n)};
	}
	FAIL("no UDP packet arrived on the tun");
	return {};
}

/// ipv4_checksum() - RFC 791 header checksum over @hdr
uint16_t ipv4_checksum(std::span<const uint8_t> hdr) {
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < hdr.size(); i += 2)
		sum += load_be16(&hdr[i]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

/// ipv4_udp_packet() - IPv4/UDP packet from @src to @dst carrying @payload
/// (UDP checksum 0: allowed for IPv4, RFC 768)
std::vector<uint8_t> ipv4_udp_packet(const Endpoint& src, const Endpoint& dst, std::string_view payload) {
	std::vector<uint8_t> p(28 + payload.size());
	p[0] = 0x45;
	store_be16(&p[2], static_cast<uint16_t>(p.size()));
	p[8] = 64;
	p[9] = 17;
	std::copy_n(src.addr.bytes.begin(), 4, &p[12]);
	std::copy_n(dst.addr.bytes.begin(), 4, &p[16]);
	store_be16(&p[10], ipv4_checksum({p.data(), 20}));
	store_be16(&p[20], src.port);
	store_be16(&p[22], dst.port);
	store_be16(&p[24], static_cast<uint16_t>(8 + payload.size()));
	std::copy(payload.begin(), payload.end(), &p[28]);
	return p;
}

std::span<const uint8_t> bytes_of(std::string_view s) {
	return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

} // namespace

TEST_CASE("open_tun creates a named layer-3 interface that vanishes when its fd closes") {
	enter_fresh_netns();
	TunDevice tun = open_tun("esp0");
	CHECK(tun.name == "esp0");
	CHECK(tun.ifindex > 1);
	CHECK(::if_nametoindex("esp0") == static_cast<unsigned>(tun.ifindex));
	std::array<uint8_t, 64> buf;
	CHECK(tun_read(tun.fd.get(), buf).err == EAGAIN); // non-blocking
	tun.fd.reset();
	CHECK(::if_nametoindex("esp0") == 0);
}

TEST_CASE("open_tun with an empty name lets the kernel choose one") {
	enter_fresh_netns();
	TunDevice tun = open_tun("");
	CHECK(tun.name.starts_with("tun"));
	CHECK(::if_nametoindex(tun.name.c_str()) == static_cast<unsigned>(tun.ifindex));
}

TEST_CASE("a multi-queue tun accepts a second queue under the same name") {
	enter_fresh_netns();
	TunDevice q0 = open_tun("esp0", true);
	TunDevice q1 = open_tun("esp0", true);
	CHECK(q0.ifindex == q1.ifindex);
	q0.fd.reset();
	CHECK(::if_nametoindex("esp0") == static_cast<unsigned>(q1.ifindex));
}

TEST_CASE("set_link_mtu and link_mtu agree; the route MTU follows the link") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	CHECK(link_mtu(tun.ifindex) == 1400);
	set_link_mtu(tun.ifindex, 1380);
	CHECK(link_mtu(tun.ifindex) == 1380);
	add_route(prefix("10.98.0.0/24"), tun.ifindex);
	CHECK(path_mtu(ip("10.98.0.5")) == 1380u);
	CHECK(path_mtu(ip("fd00:99::5")) == 1380u);
}

TEST_CASE("get_route reports interface, gateway and preferred source") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	add_route(prefix("10.98.0.0/24"), tun.ifindex);
	add_route(prefix("10.97.0.0/16"), tun.ifindex, ip("10.99.0.2"));
	add_route(prefix("fd01::/64"), tun.ifindex);
	add_route(prefix("fd02::/48"), tun.ifindex, ip("fd00:99::2"));

	auto direct = get_route(ip("10.98.0.5"));
	REQUIRE(direct);
	CHECK(direct->ifindex == tun.ifindex);
	CHECK_FALSE(direct->gateway);
	CHECK(direct->prefsrc == ip("10.99.0.1"));

	auto via = get_route(ip("10.97.1.1"));
	REQUIRE(via);
	CHECK(via->ifindex == tun.ifindex);
	CHECK(via->gateway == ip("10.99.0.2"));

	auto direct6 = get_route(ip("fd01::5"));
	REQUIRE(direct6);
	CHECK(direct6->ifindex == tun.ifindex);
	CHECK_FALSE(direct6->gateway);

	auto via6 = get_route(ip("fd02::5"));
	REQUIRE(via6);
	CHECK(via6->gateway == ip("fd00:99::2"));

	CHECK_FALSE(get_route(ip("192.0.2.1")));
	CHECK_FALSE(get_route(ip("2001:db8::1")));
}

TEST_CASE("add_route clears host bits and honours a table id past 255") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	add_route(prefix("10.98.0.77/24"), tun.ifindex);
	CHECK(get_route(ip("10.98.0.1")));
	add_route(prefix("10.96.0.0/24"), tun.ifindex, {}, 1000);
	CHECK_FALSE(get_route(ip("10.96.0.1"))); // not in the main table
	del_route(prefix("10.96.0.0/24"), tun.ifindex, {}, 1000);
	CHECK_THROWS_AS(del_route(prefix("10.96.0.0/24"), tun.ifindex, {}, 1000), SystemError);
}

TEST_CASE("a UDP datagram routed into the tun is read from the tun as IPv4/UDP") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	add_route(prefix("10.98.0.0/24"), tun.ifindex);
	UdpSocket sock = UdpSocket::bind(any_port("10.99.0.1"));
	const uint16_t sport = sock.local_endpoint().port;

	const std::string_view payload = "outbound through the tun";
	const SendSlot slot{bytes_of(payload), endpoint("10.98.0.5:5000")};
	const BatchResult sent = sock.send_batch({&slot, 1});
	REQUIRE(sent.count == 1);

	const auto pkt = read_udp_packet(tun.fd.get(), 4);
	const size_t ihl = (pkt[0] & 0x0f) * 4u;
	CHECK(load_be16(&pkt[2]) == pkt.size());
	CHECK(std::equal(&pkt[12], &pkt[16], ip("10.99.0.1").bytes.begin()));
	CHECK(std::equal(&pkt[16], &pkt[20], ip("10.98.0.5").bytes.begin()));
	CHECK(load_be16(&pkt[ihl]) == sport);
	CHECK(load_be16(&pkt[ihl + 2]) == 5000);
	const std::string got(pkt.begin() + static_cast<ptrdiff_t>(ihl + 8), pkt.end());
	CHECK(got == payload);
}

TEST_CASE("an IPv4/UDP packet written to the tun reaches the UDP socket with its source") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	add_route(prefix("10.98.0.0/24"), tun.ifindex);
	UdpSocket sock = UdpSocket::bind(any_port("0.0.0.0"));
	Endpoint local = any_port("10.99.0.1");
	local.port = sock.local_endpoint().port;

	const auto pkt = ipv4_udp_packet(endpoint("10.98.0.5:5000"), local, "inbound from the tun");
	const IoResult w = tun_write(tun.fd.get(), pkt);
	REQUIRE(w.ok());
	CHECK(static_cast<size_t>(w.n) == pkt.size());

	REQUIRE(wait_readable(sock.fd()));
	std::array<uint8_t, 256> buf;
	RecvSlot slot{buf};
	const BatchResult r = sock.recv_batch({&slot, 1});
	REQUIRE(r.count == 1);
	CHECK(slot.from == endpoint("10.98.0.5:5000"));
	CHECK(std::string(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(slot.len)) ==
	      "inbound from the tun");
}

TEST_CASE("an IPv6 address is usable at once (no DAD) and its datagrams reach the tun") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();
	add_route(prefix("fd01::/64"), tun.ifindex);
	// bind() to a tentative address fails with EADDRNOTAVAIL: IFA_F_NODAD
	// is what makes this work right after add_address().
	UdpSocket sock = UdpSocket::bind(any_port("fd00:99::1"));
	const std::string_view payload = "v6 outbound";
	const SendSlot slot{bytes_of(payload), endpoint("[fd01::5]:4500")};
	REQUIRE(sock.send_batch({&slot, 1}).count == 1);

	const auto pkt = read_udp_packet(tun.fd.get(), 6);
	REQUIRE(pkt.size() == 40 + 8 + payload.size());
	CHECK(std::equal(&pkt[8], &pkt[24], ip("fd00:99::1").bytes.begin()));
	CHECK(std::equal(&pkt[24], &pkt[40], ip("fd01::5").bytes.begin()));
	CHECK(load_be16(&pkt[42]) == 4500);
	CHECK(std::string(pkt.begin() + 48, pkt.end()) == payload);
}

TEST_CASE("NetConfigGuard removes what it added, newest first") {
	enter_fresh_netns();
	TunDevice tun = open_tun("esp0");
	set_link_up(tun.ifindex);
	{
		NetConfigGuard guard;
		guard.add_address(tun.ifindex, prefix("10.99.0.1/24"));
		guard.add_address(tun.ifindex, prefix("fd00:99::1/64"));
		guard.add_route(prefix("10.98.0.0/24"), tun.ifindex);
		guard.add_route(prefix("10.97.0.0/16"), tun.ifindex, ip("10.99.0.2"));
		CHECK(guard.size() == 4);
		CHECK(get_route(ip("10.97.1.1")));
		CHECK(get_route(ip("10.98.0.1")));
		// A failed addition is not remembered.
		CHECK_THROWS_AS(guard.add_route(prefix("10.98.0.0/24"), tun.ifindex), SystemError);
		CHECK(guard.size() == 4);
	}
	CHECK_FALSE(get_route(ip("10.97.1.1")));
	CHECK_FALSE(get_route(ip("10.98.0.1")));
	CHECK_FALSE(get_route(ip("10.99.0.7"))); // the address' prefix route went with it
	CHECK_THROWS_AS(del_address(tun.ifindex, prefix("10.99.0.1/24")), SystemError);
	CHECK_THROWS_AS(del_address(tun.ifindex, prefix("fd00:99::1/64")), SystemError);
	// Everything can be added again.
	add_address(tun.ifindex, prefix("10.99.0.1/24"));
	add_route(prefix("10.98.0.0/24"), tun.ifindex);
}

TEST_CASE(
    "NetConfigGuard::add_routes adds hundreds in batches; a refusal names its route, the rest stay known") {
	enter_fresh_netns();
	TunDevice tun = open_tun("esp0");
	set_link_up(tun.ifindex);
	// 300 routes, more than four batches, both families.
	std::vector<IpPrefix> routes;
	for (int i = 0; i < 290; i++)
		routes.push_back(prefix(
		    ("10.50." + std::to_string(i / 4) + "." + std::to_string(i % 4 * 64) + "/26").c_str()));
	for (int i = 0; i < 10; i++)
		routes.push_back(prefix(("fd10:" + std::to_string(i) + "::/64").c_str()));
	{
		NetConfigGuard guard;
		guard.add_routes(routes, tun.ifindex);
		CHECK(guard.size() == routes.size());
		for (const IpPrefix& p : routes) {
			INFO(to_string(p));
			auto r = get_route(p.addr);
			REQUIRE(r);
			CHECK(r->ifindex == tun.ifindex);
		}
		// One that exists, in the middle of a batch: refused, named, and
		// the batch's others are added and remembered.
		std::vector<IpPrefix> more = {prefix("10.60.0.0/24"), prefix("10.50.3.0/26"),
		                              prefix("10.61.0.0/24")};
		try {
			guard.add_routes(more, tun.ifindex);
			FAIL("a route that exists was added");
		} catch (const SystemError& e) {
			CHECK(e.err() == EEXIST);
			CHECK(std::string(e.what()).find("add route 10.50.3.0/26 dev esp0") !=
			      std::string::npos);
		}
		CHECK(guard.size() == routes.size() + 2);
		CHECK(get_route(ip("10.60.0.1")));
		CHECK(get_route(ip("10.61.0.1")));
		CHECK_NOTHROW(guard.add_routes({}, tun.ifindex));
	}
	// Everything the guard added went with it.
	CHECK_FALSE(get_route(ip("10.50.0.1")));
	CHECK_FALSE(get_route(ip("10.61.0.1")));
	CHECK_FALSE(get_route(ip("fd10:9::1")));
}

TEST_CASE("NetConfigGuard clean-up survives the tun having gone first") {
	enter_fresh_netns();
	NetConfigGuard guard;
	{
		TunDevice tun = open_tun("esp0");
		set_link_up(tun.ifindex);
		guard.add_address(tun.ifindex, prefix("10.99.0.1/24"));
		guard.add_route(prefix("10.98.0.0/24"), tun.ifindex);
	}
	CHECK(guard.size() == 2);
	guard.restore(); // every removal fails (ENODEV); none may escape
	CHECK(guard.size() == 0);
}

TEST_CASE("NetConfigGuard::release leaves the configuration in place") {
	enter_fresh_netns();
	TunDevice tun = open_tun("esp0");
	set_link_up(tun.ifindex);
	{
		NetConfigGuard guard;
		guard.add_route(prefix("10.98.0.0/24"), tun.ifindex);
		guard.release();
	}
	CHECK(get_route(ip("10.98.0.1")));
}

TEST_CASE("errors name the operation and the object") {
	enter_fresh_netns();
	TunDevice tun = configured_tun();

	SUBCASE("a tun name taken by another kind of interface") {
		try {
			open_tun("lo");
			FAIL("open_tun(\"lo\") succeeded");
		} catch (const SystemError& e) {
			CHECK(std::string(e.what()).starts_with("TUNSETIFF lo: "));
			CHECK(e.err() == EINVAL);
		}
	}
	SUBCASE("a tun name longer than IFNAMSIZ") {
		CHECK_THROWS_WITH_AS(open_tun("a-name-far-too-long"),
		                     doctest::Contains("a-name-far-too-long"), SystemError);
	}
	SUBCASE("deleting a route that does not exist") {
		try {
			del_route(prefix("10.55.0.0/24"), tun.ifindex);
			FAIL("del_route succeeded");
		} catch (const SystemError& e) {
			CHECK(std::string(e.what()).starts_with(
			    "delete route 10.55.0.0/24 dev esp0: No such process"));
			CHECK(e.err() == ESRCH);
		}
	}
	SUBCASE("adding a route twice") {
		add_route(prefix("10.99.7.2/32"), tun.ifindex);
		try {
			add_route(prefix("10.99.7.2/32"), tun.ifindex);
			FAIL("second add_route succeeded");
		} catch (const SystemError& e) {
			CHECK(std::string(e.what()).starts_with(
			    "add route 10.99.7.2/32 dev esp0: File exists"));
			CHECK(e.err() == EEXIST);
		}
	}
	SUBCASE("adding an address twice") {
		CHECK_THROWS_WITH_AS(add_address(tun.ifindex, prefix("10.99.0.1/24")),
		                     doctest::Contains("add address 10.99.0.1/24 dev esp0: File exists"),
		                     SystemError);
	}
	SUBCASE("an MTU below the device minimum carries the kernel's explanation") {
		try {
			set_link_mtu(tun.ifindex, 10);
			FAIL("set_link_mtu(10) succeeded");
		} catch (const SystemError& e) {
			const std::string what = e.what();
			CHECK(what.starts_with("set mtu 10 on esp0: Invalid argument"));
			CHECK(what.find("(kernel: ") != std::string::npos); // extended ack, Linux 4.12+
			CHECK(e.err() == EINVAL);
		}
	}
	SUBCASE("a missing interface") {
		CHECK_THROWS_WITH_AS(link_mtu(9999), "get mtu of ifindex 9999: No such device", SystemError);
	}
	SUBCASE("a gateway of the other family") {
		CHECK_THROWS_AS(add_route(prefix("10.1.0.0/16"), tun.ifindex, ip("fd00::1")), SystemError);
	}
}

TEST_CASE("a tun with vnet_hdr and offloads hands over a UDP GSO train as one super-packet") {
	enter_fresh_netns();
	TunDevice tun = open_tun("off0", false, true);
	const TunOffloads off = enable_tun_offloads(tun.fd.get());
	CHECK(off.csum);
	CHECK(off.tso4);
	CHECK(off.tso6);
	set_link_up(tun.ifindex);
	add_address(tun.ifindex, prefix("10.66.0.1/24"));
	UdpSocket s = UdpSocket::bind(Endpoint{ip("0.0.0.0"), 0});
	// Ten 500-byte datagrams to one peer: one UDP_SEGMENT train (udp_socket.cpp).
	std::vector<std::vector<uint8_t>> payloads(10, std::vector<uint8_t>(500));
	std::vector<SendSlot> out;
	for (size_t i = 0; i < payloads.size(); i++) {
		std::fill(payloads[i].begin(), payloads[i].end(), uint8_t(i));
		out.push_back({payloads[i], *parse_endpoint("10.66.0.2:4500")});
	}
	REQUIRE(s.send_batch(out).count == out.size());
	std::vector<uint8_t> buf(70000);
	size_t datagrams = 0, reads = 0;
	while (datagrams < payloads.size() && wait_readable(tun.fd.get())) {
		const ssize_t n = ::read(tun.fd.get(), buf.data(), buf.size());
		REQUIRE(n >= ssize_t(kTunVnetHdrLen));
		const uint8_t* ip4 = buf.data() + kTunVnetHdrLen;
		if (n < ssize_t(kTunVnetHdrLen + 28) || ip4[0] != 0x45 || ip4[9] != 17) continue; // not ours
		reads++;
		const uint8_t flags = buf[0], gso_type = buf[1];
		const uint16_t gso_size = uint16_t(buf[4] | buf[5] << 8);
		const size_t udp_payload = size_t(n) - kTunVnetHdrLen - 28;
		if (off.uso4) {
			// One read: the whole train, gso_type VIRTIO_NET_HDR_GSO_UDP_L4 (5),
			// segment size 500, checksum left to us (NEEDS_CSUM, bit 0).
			CHECK(gso_type == 5);
			CHECK(gso_size == 500);
			CHECK((flags & 1) == 1);
			CHECK(udp_payload == 500 * payloads.size());
			datagrams += udp_payload / 500;
		} else {
			CHECK(gso_type == 0);
			CHECK(udp_payload == 500);
			datagrams++;
		}
	}
	CHECK(datagrams == payloads.size());
	CHECK(reads == (off.uso4 ? 1u : payloads.size()));
}
