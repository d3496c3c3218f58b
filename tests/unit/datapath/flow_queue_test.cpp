// FlowQueue and flow_hash() (datapath/flow_queue.hpp): the scheduling of RFC
// 8290 on a simulated clock, the per-flow controller, the bound, the hash.
#include "datapath/flow_queue.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <doctest/doctest.h>
#include <map>
#include <vector>

using esptun::datapath::flow_hash;
using esptun::datapath::FlowQueue;
using esptun::datapath::FlowQueueParams;

namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;

FlowQueueParams params(uint32_t slots, int64_t target_ns = 0, int64_t interval_ns = 20 * kMs) {
	FlowQueueParams p;
	p.slots = slots;
	p.flows = 64;
	p.quantum = 1500;
	p.codel = {target_ns, interval_ns};
	return p;
}

/// Slot numbers handed out and given back, as the data plane's buffer pool does.
struct Pool {
	std::vector<uint32_t> free;
	explicit Pool(uint32_t n) {
		for (uint32_t i = n; i-- > 0;)
			free.push_back(i);
	}
	uint32_t take() {
		REQUIRE_FALSE(free.empty());
		const uint32_t s = free.back();
		free.pop_back();
		return s;
	}
	void give(uint32_t s) { free.push_back(s); }
};

// Flows by hash: 0..63 are distinct buckets of a 64-flow queue.
constexpr uint64_t kBulk = 1, kOther = 2, kSparse = 3;

} // namespace

TEST_CASE("flow queue: one flow comes out in order, and the counts follow") {
	FlowQueue q(params(16));
	Pool pool(16);
	std::vector<uint32_t> in;
	for (int i = 0; i < 10; i++) {
		const uint32_t s = pool.take();
		in.push_back(s);
		q.enqueue(s, kBulk, 1000 + uint32_t(i), i * kUs);
	}
	CHECK(q.packets() == 10);
	CHECK(q.bytes() == 10 * 1000 + 45);
	CHECK(q.active_flows() == 1);
	std::vector<uint32_t> out;
	while (auto it = q.dequeue(100 * kUs)) {
		out.push_back(it->slot);
		CHECK(it->sojourn_ns == 100 * kUs - int64_t(out.size() - 1) * kUs);
		CHECK_FALSE(it->signal); // target 0: never
	}
	CHECK(out == in);
	CHECK(q.empty());
	CHECK(q.bytes() == 0);
	CHECK(q.active_flows() == 0);
	CHECK_FALSE(q.dequeue(200 * kUs));
}

TEST_CASE("flow queue: a sparse flow goes ahead of a bulk flow's backlog") {
	FlowQueue q(params(256));
	Pool pool(256);
	for (int i = 0; i < 200; i++)
		q.enqueue(pool.take(), kBulk, 1500, 0);
	// Serve some, so the bulk flow is an old flow with a standing queue.
	for (int i = 0; i < 20; i++)
		pool.give(q.dequeue(kUs)->slot);
	const uint32_t ping = pool.take();
	q.enqueue(ping, kSparse, 84, 2 * kUs);
	auto it = q.dequeue(3 * kUs);
	REQUIRE(it);
	CHECK(it->slot == ping); // at once, not after 180 packets
	CHECK(it->sojourn_ns == kUs);
	// Each time it comes back after having gone idle, it is new again.
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < 10; i++)
			pool.give(q.dequeue(10 * kUs)->slot);
		const uint32_t p = pool.take();
		q.enqueue(p, kSparse, 84, 10 * kUs);
		// The sparse flow emptied at its last turn; one turn of the bulk
		// flow may come first (it moved to the old list behind the bulk one).
		auto a = q.dequeue(11 * kUs);
		REQUIRE(a);
		if (a->slot != p) {
			pool.give(a->slot);
			a = q.dequeue(11 * kUs);
			REQUIRE(a);
		}
		CHECK(a->slot == p);
		pool.give(a->slot);
	}
}

