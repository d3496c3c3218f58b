// VhostTunPort against a device model playing vhost-net on the same memory
// (tests/unit/support/device_model_test_util.hpp): RX buffers laid out for in-place
// encapsulation, re-posting without kicks, device errors, the direct-write
// decision on an idle TX ring, one kick per batch, and ring-full fall-back.
// The "tun" for direct writes is a SOCK_SEQPACKET pair (one packet per write).
#include "datapath/vhost_tun_port.hpp"

#include "tests/unit/support/runtime_test_util.hpp"

#include "datapath/data_plane.hpp"
#include "platform/vhost_net.hpp"
#include "tests/unit/datapath/vhost_bed_test_util.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <cstring>
#include <doctest/doctest.h>
#include <memory>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

using namespace esptun;
using esptun::virtio::test::DeviceModel;
using platform::kVirtioNetHdrLen;

namespace {

constexpr uint32_t kQ = 8; // small rings: full quickly

std::vector<uint8_t> packet(size_t len, uint8_t seed) {
	std::vector<uint8_t> p(len);
	for (size_t i = 0; i < len; i++)
		p[i] = uint8_t(seed + i * 7);
	p[0] = 0x45;
	return p;
}

struct Bed : test::VhostBed {
	explicit Bed(unsigned direct_write_max, bool gro_slots = false)
	    : VhostBed(direct_write_max, kQ, false, gro_slots) {}

	/// eventfd counter (0 when it was not signalled)
	static uint64_t drain(int fd) {
		IoResult r = platform::eventfd_drain(fd);
		return r.ok() ? uint64_t(r.n) : 0;
	}

	/// The device receives @pkt from the tun into the next RX buffer (len = 12 + size).
	void device_rx(const std::vector<uint8_t>& pkt, std::optional<uint32_t> raw_len = {}) {
		auto d = rx_dev->take_avail();
		REQUIRE(d);
		REQUIRE((d->flags & virtio::kDescFWrite) != 0);
		REQUIRE(d->len >= kVirtioNetHdrLen + pkt.size());
		auto* at = reinterpret_cast<uint8_t*>(uintptr_t(d->addr));
		std::memset(at, 0, kVirtioNetHdrLen);
		std::memcpy(at + kVirtioNetHdrLen, pkt.data(), pkt.size());
		rx_dev->push_used(d->id, raw_len ? *raw_len : uint32_t(kVirtioNetHdrLen + pkt.size()));
		if (rx_dev->flush_used()) platform::eventfd_signal(rx_call.get());
	}

	/// The device takes the next TX buffer: returns the packet after checking the zero header.
	std::vector<uint8_t> device_tx() {
		auto d = tx_dev->take_avail();
		REQUIRE(d);
		CHECK((d->flags & virtio::kDescFWrite) == 0);
		REQUIRE(d->len >= kVirtioNetHdrLen);
		const auto* at = reinterpret_cast<const uint8_t*>(uintptr_t(d->addr));
		for (size_t i = 0; i < kVirtioNetHdrLen; i++)
			CHECK(at[i] == 0);
		tx_dev->push_used(d->id, 0);
		return {at + kVirtioNetHdrLen, at + d->len};
	}

	/// Puts @pkt into receive slot @slot as decapsulate() leaves it (behind 24 bytes of ESP + IV).
	datapath::TunWrite inbound(size_t slot, const std::vector<uint8_t>& pkt) {
		std::span<uint8_t> buf = port->recv_slots()[slot].buf;
		std::memset(buf.data(), 0xee,
		            tunnel::esp::kHeadroom); // ESP header and IV: overwritten by the vnet header
		std::memcpy(buf.data() + tunnel::esp::kHeadroom, pkt.data(), pkt.size());
		return {slot, buf.subspan(tunnel::esp::kHeadroom, pkt.size())};
	}

	/// Packets the port wrote to the tun fd directly.
	std::vector<std::vector<uint8_t>> tun_written() {
		std::vector<std::vector<uint8_t>> out;
		std::vector<uint8_t> b(70000);
		for (;;) {
			ssize_t n = read(tun_test_end.get(), b.data(), b.size());
			if (n < 0) break;
			out.emplace_back(b.begin(), b.begin() + n);
		}
		return out;
	}
};

} // namespace

