// platform/privileges: each test drops privileges or installs the seccomp
// filter in a forked child (both are irreversible for the process) and
// reads the outcome from the child's exit status and a pipe.
#include <doctest/doctest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <sched.h>
#include <sstream>
#include <string>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "platform/privileges.hpp"

namespace esptun::platform {
namespace {

/// What a forked child did: how it ended and what it wrote to stdout/stderr.
struct ChildResult {
	int status = 0;
	std::string output;
};

/**
 * in_child() - run @body in a forked child whose stdout and stderr go to a
 * pipe; the child exits with @body's return value (or dies of a signal)
 */
ChildResult in_child(const std::function<int()>& body) {
	int p[2];
	REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
	const pid_t pid = ::fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		::dup2(p[1], 1);
		::dup2(p[1], 2);
		int rc = 99;
		try {
			rc = body();
		} catch (const std::exception& e) {
			const std::string m = std::string("exception: ") + e.what() + "\n";
			[[maybe_unused]] ssize_t n = ::write(2, m.data(), m.size());
		}
		::_exit(rc);
	}
	::close(p[1]);
	ChildResult r;
	char buf[512];
	for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;)
		r.output.append(buf, size_t(n));
	::close(p[0]);
	REQUIRE(::waitpid(pid, &r.status, 0) == pid);
	return r;
}

/// say() - write @s to stdout unbuffered (the child's pipe)
void say(const std::string& s) { [[maybe_unused]] ssize_t n = ::write(1, s.data(), s.size()); }

/// The value of field @key ("CapEff", "Uid", ...) in /proc/self/status.
std::string status_field(const std::string& key) {
	std::ifstream in("/proc/self/status");
	for (std::string line; std::getline(in, line);)
		if (line.rfind(key + ":", 0) == 0) {
			std::string v = line.substr(key.size() + 1);
			v.erase(0, v.find_first_not_of(" \t"));
			return v;
		}
	return "";
}

/// The child installs the filter (with no_new_privs, as after a drop), shows
/// that allowed calls work, then makes @forbidden: the test expects SIGSYS.
ChildResult filtered_then(const std::function<void()>& forbidden) {
	return in_child([&] {
		if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 2;
		const int n = install_syscall_filter();
		say("allowed " + std::to_string(n) + " pid " + std::to_string(::getpid()) + "\n");
		forbidden();
		say("still alive\n");
		return 0;
	});
}

void require_sigsys(const ChildResult& r, long nr) {
	INFO("child output: " << r.output);
	REQUIRE(WIFSIGNALED(r.status));
	CHECK(WTERMSIG(r.status) == SIGSYS);
	CHECK(r.output.find("allowed ") != std::string::npos); // the allowed calls before it ran
	CHECK(r.output.find("still alive") == std::string::npos);
	CHECK(r.output.find("seccomp refused system call " + std::to_string(nr) + " ") != std::string::npos);
}

TEST_CASE("seccomp filter: a forbidden system call stops the process with SIGSYS and says which") {
	SUBCASE("mount") {
		require_sigsys(filtered_then([] { ::mount("none", "/mnt", "tmpfs", 0, nullptr); }),
		               SYS_mount);
	}
	SUBCASE("ptrace") {
		require_sigsys(filtered_then([] { ::syscall(SYS_ptrace, 0 /*PTRACE_TRACEME*/, 0, 0, 0); }),
		               SYS_ptrace);
	}
	SUBCASE("execve") {
		require_sigsys(filtered_then([] {
			               char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
			               ::execve("/bin/true", argv, environ);
		               }),
		               SYS_execve);
	}
	SUBCASE("fork: clone without CLONE_THREAD") {
		require_sigsys(filtered_then([] {
			               const pid_t pid = ::fork();
			               if (pid == 0) ::_exit(0);
		               }),
		               SYS_clone);
	}
	SUBCASE("setuid back to root") {
		require_sigsys(filtered_then([] { (void)::syscall(SYS_setuid, 0); }), SYS_setuid);
	}
}

TEST_CASE("seccomp filter: what the endpoint does still works under it") {
	const ChildResult r = filtered_then([] {
		// A thread (clone with CLONE_THREAD; clone3 answers ENOSYS first).
		bool ran = false;
		std::thread t([&] { ran = true; });
		t.join();
		// The state file's pattern: temp file, fsync, rename, unlink.
		char path[] = "/tmp/esptun-priv-XXXXXX";
		const int fd = ::mkstemp(path);
		const bool file_ok = fd >= 0 && ::write(fd, "x", 1) == 1 && ::fsync(fd) == 0 &&
		                     ::close(fd) == 0 &&
		                     ::rename(path, (std::string(path) + ".r").c_str()) == 0 &&
		                     ::unlink((std::string(path) + ".r").c_str()) == 0;
		// Thread names are allowed; other prctl options are not.
		const bool named = ::prctl(PR_SET_NAME, "esptun-test", 0, 0, 0) == 0;
		say(std::string(ran ? "thread " : "") + (file_ok ? "file " : "") + (named ? "name " : "") +
		    "\n");
	});
	INFO("child output: " << r.output);
	REQUIRE(WIFEXITED(r.status));
	CHECK(WEXITSTATUS(r.status) == 0);
	CHECK(r.output.find("thread file name") != std::string::npos);
	CHECK(r.output.find("still alive") != std::string::npos);
}

