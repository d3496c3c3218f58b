// OffloadTunPort, the direct tun port with offloads, against a SOCK_SEQPACKET
// pair standing in for a tun opened with IFF_VNET_HDR (one read or write is
// one packet, as on a tun queue). Reads must cut super-packets into the wire
// packets the kernel would have made (the offload tests' independent builder,
// offload_test_util.hpp), writes must merge runs of one TCP flow into one
// writev() with a GSO header, and bad input or a refused write must be
// counted without losing the rest.
#include "datapath/offload_batch.hpp"
#include "datapath/offload_tun_port.hpp"

#include "platform/unique_fd.hpp"
#include "tests/unit/datapath/offload_test_util.hpp"
#include "tunnel/ecn.hpp"
#include "tunnel/esp_wire.hpp"

#include <cstring>
#include <doctest/doctest.h>
#include <memory>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <vector>

using namespace esptun;
using datapath::offload::VnetHdr;
using namespace datapath::offload::test;

namespace {

constexpr unsigned kMtu = 1500;

struct Bed {
	platform::UniqueFd port_end, test_end;
	datapath::TunIoStats stats;
	std::unique_ptr<datapath::OffloadTunPort> port;
	std::array<datapath::TunPacket, datapath::kTunBatch> out{};

	Bed() {
		int sv[2];
		REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
		port_end.reset(sv[0]);
		test_end.reset(sv[1]);
		// Room for a 64 KiB super-packet each way and several merged writes.
		const int bytes = 4 << 20;
		for (int fd : sv)
			REQUIRE(setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) == 0);
		port = std::make_unique<datapath::OffloadTunPort>(port_end.get(), kMtu, stats);
	}

	/// The tun hands over [@h][@pkt] as one packet.
	void tun_reads(const VnetHdr& h, const Bytes& pkt) {
		Bytes hdr(VnetHdr::kSize);
		REQUIRE(h.write(hdr));
		tun_reads_raw(hdr, pkt);
	}
	void tun_reads_raw(Bytes head, const Bytes& tail = {}) {
		head.insert(head.end(), tail.begin(), tail.end());
		REQUIRE(write(test_end.get(), head.data(), head.size()) == ssize_t(head.size()));
	}

	/// The inner packet of out[@i], from behind its headroom.
	Bytes out_bytes(size_t i) const {
		const auto at = out[i].buf.begin() + long(tunnel::esp::kHeadroom);
		return Bytes(at, at + long(out[i].len));
	}

	/// @pkt in receive slot @slot, where decapsulate() would leave it.
	datapath::TunWrite inbound(size_t slot, const Bytes& pkt) {
		std::span<uint8_t> buf = port->recv_slots()[slot].buf;
		std::memset(buf.data(), 0xee, tunnel::esp::kHeadroom);
		std::memcpy(buf.data() + tunnel::esp::kHeadroom, pkt.data(), pkt.size());
		return {slot, buf.subspan(tunnel::esp::kHeadroom, pkt.size())};
	}
	/// @pkts in slots 0, 1, ... in that order.
	std::vector<datapath::TunWrite> inbound_all(const std::vector<Bytes>& pkts) {
		std::vector<datapath::TunWrite> w;
		for (size_t i = 0; i < pkts.size(); i++)
			w.push_back(inbound(i, pkts[i]));
		return w;
	}

	/// Every packet the port wrote to the tun: [header][packet] each.
	std::vector<Bytes> tun_written() {
		std::vector<Bytes> got;
		Bytes b(70000);
		for (ssize_t n; (n = read(test_end.get(), b.data(), b.size())) >= 0;)
			got.emplace_back(b.begin(), b.begin() + n);
		return got;
	}
};

/// The header in front of a written packet, and the packet.
struct Written {
	VnetHdr hdr;
	Bytes pkt;
};
Written split(const Bytes& w) {
	REQUIRE(w.size() >= VnetHdr::kSize);
	return {*VnetHdr::parse(w), Bytes(w.begin() + VnetHdr::kSize, w.end())};
}

Pkt tcp_flow(size_t payload, uint32_t seed, uint16_t sport = 40000) {
	Pkt p;
	p.sport = sport;
	p.tcp_opts = ts_option(1000, 2000);
	p.payload = pattern(payload, seed);
	return p;
}

