// The demo's two namespaces and their veth link, via `ip` (iproute2).
#include "apps/bench/netns.hpp"

#include "apps/bench/process.hpp"

#include <cstdio>
#include <filesystem>

namespace esptun::bench {
namespace {

/// ip() - run `ip ARGS...`; throws when it fails
void ip(std::initializer_list<std::string> args) {
	std::vector<std::string> argv{"ip"};
	argv.insert(argv.end(), args);
	run_command(argv);
}

/// delete_netns() - `ip netns delete NAME`, quietly; false when it failed
bool delete_netns(const std::string& name) noexcept {
	try {
		run_command({"ip", "netns", "delete", name}, false);
		return true;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench: cleanup: %s\n", e.what());
		return false;
	}
}

} // namespace

NetnsPair::NetnsPair(const std::string& prefix) : a_(prefix + "-a"), b_(prefix + "-b") {
	try {
		ip({"netns", "add", a_});
		made_a_ = true;
		ip({"netns", "add", b_});
		made_b_ = true;
		ip({"-n", a_, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", b_});
		ip({"-n", a_, "addr", "add", std::string(kAddrA) + "/24", "dev", "veth0"});
		ip({"-n", b_, "addr", "add", std::string(kAddrB) + "/24", "dev", "veth0"});
		for (const auto& ns : {a_, b_}) {
			ip({"-n", ns, "link", "set", "lo", "up"});
			ip({"-n", ns, "link", "set", "veth0", "up"});
		}
	} catch (...) {
		remove();
		throw;
	}
}

NetnsPair::~NetnsPair() { remove(); }

void NetnsPair::remove() noexcept {
	// Deleting a namespace destroys the veth end inside it, and so the pair.
	if (made_b_) made_b_ = !delete_netns(b_);
	if (made_a_) made_a_ = !delete_netns(a_);
}

int remove_stale_demo_namespaces() {
	namespace fs = std::filesystem;
	std::error_code ec;
	int removed = 0;
	for (const auto& entry : fs::directory_iterator("/run/netns", ec)) {
		std::string name = entry.path().filename().string();
		if (owner_is_gone(name, "esptun-demo-") && delete_netns(name)) removed++;
	}
	return removed;
}

} // namespace esptun::bench
