// IKEv2 message codec (RFC 7296 section 3): bytes from the UDP socket to
// Message values and back. Sits between the socket and the IKE session; the
// SK payload is left opaque here and opened by ike/keymat.hpp.
//
// Theory of operation: a message is a 28-byte header and a chain of payloads,
// each a 4-byte generic header (next type, critical bit, length) and a body.
// parse_chain() walks the chain with every length checked against what is
// left; each known body has its own parser that reads through a ByteReader
// and must consume the body exactly. The encoders write the same layouts and
// refuse (std::invalid_argument) any value the parsers would refuse, so that
// what esptun sends is always something it would itself accept.
#include "ike/message.hpp"

#include "base/bytes.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace esptun::ike {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint8_t kCriticalBit = 0x80;
/// "Last Substruc" values (sections 3.3.1, 3.3.2).
constexpr uint8_t kLastSubstruc = 0;
constexpr uint8_t kMoreProposals = 2;
constexpr uint8_t kMoreTransforms = 3;
constexpr size_t kSubstrucHeaderLen = 4; ///< last, reserved, length
constexpr uint16_t kAttrFormatTv = 0x8000;
constexpr size_t kTsV4Len = 16;
constexpr size_t kTsV6Len = 40;
constexpr size_t kMinNonce = 16;
constexpr size_t kMaxNonce = 256;
constexpr size_t kMaxPayloadLen = 65535;

/// True for the payload types this codec interprets into their own structs.
bool interpreted(PayloadType t) noexcept {
	switch (t) {
	case PayloadType::sa:
	case PayloadType::ke:
	case PayloadType::idi:
	case PayloadType::idr:
	case PayloadType::auth:
	case PayloadType::nonce:
	case PayloadType::notify:
	case PayloadType::del:
	case PayloadType::tsi:
	case PayloadType::tsr:
	case PayloadType::cp:
	case PayloadType::sk:
		return true;
	default:
		return false;
	}
}

/// True for types RFC 7296 or RFC 7383 define (the critical bit is ignored
/// for these, section 3.2); the rest are unknown to esptun.
bool known_type(PayloadType t) noexcept {
	switch (t) {
	case PayloadType::cert:
	case PayloadType::certreq:
	case PayloadType::vendor:
	case PayloadType::eap:
	case PayloadType::skf:
		return true;
	default:
		return interpreted(t);
	}
}

/// proposal_spi_ok() - SPI sizes a proposal may carry (section 3.3.1): IKE 0
/// (IKE_SA_INIT) or 8 (rekeying), AH and ESP 4; other protocols none.
bool proposal_spi_ok(Protocol p, size_t size) noexcept {
	switch (p) {
	case Protocol::ike:
		return size == 0 || size == 8;
	case Protocol::ah:
	case Protocol::esp:
		return size == 4;
	default:
		return false;
	}
}

/// notify_spi_ok() - a notify names a Child SA with a 4-byte AH/ESP SPI, or
/// carries none (section 3.10); an 8-byte IKE SPI is tolerated as some
/// implementations send it. The protocol of an SPI-less notify is ignored.
bool notify_spi_ok(Protocol p, size_t size) noexcept {
	if (size == 0) return true;
	if (size == 4) return p == Protocol::ah || p == Protocol::esp;
	return size == 8 && p == Protocol::ike;
}

/// cp_value_len_ok() - value lengths section 3.15.1 allows for each
/// attribute (0 in a request); unknown attributes may have any length.
bool cp_value_len_ok(uint16_t type, size_t len) noexcept {
	switch (type) {
	case cp_attr::internal_ip4_address:
	case cp_attr::internal_ip4_netmask:
	case cp_attr::internal_ip4_dns:
	case 4: // INTERNAL_IP4_NBNS
	case 6: // INTERNAL_IP4_DHCP
		return len == 0 || len == 4;
	case cp_attr::internal_ip6_address:
	case 15: // INTERNAL_IP6_SUBNET
		return len == 0 || len == 17;
	case cp_attr::internal_ip6_dns:
	case 12: // INTERNAL_IP6_DHCP
		return len == 0 || len == 16;
	case cp_attr::internal_ip4_subnet:
		return len == 0 || len == 8;
	case 14: // SUPPORTED_ATTRIBUTES: a list of 2-byte types
		return len % 2 == 0;
	default:
		return true;
	}
}

