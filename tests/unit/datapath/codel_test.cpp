// Codel (datapath/codel.hpp): the RFC 8289 state machine on a simulated
// clock, one datagram per microsecond.
#include "datapath/codel.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <vector>

using esptun::datapath::Codel;
using esptun::datapath::CodelParams;

namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;
const CodelParams kParams{500 * kUs, 10 * kMs};

/// Feeds one bulk datagram per microsecond from @from to @to (ns) with a
/// fixed @sojourn; returns the times of the signalled ones.
std::vector<int64_t> run(Codel& c, int64_t from, int64_t to, int64_t sojourn, bool bulk = true) {
	std::vector<int64_t> at;
	for (int64_t t = from; t < to; t += kUs)
		if (c.on_dequeue(sojourn, t, bulk)) at.push_back(t);
	return at;
}

} // namespace

TEST_CASE("codel: a queue under target is never signalled") {
	Codel c(kParams);
	CHECK(run(c, kMs, 2000 * kMs, 499 * kUs).empty());
	CHECK_FALSE(c.dropping());
	CHECK(c.engaged() == 0);
	// A burst above target shorter than an interval: still nothing.
	CHECK(run(c, 2000 * kMs, 2000 * kMs + 9 * kMs, 5 * kMs).empty());
	CHECK(run(c, 2009 * kMs, 2100 * kMs, 0).empty());
	CHECK(c.engaged() == 0);
}

TEST_CASE("codel: after an interval above target, signals follow the control law") {
	Codel c(kParams);
	const int64_t start = 100 * kMs;
	const std::vector<int64_t> at = run(c, start, start + 200 * kMs, kMs);
	REQUIRE(at.size() >= 10);
	// The first one an interval after the sojourn first exceeded target.
	CHECK(at[0] == start + kParams.interval_ns);
	CHECK(c.dropping());
	CHECK(c.engaged() == 1);
	// Then interval/sqrt(n) apart: each gap within the 1 us clock step of
	// the law, so the rate rises as the queue stays.
	for (size_t i = 1; i < at.size(); i++) {
		const double want = double(kParams.interval_ns) / std::sqrt(double(i));
		INFO("gap " << i);
		CHECK(std::abs(double(at[i] - at[i - 1]) - want) <= double(kUs));
	}
	CHECK(c.count() == at.size());
}

TEST_CASE("codel: back under target ends the spell; a quick return resumes its rate") {
	Codel c(kParams);
	std::vector<int64_t> at = run(c, 0, 100 * kMs, kMs);
	const size_t first_spell = at.size();
	REQUIRE(first_spell >= 5);
	// One datagram under target leaves the signalling state.
	CHECK_FALSE(c.on_dequeue(100 * kUs, 100 * kMs, true));
	CHECK_FALSE(c.dropping());
	// Above target again soon after (well within 16 intervals): after the
	// interval, the count resumes at the last spell's count less its start
	// (RFC 8289's delta), so the spacing is short at once.
	at = run(c, 101 * kMs, 200 * kMs, kMs);
	REQUIRE(at.size() >= 2);
	CHECK(c.engaged() == 2);
	CHECK(at[0] == 111 * kMs);
	const double want = double(kParams.interval_ns) / std::sqrt(double(first_spell - 1));
	CHECK(std::abs(double(at[1] - at[0]) - want) <= double(kUs));
	// Long after: starts over at one signal per interval.
	CHECK_FALSE(c.on_dequeue(0, 200 * kMs, true));
	at = run(c, 1000 * kMs, 1100 * kMs, kMs);
	REQUIRE(at.size() >= 2);
	CHECK(at[1] - at[0] == kParams.interval_ns);
}

TEST_CASE("codel: a signal due on a small datagram goes to the next bulk one") {
	Codel c(kParams);
	// Small datagrams only, above target: signals fall due but none is given.
	CHECK(run(c, 0, 50 * kMs, kMs, false).empty());
	CHECK(c.dropping());
	const uint32_t due = c.count();
	REQUIRE(due >= 5);
	// The next bulk datagrams carry what is owed, at most kMaxOwed of it.
	unsigned paid = 0;
	while (c.on_dequeue(kMs, 50 * kMs, true))
		paid++;
	CHECK(paid == Codel::kMaxOwed);
	// Debts are forgotten once the queue is short again.
	CHECK(run(c, 51 * kMs, 52 * kMs, kMs, false).empty());
	CHECK_FALSE(c.on_dequeue(0, 52 * kMs, false));
	CHECK_FALSE(c.dropping());
	CHECK_FALSE(c.on_dequeue(kMs, 52 * kMs + kUs, true));
}

TEST_CASE("codel: a negative sojourn (a clock step) counts as none") {
	Codel c(kParams);
	CHECK(run(c, 0, 100 * kMs, -5 * kMs).empty());
	CHECK(c.engaged() == 0);
}
