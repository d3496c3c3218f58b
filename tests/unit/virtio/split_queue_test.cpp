// SplitQueue against the in-test device model
// (tests/unit/support/device_model_test_util.hpp) on the same memory: round
// trips, ring full, 16-bit index wrap-around with kick and call decisions
// checked for lost wake-ups, avail_event suppression, ring_idle(), the
// kick audit (kick_unasked()) and the used_event re-arm race.
#include "virtio/split_queue.hpp"

#include "tests/unit/support/device_model_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace esptun::virtio {
namespace {

using test::AlignedRegion;
using test::DeviceModel;

constexpr uint64_t kBufBase = 0x7f0000000000; ///< fake device addresses: nothing dereferences them

/// A queue, its memory and the device model playing vhost on it.
using Fixture = test::QueueFixture;

uint64_t splitmix64(uint64_t& s) {
	uint64_t z = (s += 0x9e3779b97f4a7c15);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
	return z ^ (z >> 31);
}

/// Push @count buffers through the ring (add, publish, device returns, harvest):
/// moves both 16-bit indices forward, e.g. to just below the wrap.
void advance(Fixture& f, uint32_t count) {
	while (count > 0) {
		uint32_t added = 0;
		while (added < count && f.q.add_buffer(kBufBase, 64, true, 0))
			added++;
		f.q.publish();
		while (auto d = f.dev.take_avail())
			f.dev.push_used(d->id, 0);
		f.dev.flush_used();
		REQUIRE(f.q.harvest_used([](const UsedBuffer&) {}) == added);
		count -= added;
	}
	f.dev.enable_notify();
}

TEST_CASE("SplitQueue: the constructor rejects bad sizes, short and misaligned regions") {
	AlignedRegion mem(ring_layout(8)->total_bytes + 64);
	CHECK_THROWS_AS(SplitQueue(mem.span(), 6), std::invalid_argument);
	CHECK_THROWS_AS(SplitQueue(mem.span(), 65536), std::invalid_argument);
	CHECK_THROWS_AS(SplitQueue(mem.span().first(ring_layout(8)->total_bytes - 1), 8),
	                std::invalid_argument);
	CHECK_THROWS_AS(SplitQueue(mem.span().subspan(8), 8), std::invalid_argument);
	SplitQueue q(mem.span().subspan(16), 8); // 16-byte aligned is enough
	CHECK(q.size() == 8);
	CHECK(q.free_count() == 8);
}

TEST_CASE("SplitQueue: a round trip writes the descriptor and avail slot, returns token and length") {
	Fixture f(8);
	CHECK(f.dev.avail_flags() == 0); // EVENT_IDX: the driver keeps flags 0
	REQUIRE(f.q.add_buffer(kBufBase + 0x1000, 1500, true, 41));
	REQUIRE(f.q.add_buffer(kBufBase + 0x2000, 60, false, 42));
	CHECK(f.q.pending() == 2);
	CHECK_FALSE(f.dev.take_avail().has_value()); // not published yet

	const Published p = f.q.publish();
	CHECK(p.old_idx == 0);
	CHECK(p.new_idx == 2);
	CHECK(f.q.in_flight() == 2);
	CHECK(f.q.pending() == 0);
	CHECK(f.q.needs_kick(p.old_idx, p.new_idx)); // avail_event 0: the device waits for entry 0

	auto rx = f.dev.take_avail();
	auto tx = f.dev.take_avail();
	REQUIRE(rx.has_value());
	REQUIRE(tx.has_value());
	CHECK(rx->addr == kBufBase + 0x1000);
	CHECK(rx->len == 1500);
	CHECK(rx->flags == kDescFWrite);
	CHECK(tx->addr == kBufBase + 0x2000);
	CHECK(tx->len == 60);
	CHECK(tx->flags == 0);
	CHECK(rx->id != tx->id);

	f.dev.push_used(tx->id, 0);
	f.dev.push_used(rx->id, 1234);
	f.dev.flush_used();
	std::vector<UsedBuffer> out(8);
	const size_t n = f.q.harvest_used(out);
	REQUIRE(n == 2);
	CHECK(out[0].token == 42);
	CHECK(out[0].len == 0);
	CHECK(out[1].token == 41);
	CHECK(out[1].len == 1234);
	CHECK_FALSE(out[1].bad_len);
	CHECK(f.q.free_count() == 8);
	CHECK(f.q.in_flight() == 0);
	CHECK(f.q.stats().added.get() == 2);
	CHECK(f.q.stats().published.get() == 2);
	CHECK(f.q.stats().harvested.get() == 2);
	CHECK(f.q.stats().corrupt_total() == 0);
}

TEST_CASE("SplitQueue: a device-readable buffer's used length is ignored, not trusted") {
	Fixture f(4);
	REQUIRE(f.q.add_buffer(kBufBase, 60, false, 7));
	f.q.publish();
	auto d = f.dev.take_avail();
	f.dev.push_used(d->id, 5000); // nonsense for a buffer the device only read
	f.dev.flush_used();
	std::vector<UsedBuffer> out(4);
	REQUIRE(f.q.harvest_used(out) == 1);
	CHECK(out[0].token == 7);
	CHECK(out[0].len == 0);
	CHECK_FALSE(out[0].bad_len);
	CHECK(f.q.stats().corrupt_total() == 0);
}

TEST_CASE("SplitQueue: add fails cleanly when every descriptor is taken, and is counted") {
	Fixture f(4);
	for (uint64_t t = 0; t < 4; t++)
		REQUIRE(f.q.add_buffer(kBufBase + t * 2048, 2048, true, t));
	CHECK(f.q.free_count() == 0);
	CHECK_FALSE(f.q.add_buffer(kBufBase, 2048, true, 99));
	CHECK(f.q.stats().ring_full.get() == 1);
	CHECK(f.q.pending() == 4); // the refused add changed nothing
	CHECK(f.q.stats().added.get() == 4);

	f.q.publish();
	CHECK_FALSE(f.q.add_buffer(kBufBase, 2048, true, 99));
	CHECK(f.q.stats().ring_full.get() == 2);

	auto d = f.dev.take_avail();
	f.dev.push_used(d->id, 10);
	f.dev.flush_used();
	std::vector<UsedBuffer> out(4);
	REQUIRE(f.q.harvest_used(out) == 1);
	CHECK(out[0].token == 0);
	CHECK(f.q.free_count() == 1);
	CHECK(f.q.add_buffer(kBufBase, 2048, true, 99));
	CHECK(f.q.stats().ring_full.get() == 2);
	f.q.publish();
	for (uint16_t id = 1; id < 4; id++)
		CHECK(f.dev.take_avail()->id == id);
	CHECK(f.dev.take_avail()->id == d->id); // the freed descriptor was reused
}

TEST_CASE("SplitQueue: harvest_used stops at max and the callback may re-add buffers") {
	Fixture f(8);
	for (uint64_t t = 0; t < 8; t++)
		REQUIRE(f.q.add_buffer(kBufBase, 100, true, t));
	f.q.publish();
	while (auto d = f.dev.take_avail())
		f.dev.push_used(d->id, 1);
	f.dev.flush_used();
	std::vector<uint64_t> seen;
	CHECK(f.q.harvest_used([&](const UsedBuffer& u) { seen.push_back(u.token); }, 3) == 3);
	CHECK(f.q.harvest_used([&](const UsedBuffer& u) {
		seen.push_back(u.token);
		CHECK(f.q.add_buffer(kBufBase, 100, true, 100 + u.token)); // recycle in place
	}) == 5);
	CHECK(seen == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7});
	CHECK(f.q.pending() == 5);
	CHECK(f.q.free_count() == 3);
}

