// VhostTunPort with tun offloads (VhostPortParams::vnet_hdr): the device model
// plays vhost-net passing the tun's virtio-net header through, with mergeable
// RX buffers (VIRTIO_NET_F_MRG_RXBUF: a packet spread over num_buffers
// buffers) and descriptor chains on TX. Super-packets from the RX ring must
// come out as the wire packets the kernel would have made (checked with the
// offload tests' independent builder), runs of TCP segments must reach the
// TX ring as one chain with a correct GSO header, and a full ring must push
// back to direct writes. The "tun" for direct writes is a SOCK_SEQPACKET pair.
#include "datapath/vhost_tun_port.hpp"

#include "tests/unit/datapath/offload_test_util.hpp"
#include "tests/unit/datapath/vhost_bed_test_util.hpp"
#include "tunnel/esp_wire.hpp"

#include <cstring>
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

using namespace esptun;
using datapath::offload::VnetHdr;
using datapath::offload::test::Bytes;
using datapath::offload::test::Pkt;
using esptun::virtio::test::DeviceModel;
using platform::kVirtioNetHdrLen;

namespace {

constexpr uint32_t kQ = 64; // a 64 KiB super-packet takes ~43 MTU buffers

struct Bed : test::VhostBed {
	explicit Bed(unsigned direct_write_max, uint32_t q = kQ, bool gro_slots = false)
	    : VhostBed(direct_write_max, q, true, gro_slots) {
		port->start();
	}

	/// vhost's handle_rx() with MRG_RXBUF: [@h][@pkt] over as many RX buffers
	/// as it takes, num_buffers patched into the first header, one used entry
	/// per buffer (the last one trimmed), published together.
	size_t device_rx(VnetHdr h, const Bytes& pkt) {
		Bytes all(kVirtioNetHdrLen);
		all.insert(all.end(), pkt.begin(), pkt.end());
		std::vector<std::pair<virtio::test::DeviceDesc, uint32_t>> used;
		for (size_t off = 0; off < all.size();) {
			auto d = rx_dev->take_avail();
			REQUIRE(d);
			REQUIRE((d->flags & virtio::kDescFWrite) != 0);
			const auto n = uint32_t(std::min<size_t>(d->len, all.size() - off));
			std::memcpy(reinterpret_cast<uint8_t*>(uintptr_t(d->addr)), all.data() + off, n);
			used.emplace_back(*d, n);
			off += n;
		}
		h.num_buffers = uint16_t(used.size());
		REQUIRE(
		    h.write({reinterpret_cast<uint8_t*>(uintptr_t(used[0].first.addr)), kVirtioNetHdrLen}));
		for (const auto& [d, n] : used)
			rx_dev->push_used(d.id, n);
		(void)rx_dev->flush_used();
		return used.size();
	}

	/// One descriptor of the TX table, read as the device would.
	virtio::test::DeviceDesc tx_desc(uint16_t id) const {
		const uint8_t* p = ring_base(platform::kVhostTxQueue) + size_t(id) * virtio::kDescSize;
		virtio::test::DeviceDesc d;
		d.id = id;
		std::memcpy(&d.addr, p + virtio::kDescAddrOff, 8);
		std::memcpy(&d.len, p + virtio::kDescLenOff, 4);
		std::memcpy(&d.flags, p + virtio::kDescFlagsOff, 2);
		return d;
	}

	struct TxBuf {
		VnetHdr hdr;
		Bytes pkt;
		size_t descs = 0;
	};
	/// The device takes the next TX buffer, following its chain: header and packet.
	TxBuf device_tx() {
		auto head = tx_dev->take_avail();
		REQUIRE(head);
		Bytes all;
		size_t descs = 0;
		for (virtio::test::DeviceDesc d = *head;; descs++) {
			CHECK((d.flags & virtio::kDescFWrite) == 0);
			REQUIRE(descs < kQ);
			const auto* at = reinterpret_cast<const uint8_t*>(uintptr_t(d.addr));
			all.insert(all.end(), at, at + d.len);
			if ((d.flags & virtio::kDescFNext) == 0) break;
			uint16_t next = 0;
			std::memcpy(&next,
			            ring_base(platform::kVhostTxQueue) + size_t(d.id) * virtio::kDescSize +
			                virtio::kDescNextOff,
			            2);
			d = tx_desc(next);
		}
		tx_dev->push_used(head->id, 0);
		REQUIRE(all.size() >= kVirtioNetHdrLen);
		return {*VnetHdr::parse(all), Bytes(all.begin() + kVirtioNetHdrLen, all.end()), descs + 1};
	}

