// tun offloads: virtio-net header, checksum completion, segmentation and
// GRO planning. See offload.hpp for the two directions and the kernel
// conventions each function follows.
#include "datapath/offload.hpp"

#include "base/bytes.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace esptun::datapath::offload {
namespace {

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr size_t kIpv4Min = 20;
constexpr size_t kIpv6Len = 40;
constexpr size_t kTcpMin = 20;
constexpr size_t kUdpLen = 8;
constexpr size_t kTcpCheckOff = 16; // offsetof(struct tcphdr, check)
constexpr size_t kUdpCheckOff = 6;  // offsetof(struct udphdr, check)
constexpr size_t kMaxIpLen = 65535;

// TCP flag bits (byte 13 of the header).
constexpr uint8_t kFin = 0x01;
constexpr uint8_t kSyn = 0x02;
constexpr uint8_t kRst = 0x04;
constexpr uint8_t kPsh = 0x08;
constexpr uint8_t kAck = 0x10;
constexpr uint8_t kUrg = 0x20;
constexpr uint8_t kCwr = 0x80;

uint16_t load_le16(const uint8_t* p) noexcept { return uint16_t(p[0] | p[1] << 8); }
void store_le16(uint8_t* p, uint16_t v) noexcept {
	p[0] = uint8_t(v);
	p[1] = uint8_t(v >> 8);
}

uint64_t load_native64(const uint8_t* p) noexcept {
	uint64_t w;
	std::memcpy(&w, p, sizeof w);
	return w;
}

/// Both 32-bit halves of a native 64-bit word: their sum is congruent to the
/// word's 16-bit ones' complement sum (2^16 == 1 mod 0xffff).
uint64_t halves(uint64_t w) noexcept { return (w & 0xffffffffu) + (w >> 32); }

/**
 * struct L3L4 - where the headers of a packet are.
 * @v6:     IPv6 (else IPv4)
 * @l4_off: length of the IP header (with IPv4 options) = offset of the L4 header
 * @l4_hdr: length of the L4 header (TCP data offset * 4, or 8 for UDP)
 * @proto:  TCP or UDP
 */
struct L3L4 {
	bool v6 = false;
	size_t l4_off = 0;
	size_t l4_hdr = 0;
	uint8_t proto = 0;
};

/**
 * parse_l3l4() - find and check the IP and TCP/UDP headers of @pkt.
 *
 * The IP header must describe exactly @pkt (IPv4 total length, IPv6 payload
 * length), IPv4 must not be a fragment, IPv6 must carry TCP or UDP directly,
 * and the whole L4 header must be inside the packet.
 */
Error parse_l3l4(std::span<const uint8_t> pkt, L3L4& out) noexcept {
	if (pkt.empty()) return Error::malformed;
	unsigned version = pkt[0] >> 4;
	if (version == 4) {
		if (pkt.size() < kIpv4Min) return Error::malformed;
		size_t ihl = size_t(pkt[0] & 0x0f) * 4;
		if (ihl < kIpv4Min || ihl > pkt.size()) return Error::malformed;
		if (load_be16(&pkt[2]) != pkt.size()) return Error::malformed;
		if (load_be16(&pkt[6]) & 0x3fff) return Error::unsupported; // MF or a fragment offset
		out.v6 = false;
		out.l4_off = ihl;
		out.proto = pkt[9];
	} else if (version == 6) {
		if (pkt.size() < kIpv6Len) return Error::malformed;
		if (size_t(load_be16(&pkt[4])) + kIpv6Len != pkt.size()) return Error::malformed;
		out.v6 = true;
		out.l4_off = kIpv6Len;
		out.proto = pkt[6];
	} else {
		return Error::malformed;
	}
	if (out.proto == kProtoTcp) {
		if (pkt.size() - out.l4_off < kTcpMin) return Error::malformed;
		size_t doff = size_t(pkt[out.l4_off + 12] >> 4) * 4;
		if (doff < kTcpMin || doff > pkt.size() - out.l4_off) return Error::malformed;
		out.l4_hdr = doff;
	} else if (out.proto == kProtoUdp) {
		if (pkt.size() - out.l4_off < kUdpLen) return Error::malformed;
		out.l4_hdr = kUdpLen;
	} else {
		// IPv6 extension headers, or an IPv4 protocol GSO does not cover.
		return Error::unsupported;
	}
	return Error::none;
}

/// Sum of the pseudo-header of @pkt (parsed into @l) for an L4 length of @l4_len.
uint16_t pseudo_sum(std::span<const uint8_t> pkt, const L3L4& l, uint32_t l4_len) noexcept {
	return l.v6 ? pseudo_sum_v6(&pkt[8], &pkt[24], l.proto, l4_len)
	            : pseudo_sum_v4(&pkt[12], &pkt[16], l.proto, l4_len);
}

/// Recompute the IPv4 header checksum of the @ihl-byte header at @ip.
void ipv4_send_check(uint8_t* ip, size_t ihl) noexcept {
	store_be16(ip + 10, 0);
	store_be16(ip + 10, internet_checksum({ip, ihl}));
}

} // namespace