// The long run: more than 65536 buffers through a ring of 8, so avail->idx,
// used->idx and both event words wrap several times. Driver and device take
// turns in small steps picked at random, so every interleaving of "looked,
// found nothing" and "re-armed" with the other side's work occurs. The device
// behaves like vhost: it takes and returns buffers while awake, flushes and
// signals, and goes to sleep only after finding the ring empty and re-arming
// (vhost_enable_notify). The driver adds, publishes and kicks as needed,
// harvests, and sleeps only after finding nothing and re-arming. After every
// step, nobody may be asleep while there is work for it: no lost kick or call.
TEST_CASE("SplitQueue: indices wrap at 16 bits with no lost kick or call over 200000 buffers") {
	Fixture f(8);
	constexpr uint64_t kTotal = 200000;
	enum class Dev { asleep, running, found_empty } dev_state = Dev::asleep;
	enum class Drv { running, found_nothing, asleep } drv_state = Drv::running;
	uint64_t rng = 1;
	uint64_t next_token = 0, expect_token = 0;
	uint64_t kicks = 0, calls = 0, lost_kick = 0, lost_call = 0, wrong = 0, deadlocks = 0;
	uint16_t prev_avail = 0;
	int avail_wraps = 0;

	auto driver_step = [&](uint64_t r) {
		if (drv_state == Drv::found_nothing) { // second half of "go to sleep": re-arm and re-check
			drv_state = f.q.enable_call_notifications() ? Drv::running : Drv::asleep;
			return;
		}
		if (r % 2 == 0) { // add a batch of 0..8 buffers (RX-style, the device fills them), publish
			for (uint64_t i = 0, batch = (r >> 1) % 9; i < batch && next_token < kTotal; i++) {
				const uint32_t len = 64 + uint32_t(next_token % 1024);
				if (!f.q.add_buffer(kBufBase + next_token * 4096, len, true, next_token))
					break;
				next_token++;
			}
			const Published p = f.q.publish();
			if (f.q.needs_kick(p.old_idx, p.new_idx)) {
				kicks++;
				if (dev_state == Dev::asleep) dev_state = Dev::running;
			}
			if (f.q.avail_idx() < prev_avail) avail_wraps++;
			prev_avail = f.q.avail_idx();
			return;
		}
		const size_t n = f.q.harvest_used([&](const UsedBuffer& u) {
			const uint64_t t = u.token;
			if (t != expect_token || u.bad_len ||
			    u.len != 64 + t % 1024 - (kBufBase / 4096 + t) % 7)
				wrong++;
			expect_token = t + 1;
		});
		if (n == 0 && f.q.in_flight() > 0 && next_token == kTotal) drv_state = Drv::found_nothing;
		if (n == 0 && f.q.in_flight() > 0 && (r >> 8) % 4 == 0) drv_state = Drv::found_nothing;
	};
	auto device_step = [&](uint64_t r) {
		if (dev_state == Dev::found_empty) { // vhost_enable_notify: re-arm and re-check
			dev_state = f.dev.enable_notify() ? Dev::running : Dev::asleep;
			return;
		}
		for (uint64_t i = 0, todo = r % 4; i < todo; i++) {
			auto d = f.dev.take_avail();
			if (!d) break;
			// Fill len - (addr / 4096 % 7) bytes: the driver can check it from the token.
			f.dev.push_used(d->id, d->len - uint32_t(d->addr / 4096 % 7));
		}
		if (f.dev.flush_used()) {
			calls++;
			if (drv_state == Drv::asleep) drv_state = Drv::running;
		}
		if (f.dev.avail_pending() == 0 && (r >> 4) % 2 == 0) dev_state = Dev::found_empty;
	};

	while (expect_token < kTotal) {
		const uint64_t r = splitmix64(rng);
		const bool drv_can = drv_state != Drv::asleep, dev_can = dev_state != Dev::asleep;
		if (!drv_can && !dev_can) {
			deadlocks++;
			drv_state = Drv::running;
			dev_state = Dev::running;
			continue;
		}
		if (drv_can && (!dev_can || (r >> 60) % 2 == 0))
			driver_step(r);
		else
			device_step(r);
		// Nobody sleeps while there is work for them.
		if (dev_state == Dev::asleep && f.dev.avail_pending() != 0) {
			lost_kick++;
			dev_state = Dev::running;
		}
		if (drv_state == Drv::asleep && f.dev.used_idx() != f.q.last_used_idx()) {
			lost_call++;
			drv_state = Drv::running;
		}
	}
	CHECK(wrong == 0);
	CHECK(lost_kick == 0);
	CHECK(lost_call == 0);
	CHECK(deadlocks == 0);
	CHECK(avail_wraps >= 3);
	CHECK(f.q.stats().harvested.get() == kTotal);
	CHECK(f.q.stats().corrupt_total() == 0);
	CHECK(f.q.free_count() == 8);
	CHECK(f.q.stats().kicks_needed.get() == kicks);
	// Event index earns its keep: many publishes need no kick, many completions no call.
	CHECK(f.q.stats().kicks_suppressed.get() > kicks / 4);
	CHECK(calls < kTotal / 2);
	MESSAGE("kicks ", kicks, " suppressed ", f.q.stats().kicks_suppressed.get(), " calls ", calls);
}

