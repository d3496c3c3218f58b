// Longest-prefix match from an inner address to a peer: picks the outbound
// SA for an inner destination and checks an inbound packet's inner source.
#pragma once

#include "base/inet.hpp"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace esptun::tunnel {

struct Peer;

/**
 * AllowedIps - prefix table built once at start-up, read on every packet.
 *
 * One hash map per prefix length that is in use, searched from the longest
 * length down: a lookup costs one masked hash probe per distinct length
 * (typically two or three), independent of the number of peers.
 */
class AllowedIps {
public:
	/// Adds a prefix; host bits are ignored. Returns false if it is already present.
	bool insert(const IpPrefix& prefix, Peer* peer);
	/// The peer whose prefix is the longest match for @addr, or nullptr.
	Peer* lookup(const IpAddress& addr) const noexcept;

private:
	struct Key {
		uint64_t hi, lo;
		friend bool operator==(const Key&, const Key&) = default;
	};
	struct KeyHash {
		size_t operator()(const Key& k) const noexcept {
			return size_t((k.hi * 0x9e3779b97f4a7c15ull) ^
			              (k.lo + 0x632be59bd9b4e019ull + (k.hi >> 17)));
		}
	};
	struct Level {
		unsigned len;
		std::unordered_map<Key, Peer*, KeyHash> map;
	};
	static Key key_of(const IpAddress& addr, unsigned len) noexcept;

	std::vector<Level> v4_, v6_; ///< sorted by prefix length, longest first
};

} // namespace esptun::tunnel
