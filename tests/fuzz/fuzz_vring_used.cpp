// libFuzzer target: the used ring as device-written, untrusted input. The
// input is a script of driver operations (add single buffers or
// device-readable chains, publish, harvest, re-arm) and
// device writes (raw used entries, used->idx, avail_event) on one split
// virtqueue. Invariants: a token comes back only while in flight and never
// twice, free + queued + in flight == N, lengths within the buffer, the kick
// predicates agree with need_event(), and after any corruption a
// well-behaved device can still return every outstanding buffer once.
// ASan/UBSan catch out-of-bounds accesses.
#include "virtio/split_queue.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <new>
#include <vector>

namespace {

using namespace esptun::virtio;

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
	bool done() const { return pos_ >= n_; }
	uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
	uint16_t u16() {
		const uint16_t lo = u8();
		return uint16_t(lo | u8() << 8);
	}
	uint32_t u32() {
		const uint32_t lo = u16();
		return lo | uint32_t(u16()) << 16;
	}

private:
	const uint8_t* p_;
	size_t n_;
	size_t pos_ = 0;
};

enum class Tok : uint8_t { queued, in_flight, returned };
struct TokenInfo {
	uint32_t len;
	bool writable;
	Tok state;
};

struct Harness {
	Harness(uint32_t n, uint16_t start_idx)
	    : layout(*ring_layout(n)), mem(new (std::align_val_t(64)) uint8_t[layout.total_bytes]),
	      q({mem, layout.total_bytes}, n, kDefaultUsedAlign, start_idx), id_token(n) {}
	~Harness() { ::operator delete[](mem, std::align_val_t(64)); }

	uint8_t* used_entry(uint16_t slot) {
		return q.used_area() + kUsedRingOff + size_t(slot & (layout.queue_size - 1)) * kUsedElemSize;
	}
	void write_used(uint16_t slot, uint32_t id, uint32_t len) {
		ring_store<uint32_t>(used_entry(slot) + kUsedElemIdOff, id);
		ring_store<uint32_t>(used_entry(slot) + kUsedElemLenOff, len);
	}
	void set_used_idx(uint16_t v) { ring_store<uint16_t>(q.used_area() + kUsedIdxOff, v); }
	uint16_t used_idx() { return ring_load<uint16_t>(q.used_area() + kUsedIdxOff); }
	void set_avail_event(uint16_t v) {
		ring_store<uint16_t>(q.used_area() + used_avail_event_off(layout.queue_size), v);
	}

	bool add(uint32_t len, bool writable) {
		if (!q.add_buffer(0x1000 + tokens.size() * 0x10000, len, writable, tokens.size()))
			return false;
		queued.push_back({tokens.size()});
		tokens.push_back({len, writable, Tok::queued});
		return true;
	}

	/// A device-readable chain of @parts pieces (vhost TX: header + first packet, payloads).
	bool add_chain(size_t parts, Input& in) {
		std::vector<SplitQueue::ChainPart> chain;
		std::vector<uint64_t> group;
		for (size_t i = 0; i < parts; i++) {
			const uint64_t token = tokens.size() + i;
			chain.push_back({0x1000 + token * 0x10000, in.u16(), token});
			group.push_back(token);
		}
		if (!q.add_chain(chain)) return false;
		for (const auto& c : chain)
			tokens.push_back({c.len, false, Tok::queued});
		queued.push_back(std::move(group));
		return true;
	}

	/// publish(), and learn as the device would which descriptor id each new avail slot names.
	Published publish() {
		const Published p = q.publish();
		for (uint16_t i = p.old_idx; i != p.new_idx; i++) {
			const uint16_t id =
			    ring_load<uint16_t>(q.avail_area() + kAvailRingOff +
			                        size_t(i & (layout.queue_size - 1)) * kAvailEntrySize);
			FUZZ_CHECK(id < layout.queue_size && !queued.empty());
			std::vector<uint64_t> group = queued.front(); // slots are filled in add order
			queued.pop_front();
			for (uint64_t token : group) {
				FUZZ_CHECK(tokens[token].state == Tok::queued);
				tokens[token].state = Tok::in_flight;
			}
			in_flight += uint32_t(group.size());
			id_token[id] = std::move(group); // the head's id names the whole chain
		}
		return p;
	}

	/// Every buffer the queue hands back must be one in flight, returned once.
	void on_used(const UsedBuffer& u) {
		FUZZ_CHECK(u.token < tokens.size());
		TokenInfo& t = tokens[u.token];
		FUZZ_CHECK(t.state == Tok::in_flight);
		t.state = Tok::returned;
		in_flight--;
		returned++;
		if (!t.writable) FUZZ_CHECK(u.len == 0);
		if (u.bad_len) FUZZ_CHECK(t.writable && u.len == 0);
		FUZZ_CHECK(u.len <= t.len);
	}

	void check_counts() {
		FUZZ_CHECK(q.free_count() <= layout.queue_size);
		// pending() counts avail slots; a chain holds several descriptors.
		size_t queued_descs = 0;
		for (const auto& group : queued)
			queued_descs += group.size();
		FUZZ_CHECK(q.pending() == queued.size());
		FUZZ_CHECK(q.free_count() + queued_descs + q.in_flight() == layout.queue_size);
		FUZZ_CHECK(q.in_flight() == in_flight);
		FUZZ_CHECK(q.stats().harvested.get() == returned);
	}