TEST_CASE("SplitQueue: no kick while the device's avail_event is ahead, a kick when the batch reaches it") {
	for (uint32_t start : {0u, 65530u}) { // the second run crosses the 16-bit wrap
		INFO("starting index ", start);
		Fixture f(16);
		advance(f, start);
		const uint16_t base = f.q.avail_idx();
		CHECK(base == uint16_t(start));
		// The device asks to be woken at entry base + 5 (as vhost_enable_notify
		// would with more entries in hand, or a device batching its wake-ups).
		f.dev.set_avail_event(uint16_t(base + 5));
		for (int i = 0; i < 5; i++) {
			REQUIRE(f.q.add_buffer(kBufBase, 64, true, uint64_t(i)));
			const Published p = f.q.publish();
			CHECK_FALSE(f.q.needs_kick(p.old_idx, p.new_idx));
			// Idle once avail->idx reaches avail_event: the next entry is the awaited one.
			CHECK(f.q.ring_idle() == (i == 4));
		}
		CHECK(f.q.stats().kicks_suppressed.get() == 5);
		REQUIRE(f.q.add_buffer(kBufBase, 64, true, 5)); // entry base + 5
		const Published p = f.q.publish();
		CHECK(f.q.needs_kick(p.old_idx, p.new_idx));
		CHECK(f.q.stats().kicks_needed.get() == 1);
	}
}

