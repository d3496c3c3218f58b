// Child processes for esptun-bench: programs and C++ functions started inside
// a network namespace, stopped and reaped by RAII, plus the stop flag that
// SIGINT/SIGTERM set so every wait can give up and clean up.
#pragma once

#include "platform/unique_fd.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <vector>

namespace esptun::bench::lab {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

/// Thrown by waits once SIGINT or SIGTERM arrived; unwinding cleans up.
class Interrupted : public std::runtime_error {
public:
	Interrupted() : std::runtime_error("interrupted") {}
};

/**
 * install_stop_handlers() - make SIGINT and SIGTERM set the stop flag
 *
 * No SA_RESTART: a blocking call returns EINTR so its loop sees the flag.
 * SIGPIPE is ignored, so `esptun-bench demo | head` cannot kill the
 * process before it has cleaned up.
 */
void install_stop_handlers();
/**
 * owner_is_gone() - for a leftover named "<prefix><pid>-...", true when that
 * pid no longer exists (its esptun-bench was killed before cleaning up)
 */
bool owner_is_gone(const std::string& name, const std::string& prefix);

/// stop_requested() - true once SIGINT or SIGTERM arrived
bool stop_requested() noexcept;
/// throw_if_stopped() - throw Interrupted when a stop was requested
void throw_if_stopped();
/// sleep_for() - sleep, waking early (and throwing Interrupted) on a stop
void sleep_for(Millis d);

/**
 * Child - a forked process that is terminated and reaped when destroyed.
 *
 * Children are never left behind: the destructor sends SIGTERM, waits a
 * moment, then sends SIGKILL. Each child also has PR_SET_PDEATHSIG, so it
 * dies if esptun-bench is killed before it can clean up. Children run in
 * their own process group: a Ctrl-C on the terminal reaches only
 * esptun-bench, which then stops them in order (gateways before the
 * namespaces they live in).
 */
class Child {
public:
	Child() noexcept = default;
	explicit Child(pid_t pid) noexcept : pid_(pid) {}
	Child(Child&& o) noexcept;
	Child& operator=(Child&& o) noexcept;
	Child(const Child&) = delete;
	Child& operator=(const Child&) = delete;
	~Child() { stop(); }

	pid_t pid() const noexcept { return pid_; }
	bool running() const noexcept { return pid_ > 0; }

	/**
	 * poll() - reap the child if it has exited, without blocking
	 * Return: its wait status once exited (the Child is then empty), else nullopt
	 */
	std::optional<int> poll();

	/**
	 * wait() - wait for the child to exit by itself
	 * @timeout:       give up after this long: the child is then killed and
	 *                 std::runtime_error thrown
	 * @interruptible: throw Interrupted on a stop request (false for clean-up
	 *                 work, which must finish even then)
	 * Return: the wait status (see describe_status())
	 */
	int wait(Millis timeout, bool interruptible = true);

	/**
	 * stop() - SIGTERM, wait up to @grace, then SIGKILL; reaps the child
	 * Return: the wait status, or -1 when there was no child
	 */
	int stop(Millis grace = Millis(3000)) noexcept;

private:
	pid_t pid_ = -1;
};

/// describe_status() - "exit status 1", "killed by SIGSEGV", ... for a wait status
std::string describe_status(int wstatus);
/// exited_ok() - true when @wstatus says "exited with status 0"
bool exited_ok(int wstatus) noexcept;

/// Pipe - the two ends of a close-on-exec pipe.
struct Pipe {
	platform::UniqueFd read_end, write_end;
	static Pipe make();
};

/**
 * exec_argv() - execv (@search_path false: @argv[0] is a path) or execvp
 * @argv; only returns on failure, after printing "<@tag>exec NAME: error"
 * @tag: "esptun-bench: " when stderr is the terminal, "" when it is a log
 */
void exec_argv(const std::vector<std::string>& argv, bool search_path, const char* tag);

/// join_args() - "a b c": a command line for messages
std::string join_args(const std::vector<std::string>& argv);

/**
 * fork_in_netns() - run @fn in a child process inside namespace @netns
 * @netns: namespace name, or empty to stay in the current one
 * @fn:    the child's work; its return value is the exit status. Exceptions
 *         are printed and become exit status 1. The child leaves with
 *         _exit(), so none of the parent's destructors run twice.
 */
Child fork_in_netns(const std::string& netns, const std::function<int()>& fn);

/**
 * spawn_in_netns() - start program @argv[0] (a path) in namespace @netns
 * @log: file that receives the program's stdout and stderr; empty to inherit
 */
Child spawn_in_netns(const std::string& netns, const std::vector<std::string>& argv,
                     const std::string& log = {});

/**
 * run_command() - run @argv (looked up in PATH) and wait for it
 * @interruptible: see Child::wait(); false for clean-up commands
 * Throws std::runtime_error naming the command when it does not exit with 0
 * within 10 s.
 */
void run_command(const std::vector<std::string>& argv, bool interruptible = true);

/**
 * read_all() - read @fd until EOF
 * @deadline: give up then (throws std::runtime_error)
 * Throws Interrupted on a stop request.
 */
std::string read_all(int fd, Clock::time_point deadline);

/**
 * run_collect() - run @fn in a child in @netns and return what it produced
 * @fn:      computes a result string in the child; it is sent back over a pipe
 * @timeout: the child is killed after this long
 * Throws std::runtime_error when the child fails or times out.
 */
std::string run_collect(const std::string& netns, const std::function<std::string()>& fn, Millis timeout);

} // namespace esptun::bench::lab
