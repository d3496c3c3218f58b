// tunnel/offload: the virtio-net header, checksum completion, segmentation of
// TSO/USO super-packets and TCP GRO planning. Every expected packet is built
// here from its fields with a plain byte-pair RFC 1071 checksum, not with the
// library's checksum code; outputs are compared byte for byte. Buffers are
// exact-size heap blocks with guard bytes around the output spans, so an
// access outside a span fails under ASan or in the guard check.
#include "tunnel/offload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace esptun::offload {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint8_t FIN = 0x01, SYN = 0x02, RST = 0x04, PSH = 0x08, ACK = 0x10, URG = 0x20, ECE = 0x40,
                  CWR = 0x80;

// ---------------------------------------------------------------------------
// Reference: RFC 1071 over byte pairs, nothing clever.

uint32_t ref_add(uint32_t sum, const Bytes& b) {
	for (size_t i = 0; i < b.size(); i += 2) {
		uint32_t hi = b[i];
		uint32_t lo = i + 1 < b.size() ? b[i + 1] : 0;
		sum += hi << 8 | lo;
	}
	return sum;
}
uint16_t ref_fold(uint32_t sum) {
	while (sum > 0xffff)
		sum = (sum & 0xffff) + (sum >> 16);
	return uint16_t(sum);
}
uint16_t ref_checksum(const Bytes& b) { return uint16_t(~ref_fold(ref_add(0, b))); }

void put16(Bytes& b, size_t at, uint16_t v) {
	b[at] = uint8_t(v >> 8);
	b[at + 1] = uint8_t(v);
}
void put32(Bytes& b, size_t at, uint32_t v) {
	put16(b, at, uint16_t(v >> 16));
	put16(b, at + 2, uint16_t(v));
}
uint16_t get16(std::span<const uint8_t> b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }
uint32_t get32(std::span<const uint8_t> b, size_t at) {
	return uint32_t(get16(b, at)) << 16 | get16(b, at + 2);
}

Bytes sub(const Bytes& b, size_t from, size_t len) {
	return Bytes(b.begin() + long(from), b.begin() + long(from + len));
}

