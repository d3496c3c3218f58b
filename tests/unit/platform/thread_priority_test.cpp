// platform/thread_priority.hpp: stepping the calling thread into and out of
// SCHED_FIFO, and its run-queue statistics.
#include "platform/thread_priority.hpp"

#include <doctest/doctest.h>
#include <thread>
#include <unistd.h>

using namespace esptun::platform;

TEST_CASE("thread priority: a thread steps up to SCHED_FIFO and down again (root)") {
	REQUIRE_MESSAGE(::geteuid() == 0, "SCHED_FIFO needs root (or CAP_SYS_NICE) here");
	std::thread t([] {
		CHECK_FALSE(is_realtime());
		CHECK(set_realtime(true) == 0);
		CHECK(is_realtime());
		CHECK(set_realtime(false) == 0);
		CHECK_FALSE(is_realtime());
	});
	t.join();
}

TEST_CASE("thread priority: run-queue statistics count the thread's runs") {
	RunQueueStats stats;
	const auto a = stats.read();
	REQUIRE(a.has_value());
	CHECK(a->waited_ns >= 0);
	for (int i = 0; i < 5; i++)
		::usleep(1000); // each sleep ends with the thread put on a CPU again
	const auto b = stats.read();
	REQUIRE(b.has_value());
	CHECK(b->runs >= a->runs + 5);
	CHECK(b->waited_ns >= a->waited_ns);
	CHECK(thread_cpu_ns() > 0);
}