TEST_CASE("flow queue: two backlogged flows share by bytes, whatever their packet sizes") {
	FlowQueue q(params(4096));
	Pool pool(4096);
	// Flow A sends 64 KB super-packets, flow B 1500-byte packets.
	for (int i = 0; i < 40; i++)
		q.enqueue(pool.take(), kBulk, 65000, 0);
	for (int i = 0; i < 2000; i++)
		q.enqueue(pool.take(), kOther, 1500, 0);
	std::map<uint64_t, uint64_t> sent; // bucket -> bytes
	uint64_t total = 0;
	// While both have a backlog (A has 2.6 MB, B 3 MB): about half each.
	while (total < 2000000) {
		auto it = q.dequeue(kUs);
		REQUIRE(it);
		sent[it->bytes == 65000 ? kBulk : kOther] += it->bytes;
		total += it->bytes;
		pool.give(it->slot);
	}
	INFO("A " << sent[kBulk] << " B " << sent[kOther]);
	const double share = double(sent[kBulk]) / double(total);
	CHECK(share > 0.45);
	CHECK(share < 0.55);
}

TEST_CASE("flow queue: a new flow that never empties becomes an old one") {
	// RFC 8290 section 4.2: otherwise a flow that keeps its queue short but
	// never empty would stay new and starve the old flows.
	FlowQueue q(params(64));
	Pool pool(64);
	q.enqueue(pool.take(), kBulk, 1500, 0);
	const uint32_t waiting = pool.take();
	q.enqueue(waiting, kBulk, 1500, 0);
	pool.give(q.dequeue(0)->slot); // the bulk flow's first packet; its quantum is spent
	int served_at = -1;
	for (int i = 0; i < 50; i++) {
		// The other flow refills before each dequeue: never empty.
		q.enqueue(pool.take(), kOther, 1500, 0);
		auto it = q.dequeue(0);
		REQUIRE(it);
		if (it->slot == waiting && served_at < 0) served_at = i; // the slot is reused afterwards
		pool.give(it->slot);
	}
	// Served after the other flow's first turn, not after all 50.
	CHECK(served_at >= 0);
	CHECK(served_at <= 2);
}

TEST_CASE("flow queue: a standing queue in one flow is signalled, the other flow is not") {
	const int64_t target = 1 * kMs, interval = 20 * kMs;
	FlowQueue q(params(4096, target, interval));
	Pool pool(4096);
	// Bulk flow: 300 packets queued, served one per 20 us and refilled, so
	// each waits about 6 ms. Sparse flow: one packet every 5 ms.
	for (int i = 0; i < 300; i++)
		q.enqueue(pool.take(), kBulk, 1500, 0);
	int bulk_signals = 0, sparse_signals = 0, sparse_seen = 0;
	int64_t worst_sparse = 0;
	for (int64_t t = 0; t < 500 * kMs; t += 20 * kUs) {
		if (t % (5 * kMs) == 0) q.enqueue(pool.take(), kSparse, 1200, t);
		auto it = q.dequeue(t);
		REQUIRE(it);
		if (it->bytes == 1200) {
			sparse_seen++;
			sparse_signals += it->signal;
			worst_sparse = std::max(worst_sparse, it->sojourn_ns);
		} else {
			bulk_signals += it->signal;
			// Refill the bulk flow: a sender that does not slow down.
			q.enqueue(pool.take(), kBulk, 1500, t);
		}
		pool.give(it->slot);
	}
	CHECK(bulk_signals > 20); // the control law's rate rises while the queue stays
	CHECK(sparse_signals == 0);
	CHECK(sparse_seen >= 99);
	CHECK(worst_sparse <= 40 * kUs); // served at the next dequeue or the one after
	CHECK(q.engaged() >= 1);
	CHECK(q.signalling() == 1);
	// The backlog drained: below target again, the flow stops being signalled.
	while (auto it = q.dequeue(600 * kMs)) {
		pool.give(it->slot);
		if (q.packets() == 0) break;
	}
	q.enqueue(pool.take(), kBulk, 1500, 600 * kMs);
	q.enqueue(pool.take(), kBulk, 1500, 600 * kMs);
	pool.give(q.dequeue(600 * kMs)->slot);
	CHECK(q.signalling() == 0);
}

TEST_CASE("flow queue: no signal to a flow with at most one packet queued, however long it waited") {
	FlowQueue q(params(64, 1 * kMs, 10 * kMs));
	Pool pool(64);
	int signals = 0;
	for (int64_t t = 0; t < 200 * kMs; t += 5 * kMs) {
		q.enqueue(pool.take(), kBulk, 1500, t);
		auto it = q.dequeue(t + 4 * kMs); // waited 4 ms, alone
		REQUIRE(it);
		signals += it->signal;
		pool.give(it->slot);
	}
	CHECK(signals == 0);
	CHECK(q.engaged() == 0);
}

