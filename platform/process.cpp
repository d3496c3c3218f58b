// disable_core_dumps(): see process.hpp.
#include "platform/process.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace esptun::platform {

void disable_core_dumps() {
	const rlimit none{0, 0};
	if (::setrlimit(RLIMIT_CORE, &none) != 0) throw SystemError(errno, "setrlimit(RLIMIT_CORE, 0)");
	if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) throw SystemError(errno, "prctl(PR_SET_DUMPABLE, 0)");
}

bool core_dumps_disabled() {
	rlimit core{};
	return ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 && ::getrlimit(RLIMIT_CORE, &core) == 0 &&
	       core.rlim_cur == 0;
}

HelperProcess fork_helper(int socket_type, const char* what,
                          const std::function<void(int fd, pid_t parent)>& child_main) {
	int sv[2];
	if (::socketpair(AF_UNIX, socket_type | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair", what);
	const pid_t parent = ::getpid();
	const pid_t pid = ::fork();
	if (pid < 0) {
		const int err = errno;
		::close(sv[0]);
		::close(sv[1]);
		throw SystemError(err, "fork", what);
	}
	if (pid == 0) {
		::close(sv[0]);
		child_main(sv[1], parent);
		::_exit(1); // child_main must not return; if it does, the child still ends here
	}
	::close(sv[1]);
	return {sv[0], pid};
}

} // namespace esptun::platform
