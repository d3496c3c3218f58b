// Precedence (datapath/precedence.hpp): when a worker steps down from and
// back up to running ahead of ordinary threads, on simulated clocks.
#include "datapath/precedence.hpp"

#include <doctest/doctest.h>
#include <vector>

using esptun::datapath::Precedence;
using esptun::datapath::PrecedenceParams;
using Change = Precedence::Change;

namespace {

constexpr int64_t kMs = 1'000'000;

/// A worker that uses @pct percent of a CPU for @ms milliseconds, looked at
/// every 100 us as its passes would; keeps the changes in order.
struct Worker {
	Precedence prec{PrecedenceParams{}, true, 0, 0};
	int64_t now = 0, cpu = 0;
	std::vector<Change> changes;

	void run(unsigned pct, int64_t ms) {
		const int64_t step = kMs / 10;
		for (int64_t t = 0; t < ms * 10; t++) {
			now += step;
			cpu += step * pct / 100;
			if (!prec.due(now)) continue;
			if (Change c = prec.update(now, cpu); c != Change::none) changes.push_back(c);
		}
	}
};

} // namespace

TEST_CASE("precedence: a worker with work and room to spare keeps it") {
	Worker w;
	w.run(10, 1000);
	w.run(45, 1000);
	w.run(94, 1000);
	w.run(5, 1000);
	CHECK(w.changes.empty());
	CHECK(w.prec.elevated());
	CHECK(w.prec.last_load_pct() == 5);
}

TEST_CASE("precedence: a saturated worker steps down after three windows in a row and stays down") {
	Worker w;
	w.run(20, 100);
	w.run(100, 500);
	REQUIRE(w.changes.size() == 1);
	CHECK(w.changes[0] == Change::lower);
	CHECK_FALSE(w.prec.elevated());
	// Between the thresholds nothing changes: no flapping.
	w.run(80, 500);
	CHECK(w.changes.size() == 1);
	CHECK_FALSE(w.prec.elevated());
	// Once the load leaves room it steps up again.
	w.run(30, 100);
	REQUIRE(w.changes.size() == 2);
	CHECK(w.changes[1] == Change::raise);
	CHECK(w.prec.elevated());
}

TEST_CASE("precedence: a nearly idle worker is an ordinary thread until it has work") {
	Worker w;
	w.run(1, 100); // the first window after start-up
	REQUIRE(w.changes.size() == 1);
	CHECK(w.changes[0] == Change::lower);
	// Light work (5-9%) neither steps it up nor, once up, down.
	w.run(7, 500);
	CHECK(w.changes.size() == 1);
	w.run(12, 40);
	REQUIRE(w.changes.size() == 2);
	CHECK(w.changes[1] == Change::raise);
	w.run(7, 500);
	CHECK(w.changes.size() == 2);
	CHECK(w.prec.elevated());
	w.run(0, 40);
	REQUIRE(w.changes.size() == 3);
	CHECK(w.changes[2] == Change::lower);
}

TEST_CASE("precedence: the third saturated window in a row is the one that steps down") {
	// 20 ms windows: 60 ms at full load are enough; 40 ms are not, nor are
	// two saturated windows, one with room, and two more.
	Worker w;
	w.run(100, 40);
	CHECK(w.changes.empty());
	w.run(40, 20);
	w.run(100, 40);
	CHECK(w.changes.empty());
	CHECK(w.prec.last_load_pct() == 100);
	w.run(100, 20);
	REQUIRE(w.changes.size() == 1);
	CHECK(w.changes[0] == Change::lower);
	// One saturated window at the threshold counts (95%), one just below
	// (94%) starts the count again.
	Worker v;
	v.run(95, 40);
	v.run(94, 20);
	v.run(95, 40);
	CHECK(v.changes.empty());
	v.run(95, 20);
	REQUIRE(v.changes.size() == 1);
	CHECK(v.changes[0] == Change::lower);
}

TEST_CASE("precedence: a long sleep is one window, judged when the worker wakes") {
	Precedence p(PrecedenceParams{}, false, 0, 0);
	CHECK_FALSE(p.due(19 * kMs));
	CHECK(p.due(20 * kMs));
	// Asleep for 10 s, then a pass: 1 ms of CPU in 10 s, idle: it stays down.
	CHECK(p.update(10'000 * kMs, 1 * kMs) == Change::none);
	CHECK(p.last_load_pct() == 0);
	CHECK_FALSE(p.due(10'010 * kMs));
	// A busy window after it steps it up.
	CHECK(p.update(10'020 * kMs, 5 * kMs) == Change::raise);
	CHECK(p.last_load_pct() == 20);
}

TEST_CASE("precedence: clocks that stand still or run backwards change nothing") {
	PrecedenceParams one; // the clocks, not the count of saturated windows
	one.saturated_windows = 1;
	Precedence p(one, true, 100 * kMs, 50 * kMs);
	CHECK(p.update(100 * kMs, 60 * kMs) == Change::none);
	CHECK(p.update(90 * kMs, 70 * kMs) == Change::none);
	CHECK(p.elevated());
	// More CPU than wall time (a coarse CPU clock) counts as a full CPU.
	CHECK(p.update(130 * kMs, 200 * kMs) == Change::lower);
	CHECK(p.last_load_pct() == 100);
	// CPU time that went backwards counts as none: idle, it stays down.
	CHECK(p.update(160 * kMs, 100 * kMs) == Change::none);
	CHECK(p.last_load_pct() == 0);
	CHECK_FALSE(p.elevated());
}

TEST_CASE("precedence: a busy worker that gets a CPU at once stays an ordinary thread") {
	using esptun::datapath::RunWaits;
	Precedence p(PrecedenceParams{}, false, 0, 0, RunWaits{0, 0});
	// 30% load, 1,000 runs in the window, 10 us waited on average: uncontended.
	CHECK(p.update(20 * kMs, 6 * kMs, RunWaits{10 * kMs, 1000}) == Change::none);
	CHECK(p.last_wait_ns() == 10'000);
	CHECK_FALSE(p.elevated());
	// The same load, each run after 200 us in the queue: contended, it steps up.
	CHECK(p.update(40 * kMs, 12 * kMs, RunWaits{30 * kMs, 1100}) == Change::raise);
	CHECK(p.last_wait_ns() == 200'000);
	// Elevated, it no longer waits; that alone does not step it down.
	CHECK(p.update(60 * kMs, 18 * kMs, RunWaits{30 * kMs, 1200}) == Change::none);
	CHECK(p.elevated());
	// Unknown waits (no schedstat): the load alone decides.
	Precedence q(PrecedenceParams{}, false, 0, 0);
	CHECK(q.update(20 * kMs, 6 * kMs) == Change::raise);
	CHECK(q.last_wait_ns() == 0);
}