TEST_CASE(
    "vhost RX: every buffer is posted, packets land at esp::kHeadroom and are re-posted without kicks") {
	Bed bed(4);
	CHECK(bed.port->rx_queue().in_flight() == kQ);
	bed.port->start();
	CHECK(Bed::drain(bed.rx_kick.get()) == 1);
	CHECK(bed.port->can_sleep()); // nothing used yet: re-armed, safe to sleep

	std::vector<std::vector<uint8_t>> sent = {packet(60, 1), packet(1500, 2), packet(20, 3)};
	for (const auto& p : sent)
		bed.device_rx(p);
	CHECK(Bed::drain(bed.rx_call.get()) == 1); // one call for the batch (event index)
	CHECK(!bed.port->can_sleep());
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};
	REQUIRE(bed.port->read_batch(out) == 3);
	for (size_t i = 0; i < 3; i++) {
		CHECK(out[i].len == sent[i].size());
		CHECK(out[i].buf.size() == datapath::VhostTunPort::buffer_size(1500));
		CHECK(out[i].buf.size() >= tunnel::esp::kHeadroom + out[i].len + tunnel::esp::kTailroom);
		CHECK(
		    std::equal(sent[i].begin(), sent[i].end(), out[i].buf.begin() + tunnel::esp::kHeadroom));
	}
	bed.port->read_done();
	CHECK(bed.port->rx_queue().in_flight() == kQ);
	CHECK(Bed::drain(bed.rx_kick.get()) == 0); // the device still had buffers: no kick
	CHECK(bed.stats.rx_ring_packets.get() == 3);
	CHECK(bed.stats.rx_kicks.get() == 1);
	CHECK(bed.port->can_sleep());
}

TEST_CASE("vhost RX read ahead: read_raw() copies each packet out; the ring's buffers go back per batch") {
	Bed bed(4);
	bed.port->start();
	(void)Bed::drain(bed.rx_kick.get());
	REQUIRE(bed.port->raw_buffer_size() >= tunnel::esp::kBufferSize);
	std::vector<std::vector<uint8_t>> sent = {packet(60, 1), packet(1500, 2), packet(20, 3)};
	for (const auto& p : sent)
		bed.device_rx(p);
	std::vector<uint8_t> raw(bed.port->raw_buffer_size());
	for (size_t i = 0; i < sent.size(); i++) {
		CAPTURE(i);
		const size_t len = bed.port->read_raw(raw);
		REQUIRE(len == sent[i].size());
		const std::span<uint8_t> pkt = bed.port->raw_packet(raw, len);
		CHECK(std::equal(sent[i].begin(), sent[i].end(), pkt.begin(), pkt.end()));
		if (i + 1 < sent.size()) {
			// The batch's buffers are out until its last packet is copied,
			// and the port must not let the loop sleep on them.
			CHECK(bed.port->rx_queue().in_flight() == kQ - 3);
			CHECK_FALSE(bed.port->can_sleep());
		}
	}
	CHECK(bed.port->rx_queue().in_flight() == kQ); // all re-posted
	CHECK(bed.port->read_raw(raw) == 0);
	CHECK(bed.port->can_sleep());
	// The copy is laid out as a packet buffer: emit_raw() hands it over whole.
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};
	bool keep = true;
	CHECK(bed.port->emit_raw(raw, 20, 5, out, keep) == 1);
	CHECK_FALSE(keep);
	CHECK(out[5].buf.data() == raw.data());
	CHECK(out[5].len == 20);
	CHECK(bed.stats.rx_ring_packets.get() == 3);
}

TEST_CASE("vhost RX: a used length below the 12-byte header or beyond the buffer is a device error, "
          "and the buffer goes back") {
	Bed bed(4);
	bed.port->start();
	bed.device_rx(packet(40, 1), 5u);
	bed.device_rx(packet(40, 2), 1u << 20);
	bed.device_rx(packet(40, 3));
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};
	REQUIRE(bed.port->read_batch(out) == 1);
	CHECK(out[0].len == 40);
	bed.port->read_done();
	CHECK(bed.stats.device_errors.get() == 2);
	CHECK(bed.stats.rx_ring_packets.get() == 1);
	CHECK(bed.port->rx_queue().in_flight() == kQ);
}

