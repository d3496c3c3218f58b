// UdpSocket batches over loopback (IPv4, IPv6, IPv4 through a dual-stack
// socket), error reporting and path_mtu(); each test in a fresh namespace.
#include <array>
#include <doctest/doctest.h>
#include <string>
#include <vector>

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

/// receive_all() - collect @want datagrams on @sock (polling), in arrival order
std::vector<std::pair<std::string, Endpoint>> receive_all(UdpSocket& sock, size_t want) {
	return platform::test::receive_all(sock, sock.fd(), want);
}

/// exchange() - send three datagrams from @a to @b in one batch and check them
void exchange(UdpSocket& a, UdpSocket& b, const Endpoint& b_addr, const Endpoint& a_seen_as) {
	const std::vector<std::string> payloads = {"one", "two two", "three three three"};
	std::vector<SendSlot> out;
	for (const auto& p : payloads)
		out.push_back({bytes_of(p), b_addr});
	const BatchResult sent = a.send_batch(out);
	CHECK(sent.count == 3);
	CHECK(sent.err == 0);

	REQUIRE(wait_readable(b.fd()));
	Receiver rx(4);
	const BatchResult r = b.recv_batch(rx.slots);
	REQUIRE(r.count == 3);
	for (size_t i = 0; i < 3; i++) {
		CHECK(rx.text(i) == payloads[i]);
		CHECK_FALSE(rx.slots[i].truncated);
		CHECK(rx.slots[i].from == a_seen_as);
	}
	const BatchResult again = b.recv_batch(rx.slots);
	CHECK(again.count == 0);
	CHECK(again.err == EAGAIN);
}

/// with_port() - @addr with @sock's port
Endpoint with_port(const char* addr, const UdpSocket& sock) { return {ip(addr), sock.local_endpoint().port}; }

} // namespace

TEST_CASE("IPv4 batch send and receive over loopback report the sender") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	CHECK(a.family() == Family::v4);
	CHECK(a.local_endpoint().port != 0);
	exchange(a, b, b.local_endpoint(), a.local_endpoint());
}

TEST_CASE("IPv6 batch send and receive over loopback report the sender") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("::1"));
	UdpSocket b = UdpSocket::bind(any_port("::1"));
	CHECK(a.family() == Family::v6);
	exchange(a, b, b.local_endpoint(), a.local_endpoint());
}

TEST_CASE("a dual-stack socket talks to IPv4 peers with plain IPv4 endpoints") {
	enter_fresh_netns();
	UdpSocket dual = UdpSocket::bind(any_port("::"));
	UdpSocket v4 = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket v6 = UdpSocket::bind(any_port("::1"));

	// IPv4 peer -> dual: the source comes out as 127.0.0.1, not ::ffff:127.0.0.1.
	exchange(v4, dual, with_port("127.0.0.1", dual), v4.local_endpoint());
	// dual -> IPv4 peer, addressed with a plain IPv4 endpoint.
	exchange(dual, v4, v4.local_endpoint(), with_port("127.0.0.1", dual));
	// And IPv6 still works on the same socket.
	exchange(v6, dual, with_port("::1", dual), v6.local_endpoint());
	exchange(dual, v6, v6.local_endpoint(), with_port("::1", dual));
}

TEST_CASE("recv_batch flags a datagram longer than its buffer as truncated") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	const std::string big(100, 'x');
	const SendSlot slot{bytes_of(big), b.local_endpoint()};
	REQUIRE(a.send_batch({&slot, 1}).count == 1);
	REQUIRE(wait_readable(b.fd()));
	Receiver rx(1, 10);
	REQUIRE(b.recv_batch(rx.slots).count == 1);
	CHECK(rx.slots[0].truncated);
	CHECK(rx.slots[0].len == 10);
}

