// The demo's underlay: two network namespaces joined by a veth pair, made
// and removed with iproute2. Nothing is added to the root namespace.
#pragma once

#include <string>

namespace esptun::bench {

/**
 * NetnsPair - namespaces "<prefix>-a" and "<prefix>-b" with a veth pair
 *
 *   netns A                                netns B
 *   veth0 10.201.0.1/24 <-----veth-----> veth0 10.201.0.2/24
 *
 * The veth is created inside A with its peer placed straight into B, so it
 * never appears in the root namespace. Both namespaces (and with them the
 * veth) are deleted by the destructor; processes still inside them must be
 * stopped first.
 */
class NetnsPair {
public:
	/// NetnsPair() - create both namespaces and the link; throws on failure
	explicit NetnsPair(const std::string& prefix);
	~NetnsPair();
	NetnsPair(const NetnsPair&) = delete;
	NetnsPair& operator=(const NetnsPair&) = delete;

	const std::string& a() const noexcept { return a_; }
	const std::string& b() const noexcept { return b_; }

	static constexpr const char* kAddrA = "10.201.0.1";
	static constexpr const char* kAddrB = "10.201.0.2";

private:
	void remove() noexcept;

	std::string a_, b_;
	bool made_a_ = false, made_b_ = false;
};

/**
 * remove_stale_demo_namespaces() - delete esptun-demo-<pid>-{a,b} namespaces
 * whose esptun-bench process no longer exists (left by a run that was
 * killed with SIGKILL). Return: how many were removed.
 */
int remove_stale_demo_namespaces();

} // namespace esptun::bench
