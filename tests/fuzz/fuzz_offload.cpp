// libFuzzer target for datapath/offload: segment(), finish_checksum(),
// plan_gro() and patch_gro_head() on untrusted header and packet bytes.
//
// Input: [mode][rest]. mode % 3 picks:
//   0 raw:        [vnet hdr 12][nbuf][bufsize be16][packet...]: the bytes as
//                 tun would hand them over.
//   1 structured: [v6|udp|opts|ecn bits][ip opts][tcp opts][flags][mss be16]
//                 [len be16][seq be32][id be16][nmut][nmut x (pos be16, xor)]
//                 [hdr overrides]: a valid super-packet with its kernel vnet
//                 header, then bytes flipped, so the checks deep in segment()
//                 are reached; its segments then go through GRO (below).
//   2 batch:      [n][n x (len be16)][bytes...]: raw packets for plan_gro().
// Invariants, checked with a byte-pair checksum written here (not the
// library's): a successful segment() gives segments whose payloads
// concatenate to the super-packet's payload, each no longer than gso_size,
// with a valid IPv4 header checksum and L4 checksum; finish_checksum()
// leaves a sum of 0xffff; the runs of plan_gro() cover the batch in order,
// and a merged run, segmented again, gives back each packet's length,
// sequence number and payload with valid checksums. ASan/UBSan catch
// out-of-bounds accesses. ESPTUN_FUZZ_TRACE=1 prints each call's result.
#include "datapath/offload.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

namespace {

using namespace esptun::datapath::offload;
using esptun::test::Bytes;

#define FUZZ_CHECK(cond)                                                                                     \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			std::fprintf(stderr, "invariant failed: %s (line %d)\n", #cond, __LINE__);           \
			std::abort();                                                                        \
		}                                                                                            \
	} while (0)

/// Reads the fuzz input; past its end every read returns 0.
class Input {
public:
	Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
	size_t left() const { return n_ - std::min(pos_, n_); }
	uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
	uint16_t be16() {
		const uint16_t hi = u8();
		return uint16_t(hi << 8 | u8());
	}
	uint32_t be32() {
		const uint32_t hi = be16();
		return hi << 16 | be16();
	}
	std::span<const uint8_t> take(size_t n) {
		n = std::min(n, left());
		std::span<const uint8_t> r(p_ + pos_, n);
		pos_ += n;
		return r;
	}

private:
	const uint8_t* p_;
	size_t n_;
	size_t pos_ = 0;
};

uint16_t rd16(std::span<const uint8_t> b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }
uint32_t rd32(std::span<const uint8_t> b, size_t at) { return uint32_t(rd16(b, at)) << 16 | rd16(b, at + 2); }
void wr16(uint8_t* p, uint16_t v) {
	p[0] = uint8_t(v >> 8);
	p[1] = uint8_t(v);
}

/// Byte-pair ones' complement sum, folded.
uint16_t ref_sum(std::span<const uint8_t> b, uint32_t sum = 0) {
	for (size_t i = 0; i < b.size(); i += 2)
		sum += uint32_t(b[i]) << 8 | (i + 1 < b.size() ? b[i + 1] : 0);
	while (sum > 0xffff)
		sum = (sum & 0xffff) + (sum >> 16);
	return uint16_t(sum);
}

/// ESPTUN_FUZZ_TRACE=1 prints what each call returned.
bool trace() {
	static const bool on = std::getenv("ESPTUN_FUZZ_TRACE") != nullptr;
	return on;
}

/// Headers of a packet segment() accepted: IP header length, L4 header length, protocol.
struct Hdrs {
	bool v6;
	size_t ip;
	size_t l4;
	uint8_t proto;
};

Hdrs headers_of(std::span<const uint8_t> p) {
	Hdrs h{};
	h.v6 = (p[0] >> 4) == 6;
	h.ip = h.v6 ? 40 : size_t(p[0] & 15) * 4;
	h.proto = h.v6 ? p[6] : p[9];
	h.l4 = h.proto == 6 ? size_t(p[h.ip + 12] >> 4) * 4 : 8;
	return h;
}

/// The L4 checksum of @p verifies.
bool l4_ok(std::span<const uint8_t> p, const Hdrs& h) {
	uint8_t ph[40] = {};
	size_t n;
	size_t l4_len = p.size() - h.ip;
	if (h.v6) {
		std::memcpy(ph, &p[8], 32);
		ph[34] = uint8_t(l4_len >> 8);
		ph[35] = uint8_t(l4_len);
		ph[39] = h.proto;
		n = 40;
	} else {
		std::memcpy(ph, &p[12], 8);
		ph[9] = h.proto;
		ph[10] = uint8_t(l4_len >> 8);
		ph[11] = uint8_t(l4_len);
		n = 12;
	}
	uint16_t s = ref_sum({ph, n});
	return ref_sum(p.subspan(h.ip), s) == 0xffff;
}

