// NetnsPair: the namespaces come from platform::NetnsGuard, the veth and its
// addresses from `ip` (iproute2).
#include "apps/bench/lab/netns_pair.hpp"

#include "apps/bench/lab/process.hpp"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

/**
 * kill_stragglers() - SIGKILL every process still inside namespace @name
 * (`ip netns pids`), so that deleting the name frees the namespace
 * Return: false when the list could not be read (printed).
 */
bool kill_stragglers(const std::string& name) noexcept {
	try {
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
		return true;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench: cleanup of %s: %s\n", name.c_str(), e.what());
		return false;
	}
}

/// delete_stale_netns() - kill what runs inside @name, then `ip netns delete` it
bool delete_stale_netns(const std::string& name) noexcept {
	if (!kill_stragglers(name)) return false;
	try {
		run_command({"ip", "netns", "delete", name}, false);
		return true;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench: cleanup of %s: %s\n", name.c_str(), e.what());
		return false;
	}
}

} // namespace

void ip(std::initializer_list<std::string> args) {
	std::vector<std::string> argv{"ip"};
	argv.insert(argv.end(), args);
	run_command(argv);
}

NetnsPair::NetnsPair(Layout layout) : layout_(std::move(layout)), ns_a_(layout_.a), ns_b_(layout_.b) {
	const Layout& l = layout_;
	ip({"-n", l.a, "link", "add", l.veth_a, "type", "veth", "peer", "name", l.veth_b, "netns", l.b});
	ip({"-n", l.a, "addr", "add", l.addr_a + "/24", "dev", l.veth_a});
	ip({"-n", l.b, "addr", "add", l.addr_b + "/24", "dev", l.veth_b});
	for (const auto& [ns, dev] : {std::pair{l.a, l.veth_a}, std::pair{l.b, l.veth_b}}) {
		ip({"-n", ns, "link", "set", "lo", "up"});
		ip({"-n", ns, "link", "set", dev, "up"});
	}
}

NetnsPair::~NetnsPair() {
	// The guards then delete the names, B first; the veth goes with them.
	kill_stragglers(b());
	kill_stragglers(a());
}

int remove_stale_leftovers(const std::string& prefix) {
	namespace fs = std::filesystem;
	std::error_code ec;
	int removed = 0;
	for (const auto& entry : fs::directory_iterator("/run/netns", ec)) {
		std::string name = entry.path().filename().string();
		if (owner_is_gone(name, prefix) && delete_stale_netns(name)) removed++;
	}
	for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
		std::string name = entry.path().filename().string();
		if (entry.is_directory(ec) && owner_is_gone(name, prefix) &&
		    fs::remove_all(entry.path(), ec) > 0)
			removed++;
	}
	return removed;
}

} // namespace esptun::bench::lab
