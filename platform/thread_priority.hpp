// Thread priority: the data-path workers' real-time scheduling
// (datapath/precedence.hpp says when they use it).
#pragma once

#include <cstdint>
#include <optional>

namespace esptun::platform {

/// The SCHED_FIFO priority of a worker that runs ahead: the lowest band,
/// below the kernel's threaded interrupt handlers (50) and anything an
/// administrator gives real-time priority on purpose.
inline constexpr int kWorkerRealtimePriority = 5;

/**
 * set_realtime() - the calling thread runs under SCHED_FIFO at @prio (@on)
 * or as an ordinary thread (SCHED_OTHER)
 * Return: 0 or the errno of sched_setscheduler() (EPERM: without
 * CAP_SYS_NICE or RLIMIT_RTPRIO, or where a service manager forbids it).
 * Stepping down is always allowed.
 */
int set_realtime(bool on, int prio = kWorkerRealtimePriority) noexcept;

/// The calling thread's scheduling policy is SCHED_FIFO or SCHED_RR.
bool is_realtime() noexcept;

/// CPU time the calling thread has used (ns; CLOCK_THREAD_CPUTIME_ID).
int64_t thread_cpu_ns() noexcept;

/**
 * RunQueueStats - the calling thread's waits for a CPU, from
 * /proc/thread-self/schedstat (kept open; one pread() per reading). Made
 * on the thread it describes.
 */
class RunQueueStats {
public:
	RunQueueStats() noexcept; ///< opens the file; read() says nullopt if that failed
	~RunQueueStats();
	RunQueueStats(const RunQueueStats&) = delete;
	RunQueueStats& operator=(const RunQueueStats&) = delete;

	struct Reading {
		int64_t waited_ns = 0; ///< runnable but waiting for a CPU, in all
		int64_t runs = 0;      ///< times put on a CPU
	};
	/// The thread's totals now; nullopt where the kernel has no schedstat.
	std::optional<Reading> read() const noexcept;

private:
	int fd_ = -1;
};

} // namespace esptun::platform
