// The whole packet pipeline in one process, without privileges: two data
// planes whose "tun" is one end of a SOCK_SEQPACKET pair (one packet per
// read/write, like a tun queue) and whose underlay sockets talk over loopback.
//
//   test -> [tunA] -> DataPlane A -> UDP 127.0.0.1 -> DataPlane B -> [tunB] -> test
#include "datapath/data_plane.hpp"

#include "base/bytes.hpp"
#include "platform/unique_fd.hpp"
#include "tunnel/ecn.hpp"
#include "tunnel/esp.hpp"

#include "tests/unit/support/runtime_test_util.hpp"

#include <algorithm>
#include <chrono>
#include <doctest/doctest.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
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

/**
 * struct Receiver - data plane B behind loopback UDP, and what A would send
 * it: ESP datagrams sealed with A's outbound SA, sent from a plain socket.
 */
struct Receiver {
	std::vector<uint8_t> k_ab = random_bytes(20), k_ba = random_bytes(20);
	platform::UdpSocket udp_b = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	platform::UdpSocket sender = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	Endpoint ep_b = udp_b.local_endpoint();
	tunnel::SaTable table_a{{test::gcm_peer("b", ep_b, "10.99.0.2/32", 0x1001, 0x2001, k_ab, k_ba)}};
	tunnel::SaTable table_b{
	    {test::gcm_peer("a", sender.local_endpoint(), "10.99.0.1/32", 0x2001, 0x1001, k_ba, k_ab)}};
	FakeTun tun_b;
	DataPathStats stats_b;
	datapath::DataPlane plane_b{table_b, tun_b.plane_end.get(), udp_b, stats_b};
	std::vector<uint8_t> buf = std::vector<uint8_t>(tunnel::esp::kBufferSize);

	/// @inner sealed for B in buf (the datagram is a span of it).
	std::span<uint8_t> seal(const std::vector<uint8_t>& inner) {
		std::copy(inner.begin(), inner.end(), buf.begin() + tunnel::esp::kHeadroom);
		tunnel::OutboundResult res = tunnel::encapsulate(table_a, buf, inner.size());
		REQUIRE(res.verdict == tunnel::Verdict::forward);
		return res.datagram;
	}
	void send(std::span<uint8_t> datagram, uint8_t ecn = 0) {
		platform::SendSlot slot{datagram, ep_b, ecn};
		REQUIRE(sender.send_batch({&slot, 1}).count == 1);
	}
	/// One ESP datagram to B; true once its inner packet came out of tun B.
	bool deliver() {
		auto pkt = ipv4_packet(0x0a630001, 0x0a630002, 100);
		send(seal(pkt));
		std::vector<uint8_t> out(2048);
		return test::wait_readable(tun_b.test_end.get()) &&
		       read(tun_b.test_end.get(), out.data(), out.size()) == ssize_t(pkt.size());
	}
};

} // namespace