Bytes to_bytes(std::span<const uint8_t> s) { return Bytes(s.begin(), s.end()); }

// ---------------------------------------------------------------------------
// Body parsers: each gets the body after the generic header and returns false
// when it does not follow its format (ParseError::malformed_payload).

/**
 * parse_transform() - one transform after its 4-byte substructure header.
 * @keep: set false when an attribute other than a TV Key Length is present
 * (section 3.3.6: the transform is then unacceptable, so it is dropped).
 */
bool parse_transform(std::span<const uint8_t> body, Transform& t, bool& keep) noexcept {
	ByteReader r(body);
	t.type = TransformType(r.u8());
	r.skip(1);
	t.id = r.be16();
	keep = true;
	while (r.ok() && r.remaining() > 0) {
		if (!r.has(4)) return false;
		const uint16_t format_type = r.be16();
		const uint16_t value = r.be16();
		const bool tv = format_type & kAttrFormatTv;
		const uint16_t type = uint16_t(format_type & ~kAttrFormatTv);
		if (!tv) {
			// TLV: @value is the length of what follows (section 3.3.5).
			if (!r.has(value)) return false;
			r.skip(value);
			if (type == kAttrKeyLength) return false; // Key Length is TV only
			keep = false;
		} else if (type == kAttrKeyLength) {
			// Twice, or a zero length (which would read back as "absent").
			if (t.key_bits != 0 || value == 0) return false;
			t.key_bits = value;
		} else {
			keep = false;
		}
	}
	return r.ok();
}

/**
 * parse_proposal() - one proposal after its 4-byte substructure header: the
 * transform count, each transform's "last" marker and the lengths must agree
 * and fill the proposal exactly.
 */
bool parse_proposal(std::span<const uint8_t> body, Proposal& p) {
	ByteReader r(body);
	p.number = r.u8();
	p.protocol = Protocol(r.u8());
	const uint8_t spi_size = r.u8();
	const uint8_t count = r.u8();
	if (!r.ok() || !proposal_spi_ok(p.protocol, spi_size) || !r.has(spi_size)) return false;
	p.spi = to_bytes(r.bytes(spi_size));
	for (unsigned i = 0; i < count; i++) {
		if (!r.has(kSubstrucHeaderLen)) return false;
		const uint8_t last = r.u8();
		r.skip(1);
		const uint16_t len = r.be16();
		if (last != (i + 1 == count ? kLastSubstruc : kMoreTransforms)) return false;
		if (len < 8 || !r.has(len - kSubstrucHeaderLen)) return false;
		Transform t;
		bool keep = false;
		if (!parse_transform(r.bytes(len - kSubstrucHeaderLen), t, keep)) return false;
		if (keep) p.transforms.push_back(t);
	}
	return r.ok() && r.remaining() == 0;
}

/// parse_sa() - one or more proposals chained by their "last" markers (section 3.3).
bool parse_sa(std::span<const uint8_t> body, SaPayload& sa) {
	ByteReader r(body);
	uint8_t last = kMoreProposals;
	while (last == kMoreProposals) {
		if (!r.has(kSubstrucHeaderLen)) return false;
		last = r.u8();
		r.skip(1);
		const uint16_t len = r.be16();
		if (last != kLastSubstruc && last != kMoreProposals) return false;
		if (len < 8 || !r.has(len - kSubstrucHeaderLen)) return false;
		Proposal p;
		if (!parse_proposal(r.bytes(len - kSubstrucHeaderLen), p)) return false;
		sa.proposals.push_back(std::move(p));
	}
	return r.remaining() == 0;
}

/// parse_prefixed() - KE, ID and AUTH share "a number, reserved bytes to 4, data".
bool parse_prefixed(std::span<const uint8_t> body, std::vector<uint8_t>& data) {
	if (body.size() < 4) return false;
	data = to_bytes(body.subspan(4));
	return true;
}

/// parse_notify() - protocol, SPI size, type, SPI, data (section 3.10).
bool parse_notify(std::span<const uint8_t> body, NotifyPayload& n) {
	ByteReader r(body);
	n.protocol = Protocol(r.u8());
	const uint8_t spi_size = r.u8();
	n.type = r.be16();
	if (!r.ok() || !notify_spi_ok(n.protocol, spi_size) || !r.has(spi_size)) return false;
	n.spi = to_bytes(r.bytes(spi_size));
	n.data = to_bytes(r.bytes(r.remaining()));
	return true;
}

