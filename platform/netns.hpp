// Named network namespaces for tests and the demo, compatible with
// "ip netns": a namespace is kept alive by a bind mount at /run/netns/NAME.
#pragma once

#include <string>
#include <string_view>

namespace esptun::platform {

/// Creates a named network namespace the way "ip netns add NAME" does, and
/// deletes it ("ip netns del") when destroyed. "ip netns exec NAME ..." works
/// on it meanwhile. The namespace itself lives until its last user is gone.
class NetnsGuard {
public:
	/**
	 * NetnsGuard() - create /run/netns/@name holding a new network namespace
	 * @name: namespace name; must not exist yet
	 *
	 * Throws SystemError (EEXIST when the name is taken, EPERM without root).
	 */
	explicit NetnsGuard(std::string_view name);
	NetnsGuard(const NetnsGuard&) = delete;
	NetnsGuard& operator=(const NetnsGuard&) = delete;
	/// ~NetnsGuard() - unmount and remove /run/netns/NAME; never throws
	~NetnsGuard();

	/// name() - the namespace name
	const std::string& name() const noexcept { return name_; }
	/// path() - /run/netns/NAME, for setns() or "nsenter --net="
	const std::string& path() const noexcept { return path_; }

private:
	std::string name_;
	std::string path_;
};

/**
 * enter_netns() - move the calling thread into a named network namespace
 * @name: a name under /run/netns (as "ip netns" lists), or an absolute path
 *        such as /proc/PID/ns/net
 *
 * Only the calling thread moves (setns() is per thread); sockets opened
 * before keep their namespace. Throws SystemError.
 */
void enter_netns(std::string_view name);

} // namespace esptun::platform