	/// @pkt in receive slot @slot as decapsulate() leaves it; with UDP GRO
	/// the datagram at byte @at of the slot's train.
	datapath::TunWrite inbound(size_t slot, const Bytes& pkt, size_t at = 0) {
		std::span<uint8_t> buf = port->recv_slots()[slot].buf.subspan(at);
		std::memset(buf.data(), 0xee, tunnel::esp::kHeadroom);
		std::memcpy(buf.data() + tunnel::esp::kHeadroom, pkt.data(), pkt.size());
		return {slot, buf.subspan(tunnel::esp::kHeadroom, pkt.size())};
	}

	/// The one write the port made to the tun fd, a merged run: its header and packet.
	TxBuf written_run() {
		const std::vector<Bytes> got = tun_written();
		REQUIRE(got.size() == 1);
		return {*VnetHdr::parse(got[0]), Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()), 1};
	}

	/// What the port wrote to the tun fd: [header][packet] per write.
	std::vector<Bytes> tun_written() {
		std::vector<Bytes> out;
		Bytes b(70000);
		for (ssize_t n; (n = read(tun_test_end.get(), b.data(), b.size())) >= 0;)
			out.emplace_back(b.begin(), b.begin() + n);
		return out;
	}
};

Pkt tcp4(size_t payload, uint32_t seed, uint16_t sport = 40000) {
	Pkt p;
	p.sport = sport;
	p.payload = datapath::offload::test::pattern(payload, seed);
	return p;
}

Bytes out_bytes(const datapath::TunPacket& t) {
	return Bytes(t.buf.begin() + tunnel::esp::kHeadroom,
	             t.buf.begin() + long(tunnel::esp::kHeadroom + t.len));
}

/// The segments of a TCP super-packet @p cut at @mss, as wire packets.
std::vector<Bytes> wire(const Pkt& p, uint16_t mss) { return datapath::offload::test::ref_segments(p, mss); }

/// segment() on what the device took: the packets it stands for.
std::vector<Bytes> resegment(const Bed::TxBuf& t) {
	datapath::offload::test::OutBufs o(datapath::kTunBatch, 2048);
	const auto r = datapath::offload::segment(t.hdr, t.pkt, o.spans, o.lens);
	REQUIRE(r.ok());
	std::vector<Bytes> segs;
	for (size_t i = 0; i < r.count; i++)
		segs.push_back(o.seg(i));
	return segs;
}

} // namespace

TEST_CASE("vhost offloads RX: a TCP super-packet over mergeable buffers comes out as the kernel's "
          "wire packets, each with room for encapsulate()") {
	for (const bool v6 : {false, true}) {
		CAPTURE(v6);
		Bed bed(4);
		Pkt p = tcp4(44 * 1448 + 700, 7); // 45 segments, the last one short: ~64 KiB
		p.v6 = v6;
		p.flags = datapath::offload::test::ACK | datapath::offload::test::PSH;
		p.tcp_opts = datapath::offload::test::ts_option(1000, 2000);
		const Bytes super = datapath::offload::test::build(p, datapath::offload::test::Csum::partial);
		const uint16_t mss = uint16_t(1448 - p.tcp_opts.size());
		const size_t bufs = bed.device_rx(datapath::offload::test::kernel_hdr(p, mss), super);
		CHECK(bufs > 40); // really spread over many buffers
		CHECK(!bed.port->can_sleep());
		std::array<datapath::TunPacket, datapath::kTunBatch> out{};
		const auto want = wire(p, mss);
		REQUIRE(bed.port->read_batch(out) == want.size());
		for (size_t i = 0; i < want.size(); i++) {
			CAPTURE(i);
			CHECK(out_bytes(out[i]) == want[i]);
			CHECK(datapath::offload::test::l4_checksum_ok(p, out_bytes(out[i])));
			CHECK(out[i].buf.size() >=
			      tunnel::esp::kHeadroom + out[i].len + tunnel::esp::kTailroom);
		}
		bed.port->read_done();
		// Gathered buffers went back at once: every RX buffer is posted again.
		CHECK(bed.port->rx_queue().in_flight() == kQ);
		CHECK(bed.stats.gso_reads.get() == 1);
		CHECK(bed.stats.gso_segments.get() == want.size());
		CHECK(bed.stats.rx_ring_packets.get() == want.size());
		CHECK(bed.stats.offload_errors.get() == 0);
		CHECK(bed.stats.device_errors.get() == 0);
	}
}

