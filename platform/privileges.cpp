// The system calls behind platform/privileges.hpp: credentials and
// capabilities with raw prctl(2)/capset(2), the filter with libseccomp.
#include "platform/privileges.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <pwd.h>
#include <seccomp.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace esptun::platform {

namespace {

/// The kept capability: rtnetlink changes (IKE's addresses and routes, their
/// removal at exit) and the per-interface IPv6 sysctls (net_ctl_permissions()
/// grants root's mode to CAP_NET_ADMIN holders).
constexpr int kKeptCap = CAP_NET_ADMIN;

/**
 * The allow-list. What each group serves:
 * - memory, threads, signals, time: glibc, libstdc++, OpenSSL (getrandom)
 *   and Asio's reactor (epoll, eventfd, timerfd, its signal pipe);
 * - files: the sequence state (temp file, fsync, rename, flock on its
 *   folder: service/seq_state.cpp), /proc/sys writes, std::filesystem;
 * - sockets: the underlay's mmsg engine, the control socket's accepts,
 *   rtnetlink requests, IKE's UDP;
 * - io_uring: the uring engine (platform/udp_uring.cpp);
 * - ioctl: tun and vhost-net requests and FIONBIO. Not narrowed by number:
 *   the fds it reaches are ours, and CAP_NET_ADMIN bounds what they can do.
 * Left out on purpose: execve/execveat, fork (clone without CLONE_THREAD),
 * ptrace, mount, the module, key, bpf, perf and namespace calls, setuid and
 * friends, chown, kill of other processes (tgkill for raise() stays).
 */
constexpr const char* kAllowed[] = {
    // memory
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    // threads and scheduling
    "futex",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "set_tid_address",
    "exit",
    "exit_group",
    "sched_yield",
    "sched_getaffinity",
    "gettid",
    "getpid",
    "getppid",
    "tgkill",
    "membarrier",
    "wait4", // reaping the client's DNS helper (service/dns_helper.hpp), our own child
    // signals
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "restart_syscall",
    // time and sleep
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "nanosleep",
    "clock_nanosleep",
    "getrandom",
    // identity and limits (read only)
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getgroups",
    "getrlimit",
    "prlimit64",
    "getrusage",
    "uname",
    "sysinfo",
    "times",
    "capget",
    // files and descriptors
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "lseek",
    "close",
    "openat",
    "open",
    "fstat",
    "newfstatat",
    "stat",
    "lstat",
    "statx",
    "fsync",
    "fdatasync",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "flock",
    "fcntl",
    "dup",
    "dup2",
    "dup3",
    "pipe2",
    "getdents64",
    "readlink",
    "readlinkat",
    "access",
    "faccessat",
    "faccessat2",
    "getcwd",
    "fchmod",
    "ftruncate",
    "mkdir",
    "mkdirat",
    "umask",
    // readiness and wake-ups
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "eventfd2",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    // sockets
    "socket",
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "shutdown",
    "getsockname",
    "getpeername",
    "getsockopt",
    "setsockopt",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    // io_uring, tun and vhost-net
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "ioctl",
};

/// fail() - a SystemError for libseccomp's negative errno return @rc
[[noreturn]] void fail(int rc, const std::string& what) { throw SystemError(-rc, "seccomp: " + what); }

/// Writes @n in decimal into @out (at least 21 bytes); async-signal-safe.
size_t format_number(long n, char* out) {
	char digits[21];
	size_t len = 0;
	const bool neg = n < 0;
	unsigned long v = neg ? 0UL - static_cast<unsigned long>(n) : static_cast<unsigned long>(n);
	do {
		digits[len++] = char('0' + v % 10);
		v /= 10;
	} while (v && len < sizeof digits);
	size_t o = 0;
	if (neg) out[o++] = '-';
	while (len)
		out[o++] = digits[--len];
	return o;
}

/**
 * on_sigsys() - a system call outside the allow-list was refused
 *
 * Says which one on stderr (only async-signal-safe calls: write(2)), then
 * raises SIGSYS again: SA_RESETHAND restored the default action (terminate
 * with a core) and SA_NODEFER lets it arrive at once, so the process dies
 * before the refused call's caller sees its ENOSYS.
 */
void on_sigsys(int sig, siginfo_t* info, void*) {
	char line[160];
	size_t len = 0;
	auto put = [&](const char* s) {
		const size_t n = std::strlen(s);
		std::memcpy(line + len, s, n);
		len += n;
	};
	put("esptun: seccomp refused system call ");
	len += format_number(info ? info->si_syscall : -1, line + len);
	put(" (not on the allow-list; `scmp_sys_resolver NUMBER` names it); stopping\n");
	[[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line, len);
	::raise(sig);
}

/// Throws when this process has more than one thread (see drop_to_user()).
void require_one_thread() {
	DIR* d = ::opendir("/proc/self/task");
	if (!d) throw_errno("opendir", "/proc/self/task");
	int tasks = 0;
	while (const dirent* e = ::readdir(d))
		if (e->d_name[0] != '.') ++tasks;
	::closedir(d);
	if (tasks != 1)
		throw std::runtime_error(
		    "dropping privileges: the process already has " + std::to_string(tasks) +
		    " threads; credentials are per thread, so it must run before any starts");
}

/// Sets the permitted and effective sets to @caps, the inheritable set to none (capset(2)).
void set_caps(uint64_t caps) {
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
	data[0].permitted = data[0].effective = uint32_t(caps);
	data[1].permitted = data[1].effective = uint32_t(caps >> 32);
	if (::syscall(SYS_capset, &hdr, data) != 0) throw_errno("capset");
}

} // namespace

RunAs lookup_user(const std::string& name) {
	errno = 0;
	const passwd* pw = ::getpwnam(name.c_str());
	if (!pw)
		throw std::runtime_error(
		    "user " + name + ": " +
		    (errno ? std::string(std::strerror(errno)) : std::string("no such user")) +
		    " (set [tunnel] user to an existing unprivileged user, e.g. \"nobody\")");
	return RunAs{name, pw->pw_uid, pw->pw_gid};
}

namespace {

/// This thread's permitted capabilities (capget(2)).
uint64_t permitted_caps() {
	__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
	if (::syscall(SYS_capget, &hdr, data) != 0) throw_errno("capget");
	return uint64_t(data[0].permitted) | uint64_t(data[1].permitted) << 32;
}

} // namespace

bool drop_to_user(const RunAs& who, bool sys_nice) {
	// CAP_SYS_NICE only where we have it: started without it (a service
	// manager's bounding set), the workers find out and run ordinary threads.
	const uint64_t nice = uint64_t(1) << CAP_SYS_NICE;
	const uint64_t kept = (uint64_t(1) << kKeptCap) | (sys_nice ? nice & permitted_caps() : 0);
	require_one_thread();
	// The bounding set first: dropping from it needs CAP_SETPCAP, which goes next.
	for (int cap = 0; ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap)
		if (cap >= 64 || !(kept & (uint64_t(1) << cap)))
			if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) throw_errno("PR_CAPBSET_DROP");
	if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
		throw_errno("PR_CAP_AMBIENT_CLEAR_ALL");
	if (who.uid != 0) {
		// Without PR_SET_KEEPCAPS, leaving uid 0 empties the permitted set
		// (capabilities(7), "Effect of user ID changes on capabilities").
		if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) throw_errno("PR_SET_KEEPCAPS");
		if (::setgroups(0, nullptr) != 0) throw_errno("setgroups");
		if (::setresgid(who.gid, who.gid, who.gid) != 0)
			throw_errno("setresgid", std::to_string(who.gid));
		if (::setresuid(who.uid, who.uid, who.uid) != 0)
			throw_errno("setresuid", std::to_string(who.uid));
		if (::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) throw_errno("PR_SET_KEEPCAPS");
	}
	set_caps(kept);
	if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) throw_errno("PR_SET_NO_NEW_PRIVS");
	return (kept & nice) != 0;
}