// ---------------------------------------------------------------------------
// VnetHdr

std::optional<VnetHdr> VnetHdr::parse(std::span<const uint8_t> in) noexcept {
	if (in.size() < kSize) return std::nullopt;
	VnetHdr h;
	h.flags = in[0];
	h.gso_type = in[1];
	h.hdr_len = load_le16(&in[2]);
	h.gso_size = load_le16(&in[4]);
	h.csum_start = load_le16(&in[6]);
	h.csum_offset = load_le16(&in[8]);
	h.num_buffers = load_le16(&in[10]);
	return h;
}

bool VnetHdr::write(std::span<uint8_t> out) const noexcept {
	if (out.size() < kSize) return false;
	out[0] = flags;
	out[1] = gso_type;
	store_le16(&out[2], hdr_len);
	store_le16(&out[4], gso_size);
	store_le16(&out[6], csum_start);
	store_le16(&out[8], csum_offset);
	store_le16(&out[10], num_buffers);
	return true;
}

// ---------------------------------------------------------------------------
// Checksums

uint16_t csum_partial(std::span<const uint8_t> data, uint16_t initial) noexcept {
	// Sum native-order words: the ones' complement sum is the same in either
	// byte order up to a final byte swap (RFC 1071 2.(B)). Each 64-bit word
	// adds less than 2^33, so the accumulator cannot overflow below 2^31
	// words (16 GiB).
	const uint8_t* p = data.data();
	size_t n = data.size();
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	for (; n >= 32; p += 32, n -= 32) {
		a0 += halves(load_native64(p));
		a1 += halves(load_native64(p + 8));
		a2 += halves(load_native64(p + 16));
		a3 += halves(load_native64(p + 24));
	}
	for (; n >= 8; p += 8, n -= 8)
		a0 += halves(load_native64(p));
	if (n) {
		// The tail starts at an even offset, so zero-filling the rest of the
		// word pads an odd last byte exactly as RFC 1071 does.
		uint64_t w = 0;
		std::memcpy(&w, p, n);
		a0 += halves(w);
	}
	uint64_t acc = (a0 & 0xffffffffu) + (a0 >> 32) + (a1 & 0xffffffffu) + (a1 >> 32) +
	               (a2 & 0xffffffffu) + (a2 >> 32) + (a3 & 0xffffffffu) + (a3 >> 32);
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	auto sum = uint16_t(acc);
	if constexpr (std::endian::native == std::endian::little) sum = uint16_t(sum << 8 | sum >> 8);
	return csum_add(sum, initial);
}

uint16_t pseudo_sum_v4(const uint8_t* src, const uint8_t* dst, uint8_t proto, uint32_t l4_len) noexcept {
	uint16_t s = csum_add(load_be16(src), load_be16(src + 2));
	s = csum_add(s, load_be16(dst));
	s = csum_add(s, load_be16(dst + 2));
	s = csum_add(s, proto);
	s = csum_add(s, uint16_t(l4_len >> 16));
	return csum_add(s, uint16_t(l4_len));
}

uint16_t pseudo_sum_v6(const uint8_t* src, const uint8_t* dst, uint8_t proto, uint32_t l4_len) noexcept {
	uint16_t s = 0;
	for (size_t i = 0; i < 16; i += 2) {
		s = csum_add(s, load_be16(src + i));
		s = csum_add(s, load_be16(dst + i));
	}
	s = csum_add(s, proto);
	s = csum_add(s, uint16_t(l4_len >> 16));
	return csum_add(s, uint16_t(l4_len));
}