/// A TCP or UDP packet over IPv4 or IPv6, described field by field.
struct Pkt {
	bool v6 = false;
	uint8_t proto = 6;
	std::array<uint8_t, 4> src4{10, 99, 0, 1};
	std::array<uint8_t, 4> dst4{10, 99, 0, 2};
	std::array<uint8_t, 16> src6{0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	std::array<uint8_t, 16> dst6{0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
	uint8_t tos = 0; // IPv4 TOS / IPv6 traffic class
	uint8_t ttl = 64;
	bool df = true;
	uint16_t id = 0x1234;
	Bytes ip_opts; // IPv4 options, a multiple of 4
	uint32_t flow = 0x12345;
	uint16_t sport = 40000, dport = 5201;
	uint32_t seq = 0xfffff000; // wraps in the bigger tests
	uint32_t ack = 77;
	uint8_t flags = ACK;
	uint16_t win = 502;
	Bytes tcp_opts; // a multiple of 4
	Bytes payload;
};

enum class Csum { full, partial };

/// L4 header length of @p.
size_t l4_hdr(const Pkt& p) { return p.proto == 6 ? 20 + p.tcp_opts.size() : 8; }
size_t ip_hdr(const Pkt& p) { return p.v6 ? 40 : 20 + p.ip_opts.size(); }

/**
 * build() - the bytes of @p. Csum::full: every checksum complete.
 * Csum::partial: the L4 checksum field holds the folded pseudo-header sum,
 * as the kernel hands over a CHECKSUM_PARTIAL packet.
 */
Bytes build(const Pkt& p, Csum mode = Csum::full) {
	size_t ih = ip_hdr(p), lh = l4_hdr(p);
	size_t l4_len = lh + p.payload.size();
	Bytes b(ih + l4_len, 0);
	Bytes pseudo;
	if (p.v6) {
		b[0] = uint8_t(0x60 | p.tos >> 4);
		b[1] = uint8_t(p.tos << 4 | (p.flow >> 16 & 0x0f));
		put16(b, 2, uint16_t(p.flow));
		put16(b, 4, uint16_t(l4_len));
		b[6] = p.proto;
		b[7] = p.ttl;
		std::copy(p.src6.begin(), p.src6.end(), b.begin() + 8);
		std::copy(p.dst6.begin(), p.dst6.end(), b.begin() + 24);
		pseudo.insert(pseudo.end(), p.src6.begin(), p.src6.end());
		pseudo.insert(pseudo.end(), p.dst6.begin(), p.dst6.end());
		Bytes tail(8, 0);
		put32(tail, 0, uint32_t(l4_len));
		tail[7] = p.proto;
		pseudo.insert(pseudo.end(), tail.begin(), tail.end());
	} else {
		b[0] = uint8_t(0x40 | ih / 4);
		b[1] = p.tos;
		put16(b, 2, uint16_t(b.size()));
		put16(b, 4, p.id);
		put16(b, 6, p.df ? 0x4000 : 0);
		b[8] = p.ttl;
		b[9] = p.proto;
		std::copy(p.src4.begin(), p.src4.end(), b.begin() + 12);
		std::copy(p.dst4.begin(), p.dst4.end(), b.begin() + 16);
		std::copy(p.ip_opts.begin(), p.ip_opts.end(), b.begin() + 20);
		put16(b, 10, ref_checksum(sub(b, 0, ih)));
		pseudo.insert(pseudo.end(), p.src4.begin(), p.src4.end());
		pseudo.insert(pseudo.end(), p.dst4.begin(), p.dst4.end());
		pseudo.push_back(0);
		pseudo.push_back(p.proto);
		pseudo.push_back(uint8_t(l4_len >> 8));
		pseudo.push_back(uint8_t(l4_len));
	}
	size_t check_at;
	put16(b, ih, p.sport);
	put16(b, ih + 2, p.dport);
	if (p.proto == 6) {
		put32(b, ih + 4, p.seq);
		put32(b, ih + 8, p.ack);
		b[ih + 12] = uint8_t(lh / 4 << 4);
		b[ih + 13] = p.flags;
		put16(b, ih + 14, p.win);
		std::copy(p.tcp_opts.begin(), p.tcp_opts.end(), b.begin() + long(ih) + 20);
		check_at = ih + 16;
	} else {
		put16(b, ih + 4, uint16_t(l4_len));
		check_at = ih + 6;
	}
	std::copy(p.payload.begin(), p.payload.end(), b.begin() + long(ih + lh));
	if (mode == Csum::partial) {
		put16(b, check_at, ref_fold(ref_add(0, pseudo)));
	} else {
		uint16_t c = ref_checksum([&] {
			Bytes all = pseudo;
			all.insert(all.end(), b.begin() + long(ih), b.end());
			return all;
		}());
		if (p.proto == 17 && c == 0) c = 0xffff;
		put16(b, check_at, c);
	}
	return b;
}

/// The L4 checksum of @pkt verifies (pseudo-header + L4 sums to 0xffff).
bool l4_checksum_ok(const Pkt& p, const Bytes& pkt) {
	size_t ih = ip_hdr(p);
	Bytes pseudo;
	size_t l4_len = pkt.size() - ih;
	if (p.v6) {
		pseudo.insert(pseudo.end(), pkt.begin() + 8, pkt.begin() + 40);
		pseudo.insert(pseudo.end(), {0, 0, uint8_t(l4_len >> 8), uint8_t(l4_len), 0, 0, 0, p.proto});
	} else {
		pseudo.insert(pseudo.end(), pkt.begin() + 12, pkt.begin() + 20);
		pseudo.insert(pseudo.end(), {0, p.proto, uint8_t(l4_len >> 8), uint8_t(l4_len)});
	}
	pseudo.insert(pseudo.end(), pkt.begin() + long(ih), pkt.end());
	return ref_fold(ref_add(0, pseudo)) == 0xffff;
}

Bytes pattern(size_t n, uint32_t seed) {
	std::mt19937 g(seed);
	Bytes b(n);
	for (auto& x : b)
		x = uint8_t(g());
	return b;
}

/// The vnet header the kernel would give a super-packet @p cut at @mss.
VnetHdr kernel_hdr(const Pkt& p, uint16_t mss) {
	VnetHdr h;
	h.flags = VnetHdr::kNeedsCsum;
	h.gso_type = p.proto == 17 ? VnetHdr::kGsoUdpL4 : p.v6 ? VnetHdr::kGsoTcpV6 : VnetHdr::kGsoTcpV4;
	h.hdr_len = uint16_t(ip_hdr(p) + l4_hdr(p));
	h.gso_size = mss;
	h.csum_start = uint16_t(ip_hdr(p));
	h.csum_offset = p.proto == 6 ? 16 : 6;
	return h;
}

/// What segment() must produce, built independently from the fields.
std::vector<Bytes> ref_segments(const Pkt& p, size_t mss) {
	std::vector<Bytes> out;
	size_t n = p.payload.empty() ? 1 : (p.payload.size() + mss - 1) / mss;
	for (size_t i = 0; i < n; ++i) {
		Pkt s = p;
		size_t off = i * mss;
		size_t len = std::min(mss, p.payload.size() - off);
		s.payload = sub(p.payload, off, len);
		s.id = uint16_t(p.id + i);
		if (p.proto == 6) {
			s.seq = uint32_t(p.seq + off);
			if (i + 1 < n) s.flags &= uint8_t(~(FIN | PSH));
			if (i > 0) s.flags &= uint8_t(~CWR);
		}
		out.push_back(build(s));
	}
	return out;
}

/// Output buffers with guard bytes on both sides of each span.
struct OutBufs {
	static constexpr uint8_t kGuard = 0xa5;
	static constexpr size_t kPad = 16;
	std::vector<Bytes> store;
	std::vector<std::span<uint8_t>> spans;
	std::vector<size_t> lens;

	OutBufs(size_t n, size_t each) : store(n, Bytes(each + 2 * kPad, kGuard)), lens(n, 0) {
		for (auto& s : store)
			spans.emplace_back(s.data() + kPad, each);
	}
	bool guards_intact() const {
		for (auto& s : store) {
			for (size_t i = 0; i < kPad; ++i)
				if (s[i] != kGuard || s[s.size() - 1 - i] != kGuard) return false;
		}
		return true;
	}
	bool untouched() const {
		for (auto& s : store)
			if (std::any_of(s.begin(), s.end(), [](uint8_t x) { return x != kGuard; }))
				return false;
		return true;
	}
	Bytes seg(size_t i) const { return Bytes(spans[i].begin(), spans[i].begin() + long(lens[i])); }
};

/// Runs segment() on an exact-size copy of @pkt.
SegmentResult run_segment(const VnetHdr& h, const Bytes& pkt, OutBufs& o) {
	auto heap = std::make_unique<uint8_t[]>(pkt.size());
	std::copy(pkt.begin(), pkt.end(), heap.get());
	return segment(h, {heap.get(), pkt.size()}, o.spans, o.lens);
}

void check_segments(const Pkt& p, uint16_t mss) {
	Bytes super = build(p, Csum::partial);
	VnetHdr h = kernel_hdr(p, mss);
	auto want = ref_segments(p, mss);
	OutBufs o(want.size() + 2, 65536);
	SegmentResult r = run_segment(h, super, o);
	REQUIRE(r.error == Error::none);
	REQUIRE(r.count == want.size());
	Bytes joined;
	size_t hdrs = ip_hdr(p) + l4_hdr(p);
	for (size_t i = 0; i < r.count; ++i) {
		Bytes got = o.seg(i);
		CHECK(got == want[i]);
		CHECK(l4_checksum_ok(p, got));
		CHECK(got.size() <= hdrs + mss);
		joined.insert(joined.end(), got.begin() + long(hdrs), got.end());
	}
	CHECK(joined == p.payload);
	CHECK(o.guards_intact());
}

Bytes ts_option(uint32_t tsval, uint32_t tsecr) {
	Bytes o{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
	for (int i = 0; i < 4; ++i) {
		o[size_t(4 + i)] = uint8_t(tsval >> (24 - 8 * i));
		o[size_t(8 + i)] = uint8_t(tsecr >> (24 - 8 * i));
	}
	return o;
}

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

// ---------------------------------------------------------------------------
// GRO

struct Batch {
	std::vector<Bytes> pkts;
	std::vector<std::span<uint8_t>> spans() {
		std::vector<std::span<uint8_t>> s;
		for (auto& p : pkts)
			s.emplace_back(p);
		return s;
	}
};

/// @n full-checksum packets of one flow, each @mss bytes, the last @last bytes.
Batch flow(const Pkt& base, size_t n, size_t mss, size_t last) {
	Batch b;
	uint32_t seq = base.seq;
	for (size_t i = 0; i < n; ++i) {
		Pkt p = base;
		p.seq = seq;
		p.id = uint16_t(base.id + i);
		p.payload = pattern(i + 1 == n ? last : mss, uint32_t(i));
		seq += uint32_t(p.payload.size());
		b.pkts.push_back(build(p));
	}
	return b;
}

std::vector<GroRun> plan(Batch& b, const GroOptions& opt = {}) {
	auto s = b.spans();
	std::vector<GroRun> runs(s.size() + 1);
	size_t n = plan_gro(s, runs, opt);
	runs.resize(n);
	return runs;
}

/// The write for @run: head patched, then the payloads of the rest.
Bytes assemble(Batch& b, const GroRun& r) {
	Bytes head = b.pkts[r.first];
	REQUIRE(patch_gro_head(r, head));
	Bytes out = head;
	for (size_t i = 1; i < r.count; ++i) {
		auto pl = gro_payload(r, b.pkts[r.first + i]);
		out.insert(out.end(), pl.begin(), pl.end());
	}
	CHECK(out.size() == r.total_len);
	return out;
}

std::vector<size_t> counts(const std::vector<GroRun>& runs) {
	std::vector<size_t> c;
	for (auto& r : runs)
		c.push_back(r.count);
	return c;
}

TEST_CASE("segment -> plan_gro -> patch_gro_head gives back the super-packet and its header") {
	struct Case {
		bool v6;
		size_t payload;
		uint16_t mss;
		bool opts;
		uint8_t flags;
	};
	const Case cases[] = {
	    {false, 2 * 1448, 1448, true, ACK},
	    {false, 2 * 1448 - 5, 1448, true, ACK | PSH},
	    {false, 10 * 1000 + 1, 1000, false, ACK | PSH | FIN},
	    {false, 64 * 1000, 1000, true, ACK | ECE},
	    {true, 3 * 1428 + 100, 1428, true, ACK | PSH},
	    {true, 64 * 1000, 1000, false, ACK | FIN},
	    {true, 5, 2, false, ACK},
	};
	for (const Case& c : cases) {
		CAPTURE(c.v6);
		CAPTURE(c.payload);
		Pkt p;
		p.v6 = c.v6;
		p.flags = c.flags;
		if (c.opts) p.tcp_opts = ts_option(9, 10);
		p.payload = pattern(c.payload, 11);
		Bytes super = build(p, Csum::partial);
		VnetHdr h = kernel_hdr(p, c.mss);
		OutBufs o(70, 2000);
		SegmentResult r = run_segment(h, super, o);
		REQUIRE(r.ok());
		Batch b;
		for (size_t i = 0; i < r.count; ++i)
			b.pkts.push_back(o.seg(i));
		auto runs = plan(b);
		REQUIRE(runs.size() == 1);
		CHECK(runs[0].first == 0);
		CHECK(runs[0].count == r.count);
		CHECK(runs[0].hdr == h);
		CHECK(assemble(b, runs[0]) == super);
	}
}

TEST_CASE("GRO: more than 64 segments split into runs of 64; CWR and singletons stay as they are") {
	Pkt p;
	p.payload = pattern(100 * 100, 1);
	p.flags = ACK | PSH;
	OutBufs o(100, 200);
	REQUIRE(run_segment(kernel_hdr(p, 100), build(p, Csum::partial), o).count == 100);
	Batch b;
	for (size_t i = 0; i < 100; ++i)
		b.pkts.push_back(o.seg(i));
	auto runs = plan(b);
	CHECK(counts(runs) == std::vector<size_t>{64, 36});
	CHECK(runs[1].first == 64);
	CHECK(runs[1].last_flags == PSH);
	CHECK(runs[0].last_flags == 0);
	Bytes second = assemble(b, runs[1]);
	CHECK(get32(second, 24) == p.seq + 6400);
	CHECK((second[33] & PSH));

	GroOptions small;
	small.max_segments = 10;
	CHECK(counts(plan(b, small)) == std::vector<size_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 10});

	// CWR on the first segment: it goes alone, the rest merge.
	p.flags = ACK | CWR;
	p.payload = pattern(500, 2);
	OutBufs o2(5, 200);
	REQUIRE(run_segment(kernel_hdr(p, 100), build(p, Csum::partial), o2).count == 5);
	Batch c;
	for (size_t i = 0; i < 5; ++i)
		c.pkts.push_back(o2.seg(i));
	runs = plan(c);
	REQUIRE(counts(runs) == std::vector<size_t>{1, 4});
	CHECK(runs[0].hdr == VnetHdr{});
	Bytes before = c.pkts[0];
	CHECK(patch_gro_head(runs[0], c.pkts[0]));
	CHECK(c.pkts[0] == before);
}

TEST_CASE("GRO merges only what the kernel would: one refusal per rule") {
	Pkt base;
	base.tcp_opts = ts_option(100, 200);
	const Batch good = flow(base, 3, 1000, 1000);
	{
		Batch b = good;
		CHECK(counts(plan(b)) == std::vector<size_t>{3});
	}
	// Mutate packet 1 (all checksums recomputed) and expect packet 0 alone.
	auto refuse = [&](const char* what, auto mutate, std::vector<size_t> want = {1, 2}, bool v6 = false,
	                  size_t last = 1000) {
		CAPTURE(what);
		Pkt p0 = base;
		p0.v6 = v6;
		Batch b = flow(p0, 3, 1000, last);
		Pkt p1 = p0;
		p1.seq = p0.seq + 1000;
		p1.id = uint16_t(p0.id + 1);
		p1.payload = pattern(1000, 1);
		mutate(p1);
		b.pkts[1] = build(p1);
		CHECK(counts(plan(b)) == want);
	};
	refuse("source address", [](Pkt& p) { p.src4[3] = 9; }, {1, 1, 1});
	refuse("destination address", [](Pkt& p) { p.dst4[0] = 11; }, {1, 1, 1});
	refuse("source port", [](Pkt& p) { p.sport++; }, {1, 1, 1});
	refuse("destination port", [](Pkt& p) { p.dport++; }, {1, 1, 1});
	refuse("TTL", [](Pkt& p) { p.ttl--; }, {1, 1, 1});
	refuse("TOS", [](Pkt& p) { p.tos = 4; }, {1, 1, 1});
	refuse("DF", [](Pkt& p) { p.df = false; }, {1, 1, 1});
	refuse("IPv4 ID not the next", [](Pkt& p) { p.id += 5; }, {1, 1, 1});
	refuse("IPv4 options", [](Pkt& p) { p.ip_opts = {1, 1, 1, 0}; }, {1, 1, 1});
	refuse("gap in sequence", [](Pkt& p) { p.seq += 1; }, {1, 1, 1});
	refuse("overlap in sequence", [](Pkt& p) { p.seq -= 1; }, {1, 1, 1});
	refuse("ACK number", [](Pkt& p) { p.ack++; }, {1, 1, 1});
	refuse("window", [](Pkt& p) { p.win++; }, {1, 1, 1});
	refuse("timestamp option", [](Pkt& p) { p.tcp_opts = ts_option(101, 200); }, {1, 1, 1});
	refuse("option length", [](Pkt& p) { p.tcp_opts.clear(); }, {1, 1, 1});
	refuse("SYN", [](Pkt& p) { p.flags |= SYN; }, {1, 1, 1});
	refuse("RST", [](Pkt& p) { p.flags |= RST; }, {1, 1, 1});
	refuse("URG", [](Pkt& p) { p.flags |= URG; }, {1, 1, 1});
	refuse("CWR", [](Pkt& p) { p.flags |= CWR; }, {1, 1, 1});
	refuse("ECE on one only", [](Pkt& p) { p.flags |= ECE; }, {1, 1, 1});
	refuse("no ACK", [](Pkt& p) { p.flags = PSH; }, {1, 1, 1});
	refuse("larger than the first", [](Pkt& p) { p.payload.push_back(0); }, {1, 1, 1});
	refuse("empty payload", [](Pkt& p) { p.payload.clear(); }, {1, 1, 1});
	refuse("UDP", [](Pkt& p) { p.proto = 17; }, {1, 1, 1});
	refuse("IPv6", [](Pkt& p) { p.v6 = true; }, {1, 1, 1});
	// A shorter middle packet or PSH/FIN in the middle ends the run after it.
	refuse("shorter middle", [](Pkt& p) { p.payload.pop_back(); }, {2, 1});
	refuse("PSH in the middle", [](Pkt& p) { p.flags |= PSH; }, {2, 1});
	refuse("FIN in the middle", [](Pkt& p) { p.flags |= FIN; }, {2, 1});
	// IPv6 fields.
	refuse(
	    "flow label", [](Pkt& p) { p.flow++; }, {1, 1, 1}, true);
	refuse(
	    "traffic class", [](Pkt& p) { p.tos = 0x20; }, {1, 1, 1}, true);
	refuse(
	    "hop limit", [](Pkt& p) { p.ttl = 1; }, {1, 1, 1}, true);
	refuse(
	    "IPv6 source", [](Pkt& p) { p.src6[15] = 7; }, {1, 1, 1}, true);
	refuse(
	    "IPv6 accepts the same", [](Pkt&) {}, {3}, true);
	refuse(
	    "shorter last", [](Pkt&) {}, {3}, false, 999);
	refuse(
	    "larger last", [](Pkt&) {}, {2, 1}, false, 1001);

	// PSH or FIN on the first packet: alone.
	for (uint8_t f : {PSH, FIN}) {
		Pkt p = base;
		p.flags = ACK | f;
		Batch b = flow(p, 3, 1000, 1000);
		CHECK(counts(plan(b)).front() == 1);
	}
	// ECE on every packet merges (the flag word is equal).
	{
		Pkt p = base;
		p.flags = ACK | ECE;
		Batch b = flow(p, 3, 1000, 1000);
		CHECK(counts(plan(b)) == std::vector<size_t>{3});
	}
	// IPv4 IDs all equal with DF: merged; without DF: not.
	for (bool df : {true, false}) {
		Pkt p = base;
		p.df = df;
		Batch b = flow(p, 3, 1000, 1000);
		for (size_t i = 0; i < 3; ++i) {
			Pkt q = p;
			q.seq = p.seq + uint32_t(1000 * i);
			q.payload = pattern(1000, uint32_t(i));
			b.pkts[i] = build(q);
		}
		CHECK(counts(plan(b)) == (df ? std::vector<size_t>{3} : std::vector<size_t>{1, 1, 1}));
	}
	// Bad checksums: refused when verifying, merged when told not to.
	{
		Batch b = good;
		b.pkts[1].back() ^= 1;
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 1, 1});
		GroOptions trust;
		trust.verify_checksums = false;
		CHECK(counts(plan(b, trust)) == std::vector<size_t>{3});
		b = good;
		b.pkts[1][8] ^= 1; // TTL without fixing the IPv4 header checksum: both differ
		b.pkts[1][10] ^= 1;
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 1, 1});
		b = good;
		b.pkts[0][11] ^= 1; // the head's IPv4 header checksum
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 2});
	}
	// 65535 bytes of IP packet at most.
	{
		Pkt p = base;
		Batch b = flow(p, 3, 30000, 30000);
		CHECK(counts(plan(b)) == std::vector<size_t>{2, 1});
		Batch d = flow(p, 3, 21000, 21000);
		CHECK(counts(plan(d)) == std::vector<size_t>{3});
		CHECK(plan(d)[0].total_len == 20 + 32 + 63000);
	}
	// The reserved IPv4 flag (inet_gro_receive() flushes on any frag_off bit but DF).
	{
		Batch b = good;
		b.pkts[1][6] |= 0x80;
		put16(b.pkts[1], 10, 0);
		put16(b.pkts[1], 10, ref_checksum(sub(b.pkts[1], 0, 20)));
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 1, 1});
	}
	// A packet whose IP length is not its span length.
	{
		Batch b = good;
		b.pkts[1].push_back(0);
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 1, 1});
	}
	// Interleaved flows merge only consecutive packets.
	{
		Pkt a = base, c = base;
		c.sport = 1;
		Batch fa = flow(a, 2, 1000, 1000), fc = flow(c, 2, 1000, 1000);
		Batch b;
		b.pkts = {fa.pkts[0], fc.pkts[0], fa.pkts[1], fc.pkts[1]};
		CHECK(counts(plan(b)) == std::vector<size_t>{1, 1, 1, 1});
	}
}

