// What /proc says about the processes a measurement runs: their CPU time
// and resident memory.
#pragma once

#include <cstdint>
#include <sys/types.h>
#include <vector>

namespace esptun::bench::lab {

/**
 * cpu_seconds() - utime + stime of processes @pids (all their threads,
 * living and exited) from /proc/PID/stat. Throws when one is gone.
 */
double cpu_seconds(const std::vector<pid_t>& pids);

/**
 * rss_kib() - the resident set of process @pid (VmRSS of /proc/PID/status)
 * in KiB. Throws when it is gone.
 */
uint64_t rss_kib(pid_t pid);

/**
 * machine_busy_seconds() - CPU time the whole machine has spent not idle
 * since boot (/proc/stat: user, nice, system, irq and softirq; not idle,
 * iowait or a hypervisor's steal), summed over its CPUs. Throws when /proc/stat cannot be read.
 */
double machine_busy_seconds();

} // namespace esptun::bench::lab