/// parse_delete() - ESP/AH: 4-byte SPIs filling the body; IKE: no SPI at all (section 3.11).
bool parse_delete(std::span<const uint8_t> body, DeletePayload& d) {
	ByteReader r(body);
	d.protocol = Protocol(r.u8());
	const uint8_t spi_size = r.u8();
	const uint16_t count = r.be16();
	if (!r.ok()) return false;
	if (d.protocol == Protocol::ike) return spi_size == 0 && count == 0 && r.remaining() == 0;
	if (d.protocol != Protocol::esp && d.protocol != Protocol::ah) return false;
	if (spi_size != 4 || r.remaining() != size_t(count) * 4) return false;
	d.spis.reserve(count);
	for (unsigned i = 0; i < count; i++)
		d.spis.push_back(r.be32());
	return true;
}

/// parse_ts() - at least one selector; IPv4 ranges are 16 bytes, IPv6 40 (section 3.13.1).
bool parse_ts(std::span<const uint8_t> body, TsPayload& ts) {
	ByteReader r(body);
	const uint8_t count = r.u8();
	r.skip(3);
	if (!r.ok() || count == 0) return false;
	for (unsigned i = 0; i < count; i++) {
		TrafficSelector s;
		const uint8_t type = r.u8();
		s.ip_protocol = r.u8();
		const uint16_t len = r.be16();
		if (!r.ok()) return false;
		Family family;
		if (type == uint8_t(TsType::ipv4_range) && len == kTsV4Len)
			family = Family::v4;
		else if (type == uint8_t(TsType::ipv6_range) && len == kTsV6Len)
			family = Family::v6;
		else
			return false; // an unknown type or a wrong length for the type
		s.start_port = r.be16();
		s.end_port = r.be16();
		s.start.family = s.end.family = family;
		const size_t alen = s.start.size();
		auto start = r.bytes(alen);
		auto end = r.bytes(alen);
		if (!r.ok()) return false;
		std::copy(start.begin(), start.end(), s.start.bytes.begin());
		std::copy(end.begin(), end.end(), s.end.bytes.begin());
		ts.selectors.push_back(s);
	}
	return r.remaining() == 0;
}

/// parse_cp() - CFG type and attributes (section 3.15.1); the reserved top
/// bit of an attribute type is ignored on receipt.
bool parse_cp(std::span<const uint8_t> body, CpPayload& cp) {
	ByteReader r(body);
	cp.type = CpType(r.u8());
	r.skip(3);
	if (!r.ok()) return false;
	while (r.remaining() > 0) {
		if (!r.has(4)) return false;
		CpAttribute a;
		a.type = uint16_t(r.be16() & 0x7fff);
		const uint16_t len = r.be16();
		if (!r.has(len) || !cp_value_len_ok(a.type, len)) return false;
		a.value = to_bytes(r.bytes(len));
		cp.attributes.push_back(std::move(a));
	}
	return true;
}

/**
 * parse_body() - the body of a payload of interpreted @type (not SK) into @out.
 * Return: false when the body does not follow the type's format.
 */
bool parse_body(PayloadType type, std::span<const uint8_t> body, std::vector<Payload>& out) {
	switch (type) {
	case PayloadType::sa: {
		SaPayload sa;
		if (!parse_sa(body, sa)) return false;
		out.emplace_back(std::move(sa));
		return true;
	}
	case PayloadType::ke: {
		KePayload ke;
		if (!parse_prefixed(body, ke.data)) return false;
		ke.group = load_be16(body.data());
		out.emplace_back(std::move(ke));
		return true;
	}
	case PayloadType::idi:
	case PayloadType::idr: {
		IdPayload id;
		if (!parse_prefixed(body, id.data)) return false;
		id.initiator = type == PayloadType::idi;
		id.type = IdType(body[0]);
		out.emplace_back(std::move(id));
		return true;
	}
	case PayloadType::auth: {
		AuthPayload a;
		if (!parse_prefixed(body, a.data)) return false;
		a.method = AuthMethod(body[0]);
		out.emplace_back(std::move(a));
		return true;
	}
	case PayloadType::nonce:
		if (body.size() < kMinNonce || body.size() > kMaxNonce) return false;
		out.emplace_back(NoncePayload{to_bytes(body)});
		return true;
	case PayloadType::notify: {
		NotifyPayload n;
		if (!parse_notify(body, n)) return false;
		out.emplace_back(std::move(n));
		return true;
	}
	case PayloadType::del: {
		DeletePayload d;
		if (!parse_delete(body, d)) return false;
		out.emplace_back(std::move(d));
		return true;
	}
	case PayloadType::tsi:
	case PayloadType::tsr: {
		TsPayload ts;
		ts.initiator = type == PayloadType::tsi;
		if (!parse_ts(body, ts)) return false;
		out.emplace_back(std::move(ts));
		return true;
	}
	case PayloadType::cp: {
		CpPayload cp;
		if (!parse_cp(body, cp)) return false;
		out.emplace_back(std::move(cp));
		return true;
	}
	default:
		return false;
	}
}