TEST_CASE("GRO: the patched super-packet is valid, and segmenting it gives back the packets") {
	for (bool v6 : {false, true}) {
		Pkt p;
		p.v6 = v6;
		p.tcp_opts = ts_option(1, 2);
		Batch b = flow(p, 7, 1200, 345);
		auto runs = plan(b);
		REQUIRE(runs.size() == 1);
		Bytes merged = assemble(b, runs[0]);
		// Finish its checksum as the kernel would (csum_start/offset from the header)
		// and check it with the reference.
		Bytes done = merged;
		VnetHdr none = runs[0].hdr;
		none.gso_type = 0;
		REQUIRE(finish_checksum(none, done) == Error::none);
		CHECK(l4_checksum_ok(p, done));
		if (!v6) CHECK(ref_checksum(sub(done, 0, 20)) == 0);
		// And the kernel's segmentation (our copy of it) gives back the batch.
		OutBufs o(8, 2000);
		SegmentResult r = run_segment(runs[0].hdr, merged, o);
		REQUIRE(r.count == 7);
		for (size_t i = 0; i < 7; ++i)
			CHECK(o.seg(i) == b.pkts[i]);
	}
}

TEST_CASE("GRO: planning stops when runs is full; patch refuses a head that does not fit") {
	Pkt p;
	Batch b = flow(p, 3, 1000, 1000);
	Pkt other = p;
	other.sport = 7;
	b.pkts.push_back(build(other));
	auto s = b.spans();
	std::vector<GroRun> runs(1);
	CHECK(plan_gro(s, runs) == 1);
	CHECK(runs[0].count == 3);
	CHECK(plan_gro(s, std::span<GroRun>()) == 0);
	CHECK(plan_gro(std::span<const std::span<uint8_t>>(), runs) == 0);

	Bytes orig = b.pkts[0];
	GroRun bad = runs[0];
	bad.hdr_bytes = 20;
	CHECK_FALSE(patch_gro_head(bad, b.pkts[0]));
	bad = runs[0];
	bad.last_flags = SYN;
	CHECK_FALSE(patch_gro_head(bad, b.pkts[0]));
	bad = runs[0];
	bad.total_len = 70000;
	CHECK_FALSE(patch_gro_head(bad, b.pkts[0]));
	CHECK_FALSE(patch_gro_head(runs[0], std::span<uint8_t>(b.pkts[0]).first(30)));
	CHECK(b.pkts[0] == orig);
	CHECK(patch_gro_head(runs[0], b.pkts[0]));
	CHECK(get16(b.pkts[0], 2) == 20 + 20 + 3000);
}

TEST_CASE("GRO on garbage: every truncation of a batch plans without reading out of bounds") {
	Pkt p;
	p.tcp_opts = ts_option(1, 2);
	Batch b = flow(p, 4, 300, 300);
	for (size_t cut = 0; cut <= b.pkts[1].size(); ++cut) {
		std::vector<std::unique_ptr<uint8_t[]>> heap;
		std::vector<std::span<uint8_t>> spans;
		for (size_t i = 0; i < b.pkts.size(); ++i) {
			size_t n = i == 1 ? cut : b.pkts[i].size();
			heap.push_back(std::make_unique<uint8_t[]>(n));
			std::copy_n(b.pkts[i].begin(), n, heap.back().get());
			spans.emplace_back(heap.back().get(), n);
		}
		std::vector<GroRun> runs(4);
		size_t n = plan_gro(spans, runs);
		size_t covered = 0;
		for (size_t i = 0; i < n; ++i) {
			CHECK(runs[i].first == covered);
			covered += runs[i].count;
			CHECK(patch_gro_head(runs[i], spans[runs[i].first]));
		}
		CHECK(covered == 4);
	}
}

} // namespace
} // namespace esptun::offload