TEST_CASE("flow queue: shed() takes the oldest packet of the flow with the most bytes") {
	FlowQueue q(params(64));
	Pool pool(64);
	std::vector<uint32_t> bulk;
	for (int i = 0; i < 6; i++) {
		bulk.push_back(pool.take());
		q.enqueue(bulk.back(), kBulk, 9000, 0);
	}
	for (int i = 0; i < 30; i++)
		q.enqueue(pool.take(), kOther, 1000, 0); // more packets, fewer bytes
	const uint32_t ping = pool.take();
	q.enqueue(ping, kSparse, 84, 0);
	for (size_t i = 0; i < 3; i++) {
		auto it = q.shed();
		REQUIRE(it);
		CHECK(it->slot == bulk[i]);
	}
	// Now 3 x 9000 against 30 x 1000: the other flow is the fattest.
	auto it = q.shed();
	REQUIRE(it);
	CHECK(it->bytes == 1000);
	CHECK(q.packets() == 3 + 29 + 1);
	CHECK(q.bytes() == 27000 + 29000 + 84);
	// The sparse packet is still there: all three flows are new, so it
	// comes out in the first round (a quantum per flow: one 9000-byte
	// packet, two of 1000 bytes, then the ping).
	std::vector<uint32_t> first_round;
	for (int i = 0; i < 4; i++)
		first_round.push_back(q.dequeue(0)->slot);
	CHECK(std::count(first_round.begin(), first_round.end(), ping) == 1);
}

TEST_CASE("flow queue: shed() until empty, then everything is consistent") {
	FlowQueue q(params(32));
	Pool pool(32);
	for (uint32_t i = 0; i < 32; i++)
		q.enqueue(pool.take(), i % 5, 100 + i, 0);
	int n = 0;
	while (auto it = q.shed()) {
		n++;
		pool.give(it->slot);
	}
	CHECK(n == 32);
	CHECK(q.empty());
	CHECK(q.bytes() == 0);
	CHECK(q.active_flows() == 0);
	CHECK_FALSE(q.dequeue(0));
	// And it works again afterwards.
	q.enqueue(pool.take(), 7, 100, 0);
	CHECK(q.dequeue(0));
}

TEST_CASE("flow queue: a random mix never loses or repeats a packet") {
	FlowQueue q(params(200));
	Pool pool(200);
	std::vector<bool> queued(200, false);
	uint64_t rng = 12345;
	auto next = [&] {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		return rng;
	};
	size_t in = 0, out = 0;
	for (int step = 0; step < 100000; step++) {
		const uint64_t r = next();
		if (r % 3 != 0 && !pool.free.empty()) {
			const uint32_t s = pool.take();
			REQUIRE_FALSE(queued[s]);
			queued[s] = true;
			q.enqueue(s, next() % 9, uint32_t(40 + next() % 65000), step);
			in++;
			continue;
		}
		auto it = r % 7 == 0 ? q.shed() : q.dequeue(step);
		if (!it) {
			CHECK(q.empty());
			continue;
		}
		REQUIRE(queued[it->slot]);
		queued[it->slot] = false;
		pool.give(it->slot);
		out++;
	}
	CHECK(in - out == q.packets());
	CHECK(size_t(std::count(queued.begin(), queued.end(), true)) == q.packets());
}

namespace {

std::vector<uint8_t> ipv4(uint8_t proto, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                          uint16_t frag = 0) {
	std::vector<uint8_t> p(40, 0);
	p[0] = 0x45;
	p[6] = uint8_t(frag >> 8);
	p[7] = uint8_t(frag);
	p[9] = proto;
	for (int i = 0; i < 4; i++) {
		p[12 + size_t(i)] = uint8_t(src >> (24 - 8 * i));
		p[16 + size_t(i)] = uint8_t(dst >> (24 - 8 * i));
	}
	p[20] = uint8_t(sport >> 8);
	p[21] = uint8_t(sport);
	p[22] = uint8_t(dport >> 8);
	p[23] = uint8_t(dport);
	return p;
}

std::vector<uint8_t> ipv6(uint8_t next, uint8_t src_last, uint16_t sport, uint16_t dport) {
	std::vector<uint8_t> p(60, 0);
	p[0] = 0x60;
	p[6] = next;
	p[8] = 0xfd;
	p[23] = src_last;
	p[24] = 0xfd;
	p[39] = 9;
	p[40] = uint8_t(sport >> 8);
	p[41] = uint8_t(sport);
	p[42] = uint8_t(dport >> 8);
	p[43] = uint8_t(dport);
	return p;
}

} // namespace