TEST_CASE("SplitQueue: a batch that jumps over avail_event still kicks, across the wrap") {
	Fixture f(16);
	advance(f, 65533); // avail->idx 65533, avail_event 65533
	REQUIRE(f.q.ring_idle());
	f.dev.set_avail_event(uint16_t(65535));
	for (uint64_t t = 0; t < 6; t++)
		REQUIRE(f.q.add_buffer(kBufBase, 64, true, t));
	const Published p = f.q.publish(); // 65533 .. 2 (wrapped), covering 65535
	CHECK(p.old_idx == 65533);
	CHECK(p.new_idx == 3);
	CHECK(f.q.needs_kick(p.old_idx, p.new_idx));
	// A device busy far behind (stale avail_event) is not kicked.
	f.dev.set_avail_event(uint16_t(65000));
	REQUIRE(f.q.add_buffer(kBufBase, 64, true, 6));
	const Published p2 = f.q.publish();
	CHECK_FALSE(f.q.needs_kick(p2.old_idx, p2.new_idx));
	// Publishing nothing never kicks and is not counted.
	const Published none = f.q.publish();
	CHECK(none.count() == 0);
	CHECK_FALSE(f.q.needs_kick(none.old_idx, none.new_idx));
	CHECK(f.q.stats().kicks_needed.get() + f.q.stats().kicks_suppressed.get() == 2);
}

TEST_CASE("SplitQueue: kick_unasked() flags a kick for a busy device, not one it asked for") {
	for (uint32_t start : {0u, 65534u}) { // the second run crosses the 16-bit wrap
		INFO("starting index ", start);
		Fixture f(16);
		advance(f, start); // device idle, avail_event = avail->idx
		// Asleep: the batch contains the awaited entry; needs_kick() and the audit agree.
		for (uint64_t t = 0; t < 3; t++)
			REQUIRE(f.q.add_buffer(kBufBase, 64, true, t));
		const Published asked = f.q.publish();
		CHECK(f.q.needs_kick(asked.old_idx, asked.new_idx));
		CHECK_FALSE(f.q.kick_unasked(asked));
		// The device wakes and takes one buffer; it is busy and does not re-arm.
		REQUIRE(f.dev.take_avail());
		REQUIRE(f.q.add_buffer(kBufBase, 64, true, 3));
		const Published busy = f.q.publish();
		CHECK_FALSE(f.q.needs_kick(busy.old_idx, busy.new_idx));
		// A kick for it anyway (event index ignored) is what the audit counts.
		CHECK(f.q.kick_unasked(busy));
		// Woken some other way, the device took everything and re-armed at
		// the new index before the kick went out: not counted.
		while (f.dev.take_avail())
			;
		CHECK_FALSE(f.dev.enable_notify());
		CHECK_FALSE(f.q.kick_unasked(busy));
		// A kick with nothing published is never asked for.
		const Published none = f.q.publish();
		CHECK(f.q.kick_unasked(none));
	}
}

