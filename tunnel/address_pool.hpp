// Virtual addresses a gateway hands to IKE clients (RFC 7296 section 3.15),
// and the routes to them: while a client holds an address, packets to it go
// to that client's SAs and packets from it are accepted from that client.
#pragma once

#include "base/inet.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace esptun::tunnel {

struct Peer;

/**
 * AddressPool - leases of single addresses out of a few prefixes
 *
 * Each pool prefix has one slot per address, an atomic pointer to the peer
 * holding it: the data path finds the holder of an address with one
 * containment test per prefix and one acquire load, takes no lock and never
 * sees a half-made lease. Leases are made and ended by the control plane
 * under a mutex. Peers outlive the pool, so a slot needs no reclamation: a
 * worker that read a peer just before its lease ended sends one last packet
 * to it, which that peer's SA (or its absence) then handles.
 *
 * Addresses are handed out round robin, so one just released is the last to
 * be reused; a peer that returns gets its previous address back while that
 * is still free.
 */
class AddressPool {
public:
	/// A pool prefix holds at most 2^16 addresses (slots cost 8 bytes each).
	static constexpr unsigned kMaxHostBits = 16;

	AddressPool();
	/**
	 * AddressPool() - slots for every address of @prefixes
	 * @reserved: prefixes never handed out (static peers' allowed_ips, the
	 *            gateway's own addresses), unless one covers a whole pool
	 *            prefix; IPv4 network and broadcast addresses are never
	 *            handed out either.
	 * Throws std::invalid_argument for a prefix larger than 2^16 addresses,
	 * or two prefixes that overlap.
	 */
	AddressPool(const std::vector<IpPrefix>& prefixes, const std::vector<IpPrefix>& reserved);
	AddressPool(AddressPool&&) noexcept;
	AddressPool& operator=(AddressPool&&) noexcept;
	~AddressPool();

	// --- Data path: any thread, lock-free. ---
	bool empty() const noexcept { return ranges_.empty(); }
	/// The peer holding @addr, or nullptr (not in a pool, or not leased).
	Peer* lookup(const IpAddress& addr) const noexcept;

	// --- Control plane. ---
	/**
	 * lease() - an address of @family for @peer
	 * The one it already holds, else its previous one if free, else the next
	 * free address. Return: nullopt when no pool prefix of @family has room.
	 */
	std::optional<IpAddress> lease(Peer& peer, Family family);
	/// release() - end every lease of @peer (packets to them then find no route).
	void release(const Peer& peer);
	/// forget() - release(), and drop @peer's previous addresses too: it is
	/// going away for good (a reload removed it).
	void forget(const Peer& peer);
	/// The addresses @peer holds.
	std::vector<IpAddress> leases(const Peer& peer) const;
	/**
	 * set_reserved() - replace the reserved prefixes (a reload changed the
	 * peers' allowed_ips): what the constructor's @reserved does, now.
	 * Return: "" or, changing nothing, why not (an address that would be
	 * reserved is leased to someone).
	 */
	std::string set_reserved(const std::vector<IpPrefix>& reserved);

	struct Usage {
		IpPrefix prefix;
		size_t usable = 0; ///< addresses that may be handed out
		size_t leased = 0;
	};
	std::vector<Usage> usage() const;

private:
	struct Range;
	static size_t index_of(const Range& r, const IpAddress& addr) noexcept;
	static std::vector<bool> blocked_in(const Range& r, const std::vector<IpPrefix>& reserved);
	static IpAddress address_at(const Range& r, size_t index) noexcept;
	Range* range_of(const IpAddress& addr) const noexcept;

	std::vector<std::unique_ptr<Range>> ranges_;
	mutable std::mutex control_;
	std::unordered_map<const Peer*, std::vector<IpAddress>> held_, previous_;
};

} // namespace esptun::tunnel