/// @p with only its first @n payload bytes: what a merge of the segments
/// that carry them must give.
Pkt first_bytes(Pkt p, size_t n) {
	p.payload.resize(n);
	return p;
}

// ---------------------------------------------------------------------------
// Outbound: the tun's super-packets cut into wire packets.

TEST_CASE(
    "a TSO/USO super-packet from the tun is cut into the kernel's wire packets, each behind the headroom") {
	struct Case {
		const char* name;
		Pkt p;
		uint16_t mss;
	};
	Pkt v6 = tcp_flow(3000, 2);
	v6.v6 = true;
	v6.flags = ACK | PSH;
	Pkt udp;
	udp.proto = 17;
	udp.payload = pattern(2500, 3);
	const Case cases[] = {
	    {"tcp4", tcp_flow(4 * 1448 - 100, 1), 1448}, {"tcp6", v6, 1000}, {"udp4", udp, 1000}};
	for (const Case& c : cases) {
		CAPTURE(c.name);
		Bed bed;
		const std::vector<Bytes> want = ref_segments(c.p, c.mss);
		bed.tun_reads(kernel_hdr(c.p, c.mss), build(c.p, Csum::partial));
		const size_t n = bed.port->read_batch(bed.out);
		REQUIRE(n == want.size());
		for (size_t i = 0; i < n; i++) {
			CAPTURE(i);
			CHECK(bed.out_bytes(i) == want[i]); // lengths, headers, checksums, payload
			CHECK(l4_checksum_ok(c.p, bed.out_bytes(i)));
			// encapsulate() needs the tailroom behind the packet too.
			CHECK(bed.out[i].buf.size() >=
			      tunnel::esp::kHeadroom + bed.out[i].len + tunnel::esp::kTailroom);
		}
		CHECK(bed.stats.gso_reads.get() == 1);
		CHECK(bed.stats.gso_segments.get() == want.size());
		CHECK(bed.stats.offload_errors.get() == 0);
		CHECK(bed.stats.tun_reads.get() == 2); // the packet, then EAGAIN
		CHECK(bed.port->read_batch(bed.out) == 0);
	}
}

TEST_CASE("a plain packet from the tun with a partial checksum comes out whole with the checksum finished") {
	Bed bed;
	const Pkt p = tcp_flow(700, 4);
	VnetHdr h;
	h.flags = VnetHdr::kNeedsCsum;
	h.csum_start = uint16_t(ip_hdr(p));
	h.csum_offset = 16;
	bed.tun_reads(h, build(p, Csum::partial));
	REQUIRE(bed.port->read_batch(bed.out) == 1);
	CHECK(bed.out_bytes(0) == build(p));
	CHECK(bed.stats.gso_reads.get() == 0);
	CHECK(bed.stats.offload_errors.get() == 0);
}

TEST_CASE("a super-packet that does not fit behind a batch's packets waits, whole, for the next batch") {
	Bed bed;
	const Pkt plain = tcp_flow(100, 5, 41000);
	bed.tun_reads(VnetHdr{}, build(plain));
	// 64 segments: the most a batch holds, so only an empty batch fits them.
	const Pkt big = tcp_flow(datapath::kTunBatch * 100, 6);
	bed.tun_reads(kernel_hdr(big, 100), build(big, Csum::partial));

	REQUIRE(bed.port->read_batch(bed.out) == 1);
	CHECK(bed.out_bytes(0) == build(plain));
	CHECK_FALSE(bed.port->can_sleep()); // the super-packet is held: no wait for the fd

	const std::vector<Bytes> want = ref_segments(big, 100);
	REQUIRE(bed.port->read_batch(bed.out) == datapath::kTunBatch);
	for (size_t i = 0; i < want.size(); i++)
		CHECK(bed.out_bytes(i) == want[i]);
	CHECK(bed.port->can_sleep());
	CHECK(bed.stats.gso_reads.get() == 1);
	CHECK(bed.stats.gso_segments.get() == datapath::kTunBatch);
	CHECK(bed.stats.tun_reads.get() == 2); // no read while the super-packet was held
}

