// Thread priority: see thread_priority.hpp.
#include "platform/thread_priority.hpp"

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace esptun::platform {

int set_realtime(bool on, int prio) noexcept {
	sched_param p{};
	p.sched_priority = on ? prio : 0;
	return sched_setscheduler(0, on ? SCHED_FIFO : SCHED_OTHER, &p) == 0 ? 0 : errno;
}

bool is_realtime() noexcept {
	const int p = sched_getscheduler(0);
	return p == SCHED_FIFO || p == SCHED_RR;
}

int64_t thread_cpu_ns() noexcept {
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

RunQueueStats::RunQueueStats() noexcept : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}

RunQueueStats::~RunQueueStats() {
	if (fd_ >= 0) ::close(fd_);
}

std::optional<RunQueueStats::Reading> RunQueueStats::read() const noexcept {
	if (fd_ < 0) return std::nullopt;
	// "<cpu time ns> <run queue wait ns> <times run>\n" (Documentation/scheduler/sched-stats.rst)
	char buf[96];
	const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
	if (n <= 0) return std::nullopt;
	buf[n] = '\0';
	char* end = nullptr;
	std::strtoll(buf, &end, 10);
	if (end == buf) return std::nullopt;
	char* p = end;
	const long long waited = std::strtoll(p, &end, 10);
	if (end == p) return std::nullopt;
	p = end;
	const long long runs = std::strtoll(p, &end, 10);
	if (end == p || waited < 0 || runs < 0) return std::nullopt;
	return Reading{waited, runs};
}

} // namespace esptun::platform
