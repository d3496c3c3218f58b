// ReplayWindow as numbered tables, in the manner of WireGuard's replay
// counter self test: each step receives a low sequence number and states
// whether check() accepts it and which 64-bit number it infers (RFC 4303
// section 3.4.3 and appendix A2). Accepted steps are committed unless the
// step says the ICV failed.
#include "tunnel/replay_window.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace esptun {
namespace {

constexpr bool A = true;  // accept
constexpr bool R = false; // reject
constexpr uint64_t k2p32 = uint64_t(1) << 32;

struct Step {
	uint32_t seq_lo;
	bool accept;
	uint64_t inferred = 0; ///< the full sequence number check() must return (accepted steps)
	bool commit = true;    ///< false: the packet failed its ICV, nothing is recorded
};

void run_table(tunnel::ReplayWindow& w, const std::vector<Step>& steps) {
	for (size_t i = 0; i < steps.size(); i++) {
		const Step& s = steps[i];
		INFO("step ", i + 1, ": seq_lo ", s.seq_lo);
		std::optional<uint64_t> got = w.check(s.seq_lo);
		REQUIRE(got.has_value() == s.accept);
		if (!s.accept) continue;
		CHECK(*got == s.inferred);
		if (s.commit) w.commit(*got);
	}
}

TEST_CASE("ReplayWindow 1024 without ESN: first packet, order, duplicates, window edges, far jumps") {
	tunnel::ReplayWindow w(1024, false);
	run_table(w, {
	                 {0, R},              // 1: sequence number 0 is never sent (RFC 4303 3.3.3)
	                 {1, A, 1},           // 2: first packet
	                 {1, R},              // 3: duplicate
	                 {2, A, 2},           // 4
	                 {3, A, 3},           // 5
	                 {10, A, 10},         // 6: gap
	                 {5, A, 5},           // 7: reordered inside the window
	                 {5, R},              // 8: duplicate of a reordered one
	                 {4, A, 4},           // 9
	                 {10, R},             // 10
	                 {1033, A, 1033},     // 11: window now 10..1033
	                 {9, R},              // 12: 1033 - 9 = 1024 = size: left of the window
	                 {11, A, 11},         // 13: 1033 - 11 = 1022
	                 {10, R},             // 14: size - 1 away but already seen
	                 {2000, A, 2000},     // 15: window 977..2000
	                 {977, A, 977},       // 16: exactly size - 1 below the top
	                 {976, R},            // 17: exactly size below the top
	                 {977, R},            // 18
	                 {1999, A, 1999},     // 19
	                 {4048, A, 4048},     // 20: jump of 2048 = the whole 32-word ring
	                 {4047, A, 4047},     // 21: same ring bit as 1999 (seen): must be clear
	                 {3025, A, 3025},     // 22: same ring bit as 977 (seen), size - 1 below the top
	                 {3024, R},           // 23: size below the top
	                 {100000, A, 100000}, // 24: far jump
	                 {99000, A, 99000},   // 25: 1000 below the top
	                 {2000, R},           // 26: long gone
	                 {98977, A, 98977},   // 27: size - 1 below the top
	                 {98976, R},          // 28: size below the top
	                 {100000, R},         // 29
	                 {0xffffffff, A, 0xffffffff}, // 30: last number of a 32-bit SA
	                 {0xfffffffe, A, 0xfffffffe}, // 31
	                 {0, R},                      // 32: no wrap without ESN
	                 {5, R},                      // 33: a small number is far left, not "after the wrap"
	                 {0xffffffff, R},             // 34
	             });
	CHECK(w.highest() == 0xffffffff);
}

TEST_CASE("ReplayWindow 64 without ESN: edges and ring reuse") {
	// The 64-packet window (Cisco, Juniper, Windows) lives in a 4-word ring.
	tunnel::ReplayWindow w(64, false);
	run_table(w, {
	                 {1, A, 1},     // 1
	                 {64, A, 64},   // 2: window 1..64
	                 {1, R},        // 3
	                 {2, A, 2},     // 4: 62 below the top
	                 {65, A, 65},   // 5: window 2..65
	                 {1, R},        // 6: 64 below: left of the window
	                 {2, R},        // 7: seen
	                 {3, A, 3},     // 8: 62 below
	                 {129, A, 129}, // 9: window 66..129
	                 {65, R},       // 10: 64 below
	                 {66, A, 66},   // 11: 63 below = size - 1
	                 {385, A, 385}, // 12: jump of 256 = the whole ring
	                 {322, A, 322}, // 13: same ring bit as 66 (seen), 63 below
	                 {321, R},      // 14: 64 below
	                 {384, A, 384}, // 15
	                 {384, R},      // 16
	             });
}

TEST_CASE("ReplayWindow 8192 without ESN: WireGuard's window size") {
	tunnel::ReplayWindow w(8192, false);
	run_table(w, {
	                 {1, A, 1},         // 1
	                 {8192, A, 8192},   // 2: window 1..8192
	                 {1, R},            // 3: seen
	                 {8193, A, 8193},   // 4: window 2..8193
	                 {1, R},            // 5: left
	                 {2, A, 2},         // 6: 8191 below
	                 {3, A, 3},         // 7
	                 {24577, A, 24577}, // 8: jump of 16384 = the whole 256-word ring
	                 {16386, A, 16386}, // 9: same ring bit as 2 (seen), 8191 below
	                 {16385, R},        // 10: 8192 below
	                 {16387, A, 16387}, // 11: same ring bit as 3 (seen)
	                 {16387, R},        // 12
	                 {20000, A, 20000}, // 13
	             });
}

TEST_CASE("ReplayWindow 1024 with ESN: crossing 2^32 and late packets from the previous subspace") {
	tunnel::ReplayWindow w(1024, true);
	run_table(w, {
	                 {0, R},                      // 1: 64-bit number 0 is never sent
	                 {1, A, 1},                   // 2
	                 {0xfffffff0, A, 0xfffffff0}, // 3: far jump inside subspace 0
	                 {0xffffffff, A, 0xffffffff}, // 4: top = 2^32 - 1 (case A)
	                 {0, A, k2p32},               // 5: below the window bottom: next subspace
	                 {3, A, k2p32 + 3},           // 6: window now straddles 2^32 (case B)
	                 {0xfffffffe, A, 0xfffffffe}, // 7: late packet from subspace 0: Th - 1
	                 {0xffffffff, R},             // 8: seen, inferred in subspace 0
	                 {0xfffffc04, A, 0xfffffc04}, // 9: 2^32 + 3 - 1023: the window bottom
	                 {0xfffffc03, A, 2 * k2p32 - 0x3fd, false}, // 10: below the bottom: read as
	                                                            // ahead in subspace 1; the ICV fails
	                 {0xfffffc03, A, 2 * k2p32 - 0x3fd, false}, // 11: nothing was recorded
	                 {0, R},                                    // 12: 2^32 seen in step 5
	                 {1, A, k2p32 + 1},                         // 13
	                 {0x7fffffff, A, k2p32 + 0x7fffffff},       // 14: far jump in subspace 1 (case A)
	                 {0xffffffff, A, 2 * k2p32 - 1},            // 15: ahead: subspace 1
	                 {0, A, 2 * k2p32},                         // 16: next wrap
	                 {0xfffffffe, A, 2 * k2p32 - 2},            // 17: late: subspace 1
	                 {0xffffffff, R},                           // 18
	             });
	CHECK(w.highest() == 2 * k2p32);
}

TEST_CASE("ReplayWindow with ESN: a fresh SA whose first packet is just below 2^32") {
	// A fresh SA has no previous subspace: the straddling window (case B)
	// must not infer Th - 1 = -1.
	tunnel::ReplayWindow w(1024, true);
	run_table(w, {
	                 {0xfffffffe, A, 0xfffffffe}, // 1: first packet
	                 {0xfffffffd, A, 0xfffffffd}, // 2: reordered, same subspace
	                 {2, A, k2p32 + 2},           // 3: crossed
	                 {0xffffffff, A, 0xffffffff}, // 4: late, previous subspace
	                 {0xfffffffe, R},             // 5
	                 {1, A, k2p32 + 1},           // 6
	                 {0, A, k2p32},               // 7: low half 0 is valid after the wrap
	                 {0, R},                      // 8
	             });
}

TEST_CASE("ReplayWindow with ESN: a fresh SA with window 64 that starts in the middle of subspace 0") {
	tunnel::ReplayWindow w(64, true);
	run_table(w, {
	                 {30, A, 30},                 // 1: window straddles 0 but Th == 0
	                 {0xfffffff0, A, 0xfffffff0}, // 2: not "previous subspace": there is none
	                 {31, A, k2p32 + 31, false},  // 3: below the bottom: read as the next
	                                              //    subspace (the ICV then fails)
	                 {0xffffffb1, A, 0xffffffb1}, // 4: 63 below the top
	                 {0xffffffb1, R},             // 5
	                 {0xffffffb0, A, k2p32 + 0xffffffb0, false}, // 6: 64 below: next subspace
	             });
}

TEST_CASE("ReplayWindow 0 disables the replay check but still infers ESN high bits") {
	SUBCASE("without ESN") {
		tunnel::ReplayWindow w(0, false);
		run_table(w, {
		                 {0, R},    // 1: 0 is still never valid
		                 {1, A, 1}, // 2
		                 {1, A, 1}, // 3: duplicate accepted
		                 {5, A, 5}, // 4
		                 {3, A, 3}, // 5: older accepted
		                 {5, A, 5}, // 6
		                 {0, R},    // 7
		             });
		CHECK(w.highest() == 5);
	}
	SUBCASE("with ESN") {
		tunnel::ReplayWindow w(0, true);
		run_table(w, {
		                 {0, R},                              // 1
		                 {1, A, 1},                           // 2
		                 {0xfffffff0, A, 0xfffffff0},         // 3: nearer to 1 going back, but
		                                                      //    there is no subspace -1
		                 {5, A, k2p32 + 5},                   // 4: 21 ahead across the wrap
		                 {0xfffffff8, A, 0xfffffff8},         // 5: 13 behind across the wrap
		                 {5, A, k2p32 + 5},                   // 6: duplicate accepted
		                 {0, A, k2p32},                       // 7: 5 behind
		                 {0x80000004, A, k2p32 + 0x80000004}, // 8: 2^31 - 1 ahead
		                 {4, A, k2p32 + 4},                   // 9: exactly 2^31 away: behind
		                 {0x00000003, A, 2 * k2p32 + 3},      // 10: 2^31 - 1 ahead across the wrap
		             });
		CHECK(w.highest() == 2 * k2p32 + 3);
	}
}

TEST_CASE("ReplayWindow check() changes nothing: a packet checked but never committed is still new") {
	tunnel::ReplayWindow w(1024, false);
	for (uint32_t s = 1; s <= 5; s++)
		w.commit(*w.check(s));
	REQUIRE(w.highest() == 5);

	// Checked many times, a far jump among them, never committed (ICV failed).
	for (int i = 0; i < 3; i++) {
		CHECK(w.check(6) == std::optional<uint64_t>(6));
		CHECK(w.check(50000) == std::optional<uint64_t>(50000));
	}
	CHECK(w.highest() == 5);
	CHECK(w.check(4) == std::nullopt); // the window did not slide to 50000
	CHECK(w.check(6) == std::optional<uint64_t>(6));

	// An authenticated packet then makes the same number a replay.
	CHECK(w.commit(6));
	CHECK(w.check(6) == std::nullopt);
}

TEST_CASE("ReplayWindow commit() returns true only for a new highest sequence number") {
	tunnel::ReplayWindow w(1024, false);
	CHECK(w.commit(10));
	CHECK_FALSE(w.commit(7));
	CHECK(w.highest() == 10);
	CHECK(w.commit(11));
	CHECK_FALSE(w.commit(3));
	CHECK(w.highest() == 11);
}

TEST_CASE("ReplayWindow commit after a jump larger than the ring clears every bit") {
	for (uint32_t size : {64u, 1000u, 1024u, 4096u}) {
		for (bool esn : {false, true}) {
			INFO("size ", size, " esn ", esn);
			tunnel::ReplayWindow w(size, esn);
			// Fill a window's worth (and a bit more) of sequence numbers.
			for (uint64_t s = 1; s <= uint64_t(size) + 100; s++)
				w.commit(s);
			// Jump far further than any ring; with ESN across several subspaces.
			uint64_t top = esn ? 5 * k2p32 + 0x12345 : 0x0fedcba9;
			CHECK(w.commit(top));
			CHECK(w.highest() == top);
			CHECK(w.check(uint32_t(top)) == std::nullopt);
			// Every other number in the new window is unseen, whatever bit it shares.
			size_t bad = 0;
			for (uint64_t back = 1; back < size; back++)
				if (w.check(uint32_t(top - back)) != std::optional<uint64_t>(top - back))
					bad++;
			CHECK(bad == 0);
			// Just below the window: a replay without ESN, the next subspace with it.
			std::optional<uint64_t> below = w.check(uint32_t(top - size));
			if (esn)
				CHECK(below == std::optional<uint64_t>(top - size + k2p32));
			else
				CHECK(below == std::nullopt);
		}
	}
}

TEST_CASE("ReplayWindow: every number in the window is accepted once, then every one is a replay") {
	// Exhaustive over a window that is not a multiple of 64 and a ring offset.
	for (uint32_t size : {1u, 63u, 64u, 65u, 100u, 1024u}) {
		INFO("size ", size);
		tunnel::ReplayWindow w(size, false);
		uint64_t top = 1000003;
		w.commit(top);
		for (uint64_t back = 1; back < size; back++) {
			REQUIRE(w.check(uint32_t(top - back)) == std::optional<uint64_t>(top - back));
			w.commit(top - back);
		}
		for (uint64_t back = 0; back <= size + 64; back++)
			REQUIRE(w.check(uint32_t(top - back)) == std::nullopt);
		CHECK(w.check(uint32_t(top + 1)) == std::optional<uint64_t>(top + 1));
	}
}

} // namespace
} // namespace esptun