TEST_CASE("vhost RX: re-posting after the device ran dry kicks, once") {
	Bed bed(4);
	bed.port->start();
	for (uint32_t i = 0; i < kQ; i++)
		bed.device_rx(packet(100, uint8_t(i)));
	CHECK(!bed.rx_dev->enable_notify()); // the device found the ring empty and asks for a kick
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};
	REQUIRE(bed.port->read_batch(out) == kQ);
	bed.port->read_done();
	CHECK(Bed::drain(bed.rx_kick.get()) == 2); // start() and this one
	CHECK(bed.stats.rx_kicks.get() == 2);
}

TEST_CASE("vhost TX: a small batch on an idle ring is written directly, a larger one goes through "
          "the ring with one kick") {
	Bed bed(4);
	auto p0 = packet(80, 9);
	datapath::TunWrite w = bed.inbound(0, p0);
	uint8_t* slot0 = bed.port->recv_slots()[0].buf.data();
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	auto direct = bed.tun_written();
	REQUIRE(direct.size() == 1);
	CHECK(direct[0] == p0);
	CHECK(bed.stats.direct_writes.get() == 1);
	CHECK(bed.port->recv_slots()[0].buf.data() == slot0); // a direct write keeps the buffer
	CHECK(Bed::drain(bed.tx_kick.get()) == 0);

	// Five packets > direct_write_max: the ring, one publish, one kick.
	std::vector<std::vector<uint8_t>> sent;
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < 5; i++) {
		sent.push_back(packet(100 + i, uint8_t(i)));
		ws.push_back(bed.inbound(i, sent.back()));
	}
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(Bed::drain(bed.tx_kick.get()) == 1);
	CHECK(bed.stats.tx_kicks.get() == 1);
	CHECK(bed.stats.tx_ring_packets.get() == 5);
	CHECK(bed.port->recv_slots()[0].buf.data() != slot0); // the slot took a free buffer
	CHECK(bed.port->free_buffers() == kQ - 5);

	// The device has not caught up: the ring is not idle, so even a lone
	// packet joins it, and needs no kick (the device has not asked for one).
	auto p6 = packet(64, 6);
	w = bed.inbound(7, p6);
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(Bed::drain(bed.tx_kick.get()) == 0);
	CHECK(bed.stats.tx_ring_packets.get() == 6);

	for (const auto& p : sent)
		CHECK(bed.device_tx() == p);
	CHECK(bed.device_tx() == p6);
	(void)bed.tx_dev->flush_used();
	CHECK(!bed.tx_dev->enable_notify()); // drained: the device asks for a kick next time

	// Idle again: the lone packet goes direct.
	w = bed.inbound(3, p0);
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	CHECK(bed.tun_written().size() == 1);
	CHECK(bed.stats.direct_writes.get() == 2);
	CHECK(bed.stats.tx_kicks.get() == 1);
	CHECK(bed.stats.ring_full.get() == 0);
}

TEST_CASE("vhost TX with direct_write_max = 0 sends even a lone packet through the ring") {
	Bed bed(0);
	auto p = packet(200, 1);
	datapath::TunWrite w = bed.inbound(0, p);
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(Bed::drain(bed.tx_kick.get()) == 1);
	CHECK(bed.device_tx() == p);
	CHECK(bed.stats.direct_writes.get() == 0);
	CHECK(bed.stats.tx_ring_packets.get() == 1);
}

TEST_CASE("vhost TX ring only: a batch for a busy device is counted as suppressed, no kick is "
          "needless") {
	Bed bed(0);
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < 3; i++)
		ws.push_back(bed.inbound(i, packet(90, uint8_t(i))));
	CHECK(bed.port->write_batch(ws) == 0); // idle device: one kick
	CHECK(Bed::drain(bed.tx_kick.get()) == 1);
	(void)bed.device_tx(); // woken, busy with the rest: no re-arm
	auto w = bed.inbound(3, packet(70, 3));
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	CHECK(Bed::drain(bed.tx_kick.get()) == 0);
	CHECK(bed.stats.tx_kicks.get() == 1);
	CHECK(bed.stats.tx_kicks_suppressed.get() == 1);
	for (int i = 0; i < 3; i++)
		(void)bed.device_tx();
	(void)bed.tx_dev->flush_used();
	CHECK(!bed.tx_dev->enable_notify()); // drained and asleep: the next batch kicks
	w = bed.inbound(4, packet(70, 4));
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	CHECK(Bed::drain(bed.tx_kick.get()) == 1);
	CHECK(bed.stats.tx_kicks.get() == 2);
	CHECK(bed.stats.needless_kicks.get() == 0);
}

