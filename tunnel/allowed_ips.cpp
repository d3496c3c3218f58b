// Longest-prefix match: see allowed_ips.hpp.
#include "tunnel/allowed_ips.hpp"

#include "base/bytes.hpp"

#include <algorithm>

namespace esptun::tunnel {

AllowedIps::Key AllowedIps::key_of(const IpAddress& addr, unsigned len) noexcept {
	IpAddress m = addr.masked(len);
	if (m.family == Family::v4) return {0, load_be32(m.bytes.data())};
	return {load_be64(m.bytes.data()), load_be64(m.bytes.data() + 8)};
}

bool AllowedIps::insert(const IpPrefix& prefix, Peer* peer) {
	auto& levels = prefix.addr.family == Family::v4 ? v4_ : v6_;
	auto it =
	    std::find_if(levels.begin(), levels.end(), [&](const Level& l) { return l.len <= prefix.len; });
	if (it == levels.end() || it->len != prefix.len) it = levels.insert(it, Level{prefix.len, {}});
	return it->map.emplace(key_of(prefix.addr, prefix.len), peer).second;
}

Peer* AllowedIps::lookup(const IpAddress& addr) const noexcept {
	const auto& levels = addr.family == Family::v4 ? v4_ : v6_;
	for (const Level& l : levels) {
		auto it = l.map.find(key_of(addr, l.len));
		if (it != l.map.end()) return it->second;
	}
	return nullptr;
}

} // namespace esptun::tunnel
