// `esptun-bench compare`: the underlay both namespaces share, and the small
// command helpers every subject uses (run a program inside a namespace,
// capture its output, find it in PATH).
#pragma once

#include "apps/bench/process.hpp"

#include <string>
#include <vector>

namespace esptun::bench::compare {

/**
 * Topology - two namespaces joined by one veth pair, unique per run
 *
 *   netns esptun-cmp-PID-a                      netns esptun-cmp-PID-b
 *   cuPIDa 10.203.0.1/24 <-------- veth --------> cuPIDb 10.203.0.2/24
 *
 * Every tunnel under test runs over this veth, each with its own inner
 * subnet; plain veth traffic (the ceiling) goes straight over it. The veth is
 * created inside A with its peer placed into B, so nothing appears in the
 * root namespace. The destructor deletes both namespaces (and with them the
 * veth and every tun made inside); processes must be stopped first.
 */
class Topology {
public:
	/// Topology() - create namespaces, veth and addresses; throws on failure
	explicit Topology(const std::string& run_id);
	~Topology();
	Topology(const Topology&) = delete;
	Topology& operator=(const Topology&) = delete;

	const std::string& a() const noexcept { return a_; }
	const std::string& b() const noexcept { return b_; }
	const std::string& veth_a() const noexcept { return veth_a_; }
	const std::string& veth_b() const noexcept { return veth_b_; }
	/// run_id() - the per-run tag put into every name this run creates
	const std::string& run_id() const noexcept { return id_; }

	static constexpr const char* kUnderA = "10.203.0.1";
	static constexpr const char* kUnderB = "10.203.0.2";
	/// The prefix of every namespace name; "<prefix><pid>-a" / "-b".
	static constexpr const char* kPrefix = "esptun-cmp-";

private:
	void remove() noexcept;

	std::string id_, a_, b_, veth_a_, veth_b_;
	bool made_a_ = false, made_b_ = false;
};

/**
 * remove_stale_compare_leftovers() - delete esptun-cmp-<pid>-* namespaces
 * and /tmp/esptun-cmp-<pid>-* folders whose esptun-bench is gone (a run
 * killed with SIGKILL). Return: how many were removed.
 */
int remove_stale_compare_leftovers();

/// find_program() - the full path of @name in PATH, or "" when absent
std::string find_program(const std::string& name);

/// CmdResult - what a finished command left: its wait status and output.
struct CmdResult {
	int status = -1;
	std::string out; ///< stdout
	std::string err; ///< stderr (the last 2 kB)
	bool ok() const noexcept { return exited_ok(status); }
};

/**
 * capture() - run @argv (looked up in PATH) inside @netns and collect output
 * @netns:   namespace name; empty for the current one
 * @timeout: the command is killed after this long (throws)
 * @scratch: a folder for the stderr file (named after the child's pid)
 * Throws Interrupted on a stop request.
 */
CmdResult capture(const std::string& netns, const std::vector<std::string>& argv, Millis timeout,
                  const std::string& scratch);

/**
 * run_in() - capture(), and throw std::runtime_error naming the command and
 * quoting its stderr when it does not exit with 0
 */
std::string run_in(const std::string& netns, const std::vector<std::string>& argv, const std::string& scratch,
                   Millis timeout = Millis(15000));

/// join_args() - "a b c" for messages
std::string join_args(const std::vector<std::string>& argv);

} // namespace esptun::bench::compare
