// Helpers for the tunnel/ tests: sites A, B and C with mirrored SA tables, real
// IPv4/IPv6 inner packets, and ESP packets sealed by hand. Shared by the
// unit-tunnel tests and tests/fuzz/fuzz_esp_receive.cpp, so no doctest here.
#pragma once

#include "crypto/esp_transform.hpp"
#include "tests/unit/support/bytes_test_util.hpp"
#include "tests/unit/support/peer_test_util.hpp"
#include "tunnel/esp.hpp"
#include "tunnel/esp_wire.hpp"
#include "tunnel/sa.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

namespace esptun::test {

/// IPv4 address from four octets, built by hand (not through inet.cpp).
inline IpAddress ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
	IpAddress r;
	r.family = Family::v4;
	r.bytes[0] = a;
	r.bytes[1] = b;
	r.bytes[2] = c;
	r.bytes[3] = d;
	return r;
}

/// IPv6 address fd00:<site>::<host> (or any /16 group @g0 with @host last).
inline IpAddress ip6(uint16_t g0, uint16_t g1, uint16_t g2, uint16_t host) {
	IpAddress r;
	r.family = Family::v6;
	r.bytes[0] = uint8_t(g0 >> 8);
	r.bytes[1] = uint8_t(g0);
	r.bytes[2] = uint8_t(g1 >> 8);
	r.bytes[3] = uint8_t(g1);
	r.bytes[4] = uint8_t(g2 >> 8);
	r.bytes[5] = uint8_t(g2);
	r.bytes[14] = uint8_t(host >> 8);
	r.bytes[15] = uint8_t(host);
	return r;
}

inline IpPrefix prefix(const IpAddress& a, uint8_t len) { return IpPrefix{a, len}; }

inline Endpoint endpoint(const IpAddress& a, uint16_t port) { return Endpoint{a, port}; }

/// Deterministic random bytes: every test seeds its own generator.
class Rng {
public:
	explicit Rng(uint64_t seed) : g_(seed) {}
	uint32_t u32() { return uint32_t(g_()); }
	size_t below(size_t n) { return size_t(g_() % n); }
	void fill(std::span<uint8_t> out) {
		for (uint8_t& b : out)
			b = uint8_t(g_());
	}
	Bytes bytes(size_t n) {
		Bytes b(n);
		fill(b);
		return b;
	}

private:
	std::mt19937_64 g_;
};

