// Per-interface sysctls: see sysctl.hpp.
#include "platform/sysctl.hpp"

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

#include <cerrno>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace esptun::platform {

void set_ipv6_enabled(std::string_view ifname, bool enabled) {
	std::string path = "/proc/sys/net/ipv6/conf/" + std::string(ifname) + "/disable_ipv6";
	UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
	if (!fd) {
		if (errno == ENOENT && access("/proc/sys/net/ipv6", F_OK) != 0)
			return; // no IPv6 in this kernel
		throw_errno("open", path);
	}
	const char* value = enabled ? "0\n" : "1\n";
	if (::write(fd.get(), value, 2) != 2) throw_errno("write", path);
}

} // namespace esptun::platform
