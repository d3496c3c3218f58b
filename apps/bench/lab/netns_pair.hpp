// The underlay of the demo and of the comparison: two network namespaces
// joined by a veth pair. Nothing is added to the root namespace.
#pragma once

#include "platform/netns.hpp"

#include <initializer_list>
#include <string>

namespace esptun::bench::lab {

/// ip() - run `ip ARGS...` (iproute2; use -n NAME for a namespace); throws
void ip(std::initializer_list<std::string> args);

/**
 * NetnsPair - namespaces A and B joined by one veth pair
 *
 *   netns A                                      netns B
 *   veth_a addr_a/24 <---------- veth ----------> veth_b addr_b/24
 *
 * The veth is created inside A with its peer placed straight into B, so it
 * never appears in the root namespace. The destructor kills whatever still
 * runs inside (a daemon that could not be stopped: the names are this run's)
 * and deletes both namespaces, and with them the veth and every tun made
 * inside. Processes started there should be stopped first, so that they can
 * clean up after themselves.
 */
class NetnsPair {
public:
	/// The names and addresses of a pair.
	struct Layout {
		std::string a, b;           ///< namespace names (under /run/netns)
		std::string veth_a, veth_b; ///< the veth's end in A and in B
		std::string addr_a, addr_b; ///< their addresses in one /24
	};

	/// NetnsPair() - create both namespaces, the veth and its addresses; throws
	explicit NetnsPair(Layout layout);
	~NetnsPair();
	NetnsPair(const NetnsPair&) = delete;
	NetnsPair& operator=(const NetnsPair&) = delete;

	const std::string& a() const noexcept { return ns_a_.name(); }
	const std::string& b() const noexcept { return ns_b_.name(); }
	const Layout& layout() const noexcept { return layout_; }

private:
	Layout layout_;
	// Declared in creation order, so B goes before A and a failure half way
	// removes what was made.
	platform::NetnsGuard ns_a_, ns_b_;
};

/**
 * remove_stale_leftovers() - delete the namespaces (under /run/netns) and the
 * folders (under /tmp) named "<prefix><pid>-..." whose esptun-bench process
 * no longer exists: leftovers of a run killed with SIGKILL.
 * Return: how many were removed.
 */
int remove_stale_leftovers(const std::string& prefix);

} // namespace esptun::bench::lab
