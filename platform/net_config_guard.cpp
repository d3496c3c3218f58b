// NetConfigGuard (see net_config_guard.hpp).
#include "platform/net_config_guard.hpp"

#include "platform/netlink.hpp"

#include <algorithm>

namespace esptun::platform {

NetConfigGuard::NetConfigGuard(NetConfigGuard&& other) noexcept : entries_(std::move(other.entries_)) {
	other.entries_.clear();
}

NetConfigGuard& NetConfigGuard::operator=(NetConfigGuard&& other) noexcept {
	if (this != &other) {
		restore();
		entries_ = std::move(other.entries_);
		other.entries_.clear();
	}
	return *this;
}

NetConfigGuard::~NetConfigGuard() { restore(); }

void NetConfigGuard::room_for_one() {
	// Doubling: reserve(size() + 1) would reallocate (and copy every entry)
	// at each call, quadratic in the 10,000 routes of 10,000 peers.
	if (entries_.size() == entries_.capacity())
		entries_.reserve(std::max<size_t>(16, 2 * entries_.capacity()));
}

void NetConfigGuard::add_address(int ifindex, const IpPrefix& addr) {
	// Reserve first: once the kernel has the address, recording it must not
	// be able to fail (a bad_alloc then would leak it past restore()).
	room_for_one();
	platform::add_address(ifindex, addr);
	entries_.push_back({false, addr, ifindex, std::nullopt, std::nullopt});
}

void NetConfigGuard::add_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway,
                               std::optional<uint32_t> table) {
	room_for_one();
	platform::add_route(dst, ifindex, gateway, table);
	entries_.push_back({true, dst, ifindex, gateway, table});
}

void NetConfigGuard::add_routes(std::span<const IpPrefix> dsts, int ifindex) {
	// Room for all first: each route the kernel adds is recorded at once,
	// without an allocation that could fail between the two.
	if (entries_.capacity() - entries_.size() < dsts.size())
		entries_.reserve(std::max(entries_.size() + dsts.size(), 2 * entries_.capacity()));
	platform::add_routes(dsts, ifindex, [&](size_t i) {
		entries_.push_back({true, dsts[i], ifindex, std::nullopt, std::nullopt});
	});
}

void NetConfigGuard::remove_route(const IpPrefix& dst, int ifindex) {
	auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
		return e.is_route && e.prefix == dst && e.ifindex == ifindex && !e.gateway && !e.table;
	});
	if (it == entries_.end()) return;
	platform::del_route(dst, ifindex);
	entries_.erase(it);
}

void NetConfigGuard::restore() noexcept {
	while (!entries_.empty()) {
		const Entry& e = entries_.back();
		try {
			if (e.is_route)
				platform::del_route(e.prefix, e.ifindex, e.gateway, e.table);
			else
				platform::del_address(e.ifindex, e.prefix);
		} catch (...) {
			// See restore() in the header: already gone, or nothing more to do.
		}
		entries_.pop_back();
	}
}

} // namespace esptun::platform
