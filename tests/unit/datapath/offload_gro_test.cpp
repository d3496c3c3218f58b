// datapath/offload: TCP GRO planning and the head patch, checked against
// packets built from their fields (offload_test_util.hpp) and against
// segment(): merging and segmenting must give back the same bytes.
#include "tests/unit/datapath/offload_test_util.hpp"

namespace esptun::datapath::offload {
namespace {

using namespace test;

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
} // namespace esptun::datapath::offload
