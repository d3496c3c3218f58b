// Least privilege for a running endpoint: once everything that needs root
// is set up (tun, vhost-net, privileged ports, sockets), the process changes
// to an unprivileged user, keeps only CAP_NET_ADMIN (the addresses and
// routes IKE installs later and removes at exit, over rtnetlink), sets
// PR_SET_NO_NEW_PRIVS, and installs a seccomp allow-list of the system calls
// the control thread and the data-path workers make.
//
// A system call outside the list is not run: the kernel raises SIGSYS
// (SECCOMP_RET_TRAP, seccomp(2)); our handler writes one line naming the
// call's number to stderr and the process dies of SIGSYS. Dying rather than
// failing with EPERM: a call the list lacks is either a bug we want to see
// at once or an attacker's, and neither should get to continue.
#pragma once

#include <string>
#include <sys/types.h>

namespace esptun::platform {

/// The user (and its primary group) the process runs as after the drop.
struct RunAs {
	std::string name;
	uid_t uid = 0;
	gid_t gid = 0;
};

/**
 * lookup_user() - the uid and primary gid of user @name (getpwnam(3))
 *
 * Throws std::runtime_error naming @name when there is no such user.
 */
RunAs lookup_user(const std::string& name);

/**
 * drop_to_user() - become @who with CAP_NET_ADMIN as the only capability
 * @sys_nice: keep CAP_SYS_NICE too, for the workers' real-time scheduling
 *            (platform/thread_priority.hpp); the seccomp filter lets a
 *            thread change only its own policy with it
 *
 * Clears the supplementary groups, sets real/effective/saved gid and uid,
 * leaves CAP_NET_ADMIN alone in the permitted, effective and bounding sets
 * (the inheritable and ambient sets empty), and sets PR_SET_NO_NEW_PRIVS so
 * nothing this process executes can gain privileges (prctl(2)). With
 * @who.uid == 0 only the capabilities are dropped. Must run while the
 * process has one thread: credentials and capabilities are per thread, and a
 * thread started earlier would keep root's. Throws SystemError.
 * Return: whether CAP_SYS_NICE was kept (asked for, and held before).
 */
bool drop_to_user(const RunAs& who, bool sys_nice = false);

/**
 * install_syscall_filter() - the seccomp allow-list, for every thread
 *
 * Applied with SECCOMP_FILTER_FLAG_TSYNC, and inherited by threads started
 * later. Needs PR_SET_NO_NEW_PRIVS (or CAP_SYS_ADMIN). clone is allowed only
 * with CLONE_THREAD (new threads, not processes); clone3, whose flags a
 * filter cannot read, fails with ENOSYS so glibc falls back to clone.
 * sched_setscheduler and sched_getscheduler are allowed on the calling
 * thread only (pid 0).
 * Throws SystemError.
 * Return: how many system calls the list allows, for the start-up log line.
 */
int install_syscall_filter();

} // namespace esptun::platform
