// datapath/offload: the virtio-net header, checksum completion and
// segmentation of TSO/USO super-packets. Every expected packet is built from
// its fields with a plain byte-pair RFC 1071 checksum (offload_test_util.hpp),
// not with the library's checksum code; outputs are compared byte for byte.
// Buffers are exact-size heap blocks with guard bytes around the output spans,
// so an access outside a span fails under ASan or in the guard check.
#include "tests/unit/datapath/offload_test_util.hpp"

namespace esptun::datapath::offload {
namespace {

using namespace test;

// ---------------------------------------------------------------------------

TEST_CASE("VnetHdr: 12 little-endian bytes, round trip, short buffers refused") {
	VnetHdr h;
	h.flags = VnetHdr::kNeedsCsum;
	h.gso_type = VnetHdr::kGsoTcpV6 | VnetHdr::kGsoEcn;
	h.hdr_len = 0x0102;
	h.gso_size = 0x0304;
	h.csum_start = 0x0506;
	h.csum_offset = 0x0708;
	h.num_buffers = 0x090a;
	Bytes b(12);
	REQUIRE(h.write(b));
	CHECK(b == Bytes{1, 0x84, 2, 1, 4, 3, 6, 5, 8, 7, 0x0a, 9});
	auto back = VnetHdr::parse(b);
	REQUIRE(back);
	CHECK(*back == h);
	Bytes small(11, 0xee);
	CHECK_FALSE(h.write(small));
	CHECK(small == Bytes(11, 0xee));
	CHECK_FALSE(VnetHdr::parse(small));
	CHECK(VnetHdr::kSize == 12);
}

TEST_CASE("csum_partial and the pseudo-header sums match a byte-pair RFC 1071 sum") {
	std::mt19937 g(7);
	for (size_t len = 0; len < 300; ++len) {
		Bytes d = pattern(len + 3, uint32_t(len));
		for (size_t shift = 0; shift < 3; ++shift) { // pointer alignment must not matter
			Bytes part(d.begin() + long(shift), d.begin() + long(shift + len));
			auto init = uint16_t(g());
			uint16_t want = ref_fold(ref_add(init, part));
			uint16_t got = csum_partial(std::span<const uint8_t>(d).subspan(shift, len), init);
			// 0 and 0xffff are the same number in ones' complement.
			CHECK((got == want || (got % 0xffff) == (want % 0xffff)));
		}
	}
	Bytes big = pattern(65535, 3);
	CHECK(csum_partial(big) == ref_fold(ref_add(0, big)));
	CHECK(internet_checksum(big) == ref_checksum(big));
	// RFC 1071 section 3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
	CHECK(csum_partial(Bytes{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}) == 0xddf2);
	CHECK(csum_add(0xffff, 1) == 1);
	CHECK(csum_add(csum_sub(0x1234, 0xabcd), 0xabcd) == 0x1234);

	Pkt p;
	p.payload = pattern(33, 1);
	Bytes v4 = build(p, Csum::partial);
	CHECK(pseudo_sum_v4(p.src4.data(), p.dst4.data(), 6, uint32_t(20 + 33)) == get16(v4, 36));
	p.v6 = true;
	Bytes v6 = build(p, Csum::partial);
	CHECK(pseudo_sum_v6(p.src6.data(), p.dst6.data(), 6, uint32_t(20 + 33)) == get16(v6, 56));
}

TEST_CASE("finish_checksum completes CHECKSUM_PARTIAL TCP and UDP, IPv4 and IPv6") {
	for (bool v6 : {false, true}) {
		for (uint8_t proto : {uint8_t(6), uint8_t(17)}) {
			for (size_t len : {0, 1, 2, 7, 100, 1399, 8000}) {
				CAPTURE(v6);
				CAPTURE(int(proto));
				CAPTURE(len);
				Pkt p;
				p.v6 = v6;
				p.proto = proto;
				p.payload = pattern(len, uint32_t(len));
				if (proto == 6) p.tcp_opts = ts_option(5, 6);
				Bytes pkt = build(p, Csum::partial);
				VnetHdr h;
				h.flags = VnetHdr::kNeedsCsum;
				h.csum_start = uint16_t(ip_hdr(p));
				h.csum_offset = proto == 6 ? 16 : 6;
				CHECK(finish_checksum(h, pkt) == Error::none);
				CHECK(pkt == build(p));
				// Through segment() as a gso NONE copy.
				Bytes again = build(p, Csum::partial);
				OutBufs o(1, again.size());
				SegmentResult r = run_segment(h, again, o);
				REQUIRE(r.ok());
				CHECK(r.count == 1);
				CHECK(o.seg(0) == build(p));
				CHECK(o.guards_intact());
			}
		}
	}
}

TEST_CASE("finish_checksum: a zero result is stored as 0xffff; bad fields refused untouched") {
	Pkt p;
	p.proto = 17;
	p.payload = Bytes(10, 0);
	Bytes pkt = build(p, Csum::partial);
	// Make the sum 0xffff: put its complement into the payload.
	uint16_t c = ref_checksum(sub(pkt, 20, pkt.size() - 20));
	put16(pkt, 28, c);
	VnetHdr h;
	h.flags = VnetHdr::kNeedsCsum;
	h.csum_start = 20;
	h.csum_offset = 6;
	Bytes copy = pkt;
	CHECK(finish_checksum(h, pkt) == Error::none);
	CHECK(get16(pkt, 26) == 0xffff);
	pkt = copy;

	VnetHdr bad = h;
	bad.csum_start = uint16_t(pkt.size() - 1);
	bad.csum_offset = 0;
	CHECK(finish_checksum(bad, pkt) == Error::malformed);
	bad.csum_start = 20;
	bad.csum_offset = uint16_t(pkt.size() - 21);
	CHECK(finish_checksum(bad, pkt) == Error::malformed);
	bad.csum_start = 0xffff;
	bad.csum_offset = 0xffff;
	CHECK(finish_checksum(bad, pkt) == Error::malformed);
	CHECK(finish_checksum(h, std::span<uint8_t>()) == Error::malformed);
	bad = h;
	bad.gso_type = VnetHdr::kGsoTcpV4;
	CHECK(finish_checksum(bad, pkt) == Error::unsupported);
	CHECK(pkt == copy);
	VnetHdr none;
	CHECK(finish_checksum(none, pkt) == Error::none);
	CHECK(pkt == copy);
	// The last possible position works.
	bad = h;
	bad.csum_start = 0;
	bad.csum_offset = uint16_t(pkt.size() - 2);
	CHECK(finish_checksum(bad, pkt) == Error::none);
}

TEST_CASE("segment TSO4/TSO6: every field of every segment, 1..64 segments and more") {
	struct Case {
		bool v6;
		size_t payload;
		uint16_t mss;
		bool tcp_opts;
		bool ip_opts;
		uint8_t flags;
	};
	const Case cases[] = {
	    {false, 1, 1448, false, false, ACK},
	    {false, 1448, 1448, true, false, ACK | PSH},
	    {false, 1449, 1448, true, false, ACK | PSH | FIN},
	    {false, 10000, 1448, true, false, ACK | PSH},
	    {false, 10000, 1000, false, true, ACK | CWR | PSH},
	    {false, 64 * 1000, 1000, true, false, ACK | PSH},
	    {false, 65000, 536, false, false, ACK | ECE | CWR | FIN},
	    {false, 3, 1, false, false, ACK | PSH},
	    {false, 0, 100, false, false, ACK | FIN},
	    {true, 1, 1428, false, false, ACK},
	    {true, 1428 * 3 + 17, 1428, true, false, ACK | PSH},
	    {true, 65000, 1000, true, false, ACK | CWR | PSH | FIN},
	    {true, 4097, 1, false, false, ACK},
	};
	for (const Case& c : cases) {
		CAPTURE(c.v6);
		CAPTURE(c.payload);
		CAPTURE(c.mss);
		Pkt p;
		p.v6 = c.v6;
		p.flags = c.flags;
		if (c.tcp_opts) p.tcp_opts = ts_option(0x11223344, 0x55667788);
		if (c.ip_opts) p.ip_opts = {0x94, 0x04, 0, 0, 1, 1, 1, 0}; // router alert, NOPs, EOL
		size_t limit = 65535 - ip_hdr(p) - l4_hdr(p);
		p.payload = pattern(std::min(c.payload, limit), uint32_t(c.payload));
		check_segments(p, c.mss);
	}
}

TEST_CASE("segment USO: each segment a full UDP datagram with its own length and checksum") {
	for (bool v6 : {false, true}) {
		for (size_t len : {1, 1200, 1201, 12000, 60001}) {
			CAPTURE(v6);
			CAPTURE(len);
			Pkt p;
			p.v6 = v6;
			p.proto = 17;
			p.payload = pattern(len, uint32_t(len) + 9);
			check_segments(p, 1200);
		}
	}
}

TEST_CASE("segment: IPv4 ID wraps, sequence numbers wrap, hdr_len is only a hint") {
	Pkt p;
	p.id = 0xfffe;
	p.seq = 0xffffffff - 1500;
	p.payload = pattern(5000, 4);
	check_segments(p, 1448);
	Bytes super = build(p, Csum::partial);
	for (uint16_t hint : {uint16_t(0), uint16_t(40), uint16_t(200), uint16_t(super.size())}) {
		VnetHdr h = kernel_hdr(p, 1448);
		h.hdr_len = hint;
		OutBufs o(8, 2000);
		SegmentResult r = run_segment(h, super, o);
		CHECK(r.ok());
		CHECK(r.count == 4);
		CHECK(o.seg(3) == ref_segments(p, 1448)[3]);
	}
	// Without NEEDS_CSUM the L4 offset comes from the packet and the field's
	// input value does not matter.
	VnetHdr h = kernel_hdr(p, 1448);
	h.flags = 0;
	h.csum_start = h.csum_offset = 0;
	put16(super, 36, 0xdead);
	OutBufs o(8, 2000);
	SegmentResult r = run_segment(h, super, o);
	REQUIRE(r.ok());
	auto want = ref_segments(p, 1448);
	for (size_t i = 0; i < r.count; ++i)
		CHECK(o.seg(i) == want[i]);
}

TEST_CASE("segment: malformed and unsupported input is refused without writing") {
	Pkt p;
	p.tcp_opts = ts_option(1, 2);
	p.payload = pattern(3000, 5);
	const Bytes good = build(p, Csum::partial);
	const VnetHdr gh = kernel_hdr(p, 1000);

	auto expect = [&](const VnetHdr& h, const Bytes& pkt, Error e, size_t nbuf = 8, size_t each = 2000) {
		OutBufs o(nbuf, each);
		SegmentResult r = run_segment(h, pkt, o);
		CHECK(r.error == e);
		CHECK(r.count == 0);
		CHECK(o.untouched());
	};
	VnetHdr h = gh;
	h.hdr_len = uint16_t(good.size() + 1);
	expect(h, good, Error::malformed);
	h = gh;
	h.gso_size = 0;
	expect(h, good, Error::malformed);
	h = gh;
	h.csum_start = 21;
	expect(h, good, Error::malformed);
	h = gh;
	h.csum_start = 0xffff;
	expect(h, good, Error::malformed);
	h = gh;
	h.csum_offset = 6;
	expect(h, good, Error::malformed);
	h = gh;
	h.gso_type = VnetHdr::kGsoTcpV6; // an IPv4 packet
	expect(h, good, Error::malformed);
	h.gso_type = 2;
	expect(h, good, Error::malformed);
	h.gso_type = 0x7f;
	expect(h, good, Error::malformed);
	h.gso_type = VnetHdr::kGsoUdp;
	expect(h, good, Error::unsupported);
	h = gh;
	h.gso_type = VnetHdr::kGsoUdpL4; // a TCP packet
	h.csum_offset = 6;
	expect(h, good, Error::malformed);
	h.gso_type = VnetHdr::kGsoUdpL4 | VnetHdr::kGsoEcn;
	expect(h, good, Error::malformed);
	h = VnetHdr{};
	h.gso_type = VnetHdr::kGsoEcn;
	expect(h, good, Error::malformed);
	h.gso_type = 0;
	h.flags = VnetHdr::kNeedsCsum;
	h.csum_start = uint16_t(good.size() - 1);
	expect(h, good, Error::malformed);

	// Truncations at every length: never accepted, never out of bounds.
	VnetHdr no_hint = gh;
	no_hint.hdr_len = 0;
	for (size_t n = 0; n < good.size(); n += (n < 80 ? 1 : 97)) {
		Bytes cut = sub(good, 0, n);
		for (const VnetHdr& hh : {gh, no_hint}) {
			OutBufs o(8, 2000);
			SegmentResult r = run_segment(hh, cut, o);
			CHECK(r.error != Error::none);
			CHECK(o.untouched());
		}
	}
	// The IP header against the packet.
	Bytes b = good;
	b[0] = 0x44; // IHL 4
	expect(gh, b, Error::malformed);
	b = good;
	b[0] = 0x4f; // 60-byte IP header: TCP header then ends past... still inside, but csum_start wrong
	expect(gh, b, Error::malformed);
	b = good;
	put16(b, 2, uint16_t(good.size() - 1));
	expect(gh, b, Error::malformed);
	b = good;
	put16(b, 2, uint16_t(good.size() + 1));
	expect(gh, b, Error::malformed);
	b = good;
	b[0] = 0x55;
	expect(gh, b, Error::malformed);
	b = good;
	put16(b, 6, 0x2000); // MF
	expect(gh, b, Error::unsupported);
	b = good;
	put16(b, 6, 0x0001); // fragment offset
	expect(gh, b, Error::unsupported);
	b = good;
	b[9] = 1; // ICMP
	expect(gh, b, Error::unsupported);
	// The TCP header against the packet.
	b = good;
	b[20 + 12] = 0x40; // data offset 4
	expect(gh, b, Error::malformed);
	Bytes small = build([&] {
		Pkt q = p;
		q.payload.clear();
		return q;
	}());
	b = small;
	b[20 + 12] = 0xf0; // data offset 60 > 32 bytes present
	expect(kernel_hdr(p, 1000), b, Error::malformed);

	// IPv6: payload length, extension headers.
	Pkt q = p;
	q.v6 = true;
	Bytes g6 = build(q, Csum::partial);
	VnetHdr h6 = kernel_hdr(q, 1000);
	b = g6;
	put16(b, 4, uint16_t(g6.size() - 40 + 1));
	expect(h6, b, Error::malformed);
	b = g6;
	put16(b, 4, 0); // a jumbogram's zero
	expect(h6, b, Error::malformed);
	b = g6;
	b[6] = 0; // hop-by-hop options
	expect(h6, b, Error::unsupported);
	b = g6;
	b[6] = 44; // fragment header
	expect(h6, b, Error::unsupported);

	// UDP length against the packet.
	Pkt u = p;
	u.proto = 17;
	Bytes gu = build(u, Csum::partial);
	b = gu;
	put16(b, 24, uint16_t(gu.size() - 20 - 1));
	expect(kernel_hdr(u, 1000), b, Error::malformed);

	// Output space.
	expect(gh, good, Error::too_many_segments, 2);
	expect(gh, good, Error::buffer_too_small, 3, 20 + 32 + 999);
	OutBufs o(3, 2000);
	std::vector<size_t> lens(2);
	auto heap = good;
	CHECK(segment(gh, heap, o.spans, lens).error == Error::too_many_segments);
	CHECK(o.untouched());
	h = VnetHdr{};
	CHECK(segment(h, heap, {}, {}).error == Error::too_many_segments);
	OutBufs tiny(1, good.size() - 1);
	CHECK(run_segment(h, good, tiny).error == Error::buffer_too_small);
	CHECK(tiny.untouched());
	// Exactly enough space works, and the guards hold.
	OutBufs exact(3, 20 + 32 + 1000);
	SegmentResult fits = run_segment(gh, good, exact);
	CHECK(fits.ok());
	CHECK(fits.count == 3);
	CHECK(exact.guards_intact());
}

} // namespace
} // namespace esptun::datapath::offload