ParseResult failed(ParseError e, PayloadType type = PayloadType::none) noexcept { return {e, uint8_t(type)}; }

/**
 * parse_chain() - walk the payload chain that starts with @first at @pos in
 * @buf and ends exactly at the end of @buf.
 * @in_message: @buf is a whole message, so SK and SKF may end the chain
 * (their offsets are then offsets in the message); otherwise they are malformed.
 */
ParseResult parse_chain(PayloadType first, std::span<const uint8_t> buf, size_t pos, bool in_message,
                        std::vector<Payload>& out) {
	PayloadType type = first;
	for (size_t count = 0; type != PayloadType::none; count++) {
		if (count == kMaxPayloads) return failed(ParseError::too_many_payloads, type);
		if (buf.size() - pos < kGenericHeaderLen) return failed(ParseError::truncated, type);
		const PayloadType next = PayloadType(buf[pos]);
		const bool critical = buf[pos + 1] & kCriticalBit;
		const size_t len = load_be16(&buf[pos + 2]);
		if (len < kGenericHeaderLen || len > buf.size() - pos)
			return failed(ParseError::bad_length, type);
		const auto body = buf.subspan(pos + kGenericHeaderLen, len - kGenericHeaderLen);

		if (type == PayloadType::sk || type == PayloadType::skf) {
			// The encrypted payload is the last one (section 3.14, RFC 7383
			// section 2.5); its Next Payload names the first inner payload.
			if (!in_message) return failed(ParseError::malformed_payload, type);
			if (pos + len != buf.size()) return failed(ParseError::sk_not_last, type);
			if (type == PayloadType::sk)
				out.emplace_back(SkPayload{next, pos, len});
			else
				out.emplace_back(RawPayload{type, critical, to_bytes(body), next});
			return {};
		}
		if (interpreted(type)) {
			if (!parse_body(type, body, out)) return failed(ParseError::malformed_payload, type);
		} else if (known_type(type) || !critical) {
			out.emplace_back(RawPayload{type, critical, to_bytes(body)});
		} else {
			return failed(ParseError::unsupported_critical, type);
		}
		pos += len;
		type = next;
	}
	// The chain ended; nothing may follow it.
	if (pos != buf.size()) return failed(ParseError::bad_length);
	return {};
}

// ---------------------------------------------------------------------------
// Encoders: append a body to a buffer, throwing for values the parsers refuse.

[[noreturn]] void refuse(const char* what) {
	throw std::invalid_argument(std::string("ike encode: ") + what);
}

void put8(Bytes& b, uint8_t v) { b.push_back(v); }
void put16(Bytes& b, uint16_t v) {
	b.push_back(uint8_t(v >> 8));
	b.push_back(uint8_t(v));
}
void put32(Bytes& b, uint32_t v) {
	put16(b, uint16_t(v >> 16));
	put16(b, uint16_t(v));
}
void put(Bytes& b, std::span<const uint8_t> s) { b.insert(b.end(), s.begin(), s.end()); }
void put_zeros(Bytes& b, size_t n) { b.insert(b.end(), n, 0); }

/// patch_len() - write the length of everything from @start to the end into
/// the 16-bit field at @start + 2 (generic and substructure headers alike).
void patch_len(Bytes& b, size_t start, const char* what) {
	const size_t len = b.size() - start;
	if (len > kMaxPayloadLen) refuse(what);
	store_be16(&b[start + 2], uint16_t(len));
}

