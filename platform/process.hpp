// Process-wide protection of the key material a running endpoint holds in
// memory (issue 16, key hygiene): no core dump may carry it to disk. And the
// fork of the small root helpers an endpoint keeps after it drops its
// privileges (service/dns_helper.hpp, service/config_reader.hpp).
#pragma once

#include <functional>
#include <sys/types.h>

namespace esptun::platform {

/// A helper process and the parent's end of the socket pair joining them.
struct HelperProcess {
	int fd = -1;
	pid_t pid = 0;
};

/**
 * fork_helper() - a child process joined to this one by a socket pair
 * @socket_type: SOCK_STREAM or SOCK_SEQPACKET (AF_UNIX, close-on-exec)
 * @what:        names the helper in errors, e.g. "DNS helper"
 * @child_main:  runs in the child with its end of the pair and the parent's
 *               pid; must not return (it ends the child with _exit)
 *
 * Call while the process has one thread. Throws SystemError when
 * socketpair() or fork() fails (nothing is left open then).
 */
HelperProcess fork_helper(int socket_type, const char* what,
                          const std::function<void(int fd, pid_t parent)>& child_main);

/**
 * disable_core_dumps() - make this process non-dumpable: prctl(PR_SET_DUMPABLE, 0)
 * and RLIMIT_CORE 0.
 *
 * Why the whole process rather than MADV_DONTDUMP on key pages: secrets
 * live in more places than pages we could mark (OpenSSL's own key
 * schedules in EVP contexts, the parsed config, stack temporaries, freed
 * heap not yet reused), and MADV_DONTDUMP works on whole pages, so every
 * secret would need its own page-aligned allocation. A non-dumpable process
 * also refuses ptrace and /proc/PID/mem to other processes of its user.
 * Costs: /proc/PID/ files become owned by root (we run as root, so nothing
 * changes for us), and no core dump exists to debug a crash (run under gdb
 * instead). The rlimit covers a core_pattern pipe configured with
 * suid_dumpable = 2, which would still dump a non-dumpable process.
 *
 * The kernel resets the dumpable flag to fs.suid_dumpable when the
 * process changes its user IDs (setuid, setresuid), so a privilege drop
 * must call this again afterwards (prctl(2), PR_SET_DUMPABLE).
 * Throws SystemError when the kernel refuses.
 */
void disable_core_dumps();

/// Whether this process is dumpable now (prctl PR_GET_DUMPABLE), for tests and status.
bool core_dumps_disabled();

} // namespace esptun::platform
