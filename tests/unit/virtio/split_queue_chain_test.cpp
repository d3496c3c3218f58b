// SplitQueue::add_chain(): device-readable descriptor chains (the TX ring's
// merged GRO runs). The device model walks the chain through the shared
// table; the driver gets every piece's token back from one used entry, never
// trusts a used entry naming a piece other than the head, and refuses a chain
// longer than the free descriptors.
#include "virtio/split_queue.hpp"

#include "tests/unit/support/device_model_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace esptun::virtio {
namespace {

using test::AlignedRegion;
using test::DeviceModel;

struct Fixture : test::QueueFixture {
	using QueueFixture::QueueFixture;

	/// The chain from head @id as the device reads it: (addr, len) per piece.
	std::vector<std::pair<uint64_t, uint32_t>> walk(uint16_t id) const {
		std::vector<std::pair<uint64_t, uint32_t>> out;
		for (uint32_t guard = 0; guard <= q.size(); guard++) {
			const uint8_t* d = q.desc_area() + size_t(id) * kDescSize;
			uint64_t addr;
			uint32_t len;
			uint16_t flags, next;
			std::memcpy(&addr, d + kDescAddrOff, 8);
			std::memcpy(&len, d + kDescLenOff, 4);
			std::memcpy(&flags, d + kDescFlagsOff, 2);
			std::memcpy(&next, d + kDescNextOff, 2);
			CHECK((flags & kDescFWrite) == 0);
			out.emplace_back(addr, len);
			if ((flags & kDescFNext) == 0) break;
			id = next;
		}
		return out;
	}
};

} // namespace

TEST_CASE("SplitQueue chains: the device reads the pieces in order, one used entry returns every token") {
	Fixture f(8);
	const std::vector<SplitQueue::ChainPart> parts{{0x1000, 100, 7}, {0x2000, 200, 8}, {0x3000, 300, 9}};
	REQUIRE(f.q.add_chain(parts));
	REQUIRE(f.q.add_buffer(0x4000, 64, false, 10));
	CHECK(f.q.free_count() == 4);
	const Published p = f.q.publish();
	CHECK(p.count() == 2); // two avail entries
	CHECK(f.q.in_flight() == 4);

	auto head = f.dev.take_avail();
	REQUIRE(head);
	const auto pieces = f.walk(head->id);
	REQUIRE(pieces.size() == 3);
	for (size_t i = 0; i < 3; i++) {
		CHECK(pieces[i].first == parts[i].addr);
		CHECK(pieces[i].second == parts[i].len);
	}
	auto single = f.dev.take_avail();
	REQUIRE(single);
	CHECK(f.walk(single->id).size() == 1);
	f.dev.push_used(single->id, 0); // out of order: allowed
	f.dev.push_used(head->id, 0);
	(void)f.dev.flush_used();
	std::vector<uint64_t> tokens;
	CHECK(f.q.harvest_used([&](const UsedBuffer& u) { tokens.push_back(u.token); }) == 2);
	CHECK(tokens == std::vector<uint64_t>{10, 7, 8, 9});
	CHECK(f.q.free_count() == 8);
	CHECK(f.q.in_flight() == 0);
	CHECK(f.q.stats().corrupt_total() == 0);

	// All eight descriptors in one chain, twice (the freed ids are reusable).
	for (int round = 0; round < 2; round++) {
		std::vector<SplitQueue::ChainPart> all;
		for (uint64_t i = 0; i < 8; i++)
			all.push_back({0x10000 + i * 0x100, 10, 100 + i});
		REQUIRE(f.q.add_chain(all));
		f.q.publish();
		auto h = f.dev.take_avail();
		REQUIRE(h);
		CHECK(f.walk(h->id).size() == 8);
		f.dev.push_used(h->id, 0);
		(void)f.dev.flush_used();
		size_t n = 0;
		CHECK(f.q.harvest_used([&](const UsedBuffer& u) { CHECK(u.token == 100 + n++); }) == 1);
		CHECK(n == 8);
	}
}

TEST_CASE("SplitQueue chains: too long for the free descriptors is refused; a used entry naming a "
          "later piece is corrupt") {
	Fixture f(4);
	REQUIRE(f.q.add_buffer(0x1000, 10, false, 1));
	std::vector<SplitQueue::ChainPart> four(4, {0x2000, 10, 2});
	CHECK_FALSE(f.q.add_chain(four));
	CHECK(f.q.stats().ring_full.get() == 1);
	CHECK_FALSE(f.q.add_chain({}));
	CHECK(f.q.free_count() == 3);
	const std::vector<SplitQueue::ChainPart> two{{0x3000, 10, 3}, {0x4000, 10, 4}};
	REQUIRE(f.q.add_chain(two));
	f.q.publish();
	(void)f.dev.take_avail();
	auto h = f.dev.take_avail();
	REQUIRE(h);
	uint16_t tail_id = 0;
	std::memcpy(&tail_id, f.q.desc_area() + size_t(h->id) * kDescSize + kDescNextOff, 2);
	f.dev.push_used(tail_id, 0); // not the head
	(void)f.dev.flush_used();
	CHECK(f.q.harvest_used([](const UsedBuffer&) { FAIL("nothing valid"); }) == 0);
	CHECK(f.q.stats().corrupt_of(UsedError::id_not_in_flight) == 1);
	CHECK(f.q.in_flight() == 3);
	f.dev.push_used(h->id, 0);
	(void)f.dev.flush_used();
	std::vector<uint64_t> tokens;
	CHECK(f.q.harvest_used([&](const UsedBuffer& u) { tokens.push_back(u.token); }) == 1);
	CHECK(tokens == std::vector<uint64_t>{3, 4});
}

TEST_CASE("SplitQueue chains: harvesting into a span takes whole chains only (found by fuzz-vring_used)") {
	Fixture f(8);
	REQUIRE(f.q.add_chain(
	    std::vector<SplitQueue::ChainPart>{{0x1000, 10, 1}, {0x2000, 20, 2}, {0x3000, 30, 3}}));
	REQUIRE(f.q.add_buffer(0x4000, 64, false, 4));
	(void)f.q.publish();
	for (int i = 0; i < 2; i++) {
		auto a = f.dev.take_avail();
		REQUIRE(a);
		f.dev.push_used(a->id, 0);
	}
	(void)f.dev.flush_used();
	// Room for two: the three-piece chain does not fit, so nothing is taken
	// (it used to write its third piece past the end of the span).
	std::vector<UsedBuffer> out(3);
	CHECK(f.q.harvest_used(std::span(out).first(2)) == 0);
	CHECK(f.q.in_flight() == 4);
	// Room for three: the chain; then room for one is less than the longest chain.
	CHECK(f.q.harvest_used(std::span(out)) == 3);
	CHECK(out[0].token == 1);
	CHECK(out[2].token == 3);
	CHECK(f.q.harvest_used(std::span(out).first(1)) == 0);
	CHECK(f.q.harvest_used(std::span(out)) == 1);
	CHECK(out[0].token == 4);
	CHECK(f.q.in_flight() == 0);
}

} // namespace esptun::virtio