const char* to_string(Error e) noexcept {
	switch (e) {
	case Error::none:
		return "none";
	case Error::malformed:
		return "malformed";
	case Error::unsupported:
		return "unsupported";
	case Error::too_many_segments:
		return "too_many_segments";
	case Error::buffer_too_small:
		return "buffer_too_small";
	}
	return "?";
}

// ---------------------------------------------------------------------------
// Read direction

namespace {

/// The checksum field of a NEEDS_CSUM packet lies inside it.
bool csum_field_ok(const VnetHdr& h, size_t len) noexcept {
	return size_t(h.csum_start) + h.csum_offset + 2 <= len;
}

/// finish_checksum() after the checks.
void finish_unchecked(const VnetHdr& h, std::span<uint8_t> pkt) noexcept {
	// net/core/dev.c skb_checksum_help(): sum from csum_start to the end, the
	// field's pseudo-header sum included; fold, complement, 0 -> 0xffff.
	uint16_t c = internet_checksum(pkt.subspan(h.csum_start));
	store_be16(&pkt[size_t(h.csum_start) + h.csum_offset], c ? c : 0xffff);
}

} // namespace

Error finish_checksum(const VnetHdr& h, std::span<uint8_t> pkt) noexcept {
	if (h.gso_type != VnetHdr::kGsoNone) return Error::unsupported;
	if (!(h.flags & VnetHdr::kNeedsCsum)) return Error::none;
	if (!csum_field_ok(h, pkt.size())) return Error::malformed;
	finish_unchecked(h, pkt);
	return Error::none;
}

