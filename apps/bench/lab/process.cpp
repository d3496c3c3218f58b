// Child processes for esptun-bench: fork + setns + exec, reaping, the stop
// flag. esptun-bench itself is single-threaded (NetnsGuard's short-lived
// thread is joined before it returns), so fork() is safe anywhere.
#include "apps/bench/lab/process.hpp"

#include "base/error.hpp"
#include "platform/netns.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

volatile sig_atomic_t g_stop = 0;

/// What an exec failure on the terminal starts with.
constexpr const char* kTerminalTag = "esptun-bench: ";

void on_stop_signal(int) { g_stop = 1; }

/// ms_until() - milliseconds from now to @deadline, clamped to [0, INT_MAX/2]
int ms_until(Clock::time_point deadline) {
	auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
	if (left < 0) return 0;
	return left > (1 << 30) ? (1 << 30) : static_cast<int>(left);
}

/// nap() - sleep @ms milliseconds, ignoring signals (used while cleaning up)
void nap(long ms) {
	timespec ts{ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/// write_full() - write all of @data to @fd; false on error
bool write_full(int fd, std::string_view data) {
	while (!data.empty()) {
		ssize_t n = ::write(fd, data.data(), data.size());
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) return false;
		data.remove_prefix(static_cast<size_t>(n));
	}
	return true;
}

} // namespace

std::string join_args(const std::vector<std::string>& argv) {
	std::string s;
	for (const auto& a : argv)
		s += (s.empty() ? "" : " ") + a;
	return s;
}

void exec_argv(const std::vector<std::string>& argv, bool search_path, const char* tag) {
	std::vector<char*> args;
	for (const auto& a : argv)
		args.push_back(const_cast<char*>(a.c_str()));
	args.push_back(nullptr);
	if (search_path)
		execvp(args[0], args.data());
	else
		execv(args[0], args.data());
	std::fprintf(stderr, "%sexec %s: %s\n", tag, args[0], std::strerror(errno));
}

void install_stop_handlers() {
	struct sigaction sa {};
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; // no SA_RESTART: blocking calls return EINTR
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	sigaction(SIGHUP, &sa, nullptr);
	signal(SIGPIPE, SIG_IGN);
}

bool owner_is_gone(const std::string& name, const std::string& prefix) {
	if (name.compare(0, prefix.size(), prefix) != 0) return false;
	char* end = nullptr;
	long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
	if (pid <= 0 || *end != '-') return false;
	return kill(static_cast<pid_t>(pid), 0) < 0 && errno == ESRCH;
}

bool stop_requested() noexcept { return g_stop != 0; }

void throw_if_stopped() {
	if (stop_requested()) throw Interrupted();
}

void sleep_for(Millis d) {
	auto deadline = Clock::now() + d;
	while (Clock::now() < deadline) {
		throw_if_stopped();
		::poll(nullptr, 0, ms_until(deadline));
	}
	throw_if_stopped();
}

Child::Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}

Child& Child::operator=(Child&& o) noexcept {
	if (this != &o) {
		stop();
		pid_ = std::exchange(o.pid_, -1);
	}
	return *this;
}

std::optional<int> Child::poll() {
	if (pid_ <= 0) return std::nullopt;
	int st = 0;
	pid_t r = waitpid(pid_, &st, WNOHANG);
	if (r == 0 || (r < 0 && errno == EINTR)) return std::nullopt;
	pid_ = -1;
	if (r < 0) return 255 << 8; // ECHILD: someone else reaped it
	return st;
}

int Child::wait(Millis timeout, bool interruptible) {
	auto deadline = Clock::now() + timeout;
	for (;;) {
		if (auto st = poll()) return *st;
		if (pid_ <= 0) return -1;
		if (interruptible) throw_if_stopped();
		if (Clock::now() >= deadline) {
			stop(Millis(500));
			throw std::runtime_error("timed out after " + std::to_string(timeout.count() / 1000) +
			                         " s");
		}
		::poll(nullptr, 0, 5);
	}
}

