// NetConfigGuard: remembers the addresses and routes the gateway or client
// added, and removes them again on exit so the host's routing table is left
// as it was found.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/inet.hpp"

namespace esptun::platform {

/// Adds addresses and routes through netlink.hpp and undoes them, newest
/// first, when destroyed. Acts in the network namespace of the calling
/// thread: destroy it in the namespace it was filled in.
class NetConfigGuard {
public:
	NetConfigGuard() = default;
	NetConfigGuard(NetConfigGuard&& other) noexcept;
	NetConfigGuard& operator=(NetConfigGuard&& other) noexcept;
	NetConfigGuard(const NetConfigGuard&) = delete;
	NetConfigGuard& operator=(const NetConfigGuard&) = delete;
	/// ~NetConfigGuard() - restore()
	~NetConfigGuard();

	/**
	 * add_address() - add_address() from netlink.hpp, remembered for removal
	 * @ifindex: interface
	 * @addr:    address and prefix length
	 *
	 * Throws SystemError; nothing is remembered then.
	 */
	void add_address(int ifindex, const IpPrefix& addr);

	/**
	 * add_route() - add_route() from netlink.hpp, remembered for removal
	 * @dst, @ifindex, @gateway, @table: see add_route() in netlink.hpp
	 *
	 * Throws SystemError; nothing is remembered then.
	 */
	void add_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway = {},
	               std::optional<uint32_t> table = {});

	/**
	 * add_routes() - add_routes() from netlink.hpp (directly connected,
	 * main table, batched), each route the kernel added remembered for removal
	 *
	 * Throws SystemError at the first refusal; what was added stays
	 * remembered (restore() removes it).
	 */
	void add_routes(std::span<const IpPrefix> dsts, int ifindex);

	/**
	 * remove_route() - delete a route add_route() added through @ifindex
	 * (main table, no gateway) and forget it; one it does not hold is left
	 * alone. Throws SystemError when the kernel refuses (it stays held).
	 */
	void remove_route(const IpPrefix& dst, int ifindex);

	/**
	 * restore() - remove everything added, newest first, and forget it
	 *
	 * Never throws. Errors are ignored: the usual one is ENODEV/ESRCH
	 * because closing the tun already deleted the interface, and with it
	 * every address on it and every route through it; the rest (a host
	 * route through the physical interface) is still attempted.
	 */
	void restore() noexcept;

	/// release() - forget everything without removing it (leave it configured)
	void release() noexcept { entries_.clear(); }

	/// size() - how many additions are remembered
	size_t size() const noexcept { return entries_.size(); }

private:
	struct Entry {
		bool is_route = false;
		IpPrefix prefix;
		int ifindex = 0;
		std::optional<IpAddress> gateway;
		std::optional<uint32_t> table;
	};
	/// room_for_one() - make sure one more entry can be recorded without allocating
	void room_for_one();
	std::vector<Entry> entries_;
};

} // namespace esptun::platform
