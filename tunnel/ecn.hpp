// ECN across the tunnel (RFC 6040, normal mode; RFC 4301 section 5.1.2).
//
// Leaving through the tunnel, the outer header carries the inner packet's
// ECN field as it is (CE included), so a queue on the underlay path that
// marks instead of dropping can mark ESP packets of an ECN-capable flow.
// Coming out of the tunnel, a mark the underlay made is carried into the
// inner header:
//
//   inner \ outer | Not-ECT  ECT(0)  ECT(1)  CE
//   Not-ECT       | Not-ECT  Not-ECT Not-ECT drop
//   ECT(0)        | ECT(0)   ECT(0)  ECT(1)  CE
//   ECT(1)        | ECT(1)   ECT(1)  ECT(1)  CE
//   CE            | CE       CE      CE      CE
//
// A CE mark on a packet whose sender cannot take one (Not-ECT inside) has
// nowhere to go: the packet is dropped, which is what the marking queue
// would have done to a Not-ECT packet. The DSCP bits are not copied either
// way: the outer header's DSCP stays 0 and reveals nothing of the inner one.
#pragma once

#include <cstdint>
#include <span>

namespace esptun::tunnel::ecn {

/// The two-bit ECN field (RFC 3168 section 5).
inline constexpr uint8_t kNotEct = 0;
inline constexpr uint8_t kEct1 = 1;
inline constexpr uint8_t kEct0 = 2;
inline constexpr uint8_t kCe = 3;

/// field() - the ECN field of an IPv4 or IPv6 packet (Not-ECT for anything shorter than 2 bytes)
inline uint8_t field(std::span<const uint8_t> pkt) noexcept {
	if (pkt.size() < 2) return kNotEct;
	// IPv4: the low two bits of the TOS byte. IPv6: the low two bits of the
	// traffic class, which straddles bytes 0 and 1: bits 5-4 of byte 1.
	return (pkt[0] >> 4) == 4 ? (pkt[1] & 3) : ((pkt[1] >> 4) & 3);
}

/// combine() - the inner packet's ECN field after decapsulation (the table
/// above); kNotEct with @drop set for a CE mark on a Not-ECT packet
inline uint8_t combine(uint8_t inner, uint8_t outer, bool& drop) noexcept {
	drop = false;
	if (inner == kNotEct) {
		drop = outer == kCe;
		return kNotEct;
	}
	if (outer == kCe) return kCe;
	if (outer == kEct1 && inner == kEct0) return kEct1;
	return inner;
}

/**
 * set_field() - write @value into the ECN field of an IPv4/IPv6 packet
 * @pkt: at least a full IPv4 header (20 bytes) or 2 bytes of IPv6
 *
 * IPv4's header checksum is updated incrementally (RFC 1624 equation 3),
 * so a header that arrived with a wrong checksum keeps a wrong one.
 */
inline void set_field(std::span<uint8_t> pkt, uint8_t value) noexcept {
	if (pkt.size() < 2) return;
	if ((pkt[0] >> 4) != 4) {
		pkt[1] = uint8_t((pkt[1] & 0xcf) | (value << 4));
		return;
	}
	if (pkt.size() < 20) return;
	const uint16_t old_word = uint16_t(pkt[0] << 8 | pkt[1]);
	pkt[1] = uint8_t((pkt[1] & 0xfc) | value);
	const uint16_t new_word = uint16_t(pkt[0] << 8 | pkt[1]);
	const uint16_t check = uint16_t(pkt[10] << 8 | pkt[11]);
	// HC' = ~(~HC + ~m + m'), in one's complement arithmetic.
	uint32_t sum = uint32_t(uint16_t(~check)) + uint16_t(~old_word) + new_word;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	const uint16_t updated = uint16_t(~sum);
	pkt[10] = uint8_t(updated >> 8);
	pkt[11] = uint8_t(updated);
}

/**
 * decapsulate() - carry the outer header's ECN mark into @inner
 * @inner: the decapsulated packet (IPv4 or IPv6, header checked)
 * @outer: the ECN field of the datagram's outer IP header
 *
 * Return: false when the packet must be dropped (CE outside, Not-ECT inside)
 */
inline bool decapsulate(std::span<uint8_t> inner, uint8_t outer) noexcept {
	const uint8_t in = field(inner);
	bool drop = false;
	const uint8_t out = combine(in, outer & 3, drop);
	if (drop) return false;
	if (out != in) set_field(inner, out);
	return true;
}

} // namespace esptun::tunnel::ecn
