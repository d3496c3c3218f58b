// The used ring is written by the device and read as untrusted input: ids out
// of range, ids not in flight (free, queued, duplicate), lengths past the
// buffer and used->idx jumps are counted and skipped, no token comes back
// twice, and the queue keeps working for valid entries afterwards.
#include "virtio/split_queue.hpp"

#include "tests/unit/support/device_model_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace esptun::virtio {
namespace {

using test::AlignedRegion;
using test::DeviceModel;

constexpr uint64_t kBufBase = 0x7f0000000000;
constexpr uint32_t kN = 8;

struct Fixture {
	Fixture() : mem(ring_layout(kN)->total_bytes), q(mem.span(), kN), dev(mem.data(), q.layout()) {}

	/// Add and publish buffers with these tokens (descriptor ids 0, 1, ... on a fresh queue).
	void post(std::initializer_list<uint64_t> tokens, uint32_t len = 100) {
		for (uint64_t t : tokens)
			REQUIRE(q.add_buffer(kBufBase + t * 4096, len, true, t));
		q.publish();
		while (dev.take_avail()) {}
	}
	std::vector<UsedBuffer> harvest() {
		std::vector<UsedBuffer> v;
		q.harvest_used([&](const UsedBuffer& u) { v.push_back(u); });
		return v;
	}
	uint64_t corrupt(UsedError e) const { return q.stats().corrupt_of(e); }