TEST_CASE("send_batch sends more than kMaxBatch datagrams, in order") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	const size_t n = UdpSocket::kMaxBatch * 2 + 22;
	std::vector<std::string> payloads;
	for (size_t i = 0; i < n; i++)
		payloads.push_back("datagram " + std::to_string(i));
	std::vector<SendSlot> out;
	for (const auto& p : payloads)
		out.push_back({bytes_of(p), b.local_endpoint()});
	const BatchResult sent = a.send_batch(out);
	CHECK(sent.count == n);
	CHECK(sent.err == 0);
	const auto got = receive_all(b, n);
	REQUIRE(got.size() == n);
	for (size_t i = 0; i < n; i++)
		CHECK(got[i].first == payloads[i]);
}

TEST_CASE("send_batch stops at a destination the socket cannot reach and says why") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	const std::string p = "payload";
	const std::array<SendSlot, 3> out = {SendSlot{bytes_of(p), b.local_endpoint()},
	                                     SendSlot{bytes_of(p), endpoint("[::1]:4500")},
	                                     SendSlot{bytes_of(p), b.local_endpoint()}};
	const BatchResult sent = a.send_batch(out);
	CHECK(sent.count == 1);
	CHECK(sent.err == EAFNOSUPPORT);
	// The caller drops the bad one and carries on with the rest.
	const BatchResult rest = a.send_batch(std::span(out).subspan(2));
	CHECK(rest.count == 1);
	CHECK(receive_all(b, 2).size() == 2);
}

TEST_CASE("send_batch reports an unroutable destination with its errno") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	const std::string p = "payload";
	const SendSlot slot{bytes_of(p), endpoint("192.0.2.1:4500")};
	const BatchResult sent = a.send_batch({&slot, 1});
	CHECK(sent.count == 0);
	CHECK(sent.err != 0); // EINVAL: bound to loopback; ENETUNREACH otherwise
	UdpSocket any = UdpSocket::bind(any_port("0.0.0.0"));
	const BatchResult sent_any = any.send_batch({&slot, 1});
	CHECK(sent_any.count == 0);
	CHECK(sent_any.err == ENETUNREACH);
}

TEST_CASE("send_batch sends equal-sized runs to one peer as GSO trains; the peer sees each datagram") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket c = UdpSocket::bind(any_port("127.0.0.1"));
	// 40 x 1200 bytes + a shorter tail to b (one train), 3 to c (a train),
	// 1 to b (alone), then 100 x 700 to b: more than one round of kMaxBatch.
	std::vector<std::pair<std::string, const UdpSocket*>> plan;
	for (size_t i = 0; i < 40; i++)
		plan.emplace_back(numbered(i, 1200), &b);
	plan.emplace_back(numbered(40, 300), &b);
	for (size_t i = 41; i < 44; i++)
		plan.emplace_back(numbered(i, 500), &c);
	plan.emplace_back(numbered(44, 500), &b);
	for (size_t i = 45; i < 145; i++)
		plan.emplace_back(numbered(i, 700), &b);
	std::vector<SendSlot> out;
	for (const auto& [p, to] : plan)
		out.push_back({bytes_of(p), to->local_endpoint()});
	const BatchResult sent = a.send_batch(out);
	CHECK(sent.count == out.size());
	CHECK(sent.err == 0);

	std::vector<std::string> want_b, want_c;
	for (const auto& [p, to] : plan)
		(to == &b ? want_b : want_c).push_back(p);
	const auto got_b = receive_all(b, want_b.size());
	const auto got_c = receive_all(c, want_c.size());
	REQUIRE(got_b.size() == want_b.size());
	REQUIRE(got_c.size() == want_c.size());
	for (size_t i = 0; i < want_b.size(); i++) {
		CHECK(got_b[i].first == want_b[i]);
		CHECK(got_b[i].second == a.local_endpoint());
	}
	for (size_t i = 0; i < want_c.size(); i++)
		CHECK(got_c[i].first == want_c[i]);

	const GsoStats g = a.gso_stats();
	CHECK(g.enabled);
	CHECK(g.disabled_errno == 0);
	// Trains: 41 to b; 3 to c; the 100 of 700 bytes split by the 64-slot
	// rounds (19 left in round 1 after 41 + 3 + 1, then 64, then 17).
	CHECK(g.trains == 5);
	CHECK(g.segments == 41 + 3 + 19 + 64 + 17);
}

