// EAP packet codec (RFC 3748 section 4): the bytes of one EAP payload in
// IKE_AUTH (RFC 7296 section 3.16) to a Packet and back. The engine calls
// parse() on whatever the other side put in its EAP payload, so every field
// is checked before use; methods only ever see the type-data.
#include "ike/eap.hpp"

#include "base/bytes.hpp"

#include <stdexcept>

namespace esptun::ike::eap {

namespace {

/// Code, Identifier, Length.
constexpr size_t kHeaderLen = 4;

bool known_code(uint8_t c) noexcept { return c >= uint8_t(Code::request) && c <= uint8_t(Code::failure); }

bool carries_type(Code c) noexcept { return c == Code::request || c == Code::response; }

} // namespace

/**
 * parse() - one EAP packet from @bytes.
 * Return: the packet, or nullopt when anything does not fit (see eap.hpp).
 * The type byte is not checked against the methods we know: telling the
 * peer "no" (a Nak, an EAP-Failure) is the engine's decision.
 */
std::optional<Packet> parse(std::span<const uint8_t> bytes) noexcept {
	if (bytes.size() < kHeaderLen || bytes.size() > kMaxPacket) return std::nullopt;
	if (!known_code(bytes[0])) return std::nullopt;
	if (load_be16(&bytes[2]) != bytes.size()) return std::nullopt;
	const Code code = Code(bytes[0]);
	const bool typed = carries_type(code);
	// Requests and responses need the Type byte (RFC 3748 section 4.1);
	// Success and Failure are the bare header (section 4.2).
	if (typed ? bytes.size() < kHeaderLen + 1 : bytes.size() != kHeaderLen) return std::nullopt;
	try {
		Packet p;
		p.code = code;
		p.id = bytes[1];
		if (typed) {
			p.type = bytes[kHeaderLen];
			p.data.assign(bytes.begin() + kHeaderLen + 1, bytes.end());
		}
		return p;
	} catch (...) { // allocation: at most kMaxPacket bytes, but still not a throw
		return std::nullopt;
	}
}

/**
 * encode() - the wire form of @p.
 * Throws std::invalid_argument for a packet parse() would refuse: an unknown
 * code, type or data on success/failure, or more than kMaxPacket bytes.
 */
std::vector<uint8_t> encode(const Packet& p) {
	if (!known_code(uint8_t(p.code))) throw std::invalid_argument("EAP: unknown code");
	const bool typed = carries_type(p.code);
	if (!typed && (p.type != 0 || !p.data.empty()))
		throw std::invalid_argument("EAP: success and failure carry no type or data");
	const size_t len = kHeaderLen + (typed ? 1 + p.data.size() : 0);
	if (len > kMaxPacket) throw std::invalid_argument("EAP: packet longer than kMaxPacket");
	std::vector<uint8_t> out(len);
	out[0] = uint8_t(p.code);
	out[1] = p.id;
	store_be16(&out[2], uint16_t(len));
	if (typed) {
		out[kHeaderLen] = p.type;
		std::copy(p.data.begin(), p.data.end(), out.begin() + kHeaderLen + 1);
	}
	return out;
}

} // namespace esptun::ike::eap
