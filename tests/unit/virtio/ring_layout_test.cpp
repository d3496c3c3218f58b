// The split virtqueue's layout arithmetic (virtio 1.1 section 2.6) and the
// event-index decision need_event() (vring_need_event), checked against a
// table and against a reference written differently: "the event index lies
// in the window [old, new) of indices just published".
#include "virtio/virtio_ring_layout.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace esptun::virtio {
namespace {

// Reference 1: walk the published indices one by one (wrapping at 2^16).
bool need_event_by_walk(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
	for (uint16_t i = old_idx; i != new_idx; i++)
		if (i == event) return true;
	return false;
}

// Reference 2: the event's distance from old, modulo 2^16, is shorter than the batch.
bool need_event_by_distance(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
	const uint32_t to_event = (uint32_t(event) + 0x10000 - old_idx) % 0x10000;
	const uint32_t batch = (uint32_t(new_idx) + 0x10000 - old_idx) % 0x10000;
	return to_event < batch;
}

uint64_t splitmix64(uint64_t& s) {
	uint64_t z = (s += 0x9e3779b97f4a7c15);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
	return z ^ (z >> 31);
}

TEST_CASE("ring_layout: sizes are 16N, 6+2N and 6+8N with the spec's alignments") {
	for (uint32_t n : {1u, 2u, 4u, 8u, 256u, 1024u, 32768u}) {
		INFO("N = ", n);
		const auto l = ring_layout(n, kUsedAlign);
		REQUIRE(l.has_value());
		CHECK(l->queue_size == n);
		CHECK(l->desc_offset == 0);
		CHECK(l->desc_bytes == 16 * size_t(n));
		CHECK(l->avail_offset == 16 * size_t(n));
		CHECK(l->avail_bytes == 6 + 2 * size_t(n));
		CHECK(l->used_offset % kUsedAlign == 0);
		CHECK(l->used_offset >= l->avail_offset + l->avail_bytes);
		CHECK(l->used_offset < l->avail_offset + l->avail_bytes + kUsedAlign);
		CHECK(l->used_bytes == 6 + 8 * size_t(n));
		CHECK(l->total_bytes == l->used_offset + l->used_bytes);
		// The event words sit right after the N entries of each ring.
		CHECK(avail_used_event_off(n) + 2 == l->avail_bytes);
		CHECK(used_avail_event_off(n) + 2 == l->used_bytes);
	}
	// N = 256: the numbers from vhost_test.c's comments.
	const auto l = ring_layout(256, kUsedAlign);
	CHECK(l->desc_bytes == 4096);
	CHECK(l->avail_bytes == 518);
	CHECK(l->used_bytes == 2054);
	CHECK(l->used_offset == 4096 + 520); // 4614 rounded up to 4
}

TEST_CASE("ring_layout: the default puts the used ring on its own cache line") {
	const auto l = ring_layout(256);
	REQUIRE(l.has_value());
	CHECK(l->used_offset % 64 == 0);
	CHECK(l->used_offset == 4096 + 576);
	const auto page = ring_layout(256, 4096); // the legacy layout's used ring alignment
	REQUIRE(page.has_value());
	CHECK(page->used_offset == 8192);
}

TEST_CASE("ring_layout: rejects sizes that are not a power of two in 1..32768 and bad alignments") {
	for (uint32_t n : {0u, 3u, 6u, 100u, 32769u, 65536u, 65535u, 0x80000000u}) {
		INFO("N = ", n);
		CHECK_FALSE(ring_layout(n).has_value());
		CHECK_FALSE(valid_queue_size(n));
	}
	CHECK_FALSE(ring_layout(8, 2).has_value());  // below the spec's 4
	CHECK_FALSE(ring_layout(8, 12).has_value()); // not a power of two
	CHECK(ring_layout(8, 4).has_value());
}

struct EventCase {
	uint16_t event, new_idx, old_idx;
	bool kick;
};

TEST_CASE("need_event: table of kick decisions, wrap-around included") {
	const std::vector<EventCase> table{
	    {0, 1, 0, true},                // first buffer ever: the device waits for entry 0
	    {0, 0, 0, false},               // nothing published
	    {5, 5, 5, false},               // nothing published, event == idx
	    {5, 10, 0, true},               // event inside the batch
	    {9, 10, 0, true},               // event is the batch's last entry
	    {10, 10, 0, false},             // event is the next entry, not yet published
	    {0, 10, 1, false},              // event before the batch: already notified for it
	    {1, 10, 1, true},               // event is the batch's first entry
	    {100, 5, 0, false},             // device asked for a later entry (suppression)
	    {0xff00, 5, 0, false},          // event long behind: the device is busy, not waiting
	    {0xffff, 2, 0xfffe, true},      // batch 0xfffe, 0xffff, 0, 1 crosses the wrap
	    {0, 2, 0xfffe, true},           //
	    {1, 2, 0xfffe, true},           //
	    {2, 2, 0xfffe, false},          // the next entry after the wrap
	    {0xfffd, 2, 0xfffe, false},     // just before the batch
	    {0xffff, 0, 0xffff, true},      // single entry 0xffff, idx wraps to 0
	    {0, 0, 0xffff, false},          //
	    {0x8000, 0x8001, 0x7fff, true}, // signed-looking midpoint
	    {0x7ffe, 0x8001, 0x7fff, false},
	    {0x7fff, 0xffff, 0x0000, true}, // a 0xffff-entry batch still covers its middle
	    {0xffff, 0xffff, 0x0000, false},
	    {0xfffe, 0xffff, 0x0000, true},
	};
	for (size_t i = 0; i < table.size(); i++) {
		const EventCase& c = table[i];
		INFO("row ", i + 1, ": event ", c.event, " new ", c.new_idx, " old ", c.old_idx);
		CHECK(need_event(c.event, c.new_idx, c.old_idx) == c.kick);
		CHECK(need_event_by_walk(c.event, c.new_idx, c.old_idx) == c.kick);
		CHECK(need_event_by_distance(c.event, c.new_idx, c.old_idx) == c.kick);
	}
}

TEST_CASE("need_event: agrees with the reference for every event index around the wrap") {
	size_t mismatches = 0;
	for (uint16_t old_idx : {uint16_t(0xfffe), uint16_t(0xffff), uint16_t(0), uint16_t(1),
	                         uint16_t(0x7fff), uint16_t(0x8000)}) {
		for (uint16_t batch :
		     {uint16_t(0), uint16_t(1), uint16_t(2), uint16_t(3), uint16_t(17), uint16_t(256)}) {
			const uint16_t new_idx = uint16_t(old_idx + batch);
			for (uint32_t e = 0; e <= 0xffff; e++) {
				const uint16_t event = uint16_t(e);
				if (need_event(event, new_idx, old_idx) !=
				    need_event_by_distance(event, new_idx, old_idx))
					mismatches++;
			}
		}
	}
	CHECK(mismatches == 0);
}

TEST_CASE("need_event: agrees with both references on random triples") {
	uint64_t s = 0x5eed;
	size_t mismatches = 0;
	for (int i = 0; i < 200000; i++) {
		const uint64_t r = splitmix64(s);
		const uint16_t old_idx = uint16_t(r);
		// Mostly small batches (what a ring of <= 32768 produces), some of any size.
		const uint16_t batch = (r >> 16) & 1 ? uint16_t((r >> 17) % 64) : uint16_t(r >> 17);
		const uint16_t new_idx = uint16_t(old_idx + batch);
		const uint16_t event =
		    (r >> 40) & 1 ? uint16_t(old_idx + int16_t(r >> 41) % 80) : uint16_t(r >> 41);
		const bool got = need_event(event, new_idx, old_idx);
		if (got != need_event_by_distance(event, new_idx, old_idx)) mismatches++;
		if (batch < 64 && got != need_event_by_walk(event, new_idx, old_idx)) mismatches++;
	}
	CHECK(mismatches == 0);
}

} // namespace
} // namespace esptun::virtio