TEST_CASE("vhost TX: with every buffer in the ring, packets go direct and count ring_full until "
          "used buffers are harvested") {
	Bed bed(0);
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < kQ; i++)
		ws.push_back(bed.inbound(i, packet(100, uint8_t(i))));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.port->free_buffers() == 0);
	CHECK(bed.port->tx_queue().in_flight() == kQ);

	ws.clear();
	for (size_t i = 0; i < 3; i++)
		ws.push_back(bed.inbound(i, packet(50, uint8_t(i + 100))));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.stats.ring_full.get() == 3);
	CHECK(bed.stats.direct_writes.get() == 3);
	CHECK(bed.tun_written().size() == 3);

	// The device finishes four: the next batch harvests them and uses the ring.
	for (int i = 0; i < 4; i++)
		(void)bed.device_tx();
	(void)bed.tx_dev->flush_used();
	ws.clear();
	for (size_t i = 0; i < 2; i++)
		ws.push_back(bed.inbound(i, packet(50, uint8_t(i + 200))));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.stats.ring_full.get() == 3);
	CHECK(bed.stats.tx_ring_packets.get() == kQ + 2);
	CHECK(bed.port->free_buffers() == 2);
	CHECK(bed.tun_written().empty());
}

TEST_CASE("vhost port set-up refuses a region that is too short") {
	datapath::TunIoStats stats;
	datapath::VhostPortParams p;
	p.queue_size = kQ;
	p.buf_size = datapath::VhostTunPort::buffer_size(1500);
	platform::MappedRegion r(datapath::VhostTunPort::region_bytes(kQ, p.buf_size) - 4096);
	CHECK_THROWS_AS(datapath::VhostTunPort(r.span(), p, stats), std::invalid_argument);
}

namespace {

/// An IPv4/UDP packet 10.99.0.@src -> 10.99.0.@dst with @payload bytes.
std::vector<uint8_t> ipv4(uint8_t src, uint8_t dst, size_t payload, uint8_t seed) {
	std::vector<uint8_t> p = packet(28 + payload, seed);
	p[0] = 0x45;
	p[1] = 0;
	p[2] = uint8_t(p.size() >> 8);
	p[3] = uint8_t(p.size());
	p[8] = 64;
	p[9] = 17;
	const uint8_t s[4] = {10, 99, 0, src}, d[4] = {10, 99, 0, dst};
	std::memcpy(&p[12], s, 4);
	std::memcpy(&p[16], d, 4);
	return p;
}

/// Data plane a (direct I/O on a socket pair) and data plane b (on the bed's
/// vhost port, every packet through the ring), ESP between them on loopback.
struct Planes {
	std::vector<uint8_t> k_ab = std::vector<uint8_t>(20, 0x11), k_ba = std::vector<uint8_t>(20, 0x22);
	platform::UdpSocket udp_a = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	platform::UdpSocket udp_b = platform::UdpSocket::bind(Endpoint{IpAddress::v4(0x7f000001), 0});
	tunnel::SaTable table_a{
	    {test::gcm_peer("b", udp_b.local_endpoint(), "10.99.0.2/32", 0x1001, 0x2001, k_ab, k_ba)}};
	tunnel::SaTable table_b{
	    {test::gcm_peer("a", udp_a.local_endpoint(), "10.99.0.1/32", 0x2001, 0x1001, k_ba, k_ab)}};
	platform::UniqueFd tun_a_plane, tun_a_test;
	DataPathStats stats_a, stats_b;
	Bed bed;
	platform::MmsgEngine engine_b{udp_b};

	/// @gro: b's socket has UDP GRO and its port the GRO receive slots.
	explicit Planes(bool gro) : bed(0, gro) {
		if (gro) REQUIRE(udp_b.enable_gro());
		int sv[2];
		REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
		tun_a_plane.reset(sv[0]);
		tun_a_test.reset(sv[1]);
		bed.port->start();
		plane_a = std::make_unique<datapath::DataPlane>(table_a, tun_a_plane.get(), udp_a, stats_a);
		plane_b = std::make_unique<datapath::DataPlane>(table_b, *bed.port, engine_b, stats_b);
	}
	std::unique_ptr<datapath::DataPlane> plane_a, plane_b;