/// encode_sa() - proposals and transforms with their "last" markers and
/// lengths; a Key Length attribute (TV) only where key_bits is set.
void encode_sa(const SaPayload& sa, Bytes& b) {
	if (sa.proposals.empty()) refuse("SA without proposals");
	for (size_t i = 0; i < sa.proposals.size(); i++) {
		const Proposal& p = sa.proposals[i];
		if (!proposal_spi_ok(p.protocol, p.spi.size()))
			refuse("proposal SPI size does not fit its protocol");
		if (p.transforms.size() > 255) refuse("more than 255 transforms in a proposal");
		const size_t start = b.size();
		put8(b, i + 1 == sa.proposals.size() ? kLastSubstruc : kMoreProposals);
		put_zeros(b, 3);
		put8(b, p.number);
		put8(b, uint8_t(p.protocol));
		put8(b, uint8_t(p.spi.size()));
		put8(b, uint8_t(p.transforms.size()));
		put(b, p.spi);
		for (size_t j = 0; j < p.transforms.size(); j++) {
			const Transform& t = p.transforms[j];
			put8(b, j + 1 == p.transforms.size() ? kLastSubstruc : kMoreTransforms);
			put8(b, 0);
			put16(b, t.key_bits ? 12 : 8);
			put8(b, uint8_t(t.type));
			put8(b, 0);
			put16(b, t.id);
			if (t.key_bits) {
				put16(b, kAttrFormatTv | kAttrKeyLength);
				put16(b, t.key_bits);
			}
		}
		patch_len(b, start, "proposal longer than 65535 bytes");
	}
}

/// encode_prefixed() - "a number, reserved bytes to 4, data" (KE, ID, AUTH).
void encode_prefixed(Bytes& b, std::span<const uint8_t> head, std::span<const uint8_t> data) {
	put(b, head);
	put_zeros(b, 4 - head.size());
	put(b, data);
}

/// encode_notify() - the SPI size comes from the SPI itself.
void encode_notify(const NotifyPayload& n, Bytes& b) {
	if (!notify_spi_ok(n.protocol, n.spi.size())) refuse("notify SPI size does not fit its protocol");
	put8(b, uint8_t(n.protocol));
	put8(b, uint8_t(n.spi.size()));
	put16(b, n.type);
	put(b, n.spi);
	put(b, n.data);
}

/// encode_delete() - SPI size 4 and the SPIs for AH/ESP; 0 and none for IKE.
void encode_delete(const DeletePayload& d, Bytes& b) {
	const bool ike = d.protocol == Protocol::ike;
	if (ike && !d.spis.empty()) refuse("an IKE SA delete carries no SPI");
	if (!ike && d.protocol != Protocol::esp && d.protocol != Protocol::ah)
		refuse("delete of an unknown protocol");
	if (d.spis.size() > 0xffff) refuse("more than 65535 SPIs in a delete");
	put8(b, uint8_t(d.protocol));
	put8(b, ike ? 0 : 4);
	put16(b, uint16_t(d.spis.size()));
	for (uint32_t spi : d.spis)
		put32(b, spi);
}

/// encode_ts() - each selector as an IPv4 or IPv6 range by its addresses' family.
void encode_ts(const TsPayload& ts, Bytes& b) {
	if (ts.selectors.empty() || ts.selectors.size() > 255) refuse("TS payload needs 1 to 255 selectors");
	put8(b, uint8_t(ts.selectors.size()));
	put_zeros(b, 3);
	for (const TrafficSelector& s : ts.selectors) {
		if (s.start.family != s.end.family) refuse("traffic selector mixes address families");
		const bool v4 = s.start.family == Family::v4;
		put8(b, uint8_t(v4 ? TsType::ipv4_range : TsType::ipv6_range));
		put8(b, s.ip_protocol);
		put16(b, uint16_t(v4 ? kTsV4Len : kTsV6Len));
		put16(b, s.start_port);
		put16(b, s.end_port);
		put(b, std::span(s.start.bytes).first(s.start.size()));
		put(b, std::span(s.end.bytes).first(s.end.size()));
	}
}

/// encode_cp() - CFG type and the attributes, reserved bit clear.
void encode_cp(const CpPayload& cp, Bytes& b) {
	put8(b, uint8_t(cp.type));
	put_zeros(b, 3);
	for (const CpAttribute& a : cp.attributes) {
		if (a.type > 0x7fff) refuse("CP attribute type has the reserved bit");
		if (a.value.size() > 0xffff || !cp_value_len_ok(a.type, a.value.size()))
			refuse("CP attribute value of a wrong length");
		put16(b, a.type);
		put16(b, uint16_t(a.value.size()));
		put(b, a.value);
	}
}

