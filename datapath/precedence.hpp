// Precedence: when a worker runs ahead of the host's ordinary threads.
//
// Beside a bulk transfer, a probe crossing the tunnel waits mostly for a
// CPU: the gateway's worker is one of several busy threads (the transfer's
// own ends, on a small machine) and the scheduler gives it its turn when
// its share says so, milliseconds later (docs/latency-under-load.md
// measures it). The kernel's own packet processing runs in softirq context,
// ahead of every process, and falls back to an ordinary thread (ksoftirqd)
// once it has taken its budget. A worker does much the same: while it has
// work but leaves room, it runs under SCHED_FIFO, so a packet that wakes it
// is handled at once. It is an ordinary thread
// - once it has used most of a CPU for a few windows in a row (a flood,
//   not a burst): a real-time thread that never sleeps would starve the
//   IKE thread, the control socket and everything else on its CPU; it
//   steps up again once its load leaves room;
// - while it is nearly idle, or gets a CPU at once anyway (it did not wait
//   on a run queue): then running ahead gains nothing, and a real-time
//   wake-up lands on the CPU the worker ran on last and preempts whatever
//   runs there, where an ordinary one may go to an idle CPU; the idle
//   worker's wake-up polling (DataPlane::set_wake_poll()) does better.
//   Measured in docs/latency-under-load.md.
//
// Pure: the clocks are passed in (wall time, the thread's CPU time and its
// run-queue waits); the caller changes the thread's policy when update()
// says so. One per worker.
#pragma once

#include <cstdint>
#include <optional>

namespace esptun::datapath {

struct PrecedenceParams {
	/// How often the worker's load is judged (ns of wall time).
	int64_t window_ns = 20'000'000;
	/// Step down when a window's CPU time reaches this share of it (percent):
	/// saturated...
	unsigned saturated_pct = 95;
	/// ...for this many windows in a row (a burst that fills one window is
	/// not a flood, and each step down costs the probes of a whole window).
	unsigned saturated_windows = 3;
	/// ...or falls below this one: nearly idle.
	unsigned idle_below_pct = 5;
	/// Step up when a window's CPU time is at least busy_from_pct and below
	/// room_below_pct (the gaps to the two above keep it from flapping).
	unsigned busy_from_pct = 10;
	unsigned room_below_pct = 70;
	/// ...and only when the CPU is contended: each time the worker was put on
	/// a CPU in the window, it had waited this long on average (ns). Where it
	/// gets a CPU at once anyway, real-time scheduling only moves it onto
	/// the CPU of whoever woke it.
	int64_t contended_wait_ns = 50'000;
};

/// Scheduler statistics of a thread, cumulative (/proc/thread-self/schedstat).
struct RunWaits {
	int64_t waited_ns = 0; ///< time spent runnable but waiting for a CPU
	int64_t runs = 0;      ///< times put on a CPU
};

class Precedence {
public:
	enum class Change : uint8_t { none, lower, raise };

	/// @elevated: the thread runs ahead now; @now_ns, @cpu_ns, @waits: the
	/// clocks now (waits nullopt: unknown, every window counts as contended).
	/// With the default parameters a worker starts elevated and steps down
	/// after its first window if it is idle.
	Precedence(PrecedenceParams p, bool elevated, int64_t now_ns, int64_t cpu_ns,
	           std::optional<RunWaits> waits = std::nullopt) noexcept
	    : p_(p), elevated_(elevated), window_start_(now_ns), cpu_start_(cpu_ns), waits_start_(waits) {}

	/// due() - a window is over: read the thread's CPU time and call update()
	bool due(int64_t now_ns) const noexcept { return now_ns - window_start_ >= p_.window_ns; }

	/**
	 * update() - judge the window that ended at @now_ns, in which the thread
	 * used CPU time up to @cpu_ns and had @waits, and start the next one
	 * Return: the change of policy to make (at most one per window).
	 */
	Change update(int64_t now_ns, int64_t cpu_ns, std::optional<RunWaits> waits = std::nullopt) noexcept;

	bool elevated() const noexcept { return elevated_; }
	/// The share of a CPU the last judged window used (percent).
	unsigned last_load_pct() const noexcept { return last_pct_; }
	/// Its average wait for a CPU per run in the last judged window (ns; 0 unknown).
	int64_t last_wait_ns() const noexcept { return last_wait_ns_; }

private:
	PrecedenceParams p_;
	bool elevated_;
	int64_t window_start_, cpu_start_;
	std::optional<RunWaits> waits_start_;
	unsigned last_pct_ = 0;
	unsigned saturated_run_ = 0; ///< saturated windows in a row, up to now
	int64_t last_wait_ns_ = 0;
};

} // namespace esptun::datapath
