// DisjointPrefixes: a set of prefixes no two of which overlap, indexed by
// where each starts, so the members a new prefix would overlap are found in
// O(log n) instead of by comparing it with every member.
//
// Two prefixes either nest or are apart. So a member overlaps prefix P when
// it starts inside P (then P holds it), or when it starts before P and holds
// P's start; as members are disjoint, only the last one starting before P
// can. Used by the config loader and the SA table to refuse an allowed_ips
// entry that overlaps another peer's with 10,000 peers as with ten.
#pragma once

#include <array>
#include <iterator>
#include <map>
#include <utility>

#include "base/inet.hpp"

namespace esptun {

template <class V> class DisjointPrefixes {
public:
	struct Entry {
		IpPrefix prefix; ///< a network (host bits clear)
		V value;
	};

	/**
	 * for_each_overlap() - call @f(const Entry&) for each member that
	 * overlaps @p, in address order, until @f returns false
	 */
	template <class F> void for_each_overlap(const IpPrefix& p, F&& f) const {
		const IpPrefix net = p.network();
		auto it = by_start_.lower_bound(key(net));
		if (it != by_start_.begin()) {
			const Entry& before = std::prev(it)->second;
			if (before.prefix.contains(net.addr) && !f(before)) return;
		}
		for (; it != by_start_.end() && net.contains(it->second.prefix.addr); ++it)
			if (!f(it->second)) return;
	}

	/// first_overlap() - a member that overlaps @p, or nullptr
	const Entry* first_overlap(const IpPrefix& p) const {
		const Entry* hit = nullptr;
		for_each_overlap(p, [&](const Entry& e) {
			hit = &e;
			return false;
		});
		return hit;
	}

	/**
	 * insert() - add @p (as its network) with @v, first removing the
	 * members @p holds; the caller has made sure no member holds @p (one
	 * that did would be left, and the set would no longer be disjoint)
	 */
	void insert(const IpPrefix& p, V v) {
		const IpPrefix net = p.network();
		auto it = by_start_.lower_bound(key(net));
		while (it != by_start_.end() && net.contains(it->second.prefix.addr))
			it = by_start_.erase(it);
		by_start_.emplace(key(net), Entry{net, std::move(v)});
	}

	size_t size() const noexcept { return by_start_.size(); }

private:
	using Key = std::pair<Family, std::array<uint8_t, 16>>;
	static Key key(const IpPrefix& net) { return {net.addr.family, net.addr.bytes}; }

	std::map<Key, Entry> by_start_;
};

} // namespace esptun