/// The RFC 791 header checksum, so inner IPv4 packets look like real ones.
inline uint16_t ipv4_checksum(std::span<const uint8_t> hdr) {
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < hdr.size(); i += 2)
		sum += uint32_t(hdr[i] << 8 | hdr[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return uint16_t(~sum);
}

/**
 * ipv4_packet() - an IPv4 packet of exactly @total bytes (>= 20): a 20-byte
 * header whose total length is @total, protocol @proto, random payload.
 */
inline Bytes ipv4_packet(const IpAddress& src, const IpAddress& dst, size_t total, Rng& rng,
                         uint8_t proto = 17) {
	if (total < 20 || total > 65535) throw std::invalid_argument("ipv4_packet: bad length");
	Bytes p = rng.bytes(total);
	p[0] = 0x45;
	p[1] = 0;
	p[2] = uint8_t(total >> 8);
	p[3] = uint8_t(total);
	p[6] = 0x40; // DF, offset 0
	p[7] = 0;
	p[8] = 64;
	p[9] = proto;
	p[10] = p[11] = 0;
	std::memcpy(&p[12], src.bytes.data(), 4);
	std::memcpy(&p[16], dst.bytes.data(), 4);
	uint16_t sum = ipv4_checksum(std::span(p).first(20));
	p[10] = uint8_t(sum >> 8);
	p[11] = uint8_t(sum);
	return p;
}

/// ipv6_packet() - an IPv6 packet of exactly @total bytes (>= 40), payload length @total - 40.
inline Bytes ipv6_packet(const IpAddress& src, const IpAddress& dst, size_t total, Rng& rng,
                         uint8_t next = 17) {
	if (total < 40 || total > 65535 + 40) throw std::invalid_argument("ipv6_packet: bad length");
	Bytes p = rng.bytes(total);
	size_t payload = total - 40;
	p[0] = 0x60;
	p[1] = p[2] = p[3] = 0;
	p[4] = uint8_t(payload >> 8);
	p[5] = uint8_t(payload);
	p[6] = next;
	p[7] = 64;
	std::memcpy(&p[8], src.bytes.data(), 16);
	std::memcpy(&p[24], dst.bytes.data(), 16);
	return p;
}

/// One end of the test tunnel: its inner networks, its underlay endpoint, a
/// base for the SPIs it receives on and a tag its receive keys are derived from.
struct Site {
	const char* name;
	IpPrefix v4, v6;
	Endpoint ep;
	uint32_t spi_base;
	uint8_t key_tag;

	IpAddress host4(uint8_t h) const {
		IpAddress a = v4.addr;
		a.bytes[3] = h;
		return a;
	}
	IpAddress host6(uint8_t h) const {
		IpAddress a = v6.addr;
		a.bytes[15] = h;
		return a;
	}
};

// SPIs (see spi_of) differ from each other in several bits and have bits set
// in every byte, so a one-bit flip never yields another test SPI, zero (the
// non-ESP marker) or a reserved SPI.
inline const Site kSiteA{"a",
                         prefix(ip4(10, 1, 0, 0), 16),
                         prefix(ip6(0xfd00, 1, 0, 0), 48),
                         endpoint(ip4(192, 0, 2, 1), 4500),
                         0x0a0b0c0d,
                         0xa0};
inline const Site kSiteB{"b",
                         prefix(ip4(10, 2, 0, 0), 16),
                         prefix(ip6(0xfd00, 2, 0, 0), 48),
                         endpoint(ip4(198, 51, 100, 2), 4500),
                         0x3c5a6e77,
                         0xb0};
inline const Site kSiteC{"c",
                         prefix(ip4(10, 3, 0, 0), 16),
                         prefix(ip6(0xfd00, 3, 0, 0), 48),
                         endpoint(ip4(203, 0, 113, 3), 4500),
                         0x55667788,
                         0xc0};

/// The SPI @receiver receives from @sender on.
inline uint32_t spi_of(const Site& receiver, const Site& sender) {
	return receiver.spi_base ^ (uint32_t(sender.key_tag) * 0x01010101u);
}

/// Key bytes for traffic *to* a site: a fixed pattern from the site's tag.
inline Bytes key_material(size_t n, uint8_t tag, uint8_t which) {
	Bytes k(n);
	for (size_t i = 0; i < n; i++)
		k[i] = uint8_t(tag ^ which ^ (i * 29 + 7));
	return k;
}
inline Bytes enc_key_to(const Site& s, crypto::Cipher c) {
	return key_material(crypto::cipher_spec(c).enc_key_len, s.key_tag, 0x01);
}
inline Bytes auth_key_to(const Site& s, crypto::Cipher c) {
	return key_material(crypto::cipher_spec(c).auth_key_len, s.key_tag, 0x02);
}

struct LinkOptions {
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = true;
	uint32_t window = 1024;
	bool endpoint_known = true;
};

/**
 * peer_entry() - the [[peer]] @self keeps for @peer: sends to @peer's SPI
 * with @peer's keys, receives on its own SPI with its own keys, so two sites
 * built this way mirror each other (A's out SA is B's in SA).
 */
inline tunnel::PeerParams peer_entry(const Site& self, const Site& peer, const LinkOptions& o) {
	tunnel::PeerParams p =
	    static_peer(peer.name, o.endpoint_known ? std::optional<Endpoint>(peer.ep) : std::nullopt,
	                {peer.v4, peer.v6}, o.cipher,
	                tunnel::SaParams{spi_of(peer, self), secret_copy(enc_key_to(peer, o.cipher)),
	                                 secret_copy(auth_key_to(peer, o.cipher))},
	                tunnel::SaParams{spi_of(self, peer), secret_copy(enc_key_to(self, o.cipher)),
	                                 secret_copy(auth_key_to(self, o.cipher))});
	p.esn = o.esn;
	p.replay_window = o.window;
	return p;
}

/// Site A's and site B's tables for one A<->B link.
struct Link {
	tunnel::SaTable a, b;
	tunnel::Peer& b_at_a() const { return *a.peers().at(0); } ///< A's view of B
	tunnel::Peer& a_at_b() const { return *b.peers().at(0); } ///< B's view of A
};

inline Link make_link(const LinkOptions& at_a, const LinkOptions& at_b) {
	return Link{tunnel::SaTable({peer_entry(kSiteA, kSiteB, at_a)}),
	            tunnel::SaTable({peer_entry(kSiteB, kSiteA, at_b)})};
}
inline Link make_link(const LinkOptions& o) { return make_link(o, o); }

/// A packet buffer with the head- and tailroom encapsulate() needs.
struct PacketBuffer {
	Bytes mem = Bytes(tunnel::esp::kBufferSize);

	void load(std::span<const uint8_t> inner) {
		if (inner.size() > tunnel::esp::kMaxInner)
			throw std::invalid_argument("inner packet too big");
		if (!inner.empty())
			std::memcpy(mem.data() + tunnel::esp::kHeadroom, inner.data(), inner.size());
	}
};

/**
 * seal_inner() - encapsulate @inner with @table.
 * Return: a copy of the datagram, or nullopt when encapsulate() dropped it.
 */
inline std::optional<Bytes> seal_inner(const tunnel::SaTable& table, std::span<const uint8_t> inner) {
	PacketBuffer buf;
	buf.load(inner);
	tunnel::OutboundResult r = tunnel::encapsulate(table, buf.mem, inner.size());
	if (r.verdict != tunnel::Verdict::forward) return std::nullopt;
	return Bytes(r.datagram.begin(), r.datagram.end());
}

/// An inner IPv4 packet from site @from to site @to.
inline Bytes packet_v4(const Site& from, const Site& to, size_t total, Rng& rng) {
	return ipv4_packet(from.host4(5), to.host4(7), total, rng);
}
inline Bytes packet_v6(const Site& from, const Site& to, size_t total, Rng& rng) {
	return ipv6_packet(from.host6(5), to.host6(7), total, rng);
}

/**
 * seal_esp() - an ESP packet laid out by hand and sealed with a transform of
 * the receiving SA's keys, so tests control every byte of the plaintext:
 * [SPI][seq lo][IV][@plaintext][ICV]. @plaintext holds payload, padding, pad
 * length and next header and must be a multiple of the cipher's alignment.
 */
inline Bytes seal_esp(crypto::EspTransform& tx, uint32_t spi, uint64_t seq,
                      std::span<const uint8_t> plaintext) {
	const crypto::CipherSpec& spec = tx.spec();
	if (plaintext.size() % spec.align != 0) throw std::invalid_argument("seal_esp: unaligned plaintext");
	Bytes esp(tunnel::esp::kHeaderLen + spec.iv_len + plaintext.size() + spec.icv_len);
	esp[0] = uint8_t(spi >> 24);
	esp[1] = uint8_t(spi >> 16);
	esp[2] = uint8_t(spi >> 8);
	esp[3] = uint8_t(spi);
	esp[4] = uint8_t(seq >> 24);
	esp[5] = uint8_t(seq >> 16);
	esp[6] = uint8_t(seq >> 8);
	esp[7] = uint8_t(seq);
	if (!plaintext.empty()) // an empty span's data() may be null, which memcpy does not allow
		std::memcpy(esp.data() + tunnel::esp::kHeaderLen + spec.iv_len, plaintext.data(),
		            plaintext.size());
	tx.seal(esp, seq);
	return esp;
}

/// The transform that seals what @to receives on its SA (same keys as @to's in SA).
inline std::unique_ptr<crypto::EspTransform> transform_to(const Site& to, crypto::Cipher c, bool esn) {
	return crypto::make_esp_transform(c, enc_key_to(to, c), auth_key_to(to, c), esn);
}

/**
 * esp_plaintext() - @payload followed by padding bytes @pad (as given, so a
 * test can make them wrong), the pad length byte @pad_len and next header @next.
 */
inline Bytes esp_plaintext(std::span<const uint8_t> payload, std::span<const uint8_t> pad, uint8_t pad_len,
                           uint8_t next) {
	Bytes b(payload.begin(), payload.end());
	b.insert(b.end(), pad.begin(), pad.end());
	b.push_back(pad_len);
	b.push_back(next);
	return b;
}

/// RFC 4303 section 2.4 padding 1, 2, 3, ... that aligns @payload_len + 2 to @align.
inline Bytes default_padding(size_t payload_len, size_t align) {
	size_t n = (align - (payload_len + 2) % align) % align;
	Bytes pad(n);
	for (size_t i = 0; i < n; i++)
		pad[i] = uint8_t(i + 1);
	return pad;
}

} // namespace esptun::test