int Child::stop(Millis grace) noexcept {
	if (pid_ <= 0) return -1;
	int st = 0;
	kill(pid_, SIGTERM);
	for (long waited = 0; waited <= grace.count(); waited += 10) {
		if (waitpid(pid_, &st, WNOHANG) == pid_) {
			pid_ = -1;
			return st;
		}
		nap(10);
	}
	kill(pid_, SIGKILL);
	while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
	pid_ = -1;
	return st;
}

std::string describe_status(int wstatus) {
	if (WIFEXITED(wstatus)) return "exit status " + std::to_string(WEXITSTATUS(wstatus));
	if (WIFSIGNALED(wstatus)) {
		const char* name = sigabbrev_np(WTERMSIG(wstatus));
		return std::string("killed by SIG") +
		       (name ? name : std::to_string(WTERMSIG(wstatus)).c_str());
	}
	return "wait status " + std::to_string(wstatus);
}

bool exited_ok(int wstatus) noexcept { return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0; }

Pipe Pipe::make() {
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0) throw_errno("pipe2");
	return Pipe{platform::UniqueFd(fds[0]), platform::UniqueFd(fds[1])};
}

Child fork_in_netns(const std::string& netns, const std::function<int()>& fn) {
	std::fflush(stdout);
	std::fflush(stderr);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) throw_errno("fork");
	if (pid > 0) return Child(pid);

	// Child: never return into the parent's stack; leave with _exit().
	int rc = 1;
	try {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent) _exit(1); // the parent died before prctl()
		setpgid(0, 0);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGPIPE, SIG_DFL); // SIG_IGN would survive exec()
		if (!netns.empty()) platform::enter_netns(netns);
		rc = fn();
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench: %s\n", e.what());
		rc = 1;
	}
	std::fflush(stdout);
	std::fflush(stderr);
	_exit(rc);
}

Child spawn_in_netns(const std::string& netns, const std::vector<std::string>& argv, const std::string& log) {
	return fork_in_netns(netns, [&] {
		if (!log.empty()) {
			platform::UniqueFd fd(
			    open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
			if (!fd) throw_errno("open", log);
			dup2(fd.get(), STDOUT_FILENO);
			dup2(fd.get(), STDERR_FILENO);
		}
		exec_argv(argv, false, kTerminalTag);
		return 127;
	});
}

void run_command(const std::vector<std::string>& argv, bool interruptible) {
	Child c = fork_in_netns("", [&] {
		exec_argv(argv, true, kTerminalTag);
		return 127;
	});
	int st;
	try {
		st = c.wait(Millis(10000), interruptible);
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		throw std::runtime_error(join_args(argv) + ": " + e.what());
	}
	if (!exited_ok(st))
		throw std::runtime_error(join_args(argv) + " failed (" + describe_status(st) + ")");
}

std::string read_all(int fd, Clock::time_point deadline) {
	std::string out;
	char buf[4096];
	for (;;) {
		pollfd p{fd, POLLIN, 0};
		int r = ::poll(&p, 1, ms_until(deadline));
		if (r < 0 && errno == EINTR) {
			throw_if_stopped();
			continue;
		}
		if (r < 0) throw_errno("poll");
		if (r == 0) throw std::runtime_error("timed out waiting for a child's result");
		ssize_t n = ::read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0) throw_errno("read from child");
		if (n == 0) return out;
		out.append(buf, static_cast<size_t>(n));
	}
}

std::string run_collect(const std::string& netns, const std::function<std::string()>& fn, Millis timeout) {
	auto deadline = Clock::now() + timeout;
	Pipe p = Pipe::make();
	Child c = fork_in_netns(netns, [&] {
		p.read_end.reset();
		return write_full(p.write_end.get(), fn()) ? 0 : 1;
	});
	p.write_end.reset();
	std::string out = read_all(p.read_end.get(), deadline);
	int st = c.wait(std::max(Millis(1000), std::chrono::duration_cast<Millis>(deadline - Clock::now())));
	if (!exited_ok(st)) throw std::runtime_error("child process failed (" + describe_status(st) + ")");
	return out;
}

} // namespace esptun::bench::lab