TEST_CASE("vhost offloads RX: a mixed batch keeps its order; plain packets stay zero-copy and a "
          "partial checksum is finished in place; a UDP super-packet is cut by USO") {
	Bed bed(4);
	Pkt plain = tcp4(100, 1);
	Pkt partial = tcp4(900, 2, 40001);
	Pkt gso = tcp4(10 * 1000, 3, 40002);
	Pkt uso = tcp4(3 * 1200 + 5, 4, 40003);
	uso.proto = 17;
	bed.device_rx({}, datapath::offload::test::build(plain));
	VnetHdr ph = datapath::offload::test::kernel_hdr(partial, 1448);
	ph.gso_type = VnetHdr::kGsoNone;
	ph.gso_size = 0;
	bed.device_rx(ph, datapath::offload::test::build(partial, datapath::offload::test::Csum::partial));
	bed.device_rx(datapath::offload::test::kernel_hdr(gso, 1000),
	              datapath::offload::test::build(gso, datapath::offload::test::Csum::partial));
	bed.device_rx(datapath::offload::test::kernel_hdr(uso, 1200),
	              datapath::offload::test::build(uso, datapath::offload::test::Csum::partial));
	bed.device_rx({}, datapath::offload::test::build(plain));

	std::vector<Bytes> want{datapath::offload::test::build(plain),
	                        datapath::offload::test::build(partial)};
	for (const auto& s : wire(gso, 1000))
		want.push_back(s);
	for (const auto& s : wire(uso, 1200))
		want.push_back(s);
	want.push_back(datapath::offload::test::build(plain));
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};
	REQUIRE(bed.port->read_batch(out) == want.size());
	for (size_t i = 0; i < want.size(); i++) {
		CAPTURE(i);
		CHECK(out_bytes(out[i]) == want[i]);
	}
	// The plain and the partial packet are the RX buffers themselves (zero-copy).
	const uint8_t* pool_lo = bed.region.span().data();
	const uint8_t* pool_hi = pool_lo + bed.region.span().size();
	for (size_t i : {size_t(0), size_t(1), want.size() - 1})
		CHECK((out[i].buf.data() >= pool_lo && out[i].buf.data() < pool_hi));
	CHECK_FALSE((out[2].buf.data() >= pool_lo && out[2].buf.data() < pool_hi));
	bed.port->read_done();
	CHECK(bed.port->rx_queue().in_flight() == kQ);
	CHECK(bed.stats.gso_reads.get() == 2);
	CHECK(bed.stats.gso_segments.get() == 10 + 4);
}

TEST_CASE("vhost offloads RX: a super-packet that does not fit the rest of the batch waits for the "
          "next one; a bad num_buffers is a device error") {
	Bed bed(4);
	for (uint8_t i = 0; i < 3; i++)
		bed.device_rx({}, datapath::offload::test::build(tcp4(50, i)));
	Pkt gso = tcp4(10 * 1000, 9);
	bed.device_rx(datapath::offload::test::kernel_hdr(gso, 1000),
	              datapath::offload::test::build(gso, datapath::offload::test::Csum::partial));
	std::array<datapath::TunPacket, 12> out{};
	REQUIRE(bed.port->read_batch(out) == 3);
	CHECK(bed.port->staged());
	CHECK(!bed.port->can_sleep()); // more work waits: no re-arm
	bed.port->read_done();
	REQUIRE(bed.port->read_batch(out) == 10);
	const auto want = wire(gso, 1000);
	for (size_t i = 0; i < 10; i++)
		CHECK(out_bytes(out[i]) == want[i]);
	CHECK(!bed.port->staged());
	bed.port->read_done();

	// num_buffers 0: vhost never writes that.
	auto d = bed.rx_dev->take_avail();
	REQUIRE(d);
	std::memset(reinterpret_cast<uint8_t*>(uintptr_t(d->addr)), 0, 64);
	bed.rx_dev->push_used(d->id, 60);
	(void)bed.rx_dev->flush_used();
	CHECK(bed.port->read_batch(out) == 0);
	bed.port->read_done();
	CHECK(bed.stats.device_errors.get() == 1);
	CHECK(bed.port->rx_queue().in_flight() == kQ);
	CHECK(bed.port->can_sleep());
}

