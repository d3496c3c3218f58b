// ESP encapsulation and decapsulation: see esp.hpp for the packet flow.
#include "tunnel/esp.hpp"

#include "base/bytes.hpp"
#include "tunnel/ecn.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace esptun::tunnel {
namespace {

OutboundResult out_drop(Drop d, Peer* peer = nullptr) noexcept { return {Verdict::drop, d, peer, {}, {}}; }

InboundResult in_drop(Drop d, Peer* peer = nullptr) noexcept {
	InboundResult r;
	r.drop = d;
	r.peer = peer;
	return r;
}

InboundResult in_ignore(Ignore i) noexcept {
	InboundResult r;
	r.verdict = Verdict::ignore;
	r.ignore = i;
	return r;
}

/// Length of the IP packet according to its own header, or 0 if malformed.
size_t ip_total_length(std::span<const uint8_t> pkt) noexcept {
	if (pkt.empty()) return 0;
	unsigned version = pkt[0] >> 4;
	if (version == 4) {
		if (pkt.size() < esp::kIpv4HeaderMin) return 0;
		size_t ihl = size_t(pkt[0] & 0x0f) * 4;
		size_t total = load_be16(&pkt[2]);
		if (ihl < esp::kIpv4HeaderMin || total < ihl) return 0;
		return total;
	}
	if (version == 6) {
		if (pkt.size() < esp::kIpv6HeaderLen) return 0;
		return esp::kIpv6HeaderLen + load_be16(&pkt[4]);
	}
	return 0;
}

/**
 * note_alive() - record an authenticated packet from @peer
 * @newest: the packet advanced the replay window
 *
 * Roaming: an authenticated packet that advanced the window from a new
 * address moves the peer there (NAT rebinding). Older packets do not, so a
 * replayed or reordered packet sent from elsewhere cannot redirect traffic.
 * Return: true when the endpoint changed.
 */
bool note_alive(Peer& peer, const Endpoint& src, bool newest, int64_t now_ms) noexcept {
	peer.last_rx_unix_ms.store(now_ms, std::memory_order_relaxed);
	if (!newest || peer.endpoint() == std::optional<Endpoint>(src)) return false;
	peer.set_endpoint(src);
	peer.endpoint_changes.add();
	return true;
}

} // namespace

bool inner_address(std::span<const uint8_t> pkt, bool source, IpAddress& out) noexcept {
	if (pkt.empty()) return false;
	unsigned version = pkt[0] >> 4;
	if (version == 4 && pkt.size() >= esp::kIpv4HeaderMin) {
		out.family = Family::v4;
		std::memcpy(out.bytes.data(), &pkt[source ? 12 : 16], 4);
		return true;
	}
	if (version == 6 && pkt.size() >= esp::kIpv6HeaderLen) {
		out.family = Family::v6;
		std::memcpy(out.bytes.data(), &pkt[source ? 8 : 24], 16);
		return true;
	}
	return false;
}