TEST_CASE("data plane carries a batch of packets through ESP over loopback UDP, in order and intact") {
	auto k_ab = random_bytes(20), k_ba = random_bytes(20);
	Endpoint loopback{IpAddress::v4(0x7f000001), 0}; // port 0: the kernel picks
	platform::UdpSocket udp_a = platform::UdpSocket::bind(loopback);
	platform::UdpSocket udp_b = platform::UdpSocket::bind(loopback);
	Endpoint ep_a = udp_a.local_endpoint(), ep_b = udp_b.local_endpoint();

	tunnel::SaTable table_a({test::gcm_peer("b", ep_b, "10.99.0.2/32", 0x1001, 0x2001, k_ab, k_ba)});
	tunnel::SaTable table_b({test::gcm_peer("a", ep_a, "10.99.0.1/32", 0x2001, 0x1001, k_ba, k_ab)});
	FakeTun tun_a, tun_b;
	DataPathStats stats_a, stats_b;
	datapath::DataPlane plane_a(table_a, tun_a.plane_end.get(), udp_a, stats_a);
	datapath::DataPlane plane_b(table_b, tun_b.plane_end.get(), udp_b, stats_b);

	// A batch larger than one pass, with sizes from tiny to jumbo.
	std::vector<std::vector<uint8_t>> sent;
	for (size_t i = 0; i < datapath::DataPlane::kBatch + 5; i++) {
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
	Receiver r;
	std::span<uint8_t> dgram = r.seal(ipv4_packet(0x0a630001, 0x0a630002, 100));
	dgram[dgram.size() - 1] ^= 0x01;
	r.send(dgram);
	REQUIRE(test::wait_readable(r.udp_b.fd()));
	r.plane_b.inbound_batch();
	CHECK(r.stats_b.drops_of(Drop::auth_failed) == 1);
	CHECK(r.stats_b.tun_tx_packets.get() == 0);
	uint8_t scratch[16];
	CHECK(read(r.tun_b.test_end.get(), scratch, sizeof scratch) < 0);
}

namespace {

/// Polls @done for up to two seconds.
template <class F> bool eventually(F done) {
	for (int i = 0; i < 2000; i++) {
		if (done()) return true;
		usleep(1000);
	}
	return done();
}

} // namespace

TEST_CASE("data plane counts drops of a peer's packets for that peer too, and others for no peer") {
	Receiver r;
	const tunnel::Peer& a = *r.table_b.peers()[0];
	// One datagram to B, handled by one inbound pass.
	auto receive = [&](std::span<uint8_t> dgram) {
		r.send(dgram);
		REQUIRE(test::wait_readable(r.udp_b.fd()));
		r.plane_b.inbound_batch();
	};
	// A forged ICV: auth_failed. A good packet, then the same datagram
	// again: replay. Both are peer a's.
	std::span<uint8_t> forged = r.seal(ipv4_packet(0x0a630001, 0x0a630002, 100));
	forged[forged.size() - 1] ^= 0x01;
	receive(forged);
	std::span<uint8_t> good = r.seal(ipv4_packet(0x0a630001, 0x0a630002, 100));
	receive(good);
	CHECK(r.stats_b.tun_tx_packets.get() == 1);
	receive(good);
	// And an SPI nobody has: the endpoint counts it, no peer does.
	store_be32(good.data(), 0x7777);
	receive(good);
	CHECK(r.stats_b.drops_of(Drop::auth_failed) == 1);
	CHECK(r.stats_b.drops_of(Drop::replay) == 1);
	CHECK(r.stats_b.drops_of(Drop::unknown_spi) == 1);
	CHECK(a.drops[size_t(Drop::auth_failed)].get() == 1);
	CHECK(a.drops[size_t(Drop::replay)].get() == 1);
	for (size_t i = 0; i < kDropReasons; i++)
		if (Drop(i) != Drop::auth_failed && Drop(i) != Drop::replay) CHECK(a.drops[i].get() == 0);
}

TEST_CASE("a data plane refuses a worker index its SA table has no transforms for") {
	platform::UdpSocket udp = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	FakeTun tun;
	datapath::DirectTunPort port(tun.plane_end.get());
	platform::MmsgEngine engine(udp);
	DataPathStats stats;
	tunnel::SaTable table({}, 2);
	CHECK_NOTHROW((void)datapath::DataPlane(table, port, engine, stats, 1));
	CHECK_THROWS_AS((void)datapath::DataPlane(table, port, engine, stats, 2), std::invalid_argument);
}

TEST_CASE("running data planes forward across rekeys, and the SAs they replaced get freed") {
	Endpoint loopback{IpAddress::v4(0x7f000001), 0};
	platform::UdpSocket udp_a = platform::UdpSocket::bind(loopback);
	platform::UdpSocket udp_b = platform::UdpSocket::bind(loopback);
	tunnel::SaTable table_a({test::run_time_peer("b", udp_b.local_endpoint(), "10.99.0.2/32")});
	tunnel::SaTable table_b({test::run_time_peer("a", udp_a.local_endpoint(), "10.99.0.1/32")});
	tunnel::Peer& b_at_a = *table_a.peers()[0];
	tunnel::Peer& a_at_b = *table_b.peers()[0];
	FakeTun tun_a, tun_b;
	DataPathStats stats_a, stats_b;
	datapath::DataPlane plane_a(table_a, tun_a.plane_end.get(), udp_a, stats_a);
	datapath::DataPlane plane_b(table_b, tun_b.plane_end.get(), udp_b, stats_b);
	platform::UniqueFd stop = platform::make_eventfd();
	int err_a = -1, err_b = -1;
	std::thread run_a([&] { err_a = plane_a.run(stop.get()); });
	std::thread run_b([&] { err_b = plane_b.run(stop.get()); });

	// The A->B direction, as IKE installs it: B's inbound SA first.
	auto rekey = [&](crypto::Cipher c) {
		const crypto::CipherSpec& spec = crypto::cipher_spec(c);
		tunnel::ChildSaKeys k;
		k.spi = table_b.allocate_spi();
		k.cipher = c;
		k.enc_key = secret_copy(random_bytes(spec.enc_key_len));
		k.auth_key = secret_copy(random_bytes(spec.auth_key_len));
		table_b.install_inbound(a_at_b, k);
		table_a.install_outbound(b_at_a, k);
		return k.spi;
	};
	// Sends @n packets into tun A; true when all come out of tun B intact.
	auto carry = [&](size_t n) {
		std::vector<uint8_t> buf(70000);
		for (size_t i = 0; i < n; i++) {
			auto pkt = ipv4_packet(0x0a630001, 0x0a630002, 50 + 100 * i);
			REQUIRE(write(tun_a.test_end.get(), pkt.data(), pkt.size()) == ssize_t(pkt.size()));
			if (!test::wait_readable(tun_b.test_end.get())) return false;
			const ssize_t got = read(tun_b.test_end.get(), buf.data(), buf.size());
			if (got != ssize_t(pkt.size()) || !std::equal(pkt.begin(), pkt.end(), buf.begin()))
				return false;
		}
		return true;
	};

	// No key exchange yet: counted as no_sa, nothing sent.
	auto early = ipv4_packet(0x0a630001, 0x0a630002, 10);
	REQUIRE(write(tun_a.test_end.get(), early.data(), early.size()) == ssize_t(early.size()));
	CHECK(eventually([&] { return stats_a.drops_of(Drop::no_sa) == 1; }));
	CHECK(stats_a.udp_tx_packets.get() == 0);

	const uint32_t first = rekey(crypto::Cipher::aes128_gcm);
	CHECK(carry(10));
	const uint32_t second = rekey(crypto::Cipher::aes256_cbc_sha256);
	// The workers sleep in epoll_wait() outside the table: the old outbound SA goes.
	CHECK(eventually([&] {
		table_a.collect();
		return table_a.retired() == 0;
	}));
	CHECK(carry(10));
	tunnel::PeerSaInfo at_b = table_b.sa_info(a_at_b);
	REQUIRE(at_b.in.size() == 2);
	CHECK(at_b.in[0].spi == first);
	CHECK(at_b.in[0].packets == 10);
	CHECK(at_b.in[1].spi == second);
	CHECK(at_b.in[1].packets == 10);
	CHECK(table_b.remove_inbound(first));
	CHECK(eventually([&] {
		table_b.collect();
		return table_b.retired() == 0;
	}));
	CHECK(carry(3));
	at_b = table_b.sa_info(a_at_b);
	CHECK(at_b.in.size() == 1);
	CHECK(at_b.totals.rx_packets == 23);
	CHECK(table_a.sa_info(b_at_a).totals.tx_packets == 23);
	for (size_t i = 0; i < kDropReasons; i++)
		CHECK(stats_b.drops[i].get() == 0);

	platform::eventfd_signal(stop.get());
	run_a.join();
	run_b.join();
	CHECK(err_a == 0);
	CHECK(err_b == 0);
}

TEST_CASE("after a pass with work, a data plane polls for busy_poll before it sleeps") {
	Receiver r;
	datapath::DataPlane& plane_b = r.plane_b;
	DataPathStats& stats_b = r.stats_b;
	platform::UniqueFd stop = platform::make_eventfd();
	int err = -1;
	const datapath::TunIoStats& io = plane_b.io_stats();

	SUBCASE("traffic that keeps coming finds the loop polling, not asleep") {
		// Windows far longer than the test needs between two packets.
		plane_b.set_busy_poll(std::chrono::milliseconds(1500));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		CHECK(r.deliver());
		CHECK(r.deliver());
		CHECK(r.deliver());
		platform::eventfd_signal(stop.get());
		run.join();
		// Asleep only before the first packet; each packet after it, and the
		// stop, came during a window.
		CHECK(io.poll_waits.get() == 1);
		CHECK(io.busy_polls.get() == 3);
		CHECK(io.busy_poll_hits.get() == 3);
		CHECK(io.polls.get() >= 4);
	}
	SUBCASE("a window that finds nothing ends in sleep") {
		plane_b.set_busy_poll(std::chrono::milliseconds(20));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		CHECK(r.deliver());
		CHECK(eventually([&] { return io.poll_waits.get() == 2; }));
		CHECK(io.busy_polls.get() == 1);
		CHECK(io.busy_poll_hits.get() == 0);
		CHECK(r.deliver());
		platform::eventfd_signal(stop.get());
		run.join();
	}
	SUBCASE("without busy_poll the loop sleeps between packets") {
		std::thread run([&] { err = plane_b.run(stop.get()); });
		CHECK(r.deliver());
		CHECK(eventually([&] { return io.poll_waits.get() == 2; }));
		CHECK(r.deliver());
		CHECK(eventually([&] { return io.poll_waits.get() == 3; }));
		platform::eventfd_signal(stop.get());
		run.join();
		CHECK(io.busy_polls.get() == 0);
		CHECK(io.polls.get() == io.poll_waits.get());
	}
	CHECK(err == 0);
	CHECK(stats_b.tun_tx_packets.get() >= 2);
	for (size_t i = 0; i < kDropReasons; i++)
		CHECK(stats_b.drops[i].get() == 0);
}

TEST_CASE("after waking from an idle spell, a data plane polls once for wake_poll") {
	Receiver r;
	datapath::DataPlane& plane_b = r.plane_b;
	platform::UniqueFd stop = platform::make_eventfd();
	int err = -1;
	const datapath::TunIoStats& io = plane_b.io_stats();
	auto asleep = [&](uint64_t waits) {
		return eventually([&] { return io.poll_waits.get() == waits; });
	};

	SUBCASE("one window per idle spell: the work it finds does not open another") {
		// Idle spells of 5 ms, windows far longer than the test needs.
		plane_b.set_wake_poll(std::chrono::milliseconds(1500), std::chrono::milliseconds(5));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		CHECK(r.deliver()); // wakes the loop after an idle spell: a window opens
		CHECK(r.deliver()); // found by that window
		// That pass came from polling, not from an idle spell: the loop sleeps.
		CHECK(asleep(2));
		CHECK(io.wake_polls.get() == 1);
		CHECK(io.wake_poll_hits.get() == 1);
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		CHECK(r.deliver()); // a second idle spell, a second window
		CHECK(eventually([&] { return io.wake_polls.get() == 2; }));
		platform::eventfd_signal(stop.get()); // found by the window
		run.join();
		CHECK(io.wake_poll_hits.get() == 2);
		CHECK(io.poll_waits.get() == 2);
		CHECK(io.busy_polls.get() == 0);
	}
	SUBCASE("a wake-up after a short sleep opens no window") {
		// An idle spell would take an hour: every sleep here is short.
		plane_b.set_wake_poll(std::chrono::milliseconds(1500), std::chrono::hours(1));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		CHECK(r.deliver());
		CHECK(asleep(2));
		CHECK(r.deliver());
		CHECK(asleep(3));
		platform::eventfd_signal(stop.get());
		run.join();
		CHECK(io.wake_polls.get() == 0);
		CHECK(io.polls.get() == io.poll_waits.get());
	}
	SUBCASE("a window that finds nothing ends in sleep") {
		plane_b.set_wake_poll(std::chrono::milliseconds(20), std::chrono::milliseconds(5));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		CHECK(r.deliver());
		CHECK(asleep(2));
		CHECK(io.wake_polls.get() == 1);
		CHECK(io.wake_poll_hits.get() == 0);
		platform::eventfd_signal(stop.get());
		run.join();
	}
	SUBCASE("busy_poll, when set, applies instead") {
		plane_b.set_busy_poll(std::chrono::milliseconds(20));
		plane_b.set_wake_poll(std::chrono::milliseconds(1500), std::chrono::milliseconds(5));
		std::thread run([&] { err = plane_b.run(stop.get()); });
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		CHECK(r.deliver());
		CHECK(asleep(2)); // after the 20 ms busy window, not a 1.5 s wake window
		CHECK(io.busy_polls.get() == 1);
		CHECK(io.wake_polls.get() == 0);
		platform::eventfd_signal(stop.get());
		run.join();
	}
	CHECK(err == 0);
	for (size_t i = 0; i < kDropReasons; i++)
		CHECK(r.stats_b.drops[i].get() == 0);
}

namespace {

/// What the queue limit did to a stream that kept a standing queue in B's socket.
struct QueueRun {
	size_t ect_sent = 0, not_ect_sent = 0, small_sent = 0;
	size_t ce_out = 0, ect_out = 0, not_ect_out = 0, small_out = 0;
};

/**
 * standing_queue() - 30 rounds of: 8 datagrams to B (ECT(0) and Not-ECT
 * bulk packets of 1000 bytes, and one small Not-ECT packet), a 2 ms wait,
 * then one inbound pass: each datagram waited at least 2 ms in the socket,
 * for 60 ms in all. Counts what came out of tun B, by its ECN field.
 */
QueueRun standing_queue(Receiver& r) {
	QueueRun q;
	for (int round = 0; round < 30; round++) {
		for (int i = 0; i < 8; i++) {
			const bool small = i == 7, ect = !small && i % 2 == 0;
			auto pkt = ipv4_packet(0x0a630001, 0x0a630002, small ? 36 : 972);
			if (ect) pkt[1] = tunnel::ecn::kEct0;
			// RFC 6040 normal mode: the outer field is the inner one.
			r.send(r.seal(pkt), ect ? tunnel::ecn::kEct0 : tunnel::ecn::kNotEct);
			(small ? q.small_sent : ect ? q.ect_sent : q.not_ect_sent)++;
		}
		usleep(2000);
		REQUIRE(test::wait_readable(r.udp_b.fd()));
		r.plane_b.inbound_batch();
		std::vector<uint8_t> out(2048);
		for (ssize_t n; (n = read(r.tun_b.test_end.get(), out.data(), out.size())) > 0;) {
			const uint8_t field = tunnel::ecn::field({out.data(), size_t(n)});
			if (n < 100)
				q.small_out++;
			else if (field == tunnel::ecn::kCe)
				q.ce_out++;
			else if (field == tunnel::ecn::kEct0)
				q.ect_out++;
			else
				q.not_ect_out++;
		}
	}
	return q;
}

} // namespace

TEST_CASE("the queue limit marks ECN-capable bulk packets CE and drops the others, sparing small ones") {
	Receiver r;
	REQUIRE(r.udp_b.enable_rx_timestamps());
	r.plane_b.set_queue_limit({1000000, 5000000}); // 1 ms target, 5 ms interval
	const QueueRun q = standing_queue(r);
	const uint64_t marks = r.stats_b.queue_marks.get(), drops = r.stats_b.drops_of(Drop::queue_delay);
	INFO("marks " << marks << ", drops " << drops << ", engaged " << r.stats_b.queue_engaged.get());
	// Above target for 60 ms, 12 intervals: the control law signals often.
	CHECK(r.stats_b.queue_engaged.get() >= 1);
	CHECK(marks + drops >= 5);
	CHECK(marks >= 1);
	CHECK(drops >= 1);
	// Each mark reached the inner header; each drop was a Not-ECT packet.
	CHECK(q.ce_out == marks);
	CHECK(q.ect_out + q.ce_out == q.ect_sent);
	CHECK(q.not_ect_out + drops == q.not_ect_sent);
	CHECK(q.small_out == q.small_sent);
	CHECK(r.stats_b.queue_sojourn_us.get() >= 2000);
	CHECK(r.stats_b.drops_of(Drop::ce_not_ect) == 0);
}

TEST_CASE("without the queue limit (or without arrival times) the same standing queue is left alone") {
	for (bool stamps : {false, true}) {
		INFO("timestamps " << stamps);
		Receiver r;
		if (stamps)
			REQUIRE(r.udp_b.enable_rx_timestamps());
		else
			r.plane_b.set_queue_limit({1000000, 5000000}); // on, but no arrival times to judge by
		const QueueRun q = standing_queue(r);
		CHECK(r.stats_b.queue_marks.get() == 0);
		CHECK(r.stats_b.drops_of(Drop::queue_delay) == 0);
		CHECK(r.stats_b.queue_engaged.get() == 0);
		CHECK(q.ect_out == q.ect_sent);
		CHECK(q.not_ect_out == q.not_ect_sent);
		CHECK(q.small_out == q.small_sent);
	}
}