TEST_CASE("vhost offloads TX: a run of TCP segments goes to the ring as one descriptor chain with "
          "a GSO header; other packets behind a zero header") {
	Bed bed(0);
	Pkt a = tcp4(5 * 1000, 11);
	Pkt b = tcp4(2 * 1000, 12, 40001);
	Pkt udp = tcp4(300, 13, 40002);
	udp.proto = 17;
	const auto sa = wire(a, 1000), sb = wire(b, 1000);
	std::vector<Bytes> batch(sa.begin(), sa.end());
	batch.push_back(datapath::offload::test::build(udp));
	batch.insert(batch.end(), sb.begin(), sb.end());
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < batch.size(); i++)
		ws.push_back(bed.inbound(i, batch[i]));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(bed.stats.tx_kicks.get() == 1);
	CHECK(bed.stats.gro_writes.get() == 2);
	CHECK(bed.stats.gro_segments.get() == 7);
	CHECK(bed.stats.tx_ring_packets.get() == 8);
	CHECK(bed.port->free_buffers() == kQ - 8);
	CHECK(bed.tx_dev->avail_pending() == 3);

	const Bed::TxBuf ra = bed.device_tx();
	CHECK(ra.descs == 5);
	CHECK(ra.hdr.gso_type == VnetHdr::kGsoTcpV4);
	CHECK(ra.hdr.gso_size == 1000);
	CHECK(ra.hdr.flags == VnetHdr::kNeedsCsum);
	CHECK(ra.hdr.csum_start == 20);
	CHECK(ra.hdr.csum_offset == 16);
	CHECK(ra.pkt.size() == 40 + 5 * 1000);
	CHECK(resegment(ra) == sa);
	const Bed::TxBuf ru = bed.device_tx();
	CHECK(ru.descs == 1);
	CHECK(ru.hdr == VnetHdr{});
	CHECK(ru.pkt == batch[5]);
	const Bed::TxBuf rb = bed.device_tx();
	CHECK(rb.descs == 2);
	CHECK(resegment(rb) == sb);
	(void)bed.tx_dev->flush_used();

	// The chains' buffers (and descriptors) all come back when the device is
	// done: 60 packets need the 56 free buffers and 4 of the returned ones.
	ws.clear();
	for (size_t i = 0; i < 60; i++)
		ws.push_back(bed.inbound(i, batch[5]));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.stats.ring_full.get() == 0);
	CHECK(bed.port->free_buffers() == kQ - 60);
	CHECK(bed.port->tx_queue().in_flight() == 60);
	CHECK(bed.stats.device_errors.get() == 0);
}

TEST_CASE("vhost offloads TX: a small batch on an idle ring is one writev() of the merged run, a "
          "lone packet one write() behind a zero header") {
	Bed bed(4);
	Pkt a = tcp4(3 * 1000, 21);
	const auto sa = wire(a, 1000);
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < sa.size(); i++)
		ws.push_back(bed.inbound(i, sa[i]));
	CHECK(bed.port->write_batch(ws) == 0);
	auto got = bed.tun_written();
	REQUIRE(got.size() == 1);
	Bed::TxBuf t{*VnetHdr::parse(got[0]), Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()), 1};
	CHECK(t.hdr.gso_type == VnetHdr::kGsoTcpV4);
	CHECK(resegment(t) == sa);
	CHECK(bed.stats.tun_writes.get() == 1);
	CHECK(bed.stats.direct_writes.get() == 3);
	CHECK(bed.stats.tx_kicks.get() == 0);

	const Bytes lone = datapath::offload::test::build(tcp4(77, 22));
	datapath::TunWrite w = bed.inbound(5, lone);
	CHECK(bed.port->write_batch({&w, 1}) == 0);
	got = bed.tun_written();
	REQUIRE(got.size() == 1);
	CHECK(Bytes(got[0].begin(), got[0].begin() + kVirtioNetHdrLen) == Bytes(kVirtioNetHdrLen, 0));
	CHECK(Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()) == lone);
	CHECK(bed.stats.tun_writes.get() == 2);
}

