// The comparison's namespaces and veth, and command helpers.
#include "apps/bench/compare_topology.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace esptun::bench::compare {
namespace {

/// ip() - `ip ARGS...` in the root namespace (all of them use -n); throws
void ip(const std::vector<std::string>& args) {
	std::vector<std::string> argv{"ip"};
	argv.insert(argv.end(), args.begin(), args.end());
	run_command(argv);
}

/// delete_netns() - kill what still runs inside @name, then delete it
bool delete_netns(const std::string& name) noexcept {
	try {
		// Stragglers (a daemon a subject could not stop): the name is ours.
		std::string pids;
		{
			Pipe p = Pipe::make();
			Child c = fork_in_netns("", [&] {
				dup2(p.write_end.get(), STDOUT_FILENO);
				execlp("ip", "ip", "netns", "pids", name.c_str(),
				       static_cast<char*>(nullptr));
				return 127;
			});
			p.write_end.reset();
			pids = read_all(p.read_end.get(), Clock::now() + Millis(5000));
			c.wait(Millis(5000), false);
		}
		std::istringstream in(pids);
		for (long pid; in >> pid;)
			if (pid > 1) kill(static_cast<pid_t>(pid), SIGKILL);
		run_command({"ip", "netns", "delete", name}, false);
		return true;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench compare: cleanup of %s: %s\n", name.c_str(), e.what());
		return false;
	}
}

std::string tail_of(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

} // namespace

Topology::Topology(const std::string& run_id)
    : id_(run_id), a_(kPrefix + run_id + "-a"), b_(kPrefix + run_id + "-b"), veth_a_("cu" + run_id + "a"),
      veth_b_("cu" + run_id + "b") {
	try {
		ip({"netns", "add", a_});
		made_a_ = true;
		ip({"netns", "add", b_});
		made_b_ = true;
		ip({"-n", a_, "link", "add", veth_a_, "type", "veth", "peer", "name", veth_b_, "netns", b_});
		ip({"-n", a_, "addr", "add", std::string(kUnderA) + "/24", "dev", veth_a_});
		ip({"-n", b_, "addr", "add", std::string(kUnderB) + "/24", "dev", veth_b_});
		for (const auto& [ns, dev] : {std::pair{a_, veth_a_}, std::pair{b_, veth_b_}}) {
			ip({"-n", ns, "link", "set", "lo", "up"});
			ip({"-n", ns, "link", "set", dev, "up"});
		}
	} catch (...) {
		remove();
		throw;
	}
}

Topology::~Topology() { remove(); }

void Topology::remove() noexcept {
	if (made_b_) made_b_ = !delete_netns(b_);
	if (made_a_) made_a_ = !delete_netns(a_);
}

int remove_stale_compare_leftovers() {
	namespace fs = std::filesystem;
	std::error_code ec;
	int removed = 0;
	for (const auto& entry : fs::directory_iterator("/run/netns", ec)) {
		std::string name = entry.path().filename().string();
		if (owner_is_gone(name, Topology::kPrefix) && delete_netns(name)) removed++;
	}
	for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
		std::string name = entry.path().filename().string();
		if (entry.is_directory(ec) && owner_is_gone(name, Topology::kPrefix) &&
		    fs::remove_all(entry.path(), ec) > 0)
			removed++;
	}
	return removed;
}

std::string find_program(const std::string& name) {
	const char* path = std::getenv("PATH");
	std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	std::istringstream in(dirs);
	for (std::string dir; std::getline(in, dir, ':');) {
		if (dir.empty()) continue;
		std::string full = dir + "/" + name;
		if (access(full.c_str(), X_OK) == 0) return full;
	}
	return {};
}

std::string join_args(const std::vector<std::string>& argv) {
	std::string s;
	for (const auto& a : argv)
		s += (s.empty() ? "" : " ") + a;
	return s;
}

CmdResult capture(const std::string& netns, const std::vector<std::string>& argv, Millis timeout,
                  const std::string& scratch) {
	static unsigned counter = 0;
	std::string err_path = scratch + "/cmd-" + std::to_string(++counter) + ".err";
	auto deadline = Clock::now() + timeout;
	Pipe out = Pipe::make();
	Child c = fork_in_netns(netns, [&] {
		dup2(out.write_end.get(), STDOUT_FILENO);
		int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (err >= 0) dup2(err, STDERR_FILENO);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0) dup2(null, STDIN_FILENO);
		std::vector<char*> args;
		for (const auto& a : argv)
			args.push_back(const_cast<char*>(a.c_str()));
		args.push_back(nullptr);
		execvp(args[0], args.data());
		std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
		return 127;
	});
	out.write_end.reset();
	CmdResult r;
	try {
		r.out = read_all(out.read_end.get(), deadline);
		auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
		r.status = c.wait(std::max(Millis(1000), left));
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		throw std::runtime_error(join_args(argv) + ": " + e.what());
	}
	std::ifstream in(err_path);
	r.err = tail_of(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
	                2000);
	std::error_code ec;
	std::filesystem::remove(err_path, ec);
	return r;
}

std::string run_in(const std::string& netns, const std::vector<std::string>& argv, const std::string& scratch,
                   Millis timeout) {
	CmdResult r = capture(netns, argv, timeout, scratch);
	if (!r.ok()) {
		std::string err = r.err.empty() ? tail_of(r.out, 400) : tail_of(r.err, 400);
		while (!err.empty() && err.back() == '\n')
			err.pop_back();
		throw std::runtime_error(join_args(argv) + " failed (" + describe_status(r.status) +
		                         "): " + err);
	}
	return r.out;
}

} // namespace esptun::bench::compare
