// libFuzzer target for the IKEv2 message codec (ike/message.hpp), the
// first code that sees a datagram on UDP 500/4500, before any authentication.
// Each input is read three ways:
//   1. as a whole message: parse_message();
//   2. as a decrypted SK body: parse_payloads() with the first payload type
//      taken from the first byte and the rest as the chain;
//   3. as a message again, behind a made-up header whose length is right and
//      whose first payload type is the first byte, so the fuzzer reaches the
//      payload parsers without having to match the length field.
// Whatever parses must re-encode (encode_payloads, build_message) without an
// exception, parse again to the same values, and re-encode to the same bytes
// (the encoding is canonical). Any difference traps. The input as a whole is
// also read as a REDIRECT notify's data (ike/engine.hpp, RFC 5685), which
// must re-encode to the same bytes.
// Seeds: tests/fuzz/corpus/ike_parse/ (strongSwan's messages from
// tests/data/ike/, and built inner chains of every payload kind).
#include "ike/message.hpp"

#include "base/bytes.hpp"
#include "ike/engine.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

namespace {

using namespace esptun::ike;
using esptun::test::Bytes;

[[noreturn]] void fail(const char* what) {
	std::fprintf(stderr, "fuzz-ike-parse: %s\n", what);
	__builtin_trap();
}

/// check_chain() - a parsed inner chain re-encodes, parses back equal, and
/// its encoding is a fixed point.
void check_chain(PayloadType first, const std::vector<Payload>& payloads) {
	PayloadType first2 = PayloadType::none;
	Bytes enc = encode_payloads(payloads, first2);
	if (payloads.empty() != (first2 == PayloadType::none)) fail("first type of an empty chain");
	if (!payloads.empty() && first2 != first) fail("first type changed");
	std::vector<Payload> again;
	if (!parse_payloads(first2, enc, again)) fail("encoded chain does not parse");
	if (again != payloads) fail("chain differs after a round trip");
	PayloadType first3 = PayloadType::none;
	if (encode_payloads(again, first3) != enc || first3 != first2) fail("chain encoding not canonical");
}

/// check_plain() - the same for a message without SK, through build_message().
void check_plain(const Message& m) {
	Bytes enc = build_message(m.header, m.payloads);
	Message again;
	if (!parse_message(enc, again)) fail("built message does not parse");
	Header h = m.header;
	h.length = uint32_t(enc.size());
	if (!(again.header == h) || again.payloads != m.payloads) fail("message differs after a round trip");
	if (build_message(again.header, again.payloads) != enc) fail("message encoding not canonical");
}

/**
 * check_sealed() - a message that ends in SK: rebuild its unencrypted part,
 * link it to the original SK bytes, and require the same values back (the SK
 * offset moves when the prefix was not canonical).
 */
void check_sealed(const Message& m, std::span<const uint8_t> wire) {
	const auto& sk = std::get<SkPayload>(m.payloads.back());
	if (sk.offset + sk.length != wire.size() || sk.offset < kHeaderLen)
		fail("SK does not end the message");
	std::vector<Payload> prefix(m.payloads.begin(), m.payloads.end() - 1);
	Bytes enc = build_message(m.header, prefix);
	// Point the last Next Payload (or the header's) at SK.
	size_t link = 16;
	for (size_t pos = kHeaderLen; pos < enc.size(); pos += esptun::load_be16(&enc[pos + 2]))
		link = pos;
	enc[link] = uint8_t(PayloadType::sk);
	const size_t offset = enc.size();
	enc.insert(enc.end(), wire.begin() + std::ptrdiff_t(sk.offset), wire.end());
	esptun::store_be32(&enc[24], uint32_t(enc.size()));
	Message again;
	if (!parse_message(enc, again)) fail("rebuilt SK message does not parse");
	std::vector<Payload> expect = m.payloads;
	std::get<SkPayload>(expect.back()).offset = offset;
	if (again.payloads != expect) fail("SK message differs after a round trip");
}

void check_message(std::span<const uint8_t> wire) {
	Message m;
	if (!parse_message(wire, m)) return;
	if (m.header.length != wire.size()) fail("header length is not the datagram size");
	if (m.payloads.size() > kMaxPayloads) fail("too many payloads accepted");
	for (size_t i = 0; i + 1 < m.payloads.size(); i++) {
		if (std::holds_alternative<SkPayload>(m.payloads[i])) fail("SK not last");
		if (payload_type(m.payloads[i]) == PayloadType::skf) fail("SKF not last");
	}
	if (!m.payloads.empty() && std::holds_alternative<SkPayload>(m.payloads.back()))
		check_sealed(m, wire);
	else
		check_plain(m);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	std::span<const uint8_t> in(data, size);
	try {
		Header h;
		(void)parse_header(in, h);
		check_message(in);
		if (const auto r = parse_redirect_data(in)) {
			if (redirect_data(r->first, r->second) != Bytes(in.begin(), in.end()))
				fail("REDIRECT data differs after a round trip");
			if (parse_redirect_target(redirect_target_text(r->first)) != r->first)
				fail("a REDIRECT target does not read back from its text");
		}
		if (size == 0) return 0;

		const PayloadType first = PayloadType(data[0]);
		std::vector<Payload> chain;
		if (parse_payloads(first, in.subspan(1), chain)) {
			if (chain.size() > kMaxPayloads) fail("too many payloads accepted in a chain");
			check_chain(first, chain);
		}

		// The rest behind a header that fits it: the payload parsers without
		// the length field in the way.
		if (size - 1 > kMaxMessageLen - kHeaderLen) return 0;
		Bytes msg(kHeaderLen + size - 1);
		Header made;
		made.spi_i = 0x0102030405060708;
		made.next = first;
		made.length = uint32_t(msg.size());
		encode_header(made, msg.data());
		std::copy(in.begin() + 1, in.end(), msg.begin() + kHeaderLen);
		check_message(msg);
	} catch (const std::exception& e) {
		std::fprintf(stderr, "fuzz-ike-parse: exception: %s\n", e.what());
		__builtin_trap();
	}
	return 0;
}