TEST_CASE(
    "read ahead: a super-packet read raw and marked CE is cut later into the kernel's packets, all CE") {
	// The flow queue's path (DataPlane::set_flow_queue()): read_raw() now,
	// the ECN mark on the held packet, emit_raw() at its turn.
	for (bool v6 : {false, true}) {
		CAPTURE(v6);
		Bed bed;
		Pkt p = tcp_flow(4 * 1448 - 100, 11);
		p.v6 = v6;
		p.tos = 2; // ECT(0)
		bed.tun_reads(kernel_hdr(p, 1448), build(p, Csum::partial));
		std::vector<uint8_t> raw(bed.port->raw_buffer_size());
		REQUIRE(raw.size() >= VnetHdr::kSize + tunnel::esp::kMaxInner);
		const size_t len = bed.port->read_raw(raw);
		REQUIRE(len == VnetHdr::kSize + build(p).size());
		CHECK(bed.port->read_raw(raw) == 0); // nothing more: EAGAIN
		const std::span<uint8_t> pkt = bed.port->raw_packet(raw, len);
		REQUIRE(pkt.size() == build(p).size());
		tunnel::ecn::set_field(pkt, tunnel::ecn::kCe);

		Pkt marked = p;
		marked.tos = 3; // CE
		const std::vector<Bytes> want = ref_segments(marked, 1448);
		bool keep = true;
		const size_t n = bed.port->emit_raw(raw, len, 0, bed.out, keep);
		CHECK_FALSE(keep);
		REQUIRE(n == want.size());
		for (size_t i = 0; i < n; i++) {
			CAPTURE(i);
			CHECK(bed.out_bytes(i) == want[i]); // the IPv4 header checksums included
		}
		CHECK(bed.stats.gso_reads.get() == 1);
	}
}

TEST_CASE("read ahead: a super-packet that does not fit behind a batch's packets is kept, then fits alone") {
	Bed bed;
	const Pkt big = tcp_flow(datapath::kTunBatch * 100, 12);
	bed.tun_reads(kernel_hdr(big, 100), build(big, Csum::partial));
	std::vector<uint8_t> raw(bed.port->raw_buffer_size());
	const size_t len = bed.port->read_raw(raw);
	REQUIRE(len > 0);
	bool keep = false;
	CHECK(bed.port->emit_raw(raw, len, 1, bed.out, keep) == 0);
	CHECK(keep);
	CHECK(bed.port->emit_raw(raw, len, 0, bed.out, keep) == datapath::kTunBatch);
	CHECK_FALSE(keep);
	const std::vector<Bytes> want = ref_segments(big, 100);
	CHECK(bed.out_bytes(datapath::kTunBatch - 1) == want.back());
}

TEST_CASE("read ahead: reads with nothing behind the header are skipped and counted") {
	Bed bed;
	bed.tun_reads_raw(Bytes(VnetHdr::kSize, 0));
	const Pkt p = tcp_flow(300, 13);
	bed.tun_reads(VnetHdr{}, build(p));
	std::vector<uint8_t> raw(bed.port->raw_buffer_size());
	const size_t len = bed.port->read_raw(raw);
	CHECK(len == VnetHdr::kSize + build(p).size());
	CHECK(bed.stats.offload_errors.get() == 1);
	CHECK(bed.port->raw_packet(raw, VnetHdr::kSize).empty());
}

TEST_CASE("bad virtio-net headers from the tun are dropped and counted; the packet after them still goes") {
	Bed bed;
	const Pkt p = tcp_flow(500, 7);
	bed.tun_reads_raw(Bytes(5, 0));              // shorter than a header
	bed.tun_reads_raw(Bytes(VnetHdr::kSize, 0)); // a header and nothing behind it
	VnetHdr ufo = kernel_hdr(p, 200);
	ufo.gso_type = VnetHdr::kGsoUdp; // UFO: not supported
	bed.tun_reads(ufo, build(p, Csum::partial));
	VnetHdr outside;
	outside.flags = VnetHdr::kNeedsCsum;
	outside.csum_start = uint16_t(build(p).size()); // the checksum field lies past the end
	outside.csum_offset = 16;
	bed.tun_reads(outside, build(p));
	VnetHdr no_mss = kernel_hdr(p, 0); // TSO with a segment size of 0
	bed.tun_reads(no_mss, build(p, Csum::partial));
	bed.tun_reads(VnetHdr{}, build(p));

	REQUIRE(bed.port->read_batch(bed.out) == 1);
	CHECK(bed.out_bytes(0) == build(p));
	CHECK(bed.stats.offload_errors.get() == 5);
	CHECK(bed.stats.gso_reads.get() == 0);
	CHECK(bed.stats.gso_segments.get() == 0);
	CHECK(bed.stats.tun_reads.get() == 7); // six packets, then EAGAIN
}