bool ip_ok(std::span<const uint8_t> p, const Hdrs& h) { return h.v6 || ref_sum(p.first(h.ip)) == 0xffff; }

/**
 * finished_ok() - @after is @before with its CHECKSUM_PARTIAL checksum finished.
 *
 * The field held a sum P (the pseudo-header's, for a real packet); the stored
 * value c must make P + sum([csum_start, end) with c) come to 0xffff, and
 * nothing else may change. A field at an odd offset from csum_start (no real
 * packet has one) straddles two words: only the second part is checked.
 */
bool finished_ok(const VnetHdr& h, std::span<const uint8_t> before, std::span<const uint8_t> after) {
	size_t at = size_t(h.csum_start) + h.csum_offset;
	if (before.size() != after.size() || at + 2 > before.size()) return false;
	for (size_t i = 0; i < before.size(); ++i)
		if (i != at && i != at + 1 && before[i] != after[i]) return false;
	if (h.csum_offset % 2) return true;
	return ref_sum(after.subspan(h.csum_start), rd16(before, at)) == 0xffff;
}

/// Output buffers shared by every run (allocated once: 128 x 64 KiB).
struct Outs {
	static constexpr size_t kN = 128;
	static constexpr size_t kSize = 65600;
	std::vector<std::unique_ptr<uint8_t[]>> mem;
	std::vector<std::span<uint8_t>> spans;
	std::vector<size_t> lens;
	Outs() : lens(kN) {
		for (size_t i = 0; i < kN; ++i)
			mem.push_back(std::make_unique<uint8_t[]>(kSize));
	}
	/// @n buffers of @size bytes each.
	std::span<const std::span<uint8_t>> get(size_t n, size_t size) {
		spans.clear();
		for (size_t i = 0; i < std::min(n, kN); ++i)
			spans.emplace_back(mem[i].get(), std::min(size, kSize));
		return spans;
	}
};

Outs& outs() {
	static Outs o;
	return o;
}

/**
 * check_segment() - segment @pkt and check what came out.
 * Return: the segments (copies) when segment() succeeded.
 */
std::vector<Bytes> check_segment(const VnetHdr& h, std::span<const uint8_t> pkt, size_t nbuf,
                                 size_t bufsize) {
	// An exact-size copy, so a read past the end is caught.
	auto heap = std::make_unique<uint8_t[]>(pkt.size());
	if (!pkt.empty()) std::memcpy(heap.get(), pkt.data(), pkt.size());
	std::span<const uint8_t> in(heap.get(), pkt.size());
	Outs& o = outs();
	auto bufs = o.get(nbuf, bufsize);
	SegmentResult r = segment(h, in, bufs, std::span<size_t>(o.lens).first(bufs.size()));
	std::vector<Bytes> segs;
	if (trace())
		std::fprintf(stderr, "segment(gso_type %u, %zu bytes): %s, %zu segments\n", h.gso_type,
		             pkt.size(), to_string(r.error), r.count);
	if (!r.ok()) {
		FUZZ_CHECK(r.count == 0);
		return segs;
	}
	FUZZ_CHECK(r.count >= 1 && r.count <= bufs.size());
	for (size_t i = 0; i < r.count; ++i) {
		FUZZ_CHECK(o.lens[i] <= bufs[i].size());
		segs.emplace_back(bufs[i].begin(), bufs[i].begin() + long(o.lens[i]));
	}
	if (h.gso_type == VnetHdr::kGsoNone) {
		FUZZ_CHECK(r.count == 1 && segs[0].size() == pkt.size());
		if (h.flags & VnetHdr::kNeedsCsum) FUZZ_CHECK(finished_ok(h, pkt, segs[0]));
		return segs;
	}
	Hdrs hd = headers_of(in);
	size_t hdrs = hd.ip + hd.l4;
	Bytes joined;
	for (auto& s : segs) {
		FUZZ_CHECK(s.size() >= hdrs && s.size() - hdrs <= h.gso_size);
		FUZZ_CHECK(ip_ok(s, hd) && l4_ok(s, hd));
		joined.insert(joined.end(), s.begin() + long(hdrs), s.end());
	}
	FUZZ_CHECK(joined.size() == in.size() - hdrs);
	FUZZ_CHECK(std::equal(joined.begin(), joined.end(), in.begin() + long(hdrs)));
	return segs;
}