	AlignedRegion mem;
	SplitQueue q;
	DeviceModel dev;
};

/// The queue still does a clean round trip of a full ring afterwards.
void check_still_works(Fixture& f) {
	const uint64_t corrupt_before = f.q.stats().corrupt_total();
	const uint32_t free_before = f.q.free_count();
	std::vector<uint64_t> tokens;
	for (uint64_t t = 1000; t < 1000 + free_before; t++) {
		REQUIRE(f.q.add_buffer(kBufBase, 100, true, t));
		tokens.push_back(t);
	}
	f.q.publish();
	while (auto d = f.dev.take_avail())
		f.dev.push_used(d->id, 50);
	f.dev.flush_used();
	std::vector<uint64_t> got;
	f.q.harvest_used([&](const UsedBuffer& u) {
		CHECK(u.len == 50);
		got.push_back(u.token);
	});
	CHECK(got == tokens);
	CHECK(f.q.free_count() == free_before);
	CHECK(f.q.stats().corrupt_total() == corrupt_before);
}

TEST_CASE("used ring: an id out of range is counted and skipped, the next entry still returns") {
	Fixture f;
	f.post({10, 11});
	f.dev.push_used(kN, 1);         // one past the table
	f.dev.push_used(0xffffffff, 1); // far past it
	f.dev.push_used(1, 7);          // valid: token 11
	f.dev.flush_used();
	const auto got = f.harvest();
	REQUIRE(got.size() == 1);
	CHECK(got[0].token == 11);
	CHECK(got[0].len == 7);
	CHECK(f.corrupt(UsedError::id_out_of_range) == 2);
	CHECK(f.q.in_flight() == 1);
	CHECK(f.q.last_used_idx() == 3); // corrupt entries are consumed
	f.dev.push_used(0, 9);
	f.dev.flush_used();
	const auto rest = f.harvest();
	REQUIRE(rest.size() == 1);
	CHECK(rest[0].token == 10);
	CHECK(f.q.free_count() == kN);
	check_still_works(f);
}

TEST_CASE("used ring: ids never handed out or queued but unpublished are not in flight") {
	Fixture f;
	f.post({20});                                     // descriptor 0 in flight
	REQUIRE(f.q.add_buffer(kBufBase, 100, true, 21)); // descriptor 1 queued only
	f.dev.push_used(5, 1);                            // free descriptor
	f.dev.push_used(1, 1);                            // the device read past avail->idx
	f.dev.flush_used();
	CHECK(f.harvest().empty());
	CHECK(f.corrupt(UsedError::id_not_in_flight) == 2);
	CHECK(f.q.in_flight() == 1);
	CHECK(f.q.pending() == 1);
	CHECK(f.q.free_count() == kN - 2);
	// Published now, descriptor 1 may come back, and 0 too.
	f.q.publish();
	REQUIRE(f.dev.take_avail()->id == 1);
	f.dev.push_used(1, 3);
	f.dev.push_used(0, 4);
	f.dev.flush_used();
	const auto got = f.harvest();
	REQUIRE(got.size() == 2);
	CHECK(got[0].token == 21);
	CHECK(got[1].token == 20);
	CHECK(f.q.free_count() == kN);
	check_still_works(f);
}

TEST_CASE("used ring: a duplicate id returns its token once, in one batch or across batches") {
	Fixture f;
	f.post({30, 31, 32});
	f.dev.push_used(0, 1);
	f.dev.push_used(0, 1); // duplicate in the same batch
	f.dev.push_used(2, 1);
	f.dev.flush_used();
	auto got = f.harvest();
	REQUIRE(got.size() == 2);
	CHECK(got[0].token == 30);
	CHECK(got[1].token == 32);
	CHECK(f.corrupt(UsedError::id_not_in_flight) == 1);

	f.dev.push_used(2, 1); // duplicate of an already harvested one
	f.dev.push_used(0, 1);
	f.dev.push_used(1, 1); // the only one still in flight
	f.dev.flush_used();
	got = f.harvest();
	REQUIRE(got.size() == 1);
	CHECK(got[0].token == 31);
	CHECK(f.corrupt(UsedError::id_not_in_flight) == 3);
	CHECK(f.q.free_count() == kN); // nothing freed twice: the free stack never overflows
	CHECK(f.q.in_flight() == 0);
	check_still_works(f);
}

TEST_CASE("used ring: a length past the buffer is flagged, the buffer comes back for recycling") {
	Fixture f;
	f.post({40, 41, 42}, 100);
	f.dev.push_used(0, 100);        // exactly full: fine
	f.dev.push_used(1, 101);        // one byte too many
	f.dev.push_used(2, 0xffffffff); // absurd
	f.dev.flush_used();
	const auto got = f.harvest();
	REQUIRE(got.size() == 3);
	CHECK(got[0].token == 40);
	CHECK(got[0].len == 100);
	CHECK_FALSE(got[0].bad_len);
	CHECK(got[1].token == 41);
	CHECK(got[1].bad_len);
	CHECK(got[1].len == 0);
	CHECK(got[2].token == 42);
	CHECK(got[2].bad_len);
	CHECK(got[2].len == 0);
	CHECK(f.corrupt(UsedError::len_too_large) == 2);
	CHECK(f.q.free_count() == kN);
	check_still_works(f);
}

TEST_CASE("used ring: used->idx more than N ahead is refused and counted once, then recovers") {
	Fixture f;
	f.post({50, 51});
	f.dev.push_used(0, 1);
	f.dev.push_used(1, 1);
	f.dev.set_used_idx(uint16_t(kN + 1)); // claims 9 entries in a ring of 8
	CHECK(f.harvest().empty());
	CHECK(f.harvest().empty()); // polling again does not count again
	CHECK(f.corrupt(UsedError::idx_jump) == 1);
	CHECK(f.q.last_used_idx() == 0);
	CHECK(f.q.in_flight() == 2);

	f.dev.set_used_idx(0xffff); // "behind" us: 65535 entries ahead, modulo 2^16
	CHECK(f.harvest().empty());
	CHECK(f.corrupt(UsedError::idx_jump) == 2);

	f.dev.set_used_idx(2); // sane again: the two real entries come back
	const auto got = f.harvest();
	REQUIRE(got.size() == 2);
	CHECK(got[0].token == 50);
	CHECK(got[1].token == 51);
	CHECK(f.corrupt(UsedError::idx_jump) == 2);
	check_still_works(f);
}

TEST_CASE("used ring: used->idx exactly N ahead is allowed, each entry still validated") {
	Fixture f;
	f.post({60, 61});
	for (uint16_t slot = 0; slot < kN; slot++)
		f.dev.write_used_raw(slot, slot % 2 == 0 ? 0 : 1, 1);
	f.dev.set_used_idx(uint16_t(kN));
	const auto got = f.harvest();
	REQUIRE(got.size() == 2);
	CHECK(got[0].token == 60);
	CHECK(got[1].token == 61);
	CHECK(f.corrupt(UsedError::id_not_in_flight) == kN - 2);
	CHECK(f.corrupt(UsedError::idx_jump) == 0);
	CHECK(f.q.free_count() == kN);
	check_still_works(f);
}

TEST_CASE("used ring: garbage in every slot never returns a token that is not in flight") {
	Fixture f;
	f.post({70, 71, 72, 73});
	uint64_t s = 99;
	std::vector<uint64_t> returned;
	for (int round = 0; round < 1000; round++) {
		s = s * 6364136223846793005u + 1442695040888963407u;
		for (uint16_t slot = 0; slot < kN; slot++)
			f.dev.write_used_raw(slot, uint32_t(s >> (slot * 3)) % 12, uint32_t(s >> 32) % 200);
		f.dev.set_used_idx(uint16_t(f.q.last_used_idx() + (s >> 60) % (kN + 1)));
		for (const UsedBuffer& u : f.harvest())
			returned.push_back(u.token);
		CHECK(f.q.free_count() + f.q.in_flight() == kN);
	}
	CHECK(returned.size() <= 4);
	CHECK(f.q.stats().harvested.get() == returned.size());
	// Whatever is left in flight can still come back once.
	for (uint16_t id = 0; id < 4; id++)
		f.dev.push_used(id, 1);
	f.dev.flush_used();
	for (const UsedBuffer& u : f.harvest())
		returned.push_back(u.token);
	std::sort(returned.begin(), returned.end());
	CHECK(returned == std::vector<uint64_t>{70, 71, 72, 73}); // each exactly once
	CHECK(f.q.free_count() == kN);
	check_still_works(f);
}

} // namespace
} // namespace esptun::virtio