// ---------------------------------------------------------------------------
// Inbound: decrypted packets merged per TCP flow.

TEST_CASE(
    "in-order segments of one TCP flow reach the tun as one writev() of a GSO header and the merged packet") {
	Bed bed;
	Pkt p = tcp_flow(4 * 1448 - 100, 8);
	p.flags = ACK | PSH;
	const auto w = bed.inbound_all(ref_segments(p, 1448));
	REQUIRE(w.size() == 4);
	CHECK(bed.port->write_batch(w) == 0);

	const std::vector<Bytes> got = bed.tun_written();
	REQUIRE(got.size() == 1);
	const Written one = split(got[0]);
	CHECK(one.hdr == kernel_hdr(p, 1448));
	CHECK(one.pkt == build(p, Csum::partial));
	CHECK(bed.stats.gro_writes.get() == 1);
	CHECK(bed.stats.gro_segments.get() == 4);
	CHECK(bed.stats.tun_writes.get() == 1);
}

TEST_CASE("a packet of another flow, or one out of order, is written alone behind a zero header") {
	Bed bed;
	const Pkt a = tcp_flow(3 * 1000, 9);
	const Pkt b = tcp_flow(1000, 10, 40001);
	const std::vector<Bytes> as = ref_segments(a, 1000);
	const Bytes b0 = build(b);
	const VnetHdr zero{};

	SUBCASE(
	    "another flow in between does not end the run: the flow's segments merge, the other goes after") {
		CHECK(bed.port->write_batch(bed.inbound_all({as[0], as[1], b0, as[2]})) == 0);
		const std::vector<Bytes> got = bed.tun_written();
		REQUIRE(got.size() == 2);
		const Written merged = split(got[0]);
		CHECK(merged.hdr == kernel_hdr(a, 1000));
		CHECK(merged.pkt == build(a, Csum::partial));
		CHECK(split(got[1]).hdr == zero);
		CHECK(split(got[1]).pkt == b0);
		CHECK(bed.stats.gro_writes.get() == 1);
		CHECK(bed.stats.gro_segments.get() == 3);
		CHECK(bed.stats.tun_writes.get() == 2);
	}
	SUBCASE("segments out of order are not merged") {
		CHECK(bed.port->write_batch(bed.inbound_all({as[1], as[0]})) == 0);
		const std::vector<Bytes> got = bed.tun_written();
		REQUIRE(got.size() == 2);
		CHECK(split(got[0]).hdr == zero);
		CHECK(split(got[0]).pkt == as[1]);
		CHECK(split(got[1]).hdr == zero);
		CHECK(split(got[1]).pkt == as[0]);
		CHECK(bed.stats.gro_writes.get() == 0);
		CHECK(bed.stats.tun_writes.get() == 2);
	}
}