void check_finish(const VnetHdr& h, std::span<const uint8_t> pkt) {
	auto heap = std::make_unique<uint8_t[]>(pkt.size());
	if (!pkt.empty()) std::memcpy(heap.get(), pkt.data(), pkt.size());
	std::span<uint8_t> p(heap.get(), pkt.size());
	Error e = finish_checksum(h, p);
	if (e == Error::none && (h.flags & VnetHdr::kNeedsCsum)) FUZZ_CHECK(finished_ok(h, pkt, p));
	if (e != Error::none) FUZZ_CHECK(std::equal(p.begin(), p.end(), pkt.begin()));
}

/// plan_gro() over @batch, then every merged run assembled, re-segmented and compared.
void check_gro(std::vector<Bytes>& batch, bool verify) {
	std::vector<std::unique_ptr<uint8_t[]>> heap;
	std::vector<std::span<uint8_t>> spans;
	for (auto& b : batch) {
		heap.push_back(std::make_unique<uint8_t[]>(b.size()));
		if (!b.empty()) std::memcpy(heap.back().get(), b.data(), b.size());
		spans.emplace_back(heap.back().get(), b.size());
	}
	std::vector<GroRun> runs(spans.size());
	GroOptions opt;
	opt.verify_checksums = verify;
	size_t n = plan_gro(spans, runs, opt);
	if (trace()) {
		std::fprintf(stderr, "plan_gro(%zu packets, verify %d):", spans.size(), int(verify));
		for (size_t r = 0; r < n; ++r)
			std::fprintf(stderr, " %zu", runs[r].count);
		std::fprintf(stderr, "\n");
	}
	FUZZ_CHECK(n <= spans.size());
	size_t next = 0;
	for (size_t r = 0; r < n; ++r) {
		const GroRun& run = runs[r];
		FUZZ_CHECK(run.first == next && run.count >= 1 && run.count <= kMaxGroSegments);
		next += run.count;
		FUZZ_CHECK(next <= spans.size());
		if (run.count == 1) {
			FUZZ_CHECK(run.hdr == VnetHdr{});
			FUZZ_CHECK(patch_gro_head(run, spans[run.first]));
			continue;
		}
		Bytes merged(batch[run.first]);
		FUZZ_CHECK(patch_gro_head(run, merged));
		for (size_t i = 1; i < run.count; ++i) {
			auto pl = gro_payload(run, spans[run.first + i]);
			merged.insert(merged.end(), pl.begin(), pl.end());
		}
		FUZZ_CHECK(merged.size() == run.total_len && merged.size() <= 65535);
		if (!verify) continue; // unverified packets may carry any checksum
		std::vector<Bytes> again = check_segment(run.hdr, merged, Outs::kN, Outs::kSize);
		FUZZ_CHECK(again.size() == run.count);
		Hdrs hd = headers_of(merged);
		for (size_t i = 0; i < run.count; ++i) {
			const Bytes& orig = batch[run.first + i];
			FUZZ_CHECK(again[i].size() == orig.size());
			FUZZ_CHECK(rd32(again[i], hd.ip + 4) == rd32(orig, hd.ip + 4));
			FUZZ_CHECK(std::equal(again[i].begin() + long(run.hdr_bytes), again[i].end(),
			                      orig.begin() + long(run.hdr_bytes)));
		}
	}
	FUZZ_CHECK(next == spans.size()); // runs has room for every packet
}