SegmentResult segment(const VnetHdr& h, std::span<const uint8_t> pkt, std::span<const std::span<uint8_t>> out,
                      std::span<size_t> out_len) noexcept {
	if (h.hdr_len > pkt.size()) return {Error::malformed, 0};
	const uint8_t type = uint8_t(h.gso_type & ~VnetHdr::kGsoEcn);
	const bool ecn = h.gso_type & VnetHdr::kGsoEcn;

	if (type == VnetHdr::kGsoNone) {
		if (ecn) return {Error::malformed, 0};
		if ((h.flags & VnetHdr::kNeedsCsum) && !csum_field_ok(h, pkt.size()))
			return {Error::malformed, 0};
		if (out.empty() || out_len.empty()) return {Error::too_many_segments, 0};
		if (out[0].size() < pkt.size()) return {Error::buffer_too_small, 0};
		if (!pkt.empty()) std::memcpy(out[0].data(), pkt.data(), pkt.size());
		if (h.flags & VnetHdr::kNeedsCsum) finish_unchecked(h, out[0].first(pkt.size()));
		out_len[0] = pkt.size();
		return {Error::none, 1};
	}
	if (type == VnetHdr::kGsoUdp) return {Error::unsupported, 0}; // UFO: IP fragments, not segments
	if (type != VnetHdr::kGsoTcpV4 && type != VnetHdr::kGsoTcpV6 && type != VnetHdr::kGsoUdpL4)
		return {Error::malformed, 0};
	// The ECN bit only exists for TCP (virtio_net_hdr_to_skb() rejects USO with it).
	if (ecn && type == VnetHdr::kGsoUdpL4) return {Error::malformed, 0};
	if (h.gso_size == 0) return {Error::malformed, 0};

	L3L4 l;
	if (Error e = parse_l3l4(pkt, l); e != Error::none) return {e, 0};
	const bool tcp = type != VnetHdr::kGsoUdpL4;
	if (tcp && (l.proto != kProtoTcp || l.v6 != (type == VnetHdr::kGsoTcpV6)))
		return {Error::malformed, 0};
	if (!tcp && l.proto != kProtoUdp) return {Error::malformed, 0};
	if (h.flags & VnetHdr::kNeedsCsum) {
		if (h.csum_start != l.l4_off || h.csum_offset != (tcp ? kTcpCheckOff : kUdpCheckOff))
			return {Error::malformed, 0};
	}
	if (!tcp && load_be16(&pkt[l.l4_off + 4]) != pkt.size() - l.l4_off) return {Error::malformed, 0};

	const size_t hdrs = l.l4_off + l.l4_hdr;
	const size_t payload = pkt.size() - hdrs;
	const size_t mss = h.gso_size;
	const size_t nseg = payload == 0 ? 1 : (payload + mss - 1) / mss;
	if (nseg > out.size() || nseg > out_len.size()) return {Error::too_many_segments, 0};
	for (size_t i = 0; i < nseg; ++i) {
		size_t chunk = std::min(mss, payload - std::min(payload, i * mss));
		if (out[i].size() < hdrs + chunk) return {Error::buffer_too_small, 0};
	}

	const uint16_t id0 = l.v6 ? 0 : load_be16(&pkt[4]);
	const uint32_t seq0 = tcp ? load_be32(&pkt[l.l4_off + 4]) : 0;
	const size_t check_at = l.l4_off + (tcp ? kTcpCheckOff : kUdpCheckOff);
	for (size_t i = 0; i < nseg; ++i) {
		const size_t off = i * mss;
		const size_t chunk = std::min(mss, payload - off);
		const size_t len = hdrs + chunk;
		uint8_t* s = out[i].data();
		std::memcpy(s, pkt.data(), hdrs);
		std::memcpy(s + hdrs, pkt.data() + hdrs + off, chunk);

		if (l.v6) {
			store_be16(s + 4, uint16_t(len - kIpv6Len));
		} else {
			store_be16(s + 2, uint16_t(len));
			store_be16(s + 4, uint16_t(id0 + i)); // inet_gso_segment(): id++ unless FIXEDID
			ipv4_send_check(s, l.l4_off);
		}
		uint8_t* l4 = s + l.l4_off;
		if (tcp) {
			// tcp_gso_segment(): seq advances by mss; FIN and PSH stay on the
			// last segment only, CWR on the first only.
			store_be32(l4 + 4, uint32_t(seq0 + off));
			if (i + 1 < nseg) l4[13] &= uint8_t(~(kFin | kPsh));
			if (i > 0) l4[13] &= uint8_t(~kCwr);
		} else {
			store_be16(l4 + 4, uint16_t(len - l.l4_off));
		}
		store_be16(s + check_at, 0);
		uint16_t sum = pseudo_sum({s, len}, l, uint32_t(len - l.l4_off));
		sum = csum_partial({l4, l.l4_hdr}, sum);
		sum = csum_partial({s + hdrs, chunk}, sum); // l4_hdr is even: the payload starts on a word
		auto check = uint16_t(~sum);
		if (!tcp && check == 0) check = 0xffff; // RFC 768: 0 means "no checksum"
		store_be16(s + check_at, check);
		out_len[i] = len;
	}
	return {Error::none, nseg};
}

// ---------------------------------------------------------------------------
// Write direction