TEST_CASE("drop_to_user: nobody with CAP_NET_ADMIN only and no_new_privs") {
	REQUIRE_MESSAGE(::geteuid() == 0, "the privilege tests need root");
	const RunAs nobody = lookup_user("nobody");
	REQUIRE(nobody.uid != 0);
	const ChildResult r = in_child([&] {
		drop_to_user(nobody);
		say("Uid=" + status_field("Uid") + "\nGid=" + status_field("Gid") +
		    "\nGroups=" + status_field("Groups") + "\nCapEff=" + status_field("CapEff") +
		    "\nCapPrm=" + status_field("CapPrm") + "\nCapInh=" + status_field("CapInh") +
		    "\nCapBnd=" + status_field("CapBnd") + "\nCapAmb=" + status_field("CapAmb") +
		    "\nNoNewPrivs=" + status_field("NoNewPrivs") + "\n");
		// Root's powers are gone: no way back to uid 0, no reading root's files.
		const bool setuid_refused = ::setuid(0) != 0 && errno == EPERM;
		const bool shadow_refused =
		    ::open("/etc/shadow", O_RDONLY | O_CLOEXEC) < 0 && errno == EACCES;
		say(std::string(setuid_refused ? "setuid refused\n" : "") +
		    (shadow_refused ? "shadow refused\n" : ""));
		return 0;
	});
	INFO("child output: " << r.output);
	REQUIRE(WIFEXITED(r.status));
	REQUIRE(WEXITSTATUS(r.status) == 0);
	const std::string u = std::to_string(nobody.uid), g = std::to_string(nobody.gid);
	CHECK(r.output.find("Uid=" + u + "\t" + u + "\t" + u + "\t" + u + "\n") != std::string::npos);
	CHECK(r.output.find("Gid=" + g + "\t" + g + "\t" + g + "\t" + g + "\n") != std::string::npos);
	CHECK(r.output.find("Groups=\n") != std::string::npos);
	// CAP_NET_ADMIN is bit 12 (capabilities(7)).
	for (const char* set : {"CapEff", "CapPrm", "CapBnd"})
		CHECK(r.output.find(std::string(set) + "=0000000000001000\n") != std::string::npos);
	for (const char* set : {"CapInh", "CapAmb"})
		CHECK(r.output.find(std::string(set) + "=0000000000000000\n") != std::string::npos);
	CHECK(r.output.find("NoNewPrivs=1\n") != std::string::npos);
	CHECK(r.output.find("setuid refused") != std::string::npos);
	CHECK(r.output.find("shadow refused") != std::string::npos);
}

TEST_CASE("drop_to_user: CAP_SYS_NICE kept beside CAP_NET_ADMIN when asked for") {
	REQUIRE_MESSAGE(::geteuid() == 0, "the privilege tests need root");
	const RunAs nobody = lookup_user("nobody");
	const ChildResult r = in_child([&] {
		const bool kept = drop_to_user(nobody, true);
		say(std::string(kept ? "kept\n" : "not kept\n") + "CapEff=" + status_field("CapEff") +
		    "\nCapBnd=" + status_field("CapBnd") + "\n");
		// The filter lets the thread change its own policy with it, and no one else's.
		if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 2;
		install_syscall_filter();
		sched_param p{};
		p.sched_priority = 5;
		say(::sched_setscheduler(0, SCHED_FIFO, &p) == 0 ? "fifo\n" : "no fifo\n");
		p.sched_priority = 0;
		say(::sched_setscheduler(0, SCHED_OTHER, &p) == 0 ? "other\n" : "no other\n");
		say("still alive\n");
		::sched_setscheduler(::getppid(), SCHED_OTHER, &p); // not pid 0: SIGSYS
		return 0;
	});
	INFO("child output: " << r.output);
	// CAP_NET_ADMIN is bit 12, CAP_SYS_NICE bit 23.
	CHECK(r.output.find("kept\n") == 0);
	CHECK(r.output.find("CapEff=0000000000801000\n") != std::string::npos);
	CHECK(r.output.find("CapBnd=0000000000801000\n") != std::string::npos);
	CHECK(r.output.find("fifo\n") != std::string::npos);
	CHECK(r.output.find("no fifo") == std::string::npos);
	CHECK(r.output.find("other\n") != std::string::npos);
	CHECK(r.output.find("still alive") != std::string::npos);
	REQUIRE(WIFSIGNALED(r.status));
	CHECK(WTERMSIG(r.status) == SIGSYS);
}

TEST_CASE("drop_to_user: refuses a process that already has threads") {
	const RunAs nobody = lookup_user("nobody");
	const ChildResult r = in_child([&] {
		std::thread t([] { ::pause(); });
		t.detach();
		try {
			drop_to_user(nobody);
		} catch (const std::exception& e) {
			say(std::string("refused: ") + e.what() + "\n");
			return ::getuid() == 0 ? 0 : 3;
		}
		return 4;
	});
	INFO("child output: " << r.output);
	REQUIRE(WIFEXITED(r.status));
	CHECK(WEXITSTATUS(r.status) == 0);
	CHECK(r.output.find("already has 2 threads") != std::string::npos);
}

TEST_CASE("lookup_user: an unknown user is a clear error") {
	CHECK_THROWS_WITH(lookup_user("esptun-no-such-user-x"),
	                  doctest::Contains("user esptun-no-such-user-x: no such user"));
}

} // namespace
} // namespace esptun::platform