int install_syscall_filter() {
	struct sigaction sa {};
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (::sigaction(SIGSYS, &sa, nullptr) != 0) throw_errno("sigaction", "SIGSYS");

	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
	if (!ctx) throw std::runtime_error("seccomp_init failed");
	struct Release {
		scmp_filter_ctx c;
		~Release() { seccomp_release(c); }
	} release{ctx};
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (rc < 0) fail(rc, "TSYNC");
	int allowed = 0;
	for (const char* name : kAllowed) {
		const int nr = seccomp_syscall_resolve_name(name);
		if (nr == __NR_SCMP_ERROR) continue; // not a call on this architecture (e.g. "open" on arm64)
		if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0)) < 0) fail(rc, name);
		++allowed;
	}
	// Threads, not processes: glibc's pthread_create passes CLONE_THREAD, fork() does not.
	// The argument tests are spelled out: libseccomp's SCMP_A0() macro is a
	// C99 compound literal, which clang's -Wpedantic flags in C++.
	rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
	                      scmp_arg_cmp{0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD});
	if (rc < 0) fail(rc, "clone");
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc < 0) fail(rc, "clone3");
	// prctl: thread names only (pthread_setname_np on itself uses PR_SET_NAME).
	for (int op : {PR_SET_NAME, PR_GET_NAME}) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
		                      scmp_arg_cmp{0, SCMP_CMP_EQ, scmp_datum_t(op), 0});
		if (rc < 0) fail(rc, "prctl");
	}
	// Scheduling policy: the calling thread's own only (pid 0), so that
	// CAP_SYS_NICE, kept for the workers' real-time steps, reaches no other
	// process.
	for (int nr : {SCMP_SYS(sched_setscheduler), SCMP_SYS(sched_getscheduler)}) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, scmp_arg_cmp{0, SCMP_CMP_EQ, 0, 0});
		if (rc < 0) fail(rc, "sched_setscheduler");
	}
	if ((rc = seccomp_load(ctx)) < 0) fail(rc, "load");
	return allowed + 4;
}

} // namespace esptun::platform