TEST_CASE("vhost offloads TX: a run that finds the ring full is written directly, merged, and the "
          "ring takes runs again once the device returns buffers") {
	constexpr uint32_t q = 8;
	Bed bed(0, q);
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < q; i++)
		ws.push_back(bed.inbound(
		    i, datapath::offload::test::build(tcp4(60, uint32_t(i), uint16_t(1000 + i)))));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.port->free_buffers() == 0);

	Pkt a = tcp4(4 * 1000, 31);
	const auto sa = wire(a, 1000);
	ws.clear();
	for (size_t i = 0; i < sa.size(); i++)
		ws.push_back(bed.inbound(i, sa[i]));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.stats.ring_full.get() == 4);
	auto got = bed.tun_written();
	REQUIRE(got.size() == 1); // one writev() for the whole run
	Bed::TxBuf t{*VnetHdr::parse(got[0]), Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()), 1};
	CHECK(resegment(t) == sa);

	// Three buffers back: a run of three fits, a run of four would not.
	for (int i = 0; i < 3; i++)
		(void)bed.device_tx();
	(void)bed.tx_dev->flush_used();
	Pkt b = tcp4(3 * 1000, 32, 40009);
	const auto sb = wire(b, 1000);
	ws.clear();
	for (size_t i = 0; i < sb.size(); i++)
		ws.push_back(bed.inbound(i, sb[i]));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(bed.stats.ring_full.get() == 4);
	CHECK(bed.port->free_buffers() == 0);
	for (int i = 0; i < 5; i++)
		(void)bed.device_tx();
	const Bed::TxBuf rb = bed.device_tx();
	CHECK(rb.descs == 3);
	CHECK(resegment(rb) == sb);
}

// UDP GRO (VhostPortParams::gro_slots): a receive slot holds a whole train,
// so its packets cannot each hand the slot's buffer to the ring.

TEST_CASE("vhost with UDP GRO slots: a train's packets reach the ring as copies, a TCP run as one "
          "chain, and the slot keeps its buffer") {
	Bed bed(0, kQ, true);
	const std::span<uint8_t> slot0 = bed.port->recv_slots()[0].buf;
	CHECK(slot0.size() == tunnel::esp::kBufferSize);
	CHECK(bed.port->free_buffers() == kQ + datapath::kTunBatch); // the slots' pool buffers are free too
	Pkt a = tcp4(5 * 1000, 41);
	Pkt udp = tcp4(300, 42, 40002);
	udp.proto = 17;
	const auto sa = wire(a, 1000);
	std::vector<Bytes> batch(sa.begin(), sa.end());
	batch.push_back(datapath::offload::test::build(udp));
	// All six in slot 0, one ESP datagram's step apart, as a GRO train leaves them.
	constexpr size_t kStep = 1100;
	std::vector<datapath::TunWrite> ws;
	for (size_t i = 0; i < batch.size(); i++)
		ws.push_back(bed.inbound(0, batch[i], i * kStep));
	CHECK(bed.port->write_batch(ws) == 0);
	CHECK(bed.tun_written().empty());
	CHECK(bed.stats.gro_writes.get() == 1);
	CHECK(bed.stats.tx_ring_packets.get() == 6);
	CHECK(bed.stats.ring_full.get() == 0);
	CHECK(bed.port->free_buffers() == kQ + datapath::kTunBatch - 6);
	CHECK(bed.port->recv_slots()[0].buf.data() == slot0.data());
	// The device reads copies: the slot may take the next train meanwhile.
	std::memset(slot0.data(), 0, 8 * kStep);
	const Bed::TxBuf ra = bed.device_tx();
	CHECK(ra.descs == 5);
	CHECK(ra.hdr.gso_type == VnetHdr::kGsoTcpV4);
	CHECK(ra.hdr.gso_size == 1000);
	CHECK(resegment(ra) == sa);
	const Bed::TxBuf ru = bed.device_tx();
	CHECK(ru.descs == 1);
	CHECK(ru.hdr == VnetHdr{});
	CHECK(ru.pkt == batch[5]);
	CHECK(bed.stats.device_errors.get() == 0);
}

