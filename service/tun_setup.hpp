// The tun side of start-up: the tun MTU (step 4), the tun device with its
// addresses and link (step 5), and the routes through it.
#pragma once

#include "conf/config.hpp"
#include "platform/net_config_guard.hpp"
#include "service/service.hpp"
#include "service/workers.hpp"

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace esptun::service {

/// Which of @prefixes get a route through the tun: not a /0 (route_all
/// decides that), nor the subnet of a tun address (the kernel's connected
/// route covers it).
std::vector<IpPrefix> tun_routes(const conf::Config& config, std::span<const IpPrefix> prefixes);
/// The same with the tun's addresses (the config's [tunnel] addresses) given.
std::vector<IpPrefix> tun_routes(std::span<const IpPrefix> tun_addresses, std::span<const IpPrefix> prefixes);

/// What the tun routes to @peer and the SA table may give it: its
/// allowed_ips, and for a template (a users_file) every user's fixed
/// addresses (host prefixes) and allowed_ips.
std::vector<IpPrefix> peer_prefixes(const conf::PeerConfig& peer);

/// What the address pool must never lease under @config: the gateway's own
/// addresses and every peer_prefixes().
std::vector<IpPrefix> pool_reserved(const conf::Config& config);

/// has_v6_address() - whether the tun gets an IPv6 address of the config's own
bool has_v6_address(const conf::Config& config);

/**
 * choose_mtu() - step 4: info.mtu and info.mtu_source, configured or derived
 *
 * Throws std::runtime_error when the tun has IPv6 addresses and the MTU is
 * below IPv6's minimum.
 */
void choose_mtu(const conf::Config& config, ServiceInfo& info);

/**
 * bring_up_tun() - step 5: the tun device, a queue per worker, up
 * @workers: each gets its queue; the first one's names the device
 * @info:    gets the interface name and the offloads the tun took
 *
 * Sets the MTU, switches IPv6 off when there is no IPv6 address (unless a
 * client asks its gateway for addresses: one may be IPv6), adds the
 * configured addresses and brings the link up. Offloads are asked for in
 * both tun I/O modes: with vhost the tun's virtio-net header passes through
 * the rings (VhostNet::use_tun_vnet_hdr()). Throws on failure; closing the
 * queues removes the device.
 */
void bring_up_tun(const conf::Config& config, Workers& workers, ServiceInfo& info);

/**
 * install_routes() - the routes through the tun @ifindex
 *
 * For the peers' allowed_ips and the address pool (see tun_routes()); with
 * route_all also a host route that keeps the gateway on its current path
 * (the /1 routes are FullTunnel's). Return: the guard that removes them
 * again. Throws on failure, after removing what it added.
 */
platform::NetConfigGuard install_routes(const conf::Config& config, int ifindex);

/// The metric of the "unreachable" /1 routes of route_all and kill_switch:
/// above the kernel's default metrics (0 for IPv4, 1024 for IPv6), so the
/// tun's /1 routes win wherever they exist; distinctive, so a crashed run's
/// routes are recognised (README.md, route_all).
inline constexpr uint32_t kBlockMetric = 2000000;

/**
 * FullTunnel - the /1 routes of a route_all client, per address family
 *
 * A family goes into the tun (0.0.0.0/1 + 128.0.0.0/1, ::/1 + 8000::/1)
 * while the tun has an address of that family; otherwise the same halves
 * are "unreachable" routes at kBlockMetric, so its packets fail at once
 * (EHOSTUNREACH) instead of leaving in the clear by the
 * underlay's default route. With kill_switch the unreachable halves of both
 * families stay underneath the tun's all the time: they have no device, so
 * they outlive the tun when the client is killed. A change is
 * make-before-break: the new routes exist before the old ones go.
 *
 * Unreachable halves that exist already (a killed run's) are taken over.
 * The destructor removes everything (a clean stop); a SIGKILL leaves the
 * unreachable halves behind.
 */
class FullTunnel {
public:
	/**
	 * FullTunnel() - install the routes for the config's own addresses
	 * @ifindex: the tun
	 * Throws on failure, after removing what it added.
	 */
	FullTunnel(const conf::Config& config, int ifindex);
	~FullTunnel();
	FullTunnel(const FullTunnel&) = delete;
	FullTunnel& operator=(const FullTunnel&) = delete;

	/**
	 * set_addresses() - the tun's addresses changed (the gateway assigned
	 * others): route each family into the tun or block it
	 * @assigned: the virtual addresses now on the tun, besides the config's
	 *
	 * Never throws: a route that cannot be changed is logged, and blocking
	 * wins over routing (a failed tun route leaves the block in place).
	 */
	void set_addresses(std::span<const IpPrefix> assigned) noexcept;

	/// kill_switch: whether the unreachable halves stay underneath
	bool kill_switch() const noexcept { return kill_switch_; }

private:
	/// family_index() - 0 for IPv4, 1 for IPv6
	static size_t family_index(Family f) noexcept { return f == Family::v4 ? 0 : 1; }
	/// apply() - make the routes of family @fi match @has_address; throws
	void apply(size_t fi, bool has_address);
	/// remove_all() - remove every route of ours; never throws
	void remove_all() noexcept;

	int ifindex_;
	bool kill_switch_;
	std::vector<IpPrefix> static_; ///< the config's own tun addresses
	std::array<bool, 2> tun_{};    ///< per family: the tun halves are installed
	std::array<bool, 2> block_{};  ///< per family: the unreachable halves are installed
	/// Per family and half: what remove_all() has to take away (a failed
	/// apply() may have added one half of two).
	std::array<std::array<bool, 2>, 2> tun_owned_{}, block_owned_{};
};

/**
 * remove_leftovers() - what a killed route_all client (kill_switch or not)
 * left behind: the unreachable /1 routes at kBlockMetric and the host route
 * to the gateway (`esptun-client cleanup`)
 *
 * Call it only while no client with this config runs: it cannot tell a
 * running client's routes from a dead one's. Absent routes are skipped.
 * Return: one line per route removed. Throws SystemError on other failures.
 */
std::vector<std::string> remove_leftovers(const conf::Config& config);

/**
 * route_everything() - step 5 for a route_all client: the FullTunnel
 * Return: null without route_all. Throws on failure.
 */
std::unique_ptr<FullTunnel> route_everything(const conf::Config& config, int ifindex);

} // namespace esptun::service