TEST_CASE("set_gso(false) sends every datagram on its own") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	a.set_gso(false);
	std::vector<std::string> payloads;
	for (size_t i = 0; i < 20; i++)
		payloads.push_back(numbered(i, 1000));
	std::vector<SendSlot> out;
	for (const auto& p : payloads)
		out.push_back({bytes_of(p), b.local_endpoint()});
	CHECK(a.send_batch(out).count == out.size());
	const auto got = receive_all(b, out.size());
	REQUIRE(got.size() == out.size());
	for (size_t i = 0; i < out.size(); i++)
		CHECK(got[i].first == payloads[i]);
	CHECK(a.gso_stats().trains == 0);
	CHECK_FALSE(a.gso_stats().enabled);
}

TEST_CASE("GSO through a device without checksum offload: a train, or EIO and GSO off; nothing lost") {
	enter_fresh_netns();
	// A tun without TUNSETOFFLOAD has no checksum offload. Kernels up to at
	// least 6.1 answer a UDP_SEGMENT send routed through it with EIO (the
	// send_batch() fallback; tests/vm runs this case on Debian 12's 6.1);
	// newer ones checksum and segment it in software.
	TunDevice tun = open_tun("gso0");
	set_link_up(tun.ifindex);
	add_address(tun.ifindex, prefix("10.77.0.1/24"));
	UdpSocket a = UdpSocket::bind(any_port("0.0.0.0"));
	std::vector<std::string> payloads;
	for (size_t i = 0; i < 10; i++)
		payloads.push_back(numbered(i, 600));
	std::vector<SendSlot> out;
	for (const auto& p : payloads)
		out.push_back({bytes_of(p), endpoint("10.77.0.2:4500")});
	const BatchResult sent = a.send_batch(out);
	CHECK(sent.count == out.size());
	CHECK(sent.err == 0);
	const GsoStats g = a.gso_stats();
	const std::string answer = g.enabled ? "a GSO train" : "EIO, GSO off";
	MESSAGE("kernel answer: " << answer);
	if (g.enabled) {
		CHECK(g.trains == 1);
		CHECK(g.segments == payloads.size());
	} else {
		CHECK(g.disabled_errno == EIO);
		CHECK(g.trains == 0);
		// Later sends do not try again.
		CHECK(a.send_batch(out).count == out.size());
		CHECK(a.gso_stats().trains == 0);
	}
	// Each datagram reached the tun as its own IPv4/UDP packet, in order
	// (anything else the kernel sends there, e.g. IPv6 link-local chatter, is skipped).
	std::vector<uint8_t> pkt(2048);
	size_t seen = 0;
	while (seen < payloads.size() && wait_readable(tun.fd.get())) {
		const ssize_t n = ::read(tun.fd.get(), pkt.data(), pkt.size());
		REQUIRE(n > 0);
		if (n < 28 || pkt[0] != 0x45 || pkt[9] != 17) continue;
		REQUIRE(n == ssize_t(28 + payloads[seen].size()));
		CHECK(std::string(pkt.begin() + 28, pkt.begin() + n) == payloads[seen]);
		seen++;
	}
	CHECK(seen == payloads.size());
}

TEST_CASE("UdpSocket::bind enlarges the socket buffers past the default") {
	enter_fresh_netns();
	UdpSocket s = UdpSocket::bind(any_port("127.0.0.1"));
	const BufferSizes sizes = s.buffer_sizes();
	// The kernel reports twice the size set (bookkeeping overhead).
	CHECK(sizes.rcv >= UdpSocket::kDefaultBufferBytes);
	CHECK(sizes.snd >= UdpSocket::kDefaultBufferBytes);
}

TEST_CASE("UdpSocket::bind on a taken port is a SystemError naming the endpoint") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	const Endpoint taken = a.local_endpoint();
	const std::string expected = "bind UDP " + to_string(taken) + ": Address already in use";
	CHECK_THROWS_WITH_AS(UdpSocket::bind(taken), doctest::Contains(expected.c_str()), SystemError);
	CHECK_THROWS_WITH_AS(UdpSocket::bind(endpoint("192.0.2.1:4500")),
	                     doctest::Contains("Cannot assign requested address"), SystemError);
}

