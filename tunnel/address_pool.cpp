// Leases of client addresses: see address_pool.hpp.
#include "tunnel/address_pool.hpp"

#include "base/bytes.hpp"

#include <algorithm>
#include <stdexcept>

namespace esptun::tunnel {

struct AddressPool::Range {
	IpPrefix prefix; ///< network form
	size_t size = 0; ///< 2^(host bits)
	std::unique_ptr<std::atomic<Peer*>[]> slots;
	std::vector<bool> blocked; ///< never handed out
	size_t usable = 0, leased = 0;
	size_t cursor = 0; ///< where the next search for a free address starts
};

AddressPool::AddressPool(const std::vector<IpPrefix>& prefixes, const std::vector<IpPrefix>& reserved) {
	for (const IpPrefix& given : prefixes) {
		const IpPrefix p = given.network();
		const unsigned host_bits = p.addr.max_prefix() - p.len;
		if (host_bits > kMaxHostBits)
			throw std::invalid_argument("address pool " + to_string(p) + " has more than 2^" +
			                            std::to_string(kMaxHostBits) +
			                            " addresses; use a longer prefix");
		for (const auto& r : ranges_)
			if (r->prefix.overlaps(p))
				throw std::invalid_argument("address pools " + to_string(r->prefix) +
				                            " and " + to_string(p) + " overlap");
		auto r = std::make_unique<Range>();
		r->prefix = p;
		r->size = size_t(1) << host_bits;
		r->slots = std::make_unique<std::atomic<Peer*>[]>(r->size);
		r->blocked = blocked_in(*r, reserved);
		r->usable = size_t(std::count(r->blocked.begin(), r->blocked.end(), false));
		ranges_.push_back(std::move(r));
	}
}

std::vector<bool> AddressPool::blocked_in(const Range& r, const std::vector<IpPrefix>& reserved) {
	const IpPrefix& p = r.prefix;
	std::vector<bool> blocked(r.size, false);
	if (p.addr.family == Family::v4 && r.size >= 4) {
		blocked.front() = true; // the network address
		blocked.back() = true;  // broadcast
	}
	for (const IpPrefix& res : reserved) {
		// A prefix covering the whole pool does not block it: a lease is a
		// host route, more specific than that prefix.
		if (!res.overlaps(p) || res.len <= p.len) continue;
		const size_t first = index_of(r, res.addr.masked(res.len));
		const size_t count = size_t(1) << (p.addr.max_prefix() - res.len);
		for (size_t i = first; i < first + count && i < r.size; i++)
			blocked[i] = true;
	}
	return blocked;
}

std::string AddressPool::set_reserved(const std::vector<IpPrefix>& reserved) {
	std::lock_guard lock(control_);
	std::vector<std::vector<bool>> blocked;
	for (const auto& r : ranges_) {
		blocked.push_back(blocked_in(*r, reserved));
		for (size_t i = 0; i < r->size; i++)
			if (blocked.back()[i] && !r->blocked[i] &&
			    r->slots[i].load(std::memory_order_relaxed))
				return "address " + to_string(address_at(*r, i)) +
				       " is leased to a connected client";
	}
	for (size_t k = 0; k < ranges_.size(); k++) {
		Range& r = *ranges_[k];
		r.blocked = std::move(blocked[k]);
		r.usable = size_t(std::count(r.blocked.begin(), r.blocked.end(), false));
	}
	return {};
}

void AddressPool::forget(const Peer& peer) {
	release(peer);
	std::lock_guard lock(control_);
	previous_.erase(&peer);
}

AddressPool::AddressPool(AddressPool&& o) noexcept
    : ranges_(std::move(o.ranges_)), held_(std::move(o.held_)), previous_(std::move(o.previous_)) {}

AddressPool& AddressPool::operator=(AddressPool&& o) noexcept {
	ranges_ = std::move(o.ranges_);
	held_ = std::move(o.held_);
	previous_ = std::move(o.previous_);
	return *this;
}

AddressPool::AddressPool() = default;
AddressPool::~AddressPool() = default;

size_t AddressPool::index_of(const Range& r, const IpAddress& addr) noexcept {
	// At most 16 host bits: they are all in the last four bytes.
	return load_be32(addr.bytes.data() + addr.size() - 4) & (r.size - 1);
}

IpAddress AddressPool::address_at(const Range& r, size_t index) noexcept {
	IpAddress a = r.prefix.addr;
	uint8_t* tail = a.bytes.data() + a.size() - 4;
	store_be32(tail, load_be32(tail) | uint32_t(index));
	return a;
}

AddressPool::Range* AddressPool::range_of(const IpAddress& addr) const noexcept {
	for (const auto& r : ranges_)
		if (r->prefix.contains(addr)) return r.get();
	return nullptr;
}

Peer* AddressPool::lookup(const IpAddress& addr) const noexcept {
	const Range* r = range_of(addr);
	return r ? r->slots[index_of(*r, addr)].load(std::memory_order_acquire) : nullptr;
}

std::optional<IpAddress> AddressPool::lease(Peer& peer, Family family) {
	std::lock_guard lock(control_);
	std::vector<IpAddress>& held = held_[&peer];
	for (const IpAddress& a : held)
		if (a.family == family) return a;
	auto take = [&](Range& r, size_t i) {
		r.slots[i].store(&peer, std::memory_order_release);
		r.leased++;
		held.push_back(address_at(r, i));
		return held.back();
	};
	if (auto prev = previous_.find(&peer); prev != previous_.end())
		for (const IpAddress& a : prev->second) {
			Range* r = a.family == family ? range_of(a) : nullptr;
			if (!r) continue;
			const size_t i = index_of(*r, a);
			if (!r->blocked[i] && !r->slots[i].load(std::memory_order_relaxed))
				return take(*r, i);
		}
	for (const auto& r : ranges_) {
		if (r->prefix.addr.family != family || r->leased == r->usable) continue;
		for (size_t n = 0; n < r->size; n++) {
			const size_t i = (r->cursor + n) & (r->size - 1);
			if (r->blocked[i] || r->slots[i].load(std::memory_order_relaxed)) continue;
			r->cursor = i + 1;
			return take(*r, i);
		}
	}
	return std::nullopt;
}

void AddressPool::release(const Peer& peer) {
	std::lock_guard lock(control_);
	auto it = held_.find(&peer);
	if (it == held_.end()) return;
	for (const IpAddress& a : it->second) {
		Range* r = range_of(a);
		r->slots[index_of(*r, a)].store(nullptr, std::memory_order_release);
		r->leased--;
	}
	previous_[&peer] = std::move(it->second);
	held_.erase(it);
}

std::vector<IpAddress> AddressPool::leases(const Peer& peer) const {
	std::lock_guard lock(control_);
	auto it = held_.find(&peer);
	return it == held_.end() ? std::vector<IpAddress>{} : it->second;
}

std::vector<AddressPool::Usage> AddressPool::usage() const {
	std::lock_guard lock(control_);
	std::vector<Usage> out;
	for (const auto& r : ranges_)
		out.push_back({r->prefix, r->usable, r->leased});
	return out;
}

} // namespace esptun::tunnel
