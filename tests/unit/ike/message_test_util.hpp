// Helpers for the IKE message codec tests: captured vectors from
// tests/data/ike/, and a tiny hand assembler for payload chains, so malformed
// messages are written byte by byte without going through the encoder.
#pragma once

#include "ike/message.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace esptun::ike::test {

using ::esptun::test::Bytes;

/// read_vector() - a file from tests/data/ike/ (captured by capture-strongswan.sh).
inline Bytes read_vector(const std::string& name) {
	const std::string path = std::string(ESPTUN_TEST_DATA_DIR) + "/ike/" + name;
	std::ifstream f(path, std::ios::binary);
	if (!f) throw std::runtime_error("cannot open " + path);
	return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// The captured messages, in the order capture-strongswan.sh writes them.
inline const char* const kVectors[] = {
    "ike_sa_init_request.bin",    "ike_sa_init_response.bin",      "ike_auth_request.bin",
    "ike_auth_response.bin",      "modp_ike_sa_init_request.bin",  "modp_invalid_ke_response.bin",
    "modp_ike_sa_init_retry.bin", "modp_ike_sa_init_response.bin",
};

inline Bytes cat(std::initializer_list<Bytes> parts) {
	Bytes out;
	for (const Bytes& p : parts)
		out.insert(out.end(), p.begin(), p.end());
	return out;
}

inline Bytes be16(uint16_t v) { return {uint8_t(v >> 8), uint8_t(v)}; }
inline Bytes be32(uint32_t v) { return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}; }
inline Bytes zeros(size_t n) { return Bytes(n, 0); }
inline Bytes filled(size_t n, uint8_t v) { return Bytes(n, v); }

/// payload() - a generic header (next, flags byte, length = 4 + body) and @body.
inline Bytes payload(uint8_t next, const Bytes& body, uint8_t flags = 0) {
	return cat({{next, flags}, be16(uint16_t(4 + body.size())), body});
}
inline Bytes payload(PayloadType next, const Bytes& body, uint8_t flags = 0) {
	return payload(uint8_t(next), body, flags);
}

/// message() - a 28-byte IKE_SA_INIT request header whose length fits @chain.
inline Bytes message(PayloadType first, const Bytes& chain, uint8_t version = kVersion2) {
	Bytes h = cat({be32(0x01020304),
	               be32(0x05060708),
	               zeros(8),
	               {uint8_t(first), version, uint8_t(Exchange::ike_sa_init), kFlagInitiator},
	               zeros(4),
	               be32(uint32_t(28 + chain.size()))});
	return cat({h, chain});
}

/// transform() - a transform substructure with optional attribute bytes.
inline Bytes transform(uint8_t last, uint8_t type, uint16_t id, const Bytes& attrs = {}) {
	return cat({{last, 0}, be16(uint16_t(8 + attrs.size())), {type, 0}, be16(id), attrs});
}

/// proposal() - a proposal substructure; @count is written as given.
inline Bytes proposal(uint8_t last, uint8_t number, uint8_t protocol, const Bytes& spi, uint8_t count,
                      const Bytes& transforms) {
	return cat({{last, 0},
	            be16(uint16_t(8 + spi.size() + transforms.size())),
	            {number, protocol, uint8_t(spi.size()), count},
	            spi,
	            transforms});
}

/// parse_one() - parse one payload of @type with @body as an inner chain.
inline ParseResult parse_one(PayloadType type, const Bytes& body, std::vector<Payload>& out) {
	return parse_payloads(type, payload(PayloadType::none, body), out);
}

/// roundtrip() - encode @payloads, parse them back, and return what came back.
inline std::vector<Payload> roundtrip(const std::vector<Payload>& payloads) {
	PayloadType first = PayloadType::none;
	Bytes b = encode_payloads(payloads, first);
	std::vector<Payload> back;
	ParseResult r = parse_payloads(first, b, back);
	INFO("parse error: ", parse_error_name(r.error), " in payload type ", int(r.payload_type));
	CHECK(r);
	return back;
}

} // namespace esptun::ike::test