namespace {

/**
 * struct GroPkt - a packet that could be part of a TCP super-packet.
 * @v6:      IPv6
 * @ip_len:  20 or 40
 * @hdrs:    IP plus TCP header length
 * @payload: TCP payload length
 * @flags:   TCP flags byte
 * @seq:     TCP sequence number
 */
struct GroPkt {
	bool v6 = false;
	size_t ip_len = 0;
	size_t hdrs = 0;
	size_t payload = 0;
	uint8_t flags = 0;
	uint32_t seq = 0;
};

/**
 * gro_candidate() - is @p a TCP packet GRO can take at all?
 *
 * IPv4 with IHL 5 (inet_gro_receive(): *(u8 *)iph != 0x45 flushes), not a
 * fragment; IPv6 with TCP as the next header (ipv6_gro_receive() would walk
 * extension headers; we do not); the IP length exactly the packet's; a whole
 * TCP header. With @verify, the IPv4 header checksum and the TCP checksum
 * must be right.
 */
bool gro_candidate(std::span<const uint8_t> p, bool verify, GroPkt& g) noexcept {
	L3L4 l;
	if (parse_l3l4(p, l) != Error::none || l.proto != kProtoTcp) return false;
	// IPv4: IHL 5, and no flag but DF (inet_gro_receive() flushes on any
	// other bit of frag_off, the reserved one included).
	if (!l.v6 && (l.l4_off != kIpv4Min || (load_be16(&p[6]) & 0xbfff))) return false;
	if (verify) {
		if (!l.v6 && csum_partial(p.first(kIpv4Min)) != 0xffff) return false;
		uint16_t sum = pseudo_sum(p, l, uint32_t(p.size() - l.l4_off));
		if (csum_partial(p.subspan(l.l4_off), sum) != 0xffff) return false;
	}
	g.v6 = l.v6;
	g.ip_len = l.l4_off;
	g.hdrs = l.l4_off + l.l4_hdr;
	g.payload = p.size() - g.hdrs;
	g.flags = p[l.l4_off + 13];
	g.seq = load_be32(&p[l.l4_off + 4]);
	return true;
}

/// A packet that can start a run: ACK (ECE allowed), payload, nothing that
/// tcp_gro_receive() refuses to hold (SYN, RST, URG, CWR) or flushes at once
/// (PSH, FIN: such a packet would be a run of one anyway).
bool can_lead(const GroPkt& g) noexcept {
	return g.payload > 0 && (g.flags & kAck) && !(g.flags & (kSyn | kRst | kUrg | kCwr | kPsh | kFin));
}

/**
 * can_follow() - may @c (at position @j of the run) join the run led by @a?
 * @a, @ga:    the first packet of the run
 * @prev_end:  sequence number right after the previous packet's payload
 * @fixed_id:  IPv4 IDs of the run are all the same (DF), not incrementing
 */
bool can_follow(std::span<const uint8_t> a, const GroPkt& ga, std::span<const uint8_t> c, const GroPkt& gc,
                size_t j, uint32_t prev_end, bool fixed_id) noexcept {
	if (gc.v6 != ga.v6 || gc.hdrs != ga.hdrs) return false;
	if (ga.v6) {
		// Version, traffic class and flow label; hop limit; addresses.
		if (std::memcmp(&a[0], &c[0], 4) != 0 || a[7] != c[7]) return false;
		if (std::memcmp(&a[8], &c[8], 32) != 0) return false;
	} else {
		// TOS, DF, TTL, addresses (inet_gro_receive(): all fields but
		// length, ID and checksum must match).
		if (a[1] != c[1] || (a[6] & 0x40) != (c[6] & 0x40) || a[8] != c[8]) return false;
		if (std::memcmp(&a[12], &c[12], 8) != 0) return false;
		uint16_t id = load_be16(&c[4]);
		uint16_t id0 = load_be16(&a[4]);
		if (fixed_id ? id != id0 : id != uint16_t(id0 + j)) return false;
	}
	const uint8_t* ta = &a[ga.ip_len];
	const uint8_t* tc = &c[gc.ip_len];
	// Ports, ACK number; data offset, flags but PSH/FIN, window; options.
	if (std::memcmp(ta, tc, 4) != 0 || std::memcmp(ta + 8, tc + 8, 4) != 0) return false;
	constexpr uint32_t kMask = ~(uint32_t(kPsh | kFin) << 16);
	if ((load_be32(ta + 12) & kMask) != (load_be32(tc + 12) & kMask)) return false;
	if (std::memcmp(ta + kTcpMin, tc + kTcpMin, ga.hdrs - ga.ip_len - kTcpMin) != 0) return false;
	if (gc.seq != prev_end) return false;
	return gc.payload > 0 && gc.payload <= ga.payload;
}

} // namespace

uint64_t tcp_flow_key(std::span<const uint8_t> pkt) noexcept {
	auto mix = [](uint64_t h, uint64_t v) noexcept {
		h = (h ^ v) * 0x9e3779b97f4a7c15ull;
		return h ^ (h >> 29);
	};
	uint64_t h = 0;
	size_t l4 = 0;
	if (pkt.size() >= kIpv4Min && pkt[0] >> 4 == 4) {
		const size_t ihl = size_t(pkt[0] & 0x0f) * 4;
		const bool fragment = (load_be16(&pkt[6]) & 0x3fff) != 0; // MF or an offset
		if (pkt[9] != kProtoTcp || ihl < kIpv4Min || fragment) return 0;
		h = mix(mix(4, load_be32(&pkt[12])), load_be32(&pkt[16]));
		l4 = ihl;
	} else if (pkt.size() >= kIpv6Len && pkt[0] >> 4 == 6) {
		if (pkt[6] != kProtoTcp) return 0;
		h = 6;
		for (size_t i = 8; i < 40; i += 8)
			h = mix(h, load_be64(&pkt[i]));
		l4 = kIpv6Len;
	} else {
		return 0;
	}
	if (pkt.size() < l4 + 4) return 0;
	h = mix(h, load_be32(&pkt[l4])); // both ports
	return h ? h : 1;
}