TEST_CASE("SplitQueue: a queue started at start_idx 65534 kicks first, wraps and calls as at 0") {
	AlignedRegion mem(ring_layout(4)->total_bytes);
	SplitQueue q(mem.span(), 4, kDefaultUsedAlign, 65534);
	DeviceModel dev(mem.data(), q.layout(), 65534);
	CHECK(q.avail_idx() == 65534);
	CHECK(q.last_used_idx() == 65534);
	CHECK(q.device_avail_event() == 65534);
	CHECK(q.ring_idle());
	CHECK(dev.used_event() == 65534);
	CHECK(dev.avail_pending() == 0);
	CHECK_FALSE(q.enable_call_notifications());

	for (uint64_t t = 0; t < 4; t++)
		REQUIRE(q.add_buffer(kBufBase, 64, true, t));
	const Published p = q.publish();
	CHECK(p.old_idx == 65534);
	CHECK(p.new_idx == 2);
	CHECK(q.needs_kick(p.old_idx, p.new_idx)); // first publish: the device waits at 65534
	CHECK(dev.avail_pending() == 4);
	while (auto d = dev.take_avail())
		dev.push_used(d->id, 10);
	CHECK(dev.flush_used()); // first completion: we asked for a call at 65534
	std::vector<uint64_t> got;
	q.harvest_used([&](const UsedBuffer& u) { got.push_back(u.token); });
	CHECK(got == std::vector<uint64_t>{0, 1, 2, 3});
	CHECK(q.last_used_idx() == 2);
	CHECK(q.stats().corrupt_total() == 0);
}

TEST_CASE("SplitQueue: ring_idle() is true exactly when the device waits for the next entry") {
	Fixture f(8);
	CHECK(f.q.ring_idle()); // fresh: avail_event 0 == avail->idx 0
	REQUIRE(f.q.add_buffer(kBufBase, 64, false, 1));
	CHECK(f.q.ring_idle()); // queued, not published: the device still waits for entry 0
	f.q.publish();
	CHECK_FALSE(f.q.ring_idle()); // entry 0 is with the device now
	f.dev.take_avail();
	CHECK_FALSE(f.q.ring_idle()); // taken, but the device has not asked for more yet
	CHECK_FALSE(f.dev.enable_notify());
	CHECK(f.q.ring_idle()); // it found the ring empty and asked to be woken at entry 1
	CHECK(f.q.device_avail_event() == 1);
	// ring_idle() agrees with the kick decision for a one-buffer publish.
	REQUIRE(f.q.add_buffer(kBufBase, 64, false, 2));
	const Published p = f.q.publish();
	CHECK(f.q.needs_kick(p.old_idx, p.new_idx));
}

TEST_CASE("SplitQueue: enable_call_notifications re-arms used_event and catches the race") {
	Fixture f(8);
	for (uint64_t t = 0; t < 3; t++)
		REQUIRE(f.q.add_buffer(kBufBase, 64, true, t));
	f.q.publish();
	for (int i = 0; i < 3; i++)
		f.dev.take_avail();

	// Nothing used yet: arm for entry 0 and sleep.
	CHECK_FALSE(f.q.enable_call_notifications());
	CHECK(f.dev.used_event() == 0);
	f.dev.push_used(0, 1);
	CHECK(f.dev.flush_used()); // entry 0 written: signal
	f.dev.push_used(1, 1);
	CHECK_FALSE(f.dev.flush_used()); // not re-armed: no second signal

	CHECK(f.q.harvest_used([](const UsedBuffer&) {}) == 2);
	// The race: the device completes entry 2 after our harvest but before we
	// re-arm, and sees the stale used_event (0), so it does not signal.
	f.dev.push_used(2, 1);
	CHECK_FALSE(f.dev.flush_used());
	// Re-arming re-checks used->idx and says "do not sleep, harvest again".
	CHECK(f.q.enable_call_notifications());
	CHECK(f.dev.used_event() == 2);
	CHECK(f.q.harvest_used([](const UsedBuffer&) {}) == 1);
	CHECK_FALSE(f.q.enable_call_notifications());
	CHECK(f.dev.used_event() == 3);
}

} // namespace
} // namespace esptun::virtio