	/// @pkts written to a's tun and sent by a in one batch.
	void send_from_a(const std::vector<std::vector<uint8_t>>& pkts) {
		for (const auto& p : pkts)
			REQUIRE(write(tun_a_test.get(), p.data(), p.size()) == ssize_t(p.size()));
		plane_a->outbound_batch();
		CHECK(stats_a.udp_tx_packets.get() == pkts.size());
	}
	/// b receives until @sent all arrived (or the socket stays quiet); each
	/// must come out of the TX ring or, once it is full, as a direct write,
	/// in order. Return: how many came through the ring.
	size_t receive_at_b(const std::vector<std::vector<uint8_t>>& sent) {
		size_t got = 0, direct = 0;
		while (stats_b.udp_rx_packets.get() < sent.size() && test::wait_readable(udp_b.fd())) {
			plane_b->inbound_batch();
			while (bed.tx_dev->avail_pending() && got < sent.size())
				CHECK(bed.device_tx() == sent[got++]);
			(void)bed.tx_dev->flush_used();
			for (const auto& p : bed.tun_written()) // ring full: direct, still in order here
				CHECK(p == sent[got + direct++]);
		}
		CHECK(got + direct == sent.size());
		CHECK(stats_b.tun_tx_packets.get() == sent.size());
		CHECK(bed.stats.tx_ring_packets.get() + bed.stats.direct_writes.get() == sent.size());
		return got;
	}
};

} // namespace

TEST_CASE("data plane over a vhost port: ESP in both directions, receive buffers swapped into the TX ring") {
	for (bool fq : {false, true}) {
		CAPTURE(fq); // the send flow queue reads the RX ring ahead, by copy
		Planes t(false);
		Bed& bed = t.bed;
		if (fq) REQUIRE(t.plane_b->set_flow_queue({1000000, 20000000}));
		// a -> b: 12 packets (more than the ring of 8 holds) arrive in b's TX ring.
		std::vector<std::vector<uint8_t>> sent;
		for (size_t i = 0; i < 12; i++)
			sent.push_back(ipv4(1, 2, 10 + i * 111, uint8_t(i)));
		t.send_from_a(sent);
		t.receive_at_b(sent);
		CHECK(bed.stats.direct_writes.get() == bed.stats.ring_full.get());

		// b -> a: the device hands b's data plane packets through the RX ring.
		std::vector<std::vector<uint8_t>> back;
		for (size_t i = 0; i < 5; i++) {
			back.push_back(ipv4(2, 1, 300 + i, uint8_t(50 + i)));
			bed.device_rx(back.back());
		}
		CHECK(!bed.port->can_sleep());
		t.plane_b->outbound_batch();
		CHECK(t.stats_b.udp_tx_packets.get() == 5);
		CHECK(bed.port->rx_queue().in_flight() == kQ); // re-posted
		size_t n = 0;
		std::vector<uint8_t> buf(70000);
		while (n < back.size() && test::wait_readable(t.udp_a.fd())) {
			t.plane_a->inbound_batch();
			for (ssize_t r; (r = read(t.tun_a_test.get(), buf.data(), buf.size())) >= 0; n++) {
				REQUIRE(n < back.size());
				CHECK(std::vector<uint8_t>(buf.begin(), buf.begin() + r) == back[n]);
			}
		}
		CHECK(n == back.size());
	}
}

TEST_CASE("data plane over a vhost port with UDP GRO: a train arrives in one receive slot and each "
          "packet reaches the TX ring as a copy, in order") {
	Planes t(true);
	const uint8_t* const slot0 = t.bed.port->recv_slots()[0].buf.data();
	// a -> b: 20 packets of one size leave as one GSO train and arrive as one
	// GRO buffer; the ring (8 descriptors) takes 8 copies, the rest go direct.
	std::vector<std::vector<uint8_t>> sent;
	for (size_t i = 0; i < 20; i++)
		sent.push_back(ipv4(1, 2, 500, uint8_t(i)));
	t.send_from_a(sent);
	CHECK(t.udp_a.gso_stats().trains >= 1);
	CHECK(t.receive_at_b(sent) >= kQ);
	CHECK(t.stats_b.udp_gro_buffers.get() >= 1);
	CHECK(t.stats_b.udp_rx_packets.get() == 20);
	CHECK(t.bed.port->recv_slots()[0].buf.data() == slot0); // the slot kept its buffer
	for (size_t i = 0; i < kDropReasons; i++)
		CHECK(t.stats_b.drops[i].get() == 0);
}