OutboundResult encapsulate(const SaTable& table, std::span<uint8_t> buf, size_t inner_len, size_t worker,
                           RouteCache* routes) noexcept {
	if (buf.size() < esp::kHeadroom + esp::kTailroom ||
	    inner_len > buf.size() - esp::kHeadroom - esp::kTailroom)
		return out_drop(Drop::too_big);
	std::span<uint8_t> inner = buf.subspan(esp::kHeadroom, inner_len);

	// 1. Which peer: the longest allowed_ips match of the inner destination.
	IpAddress dst;
	if (!inner_address(inner, false, dst)) return out_drop(Drop::malformed);
	Peer* peer = routes ? routes->route(table, dst) : table.route(dst);
	if (!peer) return out_drop(Drop::no_route);
	// Its current SA: none before the first key exchange. Replaced at a
	// rekey, but this one stays valid until the worker leaves the table
	// (SaTable::enter() in sa.cpp), so the packet finishes with it.
	OutboundSa* current = peer->outbound();
	if (!current) return out_drop(Drop::no_sa, peer);
	OutboundSa& sa = *current;
	const std::optional<Endpoint> to = peer->endpoint();
	if (!to) return out_drop(Drop::no_endpoint, peer);

	// 2. Next sequence number. Without ESN the counter must not wrap: the SA is
	// spent at 2^32 - 1 and needs new keys (RFC 4303 section 3.3.3).
	// Taken with compare-and-swap: unique across workers, and a number that
	// may not be used is not taken (the counter never passes the limits).
	uint64_t seq = sa.next_seq.load(std::memory_order_relaxed);
	do {
		if (!sa.esn && seq > UINT32_MAX) return out_drop(Drop::seq_exhausted, peer);
		if (seq == UINT64_MAX) return out_drop(Drop::seq_exhausted, peer);
		// Never use a number a restart could hand out again (seq_state.hpp).
		if (seq > sa.seq_limit.load(std::memory_order_acquire))
			return out_drop(Drop::seq_not_saved, peer);
	} while (!sa.next_seq.compare_exchange_weak(seq, seq + 1, std::memory_order_relaxed));

	// 3. Padding 1, 2, 3, ... up to the cipher's alignment, then pad length and
	// next header (RFC 4303 sections 2.4-2.6).
	const crypto::CipherSpec& spec = *sa.spec;
	size_t body = inner_len + esp::kTrailerLen;
	size_t padded = (body + spec.align - 1) / spec.align * spec.align;
	size_t pad = padded - body;
	uint8_t* tail = inner.data() + inner_len;
	for (size_t i = 0; i < pad; i++)
		tail[i] = uint8_t(i + 1);
	tail[pad] = uint8_t(pad);
	tail[pad + 1] = (inner[0] >> 4) == 4 ? esp::kNextIpv4 : esp::kNextIpv6;

	// 4. ESP header in the headroom, right before the IV.
	size_t start = esp::kHeadroom - spec.iv_len - esp::kHeaderLen;
	uint8_t* hdr = buf.data() + start;
	store_be32(hdr, sa.spi);
	store_be32(hdr + 4, uint32_t(seq));
	std::span<uint8_t> packet = buf.subspan(start, esp::kHeaderLen + spec.iv_len + padded + spec.icv_len);

	// 5. IV, encryption and ICV.
	// This worker's own transform: OpenSSL contexts are not shared between threads.
	// The inner header is ciphertext after this: its ECN field goes to the
	// outer header now (RFC 6040 normal mode, tunnel/ecn.hpp).
	const uint8_t outer_ecn = ecn::field(inner);
	sa.transforms[worker < sa.transforms.size() ? worker : 0]->seal(packet, seq);
	sa.note_sent(seq);
	sa.packets.add();
	sa.bytes.add(inner_len);
	return {Verdict::forward, Drop::malformed, peer, packet, *to, outer_ecn};
}