TEST_CASE("vhost with UDP GRO slots: a small batch on an idle ring is written from the slot; a "
          "packet larger than a pool buffer, or one the full ring cannot take, goes direct") {
	SUBCASE("direct writes") {
		Bed bed(4, kQ, true);
		const Bytes lone = datapath::offload::test::build(tcp4(77, 51));
		datapath::TunWrite w = bed.inbound(0, lone, 3000);
		CHECK(bed.port->write_batch({&w, 1}) == 0);
		auto got = bed.tun_written();
		REQUIRE(got.size() == 1);
		CHECK(Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()) == lone);
		CHECK(bed.stats.tx_ring_packets.get() == 0);
		CHECK(bed.port->free_buffers() == kQ + datapath::kTunBatch);
	}
	SUBCASE("too large for a pool buffer") {
		Bed bed(0, kQ, true);
		const Bytes big = datapath::offload::test::build(tcp4(4000, 52));
		datapath::TunWrite w = bed.inbound(0, big);
		CHECK(bed.port->write_batch({&w, 1}) == 0);
		auto got = bed.tun_written();
		REQUIRE(got.size() == 1);
		CHECK(Bytes(got[0].begin() + kVirtioNetHdrLen, got[0].end()) == big);
		CHECK(bed.port->free_buffers() == kQ + datapath::kTunBatch); // the buffer went back
		CHECK(bed.stats.tx_ring_packets.get() == 0);
		// A run of segments larger than a pool buffer: one merged writev(),
		// every buffer back, and no "ring full" (the ring had room).
		const auto sa = wire(tcp4(3 * 2000, 54), 2000);
		std::vector<datapath::TunWrite> ws;
		for (size_t i = 0; i < sa.size(); i++)
			ws.push_back(bed.inbound(1, sa[i], i * 2100));
		CHECK(bed.port->write_batch(ws) == 0);
		const Bed::TxBuf t = bed.written_run();
		CHECK(t.hdr.gso_size == 2000);
		CHECK(resegment(t) == sa);
		CHECK(bed.port->free_buffers() == kQ + datapath::kTunBatch);
		CHECK(bed.stats.ring_full.get() == 0);
		CHECK(bed.stats.tx_ring_packets.get() == 0);
	}
	SUBCASE("a full ring") {
		constexpr uint32_t q = 8;
		Bed bed(0, q, true);
		std::vector<datapath::TunWrite> ws;
		std::vector<Bytes> pkts;
		for (size_t i = 0; i < q + 2; i++)
			pkts.push_back(
			    datapath::offload::test::build(tcp4(60, uint32_t(60 + i), uint16_t(2000 + i))));
		for (size_t i = 0; i < pkts.size(); i++)
			ws.push_back(bed.inbound(0, pkts[i], i * 200));
		CHECK(bed.port->write_batch(ws) == 0);
		// Eight descriptors: eight copies in the ring, two written directly,
		// and the buffers taken for those two returned.
		CHECK(bed.stats.tx_ring_packets.get() == q);
		CHECK(bed.stats.ring_full.get() == 2);
		auto got = bed.tun_written();
		REQUIRE(got.size() == 2);
		CHECK(Bytes(got[1].begin() + kVirtioNetHdrLen, got[1].end()) == pkts[q + 1]);
		CHECK(bed.port->free_buffers() == q + datapath::kTunBatch - q);
		// A TCP run that finds no descriptors is written directly, merged.
		Pkt a = tcp4(3 * 1000, 53);
		const auto sa = wire(a, 1000);
		ws.clear();
		for (size_t i = 0; i < sa.size(); i++)
			ws.push_back(bed.inbound(1, sa[i], i * 1100));
		CHECK(bed.port->write_batch(ws) == 0);
		const Bed::TxBuf t = bed.written_run();
		CHECK(resegment(t) == sa);
		CHECK(bed.port->free_buffers() == datapath::kTunBatch);
		for (uint32_t i = 0; i < q; i++)
			CHECK(bed.device_tx().pkt == pkts[i]);
		(void)bed.tx_dev->flush_used();
		// Free buffers were left all along; the descriptors the device
		// returned are harvested when the ring has none: the ring again.
		ws.clear();
		for (size_t i = 0; i < q; i++)
			ws.push_back(bed.inbound(2, pkts[i], i * 200));
		CHECK(bed.port->write_batch(ws) == 0);
		CHECK(bed.tun_written().empty());
		CHECK(bed.stats.ring_full.get() == 2 + sa.size());
		CHECK(bed.stats.tx_ring_packets.get() == 2 * q);
		CHECK(bed.port->free_buffers() == datapath::kTunBatch);
		for (uint32_t i = 0; i < q; i++)
			CHECK(bed.device_tx().pkt == pkts[i]);
	}
}
