// disable_core_dumps(): see process.hpp.
#include "platform/process.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <sys/prctl.h>
#include <sys/resource.h>

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

} // namespace esptun::platform