TEST_CASE("flow_hash: same flow same hash; each field of the flow changes it") {
	const uint64_t key = 0x1234;
	const auto base = ipv4(6, 0x0a000001, 0x0a000002, 40000, 5201);
	const uint64_t h = flow_hash(base, key);
	CHECK(flow_hash(ipv4(6, 0x0a000001, 0x0a000002, 40000, 5201), key) == h);
	CHECK(flow_hash(ipv4(17, 0x0a000001, 0x0a000002, 40000, 5201), key) != h);
	CHECK(flow_hash(ipv4(6, 0x0a000003, 0x0a000002, 40000, 5201), key) != h);
	CHECK(flow_hash(ipv4(6, 0x0a000001, 0x0a000004, 40000, 5201), key) != h);
	CHECK(flow_hash(ipv4(6, 0x0a000001, 0x0a000002, 40001, 5201), key) != h);
	CHECK(flow_hash(ipv4(6, 0x0a000001, 0x0a000002, 40000, 5202), key) != h);
	// Another key, another hash: the buckets cannot be chosen from outside.
	CHECK(flow_hash(base, key + 1) != h);
	// The payload past the ports does not count (a TCP flow's segments differ there).
	auto later = base;
	later[30] = 0x77;
	CHECK(flow_hash(later, key) == h);

	// ICMP has no ports: bytes 20-23 are not read.
	const uint64_t icmp = flow_hash(ipv4(1, 0x0a000001, 0x0a000002, 1, 2), key);
	CHECK(flow_hash(ipv4(1, 0x0a000001, 0x0a000002, 3, 4), key) == icmp);
	// A later fragment has no ports either: it hashes like any of its siblings.
	const uint64_t frag = flow_hash(ipv4(17, 0x0a000001, 0x0a000002, 1, 2, 0x00b9), key);
	CHECK(flow_hash(ipv4(17, 0x0a000001, 0x0a000002, 7, 8, 0x00b9), key) == frag);

	const auto v6 = ipv6(6, 1, 40000, 443);
	const uint64_t h6 = flow_hash(v6, key);
	CHECK(flow_hash(ipv6(6, 1, 40000, 443), key) == h6);
	CHECK(flow_hash(ipv6(6, 2, 40000, 443), key) != h6);
	CHECK(flow_hash(ipv6(6, 1, 40001, 443), key) != h6);
	CHECK(flow_hash(ipv6(58, 1, 40000, 443), key) != h6);
	CHECK(flow_hash(ipv6(58, 1, 1, 2), key) == flow_hash(ipv6(58, 1, 3, 4), key));
}

TEST_CASE("flow_hash: garbage and short packets are one flow, and nothing is read past the end") {
	const uint64_t key = 99;
	const uint64_t junk = flow_hash(std::vector<uint8_t>{}, key);
	CHECK(flow_hash(std::vector<uint8_t>{0x45, 0, 0}, key) == junk);
	CHECK(flow_hash(std::vector<uint8_t>(39, 0x60), key) == junk);
	// A TCP header cut short: addresses and protocol only, whatever is there.
	auto cut = ipv4(6, 1, 2, 3, 4);
	cut.resize(22);
	auto cut2 = ipv4(6, 1, 2, 0xabcd, 4);
	cut2.resize(22);
	CHECK(flow_hash(cut, key) == flow_hash(cut2, key));
	CHECK(flow_hash(cut, key) != junk);
	// An IHL that points past the packet: no ports read.
	auto bad = ipv4(6, 1, 2, 3, 4);
	auto bad2 = ipv4(6, 1, 2, 9, 9);
	bad[0] = bad2[0] = 0x4f;
	CHECK(flow_hash(bad, key) == flow_hash(bad2, key));
	// The same with a proper IHL: the ports count.
	CHECK(flow_hash(ipv4(6, 1, 2, 3, 4), key) != flow_hash(ipv4(6, 1, 2, 9, 9), key));
}

TEST_CASE("flow_hash: distinct flows spread over the buckets") {
	// 4,096 TCP flows into 1,024 buckets: no bucket far above the mean of 4.
	std::array<int, 1024> count{};
	for (uint16_t port = 0; port < 4096; port++)
		count[flow_hash(ipv4(6, 0x0a000001, 0x0a000002, uint16_t(30000 + port), 443), 77) % 1024]++;
	const int worst = *std::max_element(count.begin(), count.end());
	CHECK(worst <= 16);
	CHECK(std::count(count.begin(), count.end(), 0) < 100); // e^-4 of 1024 is 19
}
