// SplitQueue with the device model running in its own thread, as vhost's
// worker does: real concurrency on the shared rings, so the barriers and the
// re-check after re-arming (both directions) are exercised, not just the
// arithmetic. Kick and call are condition-variable "eventfds"; a wait that
// times out while work is pending is a lost wake-up and fails the test
// instead of hanging it.
#include "virtio/split_queue.hpp"

#include "tests/unit/support/device_model_test_util.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace esptun::virtio {
namespace {

using namespace std::chrono_literals;
using test::AlignedRegion;
using test::DeviceModel;

/// An eventfd's semantics: signal() adds, wait_for() consumes everything or times out.
class FakeEventFd {
public:
	void signal() {
		{
			std::lock_guard<std::mutex> g(m_);
			count_++;
		}
		cv_.notify_one();
	}
	bool wait_for(std::chrono::milliseconds t) {
		std::unique_lock<std::mutex> g(m_);
		if (!cv_.wait_for(g, t, [&] { return count_ > 0; })) return false;
		count_ = 0;
		return true;
	}

private:
	std::mutex m_;
	std::condition_variable cv_;
	uint64_t count_ = 0;
};

constexpr uint64_t kBufBase = 0x10000000;

uint32_t buf_len(uint64_t token) { return 64 + uint32_t(token % 1500); }
uint32_t written_len(uint64_t addr, uint32_t len) { return len - uint32_t(addr % 13); }

void run(uint32_t queue_size, uint64_t total) {
	AlignedRegion mem(ring_layout(queue_size)->total_bytes);
	SplitQueue q(mem.span(), queue_size);
	DeviceModel dev(mem.data(), q.layout());
	FakeEventFd kick, call;
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> lost_kicks{0}, bad_descs{0}, device_sleeps{0};

	// The device: vhost's handle_tx/handle_rx loop.
	std::thread device([&] {
		while (!stop.load()) {
			for (;;) {
				auto d = dev.take_avail();
				if (!d) {
					if (dev.enable_notify()) continue; // a buffer slipped in: keep going
					break;
				}
				// The descriptor must be the one the driver wrote before publishing.
				const uint64_t token = d->addr - kBufBase;
				if (d->id >= queue_size || d->len != buf_len(token) ||
				    d->flags != kDescFWrite)
					bad_descs++;
				dev.push_used(d->id, written_len(d->addr, d->len));
				if (dev.flush_used()) call.signal();
			}
			device_sleeps++;
			if (!kick.wait_for(2000ms) && !stop.load() && dev.avail_pending() != 0) lost_kicks++;
		}
	});

	// The driver: keep the ring full, harvest, sleep on the call when there is nothing to do.
	uint64_t next_token = 0, expect = 0, wrong = 0, lost_calls = 0, driver_sleeps = 0;
	while (expect < total) {
		while (next_token < total &&
		       q.add_buffer(kBufBase + next_token, buf_len(next_token), true, next_token))
			next_token++;
		const Published p = q.publish();
		if (q.needs_kick(p.old_idx, p.new_idx)) kick.signal();
		const size_t n = q.harvest_used([&](const UsedBuffer& u) {
			if (u.token != expect || u.bad_len ||
			    u.len != written_len(kBufBase + u.token, buf_len(u.token)))
				wrong++;
			expect = u.token + 1;
		});
		if (n == 0 && q.in_flight() > 0 && !q.enable_call_notifications()) {
			driver_sleeps++;
			if (!call.wait_for(2000ms)) {
				lost_calls++;
				if (lost_calls > 3) break;
			}
		}
	}
	stop.store(true);
	kick.signal();
	device.join();

	CHECK(wrong == 0);
	CHECK(expect == total);
	CHECK(lost_calls == 0);
	CHECK(lost_kicks.load() == 0);
	CHECK(bad_descs.load() == 0);
	CHECK(q.stats().corrupt_total() == 0);
	CHECK(q.free_count() == queue_size);
	MESSAGE("N=", queue_size, ": kicks ", q.stats().kicks_needed.get(), " suppressed ",
	        q.stats().kicks_suppressed.get(), ", device sleeps ", device_sleeps.load(),
	        ", driver sleeps ", driver_sleeps);
}

TEST_CASE("SplitQueue with a concurrent device: 100000 buffers, ring of 4, no lost wake-up") {
	run(4, 100000);
}

TEST_CASE("SplitQueue with a concurrent device: 100000 buffers, ring of 256, no lost wake-up") {
	run(256, 100000);
}

} // namespace
} // namespace esptun::virtio