TEST_CASE("path_mtu gives the loopback MTU and nothing without a route") {
	enter_fresh_netns();
	// lo has MTU 65536; IPv4 caps a route's MTU at IP_MAX_MTU (65535, the
	// largest total length its header can say), IPv6 does not.
	CHECK(path_mtu(ip("127.0.0.1")) == 65535u);
	CHECK(path_mtu(ip("::1")) == 65536u);
	CHECK_FALSE(path_mtu(ip("192.0.2.1")));
	CHECK_FALSE(path_mtu(ip("2001:db8::1")));
}

TEST_CASE("enable_gro(): a GSO train arrives as one buffer with its segment size") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	REQUIRE(b.enable_gro());
	CHECK(b.gro_on());
	std::vector<std::string> payloads;
	for (size_t i = 0; i < 20; i++)
		payloads.push_back(numbered(i, i == 19 ? 300 : 1000));
	std::vector<SendSlot> out;
	for (const auto& p : payloads)
		out.push_back({bytes_of(p), b.local_endpoint()});
	REQUIRE(a.send_batch(out).count == out.size());
	REQUIRE(a.gso_stats().trains == 1);
	REQUIRE(wait_readable(b.fd()));
	Receiver rx(4, 65536);
	const BatchResult r = b.recv_batch(rx.slots);
	REQUIRE(r.count == 1);
	const RecvSlot& s = rx.slots[0];
	CHECK(s.segment == 1000);
	REQUIRE(s.len == 19 * 1000 + 300);
	for (size_t i = 0; i < payloads.size(); i++) {
		const size_t off = i * 1000, len = std::min<size_t>(1000, s.len - off);
		CHECK(std::string(rx.bufs[0].begin() + ptrdiff_t(off),
		                  rx.bufs[0].begin() + ptrdiff_t(off + len)) == payloads[i]);
	}
	// Without GRO the same train comes out datagram by datagram, segment 0.
	UdpSocket c = UdpSocket::bind(any_port("127.0.0.1"));
	for (auto& slot : out)
		slot.to = c.local_endpoint();
	REQUIRE(a.send_batch(out).count == out.size());
	const auto got = receive_all(c, out.size());
	CHECK(got.size() == out.size());
}

TEST_CASE("enable_gro(): a train's ECN field comes with the buffer; different fields are not merged") {
	enter_fresh_netns();
	UdpSocket a = UdpSocket::bind(any_port("127.0.0.1"));
	UdpSocket b = UdpSocket::bind(any_port("127.0.0.1"));
	REQUIRE(b.enable_gro());
	// Ten ECT(0) datagrams, then ten CE ones: two trains, two buffers.
	std::vector<std::string> payloads;
	std::vector<SendSlot> out;
	for (size_t i = 0; i < 20; i++)
		payloads.push_back(numbered(i, 1000));
	for (size_t i = 0; i < 20; i++)
		out.push_back({bytes_of(payloads[i]), b.local_endpoint(), uint8_t(i < 10 ? 2 : 3)});
	REQUIRE(a.send_batch(out).count == out.size());
	Receiver rx(4, 65536);
	std::vector<std::pair<size_t, uint8_t>> buffers; // bytes, ECN of each buffer
	size_t bytes = 0;
	while (bytes < 20 * 1000 && wait_readable(b.fd())) {
		const BatchResult r = b.recv_batch(rx.slots);
		for (size_t i = 0; i < r.count; i++) {
			buffers.emplace_back(rx.slots[i].len, rx.slots[i].ecn);
			bytes += rx.slots[i].len;
		}
	}
	REQUIRE(bytes == 20 * 1000);
	// However the kernel grouped them, no buffer mixes the two marks: the
	// first 10,000 bytes came as ECT(0), the rest as CE.
	size_t seen = 0;
	for (const auto& [len, ecn] : buffers) {
		CHECK(int(ecn) == (seen < 10 * 1000 ? 2 : 3));
		CHECK((seen < 10 * 1000) == (seen + len <= 10 * 1000));
		seen += len;
	}
}
