// The whole packet pipeline in one process, without privileges: two data
// planes whose "tun" is one end of a SOCK_SEQPACKET pair (one packet per
// read/write, like a tun queue) and whose underlay sockets talk over loopback.
//
//   test -> [tunA] -> DataPlane A -> UDP 127.0.0.1 -> DataPlane B -> [tunB] -> test
#include "apps/common/data_plane.hpp"

#include "platform/unique_fd.hpp"
#include "tunnel/bytes.hpp"
#include "tunnel/esp.hpp"

#include "runtime_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

using namespace esptun;

namespace {

struct FakeTun {
	platform::UniqueFd plane_end, test_end;
	FakeTun() {
		int sv[2];
		REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
		plane_end.reset(sv[0]);
		test_end.reset(sv[1]);
		// Room for more than a whole batch of jumbo packets queued at once.
		const int bytes = 4 << 20;
		for (int fd : sv)
			REQUIRE(setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) == 0);
	}
};

std::vector<uint8_t> random_bytes(size_t n) {
	std::vector<uint8_t> v(n);
	if (n) REQUIRE(RAND_bytes(v.data(), int(n)) == 1);
	return v;
}

/// An IPv4/UDP packet from @src to @dst with @payload_len random bytes.
std::vector<uint8_t> ipv4_packet(uint32_t src, uint32_t dst, size_t payload_len) {
	std::vector<uint8_t> p(28 + payload_len, 0);
	p[0] = 0x45;
	store_be16(&p[2], uint16_t(p.size()));
	p[8] = 64;
	p[9] = 17;
	store_be32(&p[12], src);
	store_be32(&p[16], dst);
	auto payload = random_bytes(payload_len);
	std::copy(payload.begin(), payload.end(), p.begin() + 28);
	return p;
}

} // namespace

TEST_CASE("data plane carries a batch of packets through ESP over loopback UDP, in order and intact") {
	auto k_ab = random_bytes(20), k_ba = random_bytes(20);
	Endpoint loopback{IpAddress::v4(0x7f000001), 0}; // port 0: the kernel picks
	platform::UdpSocket udp_a = platform::UdpSocket::bind(loopback);
	platform::UdpSocket udp_b = platform::UdpSocket::bind(loopback);
	Endpoint ep_a = udp_a.local_endpoint(), ep_b = udp_b.local_endpoint();

	SaTable table_a({test::gcm_peer("b", ep_b, "10.99.0.2/32", 0x1001, 0x2001, k_ab, k_ba)});
	SaTable table_b({test::gcm_peer("a", ep_a, "10.99.0.1/32", 0x2001, 0x1001, k_ba, k_ab)});
	FakeTun tun_a, tun_b;
	DataPathStats stats_a, stats_b;
	DataPlane plane_a(table_a, tun_a.plane_end.get(), udp_a, stats_a);
	DataPlane plane_b(table_b, tun_b.plane_end.get(), udp_b, stats_b);

	// A batch larger than one pass, with sizes from tiny to jumbo.
	std::vector<std::vector<uint8_t>> sent;
	for (size_t i = 0; i < DataPlane::kBatch + 5; i++) {
		// Sizes stay small enough that the whole batch fits the socket pair's buffer.
		sent.push_back(ipv4_packet(0x0a630001, 0x0a630002, i == 7 ? 8972 : (i * 397) % 4000));
		REQUIRE(write(tun_a.test_end.get(), sent.back().data(), sent.back().size()) ==
		        ssize_t(sent.back().size()));
	}
	// One packet for nobody: counted as no_route, not sent.
	auto stray = ipv4_packet(0x0a630001, 0x0a630063, 10);
	REQUIRE(write(tun_a.test_end.get(), stray.data(), stray.size()) == ssize_t(stray.size()));

	plane_a.outbound_batch();
	plane_a.outbound_batch();
	CHECK(stats_a.tun_rx_packets.get() == sent.size() + 1);
	CHECK(stats_a.udp_tx_packets.get() == sent.size());
	CHECK(stats_a.drops_of(Drop::no_route) == 1);

	size_t got = 0;
	std::vector<uint8_t> buf(70000);
	while (got < sent.size() && test::wait_readable(udp_b.fd())) {
		plane_b.inbound_batch();
		for (;;) {
			ssize_t n = read(tun_b.test_end.get(), buf.data(), buf.size());
			if (n < 0) break;
			REQUIRE(got < sent.size());
			CHECK(std::vector<uint8_t>(buf.begin(), buf.begin() + n) == sent[got]);
			got++;
		}
	}
	CHECK(got == sent.size());
	CHECK(stats_b.tun_tx_packets.get() == sent.size());
	CHECK(table_b.peers()[0]->in->packets.get() == sent.size());
	for (size_t i = 0; i < kDropReasons; i++)
		CHECK(stats_b.drops[i].get() == 0);
}

TEST_CASE(
    "data plane counts a datagram with a flipped bit as an authentication failure and delivers nothing") {
	auto k_ab = random_bytes(20), k_ba = random_bytes(20);
	Endpoint loopback{IpAddress::v4(0x7f000001), 0}; // port 0: the kernel picks
	platform::UdpSocket udp_b = platform::UdpSocket::bind(loopback);
	platform::UdpSocket sender = platform::UdpSocket::bind(loopback);
	Endpoint ep_b = udp_b.local_endpoint();
	SaTable table_a({test::gcm_peer("b", ep_b, "10.99.0.2/32", 0x1001, 0x2001, k_ab, k_ba)});
	SaTable table_b(
	    {test::gcm_peer("a", sender.local_endpoint(), "10.99.0.1/32", 0x2001, 0x1001, k_ba, k_ab)});
	FakeTun tun_b;
	DataPathStats stats_b;
	DataPlane plane_b(table_b, tun_b.plane_end.get(), udp_b, stats_b);

	std::vector<uint8_t> buf(esp::kBufferSize);
	auto pkt = ipv4_packet(0x0a630001, 0x0a630002, 100);
	std::copy(pkt.begin(), pkt.end(), buf.begin() + esp::kHeadroom);
	OutboundResult res = encapsulate(table_a, buf, pkt.size());
	REQUIRE(res.verdict == Verdict::forward);
	res.datagram[res.datagram.size() - 1] ^= 0x01;
	platform::SendSlot slot{res.datagram, ep_b};
	REQUIRE(sender.send_batch({&slot, 1}).count == 1);
	REQUIRE(test::wait_readable(udp_b.fd()));
	plane_b.inbound_batch();
	CHECK(stats_b.drops_of(Drop::auth_failed) == 1);
	CHECK(stats_b.tun_tx_packets.get() == 0);
	uint8_t scratch[16];
	CHECK(read(tun_b.test_end.get(), scratch, sizeof scratch) < 0);
}
