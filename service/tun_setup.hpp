// The tun side of start-up: the tun MTU (step 4), the tun device with its
// addresses and link (step 5), and the routes through it.
#pragma once

#include "conf/config.hpp"
#include "platform/net_config_guard.hpp"
#include "service/service.hpp"
#include "service/workers.hpp"

#include <span>
#include <vector>

namespace esptun::service {

/// Which of @prefixes get a route through the tun: not a /0 (route_all
/// decides that), nor the subnet of a tun address (the kernel's connected
/// route covers it).
std::vector<IpPrefix> tun_routes(const conf::Config& config, std::span<const IpPrefix> prefixes);

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
 * Sets the MTU, switches IPv6 off when there is no IPv6 address, adds the
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
 * route_all also two /1 routes per family and a host route that keeps the
 * gateway on its current path. Return: the guard that removes them again.
 * Throws on failure, after removing what it added.
 */
platform::NetConfigGuard install_routes(const conf::Config& config, int ifindex);

} // namespace esptun::service
