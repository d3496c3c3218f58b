// The client's DNS tools after a privilege drop.
//
// resolvectl asks systemd-resolved over D-Bus, which lets only root change a
// link's DNS; resolvconf rewrites root's files under /run and /etc. Neither
// works for the unprivileged user the endpoint becomes (service/
// privileges.hpp), and the seccomp filter forbids exec anyway, which a child
// would inherit. So before the drop the endpoint forks a helper that keeps
// root and does one thing: run resolvectl or resolvconf (from the fixed
// kDnsToolDirs only) when the endpoint asks over a socket pair, and answer
// with the outcome. It reads nothing from the network; the worst a
// subverted endpoint can make it do is set the tun's DNS servers, which the
// endpoint could be told to do by its gateway anyway.
#pragma once

#include "service/dns_config.hpp"

#include <memory>
#include <sys/types.h>

namespace esptun::service {

class DnsHelper {
public:
	/**
	 * start() - fork the helper; it ends when the endpoint closes its socket
	 * or dies (PR_SET_PDEATHSIG). Call while the process has one thread.
	 * Throws SystemError.
	 */
	static std::unique_ptr<DnsHelper> start();
	/// Closes the socket and reaps the helper.
	~DnsHelper();
	DnsHelper(const DnsHelper&) = delete;
	DnsHelper& operator=(const DnsHelper&) = delete;

	/// run() - a DnsToolRunner: have the helper run @argv; never throws.
	std::string run(const std::vector<std::string>& argv, const std::string& input,
	                std::chrono::milliseconds timeout) noexcept;

private:
	DnsHelper(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
	int fd_;
	pid_t pid_;
};

/// dns_tool_allowed() - true when @argv may run in the helper: argv[0] is
/// resolvectl or resolvconf in one of kDnsToolDirs, and no argument holds a NUL.
bool dns_tool_allowed(const std::vector<std::string>& argv);

} // namespace esptun::service
