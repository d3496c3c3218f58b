// Helpers for the datapath offload tests: a reference RFC 1071 checksum over
// byte pairs, a packet builder that sets every header field from a
// description, the segments the kernel would produce, and output buffers
// with guard bytes. Nothing here uses the library's own checksum code.
#pragma once

#include "datapath/offload.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace esptun::datapath::offload::test {

using ::esptun::test::Bytes;

constexpr uint8_t FIN = 0x01, SYN = 0x02, RST = 0x04, PSH = 0x08, ACK = 0x10, URG = 0x20, ECE = 0x40,
                  CWR = 0x80;

// ---------------------------------------------------------------------------
// Reference: RFC 1071 over byte pairs, nothing clever.

inline uint32_t ref_add(uint32_t sum, const Bytes& b) {
	for (size_t i = 0; i < b.size(); i += 2) {
		uint32_t hi = b[i];
		uint32_t lo = i + 1 < b.size() ? b[i + 1] : 0;
		sum += hi << 8 | lo;
	}
	return sum;
}
inline uint16_t ref_fold(uint32_t sum) {
	while (sum > 0xffff)
		sum = (sum & 0xffff) + (sum >> 16);
	return uint16_t(sum);
}
inline uint16_t ref_checksum(const Bytes& b) { return uint16_t(~ref_fold(ref_add(0, b))); }

inline void put16(Bytes& b, size_t at, uint16_t v) {
	b[at] = uint8_t(v >> 8);
	b[at + 1] = uint8_t(v);
}
inline void put32(Bytes& b, size_t at, uint32_t v) {
	put16(b, at, uint16_t(v >> 16));
	put16(b, at + 2, uint16_t(v));
}
inline uint16_t get16(std::span<const uint8_t> b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }
inline uint32_t get32(std::span<const uint8_t> b, size_t at) {
	return uint32_t(get16(b, at)) << 16 | get16(b, at + 2);
}

inline Bytes sub(const Bytes& b, size_t from, size_t len) {
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
inline size_t l4_hdr(const Pkt& p) { return p.proto == 6 ? 20 + p.tcp_opts.size() : 8; }
inline size_t ip_hdr(const Pkt& p) { return p.v6 ? 40 : 20 + p.ip_opts.size(); }

/**
 * build() - the bytes of @p. Csum::full: every checksum complete.
 * Csum::partial: the L4 checksum field holds the folded pseudo-header sum,
 * as the kernel hands over a CHECKSUM_PARTIAL packet.
 */
inline Bytes build(const Pkt& p, Csum mode = Csum::full) {
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
inline bool l4_checksum_ok(const Pkt& p, const Bytes& pkt) {
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

inline Bytes pattern(size_t n, uint32_t seed) {
	std::mt19937 g(seed);
	Bytes b(n);
	for (auto& x : b)
		x = uint8_t(g());
	return b;
}

/// The vnet header the kernel would give a super-packet @p cut at @mss.
inline VnetHdr kernel_hdr(const Pkt& p, uint16_t mss) {
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
inline std::vector<Bytes> ref_segments(const Pkt& p, size_t mss) {
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
inline SegmentResult run_segment(const VnetHdr& h, const Bytes& pkt, OutBufs& o) {
	auto heap = std::make_unique<uint8_t[]>(pkt.size());
	std::copy(pkt.begin(), pkt.end(), heap.get());
	return segment(h, {heap.get(), pkt.size()}, o.spans, o.lens);
}

inline void check_segments(const Pkt& p, uint16_t mss) {
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

inline Bytes ts_option(uint32_t tsval, uint32_t tsecr) {
	Bytes o{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0};
	for (int i = 0; i < 4; ++i) {
		o[size_t(4 + i)] = uint8_t(tsval >> (24 - 8 * i));
		o[size_t(8 + i)] = uint8_t(tsecr >> (24 - 8 * i));
	}
	return o;
}

} // namespace esptun::datapath::offload::test
