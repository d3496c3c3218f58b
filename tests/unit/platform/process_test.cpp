// disable_core_dumps() (platform/process.hpp): run in a forked child, since
// a non-dumpable process cannot be made dumpable again by the tests after it.
#include <doctest/doctest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/process.hpp"

using namespace esptun::platform;

TEST_CASE("disable_core_dumps leaves the process non-dumpable with no core size") {
	REQUIRE(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1); // the test runner itself is dumpable
	CHECK_FALSE(core_dumps_disabled());
	const pid_t pid = ::fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		// Child: exit code 0 only when both settings took.
		disable_core_dumps();
		rlimit core{1, 1};
		::getrlimit(RLIMIT_CORE, &core);
		const bool ok = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 && core.rlim_cur == 0 &&
		                core.rlim_max == 0 && core_dumps_disabled();
		::_exit(ok ? 0 : 1);
	}
	int status = 0;
	REQUIRE(::waitpid(pid, &status, 0) == pid);
	REQUIRE(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) == 0);
}
