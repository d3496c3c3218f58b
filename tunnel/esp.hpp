// Encapsulation and decapsulation of one packet, in place, with no I/O: the
// caller reads and writes devices and sockets (datapath/data_plane.cpp).
//
// Outbound: inner packet from the tun -> peer by inner destination -> next
//   sequence number -> pad and trailer -> seal (IV, encrypt, ICV) -> datagram
//   for the peer's endpoint.
// Inbound: datagram -> keepalive / non-ESP marker? -> SA by SPI -> replay
//   check -> open (verify ICV, decrypt) -> replay commit -> trailer and
//   padding checks -> inner packet checks -> inner source allowed? ->
//   endpoint update -> inner packet for the tun.
//
// Both run between SaTable::enter() and leave() of the calling worker: the
// SAs they find may be replaced by the control plane meanwhile (IKE rekeys),
// and the table frees a replaced SA only once every worker has left.
#pragma once

#include "base/counters.hpp"
#include "base/inet.hpp"
#include "tunnel/sa.hpp"

#include <cstdint>
#include <span>

namespace esptun::tunnel {

/// What became of a packet. Exactly one of the fields describes it.
enum class Verdict : uint8_t { forward, drop, ignore };

struct OutboundResult {
	Verdict verdict = Verdict::drop;
	Drop drop = Drop::malformed;
	Peer* peer = nullptr;
	std::span<uint8_t> datagram; ///< the ESP packet
	Endpoint to;                 ///< where to send it: the peer's endpoint as read for this packet
	uint8_t ecn = 0;             ///< the outer header's ECN field: the inner packet's (tunnel/ecn.hpp)
};

struct InboundResult {
	Verdict verdict = Verdict::drop;
	Drop drop = Drop::malformed;
	Ignore ignore = Ignore::nat_keepalive;
	Peer* peer = nullptr;
	std::span<uint8_t> inner; ///< the inner IP packet to write to the tun
	bool endpoint_changed = false;
};

/**
 * encapsulate() - turn an inner packet into an ESP packet in place.
 * @table:     the SA table
 * @buf:       a packet buffer; the inner packet starts at esp::kHeadroom
 * @inner_len: length of the inner packet
 * @worker:    whose transforms to use
 * @routes:    the worker's route cache for this pass, or nullptr
 * Return: forward with the datagram (a subspan of @buf), or the drop reason.
 */
OutboundResult encapsulate(const SaTable& table, std::span<uint8_t> buf, size_t inner_len, size_t worker = 0,
                           RouteCache* routes = nullptr) noexcept;

/**
 * decapsulate() - check, authenticate and decrypt one received datagram in place.
 * @table:   the SA table
 * @dgram:   the UDP payload as received
 * @src:     where it came from (becomes the peer's endpoint if it moved)
 * @now_ms:  wall-clock milliseconds, for the peer's last-packet time
 * @worker:  whose transforms to use
 * @routes:  the worker's route cache for this pass (the inner source check), or nullptr
 * @outer_ecn: the ECN field of the datagram's outer IP header, carried into
 *           the inner packet (tunnel/ecn.hpp); a CE mark on a Not-ECT inner
 *           packet drops it (Drop::ce_not_ect)
 */
InboundResult decapsulate(const SaTable& table, std::span<uint8_t> dgram, const Endpoint& src, int64_t now_ms,
                          size_t worker = 0, RouteCache* routes = nullptr, uint8_t outer_ecn = 0) noexcept;

/// Parses the destination (or source) address of an IPv4/IPv6 packet; false if malformed.
bool inner_address(std::span<const uint8_t> pkt, bool source, IpAddress& out) noexcept;

} // namespace esptun::tunnel