	RingLayout layout;
	uint8_t* mem;
	SplitQueue q;
	std::vector<TokenInfo> tokens;
	/// The device's view: the tokens a head descriptor id carries (one, or a chain's).
	std::vector<std::vector<uint64_t>> id_token;
	std::deque<std::vector<uint64_t>> queued; ///< added but not yet published, oldest first
	uint32_t in_flight = 0;
	uint64_t returned = 0;
};

void step(Harness& h, Input& in) {
	const uint32_t n = h.layout.queue_size;
	switch (in.u8() % 9) {
	case 0: { // add up to N buffers
		for (uint32_t i = 0, k = in.u8() % (n + 1); i < k; i++) {
			const uint32_t len = in.u16();
			if (!h.add(len, in.u8() & 1)) break;
		}
		break;
	}
	case 1: { // publish, then decide the kick against a device-chosen avail_event
		const uint16_t event = in.u16();
		h.set_avail_event(event);
		const Published p = h.publish();
		FUZZ_CHECK(h.q.needs_kick(p.old_idx, p.new_idx) == need_event(event, p.new_idx, p.old_idx));
		break;
	}
	case 2: // a raw used entry anywhere
		h.write_used(in.u16(), in.u32(), in.u32());
		break;
	case 3: { // a plausible used entry: small id, length near the buffer's
		const uint16_t slot = in.u16();
		const uint32_t id = in.u8() % (n + 1);
		h.write_used(slot, id, in.u16());
		break;
	}
	case 4: { // move used->idx: mostly a few entries on, sometimes anywhere
		const uint8_t b = in.u8();
		h.set_used_idx(b & 0x80 ? in.u16() : uint16_t(h.q.last_used_idx() + b % (n + 2)));
		break;
	}
	case 5: { // harvest into a span of 0..N+1 entries
		std::vector<UsedBuffer> out(in.u8() % (n + 2));
		const uint16_t before = h.q.last_used_idx();
		const size_t got = h.q.harvest_used(out);
		FUZZ_CHECK(got <= out.size());
		FUZZ_CHECK(uint16_t(h.q.last_used_idx() - before) <= n);
		for (size_t i = 0; i < got; i++)
			h.on_used(out[i]);
		break;
	}
	case 6: { // harvest with a callback that re-adds buffers, then maybe re-arm
		const size_t max = in.u8() % (n + 2);
		h.q.harvest_used(
		    [&](const UsedBuffer& u) {
			    h.on_used(u);
			    h.add(64, true);
		    },
		    max);
		if (in.u8() & 1)
			FUZZ_CHECK(h.q.enable_call_notifications() == (h.used_idx() != h.q.last_used_idx()));
		break;
	}
	case 8: // a chain of 1..4 pieces
		h.add_chain(1 + in.u8() % 4, in);
		break;
	case 7: { // ring_idle() agrees with need_event for a one-entry publish
		const uint16_t event = in.u8() & 1 ? h.q.avail_idx() : in.u16();
		h.set_avail_event(event);
		FUZZ_CHECK(h.q.ring_idle() ==
		           need_event(event, uint16_t(h.q.avail_idx() + 1), h.q.avail_idx()));
		break;
	}
	}
	h.check_counts();
}

/// A well-behaved device returns every in-flight buffer: each comes back exactly once.
void return_all(Harness& h) {
	uint16_t idx = h.q.last_used_idx();
	uint32_t written = 0, entries = 0; // buffers (chain pieces each), used entries
	for (uint32_t id = 0; id < h.layout.queue_size; id++) {
		const std::vector<uint64_t>& group = h.id_token[id];
		// A stale entry (the id is now a chain's later piece, or free) names
		// tokens already returned.
		if (group.empty() || h.tokens[group.front()].state != Tok::in_flight) continue;
		const TokenInfo& t = h.tokens[group.front()];
		h.write_used(idx++, id, t.writable ? t.len : 0);
		written += uint32_t(group.size());
		entries++;
	}
	h.set_used_idx(idx);
	FUZZ_CHECK(written == h.in_flight);
	const size_t got = h.q.harvest_used([&](const UsedBuffer& u) {
		FUZZ_CHECK(!u.bad_len);
		h.on_used(u);
	});
	FUZZ_CHECK(got == entries);
	h.check_counts();
}

/// After whatever the input did, the queue still works: everything comes back.
void drain(Harness& h) {
	return_all(h);
	h.publish();
	return_all(h);
	FUZZ_CHECK(h.q.free_count() == h.layout.queue_size);
	for (const TokenInfo& t : h.tokens)
		FUZZ_CHECK(t.state == Tok::returned);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	Input in(data, size);
	const uint32_t n = 1u << (in.u8() % 6); // N = 1..32: small rings fill quickly
	// Start anywhere in the 16-bit index space, so inputs cross the wrap cheaply.
	Harness h(n, in.u16());
	for (int steps = 0; !in.done() && steps < 4096; steps++)
		step(h, in);
	drain(h);
	return 0;
}