/// encode_raw() - the body as kept; only types without a struct of their own.
void encode_raw(const RawPayload& raw, Bytes& b) {
	if (raw.type == PayloadType::none || interpreted(raw.type))
		refuse("RawPayload of a type that has its own struct");
	if (raw.type != PayloadType::skf && raw.first_inner != PayloadType::none)
		refuse("first_inner is for SKF only");
	put(b, raw.body);
}

/// encode_body() - append @p's body (no generic header) to @b.
void encode_body(const Payload& p, Bytes& b) {
	if (const auto* sa = std::get_if<SaPayload>(&p)) {
		encode_sa(*sa, b);
	} else if (const auto* ke = std::get_if<KePayload>(&p)) {
		const uint8_t head[2] = {uint8_t(ke->group >> 8), uint8_t(ke->group)};
		encode_prefixed(b, head, ke->data);
	} else if (const auto* id = std::get_if<IdPayload>(&p)) {
		const uint8_t head[1] = {uint8_t(id->type)};
		encode_prefixed(b, head, id->data);
	} else if (const auto* auth = std::get_if<AuthPayload>(&p)) {
		const uint8_t head[1] = {uint8_t(auth->method)};
		encode_prefixed(b, head, auth->data);
	} else if (const auto* nonce = std::get_if<NoncePayload>(&p)) {
		if (nonce->data.size() < kMinNonce || nonce->data.size() > kMaxNonce)
			refuse("nonce outside 16..256 bytes");
		put(b, nonce->data);
	} else if (const auto* n = std::get_if<NotifyPayload>(&p)) {
		encode_notify(*n, b);
	} else if (const auto* d = std::get_if<DeletePayload>(&p)) {
		encode_delete(*d, b);
	} else if (const auto* ts = std::get_if<TsPayload>(&p)) {
		encode_ts(*ts, b);
	} else if (const auto* cp = std::get_if<CpPayload>(&p)) {
		encode_cp(*cp, b);
	} else if (const auto* raw = std::get_if<RawPayload>(&p)) {
		encode_raw(*raw, b);
	} else {
		refuse("an SK payload is sealed by SkCipher, not encoded");
	}
}

} // namespace

PayloadType payload_type(const Payload& p) noexcept {
	struct {
		PayloadType operator()(const SaPayload&) const { return PayloadType::sa; }
		PayloadType operator()(const KePayload&) const { return PayloadType::ke; }
		PayloadType operator()(const IdPayload& id) const {
			return id.initiator ? PayloadType::idi : PayloadType::idr;
		}
		PayloadType operator()(const AuthPayload&) const { return PayloadType::auth; }
		PayloadType operator()(const NoncePayload&) const { return PayloadType::nonce; }
		PayloadType operator()(const NotifyPayload&) const { return PayloadType::notify; }
		PayloadType operator()(const DeletePayload&) const { return PayloadType::del; }
		PayloadType operator()(const TsPayload& ts) const {
			return ts.initiator ? PayloadType::tsi : PayloadType::tsr;
		}
		PayloadType operator()(const CpPayload&) const { return PayloadType::cp; }
		PayloadType operator()(const SkPayload&) const { return PayloadType::sk; }
		PayloadType operator()(const RawPayload& raw) const { return raw.type; }
	} visitor;
	return std::visit(visitor, p);
}

/// IdPayload::body() - ID type, three reserved zero bytes, then the data.
std::vector<uint8_t> IdPayload::body() const {
	Bytes b;
	b.reserve(4 + data.size());
	const uint8_t head[1] = {uint8_t(type)};
	encode_prefixed(b, head, data);
	return b;
}

const NotifyPayload* Message::find_notify(uint16_t type) const noexcept {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->type == type) return n;
	return nullptr;
}

std::string_view parse_error_name(ParseError e) noexcept {
	switch (e) {
	case ParseError::ok:
		return "ok";
	case ParseError::truncated:
		return "truncated";
	case ParseError::bad_length:
		return "bad_length";
	case ParseError::bad_version:
		return "bad_version";
	case ParseError::too_many_payloads:
		return "too_many_payloads";
	case ParseError::unsupported_critical:
		return "unsupported_critical";
	case ParseError::malformed_payload:
		return "malformed_payload";
	case ParseError::sk_not_last:
		return "sk_not_last";
	}
	return "unknown";
}