TEST_CASE("flows that alternate in a batch are each merged, in their own order; other packets stay whole") {
	// Found with `esptun-bench peers`: with 64 peers a hub's batches mix
	// many flows, and merging only neighbours gave 4.7 packets per write.
	Bed bed;
	const Pkt a = tcp_flow(4 * 1000, 11), b = tcp_flow(3 * 1000, 12, 40001),
	          c = tcp_flow(2 * 1000, 13, 40002);
	const std::vector<Bytes> as = ref_segments(a, 1000), bs = ref_segments(b, 1000),
	                         cs = ref_segments(c, 1000);
	Pkt u; // a UDP datagram between them
	u.proto = 17;
	u.payload = pattern(300, 14);
	const Bytes u0 = build(u);
	const VnetHdr zero{};
	CHECK(bed.port->write_batch(
	          bed.inbound_all({as[0], bs[0], cs[0], as[1], u0, bs[1], as[2], cs[1], bs[2], as[3]})) == 0);
	const std::vector<Bytes> got = bed.tun_written();
	REQUIRE(got.size() == 4);
	// Flows in the order of their first packet, the UDP datagram where its
	// own group falls: after the flows that came before it.
	CHECK(split(got[0]).hdr == kernel_hdr(a, 1000));
	CHECK(split(got[0]).pkt == build(a, Csum::partial));
	CHECK(split(got[1]).hdr == kernel_hdr(b, 1000));
	CHECK(split(got[1]).pkt == build(b, Csum::partial));
	CHECK(split(got[2]).hdr == kernel_hdr(c, 1000));
	CHECK(split(got[2]).pkt == build(c, Csum::partial));
	CHECK(split(got[3]).hdr == zero);
	CHECK(split(got[3]).pkt == u0);
	CHECK(bed.stats.gro_writes.get() == 3);
	CHECK(bed.stats.gro_segments.get() == 9);

	SUBCASE("a flow's own order is kept: its segments out of order are not merged, nor put in order") {
		CHECK(bed.port->write_batch(bed.inbound_all({as[1], bs[0], as[0], bs[1]})) == 0);
		const std::vector<Bytes> two = bed.tun_written();
		REQUIRE(two.size() == 3);
		CHECK(split(two[0]).pkt == as[1]);
		CHECK(split(two[1]).pkt == as[0]);
		CHECK(split(two[2]).hdr == kernel_hdr(first_bytes(b, 2000), 1000));
	}
}

TEST_CASE("GroPlan::group() hands back a chunk that is grouped already, and is stable") {
	datapath::GroPlan plan;
	const Pkt a = tcp_flow(3 * 1000, 15), b = tcp_flow(2 * 1000, 16, 40001);
	std::vector<Bytes> pkts = ref_segments(a, 1000);
	for (const Bytes& x : ref_segments(b, 1000))
		pkts.push_back(x);
	std::vector<datapath::TunWrite> w;
	for (size_t i = 0; i < pkts.size(); i++)
		w.push_back({i, std::span<uint8_t>(pkts[i])});
	const std::span<const datapath::TunWrite> same = plan.group(w);
	CHECK(same.data() == w.data()); // a a a b b: nothing to move
	CHECK(same.size() == w.size());
	const std::vector<datapath::TunWrite> mixed = {w[3], w[0], w[4], w[1], w[2]}; // b a b a a
	const std::span<const datapath::TunWrite> g = plan.group(mixed);
	REQUIRE(g.size() == 5);
	std::vector<size_t> order;
	for (const datapath::TunWrite& x : g)
		order.push_back(x.slot);
	CHECK(order == std::vector<size_t>{3, 4, 0, 1, 2});
}

TEST_CASE("a write the tun refuses counts every packet it carried as failed; the next batch goes through") {
	Bed bed;
	// Fill the pair until a write would block, as a tun whose queue is full.
	const Bytes filler(60000, 0x42);
	while (write(bed.port_end.get(), filler.data(), filler.size()) > 0) {}
	REQUIRE(errno == EAGAIN);

	const Pkt a = tcp_flow(3 * 1000, 11);
	const Pkt b = tcp_flow(500, 12, 40001);
	const std::vector<Bytes> batch = {ref_segments(a, 1000)[0], ref_segments(a, 1000)[1],
	                                  ref_segments(a, 1000)[2], build(b)};
	// One merged write of three packets and one single write: all four lost.
	CHECK(bed.port->write_batch(bed.inbound_all(batch)) == 4);
	CHECK(bed.stats.tun_writes.get() == 2);
	CHECK(bed.stats.gro_writes.get() == 1);
	CHECK(bed.stats.gro_segments.get() == 3);

	const std::vector<Bytes> filled = bed.tun_written(); // the tun drains its queue
	CHECK(!filled.empty());
	for (const Bytes& f : filled)
		CHECK(f == filler); // nothing of the refused writes got in

	CHECK(bed.port->write_batch(bed.inbound_all(batch)) == 0);
	const std::vector<Bytes> got = bed.tun_written();
	REQUIRE(got.size() == 2);
	CHECK(split(got[0]).pkt == build(a, Csum::partial));
	CHECK(split(got[1]).pkt == build(b));
	CHECK(bed.stats.tun_writes.get() == 4);
}

} // namespace