InboundResult decapsulate(const SaTable& table, std::span<uint8_t> dgram, const Endpoint& src, int64_t now_ms,
                          size_t worker, RouteCache* routes, uint8_t outer_ecn) noexcept {
	// 1. Not ESP: NAT keepalive or an IKE packet behind the non-ESP marker
	// (RFC 3948 sections 2.2, 2.3). A zero SPI is never valid ESP.
	if (dgram.size() == 1 && dgram[0] == esp::kNatKeepalive) return in_ignore(Ignore::nat_keepalive);
	if (dgram.size() >= esp::kNonEspMarkerLen && load_be32(dgram.data()) == 0)
		return in_ignore(Ignore::non_esp_marker);
	if (dgram.size() < esp::kHeaderLen) return in_drop(Drop::malformed);
	uint32_t spi = load_be32(dgram.data());

	// 2. SA by SPI, then lengths for its cipher: IV, whole cipher blocks, ICV.
	InboundSa* sa = table.find_inbound(spi);
	if (!sa) return in_drop(Drop::unknown_spi);
	Peer* peer = sa->peer;
	const crypto::CipherSpec& spec = *sa->spec;
	if (dgram.size() < crypto::min_esp_len(spec)) return in_drop(Drop::malformed, peer);
	size_t body = dgram.size() - esp::kHeaderLen - spec.iv_len - spec.icv_len;
	if (body % spec.align != 0) return in_drop(Drop::malformed, peer);

	// 3. Replay check before spending any crypto on the packet; commit only
	// once the ICV verified, so forged packets cannot move the window
	// (RFC 4303 section 3.4.3).
	// Under the SA's replay lock: another worker may hold a packet of the
	// same SA (after a NAT rebinding moved the peer to its socket), so the
	// commit checks again: of two copies of one packet, one is a replay.
	uint32_t seq_lo = load_be32(dgram.data() + 4);
	std::optional<uint64_t> seq;
	{
		std::lock_guard lock(sa->replay_lock);
		seq = sa->replay.check(seq_lo);
	}
	if (!seq) return in_drop(Drop::replay, peer);
	crypto::EspTransform& t = *sa->transforms[worker < sa->transforms.size() ? worker : 0];
	if (!t.open(dgram, uint32_t(*seq >> 32))) return in_drop(Drop::auth_failed, peer);
	bool newest;
	{
		std::lock_guard lock(sa->replay_lock);
		if (sa->replay.check(seq_lo) != seq) return in_drop(Drop::replay, peer);
		newest = sa->replay.commit(*seq);
		sa->highest_seq.store(sa->replay.highest(), std::memory_order_relaxed);
	}
	if (!newest) sa->reordered.add();

	// 4. Trailer: pad length, padding 1, 2, 3, ... and next header.
	uint8_t* payload = dgram.data() + esp::kHeaderLen + spec.iv_len;
	uint8_t next = payload[body - 1];
	size_t pad = payload[body - 2];
	if (pad + esp::kTrailerLen > body) return in_drop(Drop::padding, peer);
	size_t inner_len = body - esp::kTrailerLen - pad;
	for (size_t i = 0; i < pad; i++)
		if (payload[inner_len + i] != uint8_t(i + 1)) return in_drop(Drop::padding, peer);
	if (next == esp::kNextNone) {
		// An authenticated dummy packet (RFC 4303 section 2.6) proves the
		// peer alive and may carry it to a new address, like any other.
		InboundResult r = in_ignore(Ignore::dummy_packet);
		r.peer = peer;
		r.endpoint_changed = note_alive(*peer, src, newest, now_ms);
		return r;
	}

	// 5. The inner packet: its version must match the next header; bytes past
	// its own length are TFC padding (RFC 4303 section 2.7) and are cut off.
	std::span<uint8_t> inner(payload, inner_len);
	if (next != esp::kNextIpv4 && next != esp::kNextIpv6) return in_drop(Drop::malformed, peer);
	if (inner.empty() || (inner[0] >> 4) != (next == esp::kNextIpv4 ? 4u : 6u))
		return in_drop(Drop::malformed, peer);
	size_t total = ip_total_length(inner);
	if (total == 0 || total > inner.size()) return in_drop(Drop::malformed, peer);
	inner = inner.first(total);

	// 6. The inner source must be one the peer may use (its allowed_ips).
	IpAddress source;
	if (!inner_address(inner, true, source) ||
	    (routes ? routes->route(table, source) : table.route(source)) != peer)
		return in_drop(Drop::policy, peer);
	// ... and its destination one the CHILD_SA covers on our side (its
	// local traffic selectors: what the peer may reach through us).
	IpAddress dest;
	if (!inner_address(inner, false, dest) || !sa->destination_allowed(dest))
		return in_drop(Drop::dest_policy, peer);
	// A congestion mark the underlay put on the outer header (RFC 6040).
	if (outer_ecn != ecn::kNotEct && !ecn::decapsulate(inner, outer_ecn))
		return in_drop(Drop::ce_not_ect, peer);

	// 7. Last-packet time and roaming.
	InboundResult r;
	r.verdict = Verdict::forward;
	r.peer = peer;
	r.inner = inner;
	r.endpoint_changed = note_alive(*peer, src, newest, now_ms);
	sa->packets.add();
	sa->bytes.add(total);
	return r;
}

} // namespace esptun::tunnel