TEST_CASE("tun-side system call counters: one per read()/write()/kick/call read, EAGAIN included, "
          "and one per data-plane poll()") {
	SUBCASE("direct port") {
		int sv[2];
		REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
		platform::UniqueFd plane_end(sv[0]), test_end(sv[1]);
		datapath::TunIoStats stats;
		datapath::DirectTunPort port(plane_end.get(), &stats);
		CHECK(&port.io_stats() == &stats);
		for (uint8_t i = 0; i < 3; i++) {
			auto p = packet(100, i);
			REQUIRE(write(test_end.get(), p.data(), p.size()) == ssize_t(p.size()));
		}
		std::array<datapath::TunPacket, datapath::kTunBatch> out{};
		CHECK(port.read_batch(out) == 3);
		CHECK(stats.tun_reads.get() == 4); // three packets and the EAGAIN that ends the batch
		std::array<datapath::TunWrite, 2> ws{};
		auto p = packet(64, 7);
		for (size_t i = 0; i < ws.size(); i++) {
			std::span<uint8_t> buf = port.recv_slots()[i].buf;
			std::copy(p.begin(), p.end(), buf.begin() + tunnel::esp::kHeadroom);
			ws[i] = {i, buf.subspan(tunnel::esp::kHeadroom, p.size())};
		}
		CHECK(port.write_batch(ws) == 0);
		CHECK(stats.tun_writes.get() == 2);
		CHECK(stats.rx_kicks.get() + stats.tx_kicks.get() == 0);
	}
	SUBCASE("vhost port") {
		Bed bed(4);
		bed.port->start();
		CHECK(bed.stats.rx_kicks.get() == 1);
		// One packet from the device: a wake-up, but no read of the call
		// eventfd (the loop watches it edge-triggered) and no tun read.
		bed.device_rx(packet(60, 1));
		bed.port->on_read_wakeup();
		std::array<datapath::TunPacket, datapath::kTunBatch> out{};
		REQUIRE(bed.port->read_batch(out) == 1);
		bed.port->read_done();
		CHECK(bed.stats.call_wakeups.get() == 1);
		CHECK(bed.port->read_fd_signals_only());
		CHECK(bed.stats.tun_reads.get() == 0);
		// A lone inbound packet on the idle ring: one write(), no kick.
		auto p = packet(80, 2);
		datapath::TunWrite w = bed.inbound(0, p);
		CHECK(bed.port->write_batch({&w, 1}) == 0);
		CHECK(bed.stats.tun_writes.get() == 1);
		CHECK(bed.stats.tx_kicks.get() == 0);
		// Five packets: the ring, one kick, no write().
		std::vector<datapath::TunWrite> ws;
		for (size_t i = 0; i < 5; i++)
			ws.push_back(bed.inbound(i, packet(90, uint8_t(i))));
		CHECK(bed.port->write_batch(ws) == 0);
		CHECK(bed.stats.tun_writes.get() == 1);
		CHECK(bed.stats.tx_kicks.get() == 1);
		CHECK(bed.tun_written().size() == 1);
	}
	SUBCASE("data plane loop") {
		Endpoint loopback{IpAddress::v4(0x7f000001), 0};
		platform::UdpSocket udp = platform::UdpSocket::bind(loopback);
		tunnel::SaTable table({});
		DataPathStats stats;
		Bed bed(4);
		bed.port->start();
		platform::MmsgEngine engine(udp);
		datapath::DataPlane plane(table, *bed.port, engine, stats);
		platform::UniqueFd stop = platform::make_eventfd();
		platform::eventfd_signal(stop.get()); // the first poll() returns at once
		CHECK(plane.run(stop.get()) == 0);
		CHECK(bed.stats.polls.get() == 1);
		CHECK(bed.stats.poll_waits.get() == 1); // nothing used: it could have slept
	}
}