/**
 * parse_header() - the 28-byte header (section 3.1). The major version must
 * be 2; the minor version and the reserved flag bits are kept as received
 * (section 2.5 says to ignore them). The length field must equal the size of
 * the datagram: a longer field means the datagram was cut, a shorter one
 * means trailing bytes that belong to nothing.
 */
ParseResult parse_header(std::span<const uint8_t> bytes, Header& out) noexcept {
	if (bytes.size() < kHeaderLen) return failed(ParseError::truncated);
	const uint8_t* p = bytes.data();
	out.spi_i = load_be64(p);
	out.spi_r = load_be64(p + 8);
	out.next = PayloadType(p[16]);
	out.version = p[17];
	out.exchange = Exchange(p[18]);
	out.flags = p[19];
	out.message_id = load_be32(p + 20);
	out.length = load_be32(p + 24);
	if (out.version >> 4 != kVersion2 >> 4) return failed(ParseError::bad_version);
	if (out.length < kHeaderLen || bytes.size() > kMaxMessageLen) return failed(ParseError::bad_length);
	if (out.length > bytes.size()) return failed(ParseError::truncated);
	if (out.length < bytes.size()) return failed(ParseError::bad_length);
	return {};
}

ParseResult parse_message(std::span<const uint8_t> bytes, Message& out) {
	out = Message{};
	if (ParseResult r = parse_header(bytes, out.header); !r) return r;
	return parse_chain(out.header.next, bytes, kHeaderLen, true, out.payloads);
}

ParseResult parse_payloads(PayloadType first, std::span<const uint8_t> bytes, std::vector<Payload>& out) {
	const size_t before = out.size();
	ParseResult r = parse_chain(first, bytes, 0, false, out);
	if (!r) out.erase(out.begin() + std::ptrdiff_t(before), out.end());
	return r;
}

/**
 * encode_payloads() - generic headers with the critical bit clear for every
 * payload this codec knows (section 3.2: MUST be zero for RFC 7296 types) and
 * as given for raw ones; each header's Next Payload names the payload after it.
 */
std::vector<uint8_t> encode_payloads(std::span<const Payload> payloads, PayloadType& first) {
	if (payloads.size() > kMaxPayloads) refuse("more than kMaxPayloads payloads");
	first = PayloadType::none;
	Bytes b;
	size_t prev = 0;
	for (size_t i = 0; i < payloads.size(); i++) {
		const Payload& p = payloads[i];
		const PayloadType type = payload_type(p);
		const auto* raw = std::get_if<RawPayload>(&p);
		if (type == PayloadType::skf && i + 1 != payloads.size())
			refuse("SKF must be the last payload");
		const size_t start = b.size();
		put8(b, uint8_t(raw && type == PayloadType::skf ? raw->first_inner : PayloadType::none));
		put8(b, raw && raw->critical ? kCriticalBit : 0);
		put16(b, 0);
		encode_body(p, b);
		patch_len(b, start, "payload longer than 65535 bytes");
		if (i == 0)
			first = type;
		else
			b[prev] = uint8_t(type);
		prev = start;
	}
	return b;
}

void encode_header(const Header& h, uint8_t* out) noexcept {
	store_be64(out, h.spi_i);
	store_be64(out + 8, h.spi_r);
	out[16] = uint8_t(h.next);
	out[17] = h.version;
	out[18] = uint8_t(h.exchange);
	out[19] = h.flags;
	store_be32(out + 20, h.message_id);
	store_be32(out + 24, h.length);
}

std::vector<uint8_t> build_message(Header header, std::span<const Payload> payloads) {
	if (header.version >> 4 != kVersion2 >> 4) refuse("major version is not 2");
	PayloadType first = PayloadType::none;
	Bytes chain = encode_payloads(payloads, first);
	if (chain.size() > kMaxMessageLen - kHeaderLen) refuse("message longer than kMaxMessageLen");
	header.next = first;
	header.length = uint32_t(kHeaderLen + chain.size());
	Bytes msg(kHeaderLen + chain.size());
	encode_header(header, msg.data());
	std::copy(chain.begin(), chain.end(), msg.begin() + kHeaderLen);
	return msg;
}

} // namespace esptun::ike
