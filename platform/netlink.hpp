// A small rtnetlink (NETLINK_ROUTE) client for set-up: link MTU and state,
// interface addresses, routes, route lookups. Every request is acknowledged
// (NLM_F_ACK) and a refusal becomes a SystemError such as
// "add route 10.99.0.2/32 dev esp0: File exists".
//
// Each call opens its own netlink socket, so it acts in the network
// namespace of the calling thread at the time of the call.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "base/inet.hpp"

namespace esptun::platform {

/// The answer of a route lookup (RTM_GETROUTE), as "ip route get" shows it.
struct RouteInfo {
	int ifindex = 0;                  ///< outgoing interface
	std::optional<IpAddress> gateway; ///< next hop, if not directly connected
	std::optional<IpAddress> prefsrc; ///< source address the kernel would pick
};

/**
 * set_link_mtu() - set an interface's MTU (ip link set dev X mtu N)
 * @ifindex: interface
 * @mtu:     new MTU; IPv6 needs at least 1280
 *
 * Throws SystemError.
 */
void set_link_mtu(int ifindex, unsigned mtu);

/**
 * set_link_gso_max_segs() - most segments the stack puts in one GSO packet
 * for this interface (ip link set dev X gso_max_segs N)
 * @ifindex: the interface
 * @segs:    the limit; a tun with offloads then never hands over a
 *           super-packet of more segments than a batch has buffers
 * Throws SystemError.
 */
void set_link_gso_max_segs(int ifindex, unsigned segs);

/**
 * set_link_up() - bring an interface up (ip link set dev X up)
 * @ifindex: interface
 *
 * Throws SystemError.
 */
void set_link_up(int ifindex);

/**
 * link_mtu() - an interface's MTU
 * @ifindex: interface
 *
 * Return: the MTU. Throws SystemError (ENODEV for a missing interface).
 */
unsigned link_mtu(int ifindex);

/**
 * add_address() - add an address to an interface (ip addr add A/N dev X)
 * @ifindex: interface
 * @addr:    address with its prefix length; the kernel adds the prefix
 *           route (e.g. 10.99.0.0/24 dev X) once the link is up
 *
 * IPv6 addresses are added with IFA_F_NODAD, see netlink.cpp.
 * Throws SystemError (EEXIST when already present).
 */
void add_address(int ifindex, const IpPrefix& addr);

/**
 * del_address() - remove an address from an interface
 * @ifindex: interface
 * @addr:    as given to add_address()
 *
 * Throws SystemError (EADDRNOTAVAIL when not present).
 */
void del_address(int ifindex, const IpPrefix& addr);

/**
 * add_route() - add a unicast route (ip route add DST [via GW] dev X [table T])
 * @dst:     destination prefix; host bits are cleared; /0 is a default route
 * @ifindex: outgoing interface
 * @gateway: next hop, same family as @dst; none for a directly connected route
 * @table:   routing table id; the main table (254) when absent
 *
 * Never replaces an existing route (NLM_F_EXCL). Throws SystemError
 * (EEXIST when the route exists).
 */
void add_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway = {},
               std::optional<uint32_t> table = {});

/**
 * add_routes() - add_route() for many directly connected routes through
 * @ifindex in the main table, on one netlink socket with up to 64
 * requests per send (10,000 routes take a fraction of a second, not one
 * socket and round trip each)
 * @dsts:  the destinations
 * @added: called with the index in @dsts of each route the kernel added
 *
 * Throws SystemError for the first route the kernel refused, once the acks
 * of its batch are read (a later route of that batch may have been added:
 * @added was called for it); transport failures throw too.
 */
void add_routes(std::span<const IpPrefix> dsts, int ifindex, const std::function<void(size_t)>& added);

/**
 * del_route() - remove a route added by add_route(); same parameters
 * @dst, @ifindex, @gateway, @table: as given to add_route()
 *
 * Throws SystemError (ESRCH when no such route).
 */
void del_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway = {},
               std::optional<uint32_t> table = {});

/**
 * add_unreachable_route() - ip route add unreachable DST metric METRIC
 * @dst:    destination prefix (host bits are cleared)
 * @metric: the route's priority; a lower one (e.g. a route through a tun
 *          for the same prefix) wins while it exists
 *
 * The route has no device, so it outlives any interface: a sender that
 * matches it gets EHOSTUNREACH ("No route to host") and nothing is sent.
 * In the main table. Never replaces a route (NLM_F_EXCL). Throws
 * SystemError (EEXIST when a route for @dst with this metric exists).
 */
void add_unreachable_route(const IpPrefix& dst, uint32_t metric);

/**
 * del_unreachable_route() - remove a route added by add_unreachable_route()
 * @dst, @metric: as given to add_unreachable_route()
 *
 * Throws SystemError (ESRCH when no such route).
 */
void del_unreachable_route(const IpPrefix& dst, uint32_t metric);

/**
 * get_route() - the route the kernel would use towards @dst (ip route get)
 * @dst: destination address
 *
 * A VPN client calls this for its gateway's address before pointing the
 * default route into the tunnel, and pins a host route with the answer so
 * the encrypted packets themselves do not loop into the tunnel.
 * Return: the route, or nullopt when @dst is unreachable. Throws SystemError.
 */
std::optional<RouteInfo> get_route(const IpAddress& dst);

/**
 * link_name() - an interface's name for messages: "esp0", or "ifindex 7"
 * @ifindex: interface
 */
std::string link_name(int ifindex);

} // namespace esptun::platform
