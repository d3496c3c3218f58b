// ESP and UDP-encapsulation wire constants (RFC 4303, RFC 3948) and the
// packet buffer geometry every stage of the pipeline shares.
#pragma once

#include "crypto/esp_transform.hpp"

#include <cstddef>
#include <cstdint>

namespace esptun::tunnel::esp {

inline constexpr uint16_t kNatTPort = 4500;    // RFC 3948 section 2
inline constexpr size_t kHeaderLen = 8;        // SPI + sequence number, RFC 4303 section 2
inline constexpr size_t kTrailerLen = 2;       // pad length + next header, RFC 4303 section 2.5
inline constexpr size_t kNonEspMarkerLen = 4;  // four zero bytes in front of IKE, RFC 3948 section 2.2
inline constexpr uint8_t kNatKeepalive = 0xff; // one-byte NAT-keepalive, RFC 3948 section 2.3
inline constexpr uint32_t kMinSpi = 256;       // SPIs 1..255 are reserved, RFC 4303 section 2.1

// Next-header values for tunnel mode (IANA protocol numbers).
inline constexpr uint8_t kNextIpv4 = 4;
inline constexpr uint8_t kNextIpv6 = 41;
inline constexpr uint8_t kNextNone = 59; // dummy packet, RFC 4303 section 2.6: discard silently

inline constexpr size_t kIpv4HeaderMin = 20;
inline constexpr size_t kIpv6HeaderLen = 40;
inline constexpr size_t kUdpHeaderLen = 8;

/// Room in front of an inner packet for the ESP header and the largest IV,
/// so encapsulation happens in place without a copy.
inline constexpr size_t kHeadroom = kHeaderLen + crypto::kMaxIvLen;
/// Room behind it for the largest padding, the trailer and the largest ICV.
inline constexpr size_t kTailroom = (crypto::kMaxAlign - 1) + kTrailerLen + crypto::kMaxIcvLen;
/// Largest inner packet (an IPv4/IPv6 total length fits 16 bits).
inline constexpr size_t kMaxInner = 65535;
/// One packet buffer: enough for any inner packet plus head- and tailroom.
inline constexpr size_t kBufferSize = kHeadroom + kMaxInner + kTailroom;

/// Bytes ESP adds around an inner packet of @inner_len for @spec, with padding.
inline size_t esp_overhead(const crypto::CipherSpec& spec, size_t inner_len) noexcept {
	size_t body = inner_len + kTrailerLen;
	size_t padded = (body + spec.align - 1) / spec.align * spec.align;
	return kHeaderLen + spec.iv_len + (padded - inner_len) + spec.icv_len;
}

/**
 * max_inner_mtu() - the largest inner packet that still fits one underlay packet.
 * @underlay_mtu: MTU of the path to the peer (outer IP packet size)
 * @outer_v6:     the underlay is IPv6 (40-byte header instead of 20)
 *
 * The payload plus trailer is rounded up to the cipher's alignment, so the
 * space left after the fixed overhead is rounded down before the trailer is
 * taken off (RFC 4303 section 2.4).
 */
inline size_t max_inner_mtu(const crypto::CipherSpec& spec, size_t underlay_mtu, bool outer_v6) noexcept {
	size_t fixed = (outer_v6 ? kIpv6HeaderLen : kIpv4HeaderMin) + kUdpHeaderLen + kHeaderLen +
	               spec.iv_len + spec.icv_len;
	if (underlay_mtu <= fixed + spec.align) return 0;
	size_t room = (underlay_mtu - fixed) / spec.align * spec.align;
	return room - kTrailerLen;
}

} // namespace esptun::tunnel::esp
