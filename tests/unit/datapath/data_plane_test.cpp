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

/// What a queue limit did to a stream that kept a standing queue: what was
/// sent, and what came out of tun B by its ECN field.
struct QueueRun {
	size_t ect_sent = 0, not_ect_sent = 0, small_sent = 0;
	size_t ce_out = 0, ect_out = 0, not_ect_out = 0, small_out = 0;

	/// Counts @pkt out of tun B (@small: one of the small flow's).
	void out(std::span<const uint8_t> pkt, bool small) {
		const uint8_t field = tunnel::ecn::field(pkt);
		(small                         ? small_out
		 : field == tunnel::ecn::kCe   ? ce_out
		 : field == tunnel::ecn::kEct0 ? ect_out
		                               : not_ect_out)++;
	}
};

/**
 * standing_queue() - 30 rounds of: 72 datagrams to B (bulk packets of 1000
 * bytes, ECT(0) and Not-ECT in turn, and every eighth a small Not-ECT one),
 * a 2 ms wait, then one inbound pass, which takes 64: the socket's queue
 * never empties and grows by 8 a round, each datagram waits several rounds.
 * Then B drains it. Counts what came out of tun B, by its ECN field.
 */
QueueRun standing_queue(Receiver& r) {
	const int bytes = 8 << 20; // room for the backlog
	REQUIRE(setsockopt(r.udp_b.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) == 0);
	QueueRun q;
	std::vector<uint8_t> out(2048);
	auto take = [&] {
		REQUIRE(test::wait_readable(r.udp_b.fd()));
		r.plane_b.inbound_batch();
		for (ssize_t n; (n = read(r.tun_b.test_end.get(), out.data(), out.size())) > 0;)
			q.out({out.data(), size_t(n)}, n < 100);
	};
	size_t sent = 0;
	for (int round = 0; round < 30; round++) {
		for (int i = 0; i < 72; i++) {
			const bool small = i % 8 == 7, ect = !small && i % 2 == 0;
			auto pkt = ipv4_packet(0x0a630001, 0x0a630002, small ? 36 : 972);
			if (ect) pkt[1] = tunnel::ecn::kEct0;
			// RFC 6040 normal mode: the outer field is the inner one.
			r.send(r.seal(pkt), ect ? tunnel::ecn::kEct0 : tunnel::ecn::kNotEct);
			(small ? q.small_sent : ect ? q.ect_sent : q.not_ect_sent)++;
			sent++;
		}
		usleep(2000);
		take();
	}
	while (r.stats_b.udp_rx_packets.get() < sent)
		take();
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

TEST_CASE(
    "the queue limit never signals a datagram that waited alone: a slow receiver is not a standing queue") {
	// Found in the VM (TCG): a worker that takes more than the target to get
	// round to each lone datagram of a TCP retransmission dropped every one
	// of them, and the transfer stalled. RFC 8289 does not signal while the
	// queue holds no more than one packet; here, the datagram that empties
	// the socket's queue.
	Receiver r;
	REQUIRE(r.udp_b.enable_rx_timestamps());
	r.plane_b.set_queue_limit({1000000, 5000000}); // 1 ms target, 5 ms interval
	QueueRun q;
	for (int round = 0; round < 40; round++) {
		auto pkt = ipv4_packet(0x0a630001, 0x0a630002, 972); // bulk, Not-ECT
		r.send(r.seal(pkt));
		q.not_ect_sent++;
		// Seen queued (so stamped: a loaded machine may queue it late),
		// then left there 3 ms, alone.
		REQUIRE(test::wait_readable(r.udp_b.fd()));
		usleep(3000);
		r.plane_b.inbound_batch();
		std::vector<uint8_t> out(2048);
		for (ssize_t n; (n = read(r.tun_b.test_end.get(), out.data(), out.size())) > 0;)
			q.out({out.data(), size_t(n)}, false);
	}
	CHECK(r.stats_b.queue_sojourn_us.get() >= 3000); // it did wait past the target
	CHECK(r.stats_b.drops_of(Drop::queue_delay) == 0);
	CHECK(r.stats_b.queue_engaged.get() == 0);
	CHECK(q.not_ect_out == q.not_ect_sent);
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

// --- The send-side flow queue (DataPlane::set_flow_queue()) ---

namespace {

/**
 * struct SendPair - data plane A, whose sending is under test, and data
 * plane B receiving from it over loopback; packets go into tun A and are
 * read back from tun B.
 */
struct SendPair {
	std::vector<uint8_t> k_ab = random_bytes(20), k_ba = random_bytes(20);
	platform::UdpSocket udp_a = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	platform::UdpSocket udp_b = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	tunnel::SaTable table_a{
	    {test::gcm_peer("b", udp_b.local_endpoint(), "10.99.0.0/24", 0x1001, 0x2001, k_ab, k_ba)}};
	tunnel::SaTable table_b{
	    {test::gcm_peer("a", udp_a.local_endpoint(), "10.98.0.0/24", 0x2001, 0x1001, k_ba, k_ab)}};
	FakeTun tun_a, tun_b;
	DataPathStats stats_a, stats_b;
	datapath::DataPlane plane_a{table_a, tun_a.plane_end.get(), udp_a, stats_a};
	datapath::DataPlane plane_b{table_b, tun_b.plane_end.get(), udp_b, stats_b};

	SendPair() {
		// Room for the bursts the tests make in B's socket.
		const int bytes = 8 << 20;
		REQUIRE(setsockopt(udp_b.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) == 0);
	}
	void put(const std::vector<uint8_t>& pkt) {
		REQUIRE(write(tun_a.test_end.get(), pkt.data(), pkt.size()) == ssize_t(pkt.size()));
	}
	/// B takes in what A has sent: the packets out of tun B, in order. A
	/// sent as many packets as it read less what it dropped; on a busy
	/// machine loopback may hand them over late, so this waits for them.
	std::vector<std::vector<uint8_t>> receive() {
		uint64_t dropped = 0;
		for (const Counter& d : stats_a.drops)
			dropped += d.get();
		const uint64_t expect = stats_a.tun_rx_packets.get() - dropped;
		std::vector<std::vector<uint8_t>> out;
		std::vector<uint8_t> buf(70000);
		while (out.size() < expect && test::wait_readable(udp_b.fd())) {
			plane_b.inbound_batch();
			for (ssize_t n; (n = read(tun_b.test_end.get(), buf.data(), buf.size())) > 0;)
				out.emplace_back(buf.begin(), buf.begin() + n);
		}
		return out;
	}
};

/// A UDP packet of flow @port (source port) from 10.98.0.1 to 10.99.0.2,
/// @payload bytes, with ECN field @ecn; its first payload byte is @tag.
std::vector<uint8_t> flow_packet(uint16_t port, size_t payload, uint8_t ecn = 0, uint8_t tag = 0) {
	auto p = ipv4_packet(0x0a620001, 0x0a630002, payload);
	p[1] = ecn;
	store_be16(&p[20], port);
	store_be16(&p[22], 9);
	if (payload) p[28] = tag;
	return p;
}

bool same_flow(const std::vector<uint8_t>& p, uint16_t port) {
	return p.size() >= 22 && load_be16(&p[20]) == port;
}

} // namespace

TEST_CASE("with the flow queue, packets still go through intact and each flow in order") {
	SendPair s;
	REQUIRE(s.plane_a.set_flow_queue({1000000, 20000000}));
	CHECK(s.plane_a.flow_queue_on());
	std::vector<std::vector<uint8_t>> sent;
	for (size_t i = 0; i < 300; i++) {
		sent.push_back(
		    flow_packet(uint16_t(1000 + i % 3), i == 7 ? 8972 : (i * 397) % 4000, 0, uint8_t(i)));
		s.put(sent.back());
	}
	for (int pass = 0; pass < 10; pass++)
		s.plane_a.outbound_batch();
	const auto got = s.receive();
	for (size_t i = 0; i < kDropReasons; i++) {
		INFO("drop reason " << drop_name(Drop(i)));
		CHECK(s.stats_a.drops[i].get() == 0);
		CHECK(s.stats_b.drops[i].get() == 0);
	}
	CHECK(s.stats_a.tun_rx_packets.get() == sent.size());
	CHECK(s.stats_a.udp_tx_packets.get() == sent.size());
	CHECK(s.stats_b.udp_rx_packets.get() == sent.size());
	REQUIRE(got.size() == sent.size());
	// Interleaved between flows, but each flow's packets in their order.
	for (uint16_t port = 1000; port < 1003; port++) {
		std::vector<std::vector<uint8_t>> in, out;
		for (const auto& p : sent)
			if (same_flow(p, port)) in.push_back(p);
		for (const auto& p : got)
			if (same_flow(p, port)) out.push_back(p);
		CHECK(in == out);
	}
	CHECK(s.stats_a.tx_queue_packets.get() == 0);
	CHECK(s.stats_a.tx_queue_bytes.get() == 0);
}

TEST_CASE("with the flow queue, a sparse packet overtakes a bulk flow's backlog; without it, it waits") {
	for (bool fq : {true, false}) {
		INFO("flow queue " << fq);
		SendPair s;
		if (fq) REQUIRE(s.plane_a.set_flow_queue({1000000, 20000000}));
		for (int i = 0; i < 100; i++)
			s.put(flow_packet(2000, 1200));
		s.plane_a.outbound_batch(); // one batch of the bulk flow goes; the rest waits
		s.put(flow_packet(3000, 56));
		for (int pass = 0; pass < 10; pass++)
			s.plane_a.outbound_batch();
		const auto got = s.receive();
		REQUIRE(got.size() == 101);
		size_t at = 0;
		while (at < got.size() && !same_flow(got[at], 3000))
			at++;
		INFO("the sparse packet came out " << at << "th");
		if (fq)
			CHECK(at == datapath::DataPlane::kBatch); // first of the second batch
		else
			CHECK(at == 100); // behind the whole backlog
	}
}

namespace {

/**
 * send_standing_queue() - 12 rounds of: 96 bulk packets of one flow into tun
 * A (ECT(0) and Not-ECT in turn) and one small packet of another flow, a
 * 2 ms wait, one pass of A (which sends 64): A's backlog grows by 33 a round
 * and each packet waits several rounds. Then A drains it. Counts what came
 * out of tun B.
 */
QueueRun send_standing_queue(SendPair& s) {
	QueueRun r;
	for (int round = 0; round < 12; round++) {
		for (int i = 0; i < 96; i++) {
			const bool ect = i % 2 == 0;
			s.put(flow_packet(4000, 972, ect ? tunnel::ecn::kEct0 : tunnel::ecn::kNotEct));
			(ect ? r.ect_sent : r.not_ect_sent)++;
		}
		s.put(flow_packet(5000, 36));
		r.small_sent++;
		usleep(2000);
		s.plane_a.outbound_batch();
	}
	for (int pass = 0; pass < 100; pass++)
		s.plane_a.outbound_batch();
	for (const auto& p : s.receive())
		r.out(p, same_flow(p, 5000));
	return r;
}

} // namespace

TEST_CASE("the flow queue marks a standing flow's ECN-capable packets CE and drops its others") {
	SendPair s;
	REQUIRE(s.plane_a.set_flow_queue({1000000, 5000000})); // 1 ms target, 5 ms interval
	const QueueRun r = send_standing_queue(s);
	const uint64_t marks = s.stats_a.tx_queue_marks.get(), drops = s.stats_a.tx_queue_drops.get();
	INFO("marks " << marks << ", drops " << drops << ", engaged " << s.stats_a.tx_queue_engaged.get());
	CHECK(s.stats_a.tx_queue_engaged.get() >= 1);
	CHECK(marks >= 1);
	CHECK(drops >= 1);
	CHECK(s.stats_a.drops_of(Drop::queue_delay) == drops);
	CHECK(s.stats_a.drops_of(Drop::queue_overflow) == 0);
	// Each mark reached B inside the packet; each drop was a Not-ECT one;
	// the small flow was never touched.
	CHECK(r.ce_out == marks);
	CHECK(r.ect_out + r.ce_out == r.ect_sent);
	CHECK(r.not_ect_out + drops == r.not_ect_sent);
	CHECK(r.small_out == r.small_sent);
	CHECK(s.stats_b.drops_of(Drop::ce_not_ect) == 0);
}

TEST_CASE("without the flow queue the same standing queue is left alone") {
	SendPair s;
	REQUIRE(s.plane_a.set_flow_queue({0, 5000000})); // target 0: off
	CHECK_FALSE(s.plane_a.flow_queue_on());
	const QueueRun r = send_standing_queue(s);
	CHECK(s.stats_a.tx_queue_marks.get() == 0);
	CHECK(s.stats_a.drops_of(Drop::queue_delay) == 0);
	CHECK(r.ect_out == r.ect_sent);
	CHECK(r.not_ect_out == r.not_ect_sent);
	CHECK(r.small_out == r.small_sent);
	CHECK(r.ce_out == 0);
}

TEST_CASE("a full flow queue sheds the fullest flow's oldest packets, not a small flow's") {
	SendPair s;
	// 64 buffers: a burst of 200 bulk packets does not fit.
	REQUIRE(s.plane_a.set_flow_queue({1000000, 20000000}, 64));
	for (int i = 0; i < 200; i++) {
		s.put(flow_packet(6000, 1000, 0, uint8_t(i)));
		if (i % 20 == 0) s.put(flow_packet(7000, 40, 0, uint8_t(i)));
	}
	for (int pass = 0; pass < 20; pass++)
		s.plane_a.outbound_batch();
	const auto got = s.receive();
	size_t bulk = 0, small = 0;
	for (const auto& p : got)
		(same_flow(p, 7000) ? small : bulk)++;
	const uint64_t shed = s.stats_a.drops_of(Drop::queue_overflow);
	INFO("bulk out " << bulk << ", shed " << shed);
	CHECK(small == 10);
	CHECK(shed > 0);
	CHECK(bulk + shed == 200);
	CHECK(s.stats_a.tun_rx_packets.get() == 210);
	// The shed ones were the oldest: the last bulk packet got through.
	CHECK(std::any_of(got.begin(), got.end(),
	                  [](const auto& p) { return same_flow(p, 6000) && p[28] == uint8_t(199); }));
}

TEST_CASE("a byte bound sheds as a full set of buffers does") {
	SendPair s;
	REQUIRE(s.plane_a.set_flow_queue({1000000, 20000000}, 512, 50000));
	for (int i = 0; i < 200; i++)
		s.put(flow_packet(6000, 1000));
	s.plane_a.outbound_batch();
	// 128 read, 64 sent; at most 50 KB kept.
	CHECK(s.stats_a.tx_queue_bytes.get() <= 50000 + 1028);
	CHECK(s.stats_a.drops_of(Drop::queue_overflow) > 0);
}