/// Mode 1: a valid super-packet from a few parameters, then mutated.
void structured(Input& in) {
	uint8_t bits = in.u8();
	bool v6 = bits & 1, udp = bits & 2;
	size_t ip_opts = v6 ? 0 : (in.u8() % 11) * 4;
	size_t tcp_opts = udp ? 0 : (in.u8() % 11) * 4;
	uint8_t flags = in.u8();
	uint16_t mss = in.be16();
	size_t ih = v6 ? 40 : 20 + ip_opts, lh = udp ? 8 : 20 + tcp_opts;
	size_t len = std::min<size_t>(in.be16(), 65535 - ih - lh);
	uint32_t seq = in.be32();
	uint16_t id = in.be16();
	Bytes p(ih + lh + len, 0);
	uint8_t proto = udp ? 17 : 6;
	if (v6) {
		p[0] = 0x60;
		wr16(&p[4], uint16_t(lh + len));
		p[6] = proto;
		p[7] = 64;
		p[8] = 0xfd;
		p[23] = 1;
		p[24] = 0xfd;
		p[39] = 2;
	} else {
		p[0] = uint8_t(0x40 | ih / 4);
		wr16(&p[2], uint16_t(p.size()));
		wr16(&p[4], id);
		p[6] = 0x40;
		p[8] = 64;
		p[9] = proto;
		p[12] = 10;
		p[15] = 1;
		p[16] = 10;
		p[19] = 2;
		for (size_t i = 20; i < ih; ++i)
			p[i] = 1; // NOP options
		wr16(&p[10], uint16_t(~ref_sum({p.data(), ih})));
	}
	wr16(&p[ih], 40000);
	wr16(&p[ih + 2], 5201);
	if (udp) {
		wr16(&p[ih + 4], uint16_t(lh + len));
	} else {
		wr16(&p[ih + 4], uint16_t(seq >> 16));
		wr16(&p[ih + 6], uint16_t(seq));
		p[ih + 12] = uint8_t(lh / 4 << 4);
		p[ih + 13] = flags;
		for (size_t i = ih + 20; i < ih + lh; ++i)
			p[i] = 1;
	}
	for (size_t i = 0; i < len; ++i)
		p[ih + lh + i] = uint8_t(i * 7 + seq);
	VnetHdr h;
	h.flags = VnetHdr::kNeedsCsum;
	h.gso_type = udp ? VnetHdr::kGsoUdpL4 : v6 ? VnetHdr::kGsoTcpV6 : VnetHdr::kGsoTcpV4;
	if (!udp && (bits & 4)) h.gso_type |= VnetHdr::kGsoEcn;
	h.hdr_len = uint16_t(ih + lh);
	h.gso_size = mss;
	h.csum_start = uint16_t(ih);
	h.csum_offset = udp ? 6 : 16;
	// The pseudo-header sum in the checksum field, as the kernel leaves it.
	{
		uint8_t ph[40] = {};
		size_t n = v6 ? 40 : 12;
		if (v6) {
			std::memcpy(ph, &p[8], 32);
			ph[34] = uint8_t((lh + len) >> 8);
			ph[35] = uint8_t(lh + len);
			ph[39] = proto;
		} else {
			std::memcpy(ph, &p[12], 8);
			ph[9] = proto;
			ph[10] = uint8_t((lh + len) >> 8);
			ph[11] = uint8_t(lh + len);
		}
		wr16(&p[ih + h.csum_offset], ref_sum({ph, n}));
	}
	size_t nmut = in.u8() % 8;
	for (size_t i = 0; i < nmut; ++i) {
		size_t pos = in.be16();
		uint8_t x = in.u8();
		if (pos < p.size()) p[pos] ^= x;
	}
	if (bits & 8) h.flags = in.u8();
	if (bits & 16) h.gso_type = in.u8();
	if (bits & 32) h.hdr_len = in.be16();
	if (bits & 64) {
		h.csum_start = in.be16();
		h.csum_offset = in.be16();
	}
	if (bits & 128) p.resize(std::min<size_t>(p.size(), in.be16()));
	size_t nbuf = in.u8() % 2 ? Outs::kN : in.u8();
	check_finish(h, p);
	std::vector<Bytes> segs = check_segment(h, p, nbuf, Outs::kSize);
	if (segs.size() < 2) return;
	// GRO over the segments, some of them mutated.
	size_t gmut = in.u8() % 4;
	for (size_t i = 0; i < gmut; ++i) {
		Bytes& s = segs[in.u8() % segs.size()];
		size_t pos = in.be16();
		if (pos < s.size()) s[pos] ^= in.u8();
	}
	check_gro(segs, in.u8() % 4 != 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	Input in(data, size);
	switch (in.u8() % 3) {
	case 0: {
		auto hb = in.take(VnetHdr::kSize);
		auto h = VnetHdr::parse(hb);
		if (!h) return 0;
		size_t nbuf = in.u8();
		size_t bufsize = in.be16();
		auto pkt = in.take(in.left());
		check_finish(*h, pkt);
		check_segment(*h, pkt, nbuf, bufsize);
		std::vector<Bytes> one{Bytes(pkt.begin(), pkt.end())};
		check_gro(one, true);
		break;
	}
	case 1:
		structured(in);
		break;
	default: {
		size_t n = in.u8() % 70;
		std::vector<size_t> lens(n);
		for (auto& l : lens)
			l = in.be16() % 2048;
		std::vector<Bytes> batch;
		for (size_t l : lens) {
			auto b = in.take(l);
			batch.emplace_back(b.begin(), b.end());
		}
		check_gro(batch, true);
		check_gro(batch, false);
		break;
	}
	}
	return 0;
}
