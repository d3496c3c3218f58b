// The DNS servers a gateway hands a client (IKEv2 configuration payload) put
// into the system's resolver configuration for the client's tun, and taken
// out again when the client stops.
//
// Two interfaces exist on Linux, and both are used through their command
// line tool rather than a library or a file of our own:
//  - systemd-resolved keeps DNS servers per link: `resolvectl dns IFACE
//    ADDR...`. They go away with the link.
//  - resolvconf (Debian's resolvconf, openresolv, and systemd's resolvconf
//    emulation) keeps one record per interface and writes /etc/resolv.conf
//    from all records: `resolvconf -a IFACE` with resolv.conf lines on its
//    stdin adds or replaces the record, `resolvconf -d IFACE` deletes it.
// Without either there is nothing that owns /etc/resolv.conf on our behalf,
// and rewriting it behind the system's back is not ours to do: the servers
// are then only logged.
//
// The tools are run with posix_spawn (no shell), each with a hard time limit
// after which it is killed with its process group, so a hung resolver
// manager cannot hang the VPN. Nothing here throws.
#pragma once

#include "base/inet.hpp"

#include <chrono>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace esptun::service {

/// Where LinkDns looks for resolvectl and resolvconf, in order. A fixed list
/// rather than $PATH: esptun runs as root.
inline const std::vector<std::string> kDnsToolDirs{"/usr/bin", "/bin", "/usr/sbin", "/sbin"};

/**
 * DnsToolRunner - how LinkDns runs resolvectl or resolvconf
 * @argv:    argv[0] is the tool's full path
 * @input:   its stdin
 * @timeout: the time limit, after which it is killed
 * Return: "" when it exited with status 0, else what went wrong.
 */
using DnsToolRunner = std::function<std::string(const std::vector<std::string>& argv,
                                                const std::string& input, std::chrono::milliseconds timeout)>;

/// run_dns_tool() - the runner LinkDns uses by default: posix_spawn here, as this process.
std::string run_dns_tool(const std::vector<std::string>& argv, const std::string& input,
                         std::chrono::milliseconds timeout);

/**
 * set_dns_tool_runner() - make every LinkDns in the process run its tools
 * with @runner (after a privilege drop: through the helper that kept root,
 * service/dns_helper.hpp); an empty @runner restores run_dns_tool(). Call
 * it before any thread that may use LinkDns starts.
 */
void set_dns_tool_runner(DnsToolRunner runner);

class LinkDns {
public:
	/// At most this many servers are handed on (resolv.conf reads only 3).
	static constexpr size_t kMaxServers = 8;

	/**
	 * LinkDns() - ready; nothing is run until apply()
	 * @tool_dirs: where to look for resolvectl and resolvconf (tests pass their own)
	 * @timeout:   how long one run of either may take before it is killed
	 */
	explicit LinkDns(std::vector<std::string> tool_dirs = kDnsToolDirs,
	                 std::chrono::milliseconds timeout = std::chrono::seconds(5));
	/// Calls restore().
	~LinkDns();
	LinkDns(const LinkDns&) = delete;
	LinkDns& operator=(const LinkDns&) = delete;

	/**
	 * apply() - make @servers the DNS servers of interface @ifname
	 * @ifname:  the tun
	 * @servers: from the gateway; empty: remove what an earlier apply() set
	 * @catch_all: route_all: every query is to go to @servers
	 *
	 * Tries `resolvectl dns` when resolvectl is installed, else (or when it
	 * fails, e.g. systemd-resolved not running) `resolvconf -a @ifname`. A
	 * second call (a new IKE SA) replaces the servers of the first. Logs one
	 * line saying what it did, a warning when a tool failed.
	 *
	 * With @catch_all and resolvectl, the link also gets the routing domain
	 * "~." and is made a default route for DNS (`resolvectl domain @ifname
	 * '~.'`, `resolvectl default-route @ifname yes`): systemd-resolved then
	 * sends every name without a more specific routing domain of another link
	 * to the VPN's servers, not to the local network's as well. resolvconf
	 * has no such notion: its servers are merged in its interface order.
	 *
	 * Return: for the status JSON ("dns_applied"): the tool that set them,
	 * "resolvectl" or "resolvconf"; "resolvconf failed" (or "resolvectl
	 * failed", "resolvectl and resolvconf failed") when it exited non-zero,
	 * could not be started or was killed at the time limit; "not applied:
	 * neither resolvectl nor resolvconf is installed"; "" when @servers is
	 * empty.
	 */
	std::string apply(const std::string& ifname, std::span<const IpAddress> servers,
	                  bool catch_all = false);

	/**
	 * restore() - take back what apply() set: `resolvconf -d IFACE`, or
	 * `resolvectl revert IFACE`. Does nothing the second time, or when
	 * nothing was set. Call it while the tun still exists.
	 */
	void restore() noexcept;

private:
	enum class Undo { none, resolvectl, resolvconf };

	/// The full path of @name in the first of tool_dirs_ that has it executable, else "".
	std::string find_tool(const char* name) const;
	/// Runs @tool with @args and @input on its stdin; logs a warning when it fails.
	bool run_logged(const std::string& tool, const std::vector<std::string>& args,
	                const std::string& input) const;

	std::vector<std::string> tool_dirs_;
	std::chrono::milliseconds timeout_;
	Undo undo_ = Undo::none; ///< what restore() has to take back
	std::string tool_;       ///< with which tool (its path)
	std::string ifname_;     ///< for which interface
};

} // namespace esptun::service