size_t plan_gro(std::span<const std::span<uint8_t>> pkts, std::span<GroRun> runs,
                const GroOptions& opt) noexcept {
	const size_t max_segs = std::clamp<size_t>(opt.max_segments, 1, kMaxGroSegments);
	size_t nruns = 0;
	size_t i = 0;
	while (i < pkts.size() && nruns < runs.size()) {
		GroRun& r = runs[nruns++];
		r = GroRun{};
		r.first = i;
		r.count = 1;
		r.total_len = pkts[i].size();
		std::span<const uint8_t> a = pkts[i];
		GroPkt ga;
		if (!gro_candidate(a, opt.verify_checksums, ga) || !can_lead(ga)) {
			++i;
			continue;
		}
		// The IPv4 ID mode is set by the second packet: incrementing, or
		// fixed (DF only; inet_gro_receive() accepts both for atomic datagrams).
		bool fixed_id = false;
		if (!ga.v6 && i + 1 < pkts.size() && pkts[i + 1].size() >= kIpv4Min && (a[6] & 0x40))
			fixed_id = load_be16(&pkts[i + 1][4]) == load_be16(&a[4]);
		size_t total = a.size();
		uint32_t next_seq = uint32_t(ga.seq + ga.payload);
		uint8_t last_flags = 0;
		bool open = true; // the previous packet was full-sized and without PSH/FIN
		size_t j = 1;
		for (; open && j < max_segs && i + j < pkts.size(); ++j) {
			std::span<const uint8_t> c = pkts[i + j];
			GroPkt gc;
			if (!gro_candidate(c, opt.verify_checksums, gc)) break;
			if (!can_follow(a, ga, c, gc, j, next_seq, fixed_id)) break;
			if (total + gc.payload > kMaxIpLen) break;
			total += gc.payload;
			next_seq = uint32_t(gc.seq + gc.payload);
			last_flags = gc.flags & (kPsh | kFin);
			open = last_flags == 0 && gc.payload == ga.payload;
		}
		if (j == 1) {
			++i;
			continue;
		}
		r.count = j;
		r.total_len = total;
		r.hdr_bytes = ga.hdrs;
		r.last_flags = last_flags;
		r.hdr.flags = VnetHdr::kNeedsCsum;
		r.hdr.gso_type = ga.v6 ? VnetHdr::kGsoTcpV6 : VnetHdr::kGsoTcpV4;
		r.hdr.hdr_len = uint16_t(ga.hdrs);
		r.hdr.gso_size = uint16_t(ga.payload);
		r.hdr.csum_start = uint16_t(ga.ip_len);
		r.hdr.csum_offset = uint16_t(kTcpCheckOff);
		i += j;
	}
	return nruns;
}

bool patch_gro_head(const GroRun& run, std::span<uint8_t> head) noexcept {
	if (run.count <= 1) return true;
	GroPkt g;
	if (!gro_candidate(head, false, g)) return false;
	if (g.hdrs != run.hdr_bytes || g.ip_len != run.hdr.csum_start || run.total_len < head.size() ||
	    run.total_len > kMaxIpLen || (run.last_flags & ~(kPsh | kFin)))
		return false;
	uint8_t* p = head.data();
	if (g.v6) {
		store_be16(p + 4, uint16_t(run.total_len - kIpv6Len));
	} else {
		store_be16(p + 2, uint16_t(run.total_len));
		ipv4_send_check(p, kIpv4Min);
	}
	uint8_t* th = p + g.ip_len;
	th[13] |= run.last_flags;
	L3L4 l{g.v6, g.ip_len, g.hdrs - g.ip_len, kProtoTcp};
	// tcp4_gro_complete() / tcp6_gro_complete(): th->check = ~tcp_v4_check(len, ...)
	// = the pseudo-header sum of the merged TCP length, not complemented.
	store_be16(th + kTcpCheckOff, pseudo_sum(head, l, uint32_t(run.total_len - g.ip_len)));
	return true;
}

} // namespace esptun::datapath::offload
