// The IKE message parser on malformed input: every length off by one or cut
// short, counts that disagree with lengths, bad versions, unknown critical
// payloads, SK not last, and each payload's own format rules. Each case must
// give the expected ParseError and never a crash (the ASan build runs these).
#include "tests/unit/ike/message_test_util.hpp"

#include "base/bytes.hpp"

#include <initializer_list>

namespace esptun::ike {
namespace {

using test::be16;
using test::be32;
using test::Bytes;
using test::cat;
using test::filled;
using test::payload;
using test::proposal;
using test::transform;
using test::zeros;
using PT = PayloadType;

ParseError parse_error(const Bytes& wire) {
	Message m;
	return parse_message(wire, m).error;
}

/// body_error() - the error for a single payload of @type with @body, both as
/// a message and as an inner chain (the two must agree).
ParseError body_error(PayloadType type, const Bytes& body) {
	std::vector<Payload> out;
	const ParseError inner = test::parse_one(type, body, out).error;
	const ParseError outer = parse_error(test::message(type, payload(PT::none, body)));
	CHECK(inner == outer);
	return outer;
}

/// body_parses() - body_error() == ok, and the parsed payload.
Payload body_parses(PayloadType type, const Bytes& body) {
	std::vector<Payload> out;
	ParseResult r = test::parse_one(type, body, out);
	INFO(parse_error_name(r.error));
	REQUIRE(r);
	REQUIRE(out.size() == 1);
	return out[0];
}

const Bytes kNonce = filled(32, 0x4e);

/// A valid message: SA (one ESP proposal), nonce, notify, vendor ID.
Bytes valid_chain() {
	Bytes sa = proposal(0, 1, 3, {1, 2, 3, 4}, 2,
	                    cat({transform(3, 1, 20, cat({be16(0x800e), be16(128)})), transform(0, 5, 0)}));
	return cat({payload(PT::nonce, sa), payload(PT::notify, kNonce),
	            payload(PT::vendor, cat({{0, 0}, be16(16388), filled(20, 1)})),
	            payload(PT::none, {'v'})});
}

TEST_CASE("the hand-built reference message is valid, so each mutation below tests one thing") {
	Message m;
	Bytes wire = test::message(PT::sa, valid_chain());
	REQUIRE(parse_message(wire, m));
	CHECK(m.payloads.size() == 4);
	CHECK(build_message(m.header, m.payloads) == wire);
}

TEST_CASE("header: too short, length field not the datagram size, bad major version") {
	Bytes wire = test::message(PT::sa, valid_chain());
	Header h;
	for (size_t n = 0; n < kHeaderLen; n++)
		CHECK(parse_header(std::span(wire).first(n), h).error == ParseError::truncated);

	auto with_length = [&](uint32_t len) {
		Bytes w = wire;
		store_be32(&w[24], len);
		return parse_error(w);
	};
	CHECK(with_length(uint32_t(wire.size())) == ParseError::ok);
	CHECK(with_length(uint32_t(wire.size() + 1)) == ParseError::truncated);
	CHECK(with_length(uint32_t(wire.size() - 1)) == ParseError::bad_length);
	CHECK(with_length(27) == ParseError::bad_length);
	CHECK(with_length(0) == ParseError::bad_length);
	CHECK(with_length(0xffffffff) == ParseError::truncated);

	// A datagram larger than kMaxMessageLen, even with a matching length field.
	Bytes huge = test::message(PT::vendor, payload(PT::none, filled(65535 - 4, 0)));
	huge.resize(kMaxMessageLen + 1);
	store_be32(&huge[24], uint32_t(huge.size()));
	CHECK(parse_error(huge) == ParseError::bad_length);

	// Major version 1 and 3 are refused; a minor version is kept and ignored.
	CHECK(parse_error(test::message(PT::sa, valid_chain(), 0x10)) == ParseError::bad_version);
	CHECK(parse_error(test::message(PT::sa, valid_chain(), 0x30)) == ParseError::bad_version);
	CHECK(parse_error(test::message(PT::sa, valid_chain(), 0x00)) == ParseError::bad_version);
	Message m;
	Bytes minor = test::message(PT::sa, valid_chain(), 0x21);
	REQUIRE(parse_message(minor, m));
	CHECK(m.header.version == 0x21);
	CHECK(build_message(m.header, m.payloads) == minor);
}

TEST_CASE("every truncation of every captured message is refused, with its length field fixed or not") {
	for (const char* name : test::kVectors) {
		INFO(name);
		const Bytes wire = test::read_vector(name);
		for (size_t n = 0; n < wire.size(); n++) {
			Bytes cut(wire.begin(), wire.begin() + std::ptrdiff_t(n));
			INFO("cut at ", n);
			CHECK(parse_error(cut) != ParseError::ok);
			if (n >= kHeaderLen) {
				store_be32(&cut[24], uint32_t(n)); // the header agrees: the chain must notice
				CHECK(parse_error(cut) != ParseError::ok);
			}
		}
	}
}

TEST_CASE("every generic payload length one off in a captured message is refused") {
	for (const char* name :
	     {"ike_sa_init_request.bin", "ike_sa_init_response.bin", "modp_ike_sa_init_retry.bin"}) {
		INFO(name);
		const Bytes wire = test::read_vector(name);
		size_t pos = kHeaderLen;
		uint8_t next = wire[16];
		while (next != 0) {
			const uint16_t len = load_be16(&wire[pos + 2]);
			for (int delta : {-1, 1}) {
				INFO("payload at ", pos, " length ", len, " ", delta);
				Bytes w = wire;
				store_be16(&w[pos + 2], uint16_t(len + delta));
				CHECK(parse_error(w) != ParseError::ok);
			}
			next = wire[pos];
			pos += len;
		}
		CHECK(pos == wire.size());
	}
}

TEST_CASE("every single-byte change of a captured message parses or fails cleanly") {
	// No expectation on the result (many bytes are data); this is for the
	// sanitizers, and checks that whatever parses re-encodes and parses again.
	for (const char* name : test::kVectors) {
		const Bytes wire = test::read_vector(name);
		for (size_t i = 0; i < wire.size(); i++) {
			for (uint8_t x : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
				Bytes w = wire;
				w[i] ^= x;
				Message m;
				if (!parse_message(w, m) || m.find<SkPayload>()) continue;
				Message again;
				INFO(name, " byte ", i, " ^ ", int(x));
				REQUIRE(parse_message(build_message(m.header, m.payloads), again));
				CHECK(again.payloads == m.payloads);
			}
		}
	}
}

TEST_CASE("generic headers: short, too small, past the end, trailing bytes, a chain that runs out") {
	// Next Payload says another follows, but the message ends.
	CHECK(parse_error(test::message(PT::nonce, payload(PT::vendor, kNonce))) == ParseError::truncated);
	CHECK(parse_error(test::message(PT::nonce, cat({payload(PT::vendor, kNonce), {0, 0, 0}}))) ==
	      ParseError::truncated);
	// Header next says a payload follows, but there is none.
	CHECK(parse_error(test::message(PT::nonce, {})) == ParseError::truncated);
	// Payload length below the generic header, and past the end.
	for (uint16_t len : std::initializer_list<uint16_t>{0, 1, 3}) {
		Bytes chain = payload(PT::none, kNonce);
		store_be16(&chain[2], len);
		CHECK(parse_error(test::message(PT::nonce, chain)) == ParseError::bad_length);
	}
	Bytes past = payload(PT::none, kNonce);
	store_be16(&past[2], uint16_t(past.size() + 1));
	CHECK(parse_error(test::message(PT::nonce, past)) == ParseError::bad_length);
	// Bytes after the last payload (next = none), and bytes with no payload at all.
	CHECK(parse_error(test::message(PT::nonce, cat({payload(PT::none, kNonce), {0}}))) ==
	      ParseError::bad_length);
	CHECK(parse_error(test::message(PT::none, {0, 0, 0, 4})) == ParseError::bad_length);
	std::vector<Payload> out;
	CHECK(parse_payloads(PT::none, Bytes{1}, out).error == ParseError::bad_length);
	CHECK(parse_payloads(PT::none, Bytes{}, out));
	CHECK(out.empty());
}

TEST_CASE("at most kMaxPayloads payloads in a message or an inner chain") {
	auto vendors = [](size_t n) {
		Bytes chain;
		for (size_t i = 0; i < n; i++)
			chain = cat({chain, payload(i + 1 == n ? PT::none : PT::vendor, {})});
		return chain;
	};
	CHECK(parse_error(test::message(PT::vendor, vendors(kMaxPayloads))) == ParseError::ok);
	CHECK(parse_error(test::message(PT::vendor, vendors(kMaxPayloads + 1))) ==
	      ParseError::too_many_payloads);
	std::vector<Payload> out;
	CHECK(parse_payloads(PT::vendor, vendors(kMaxPayloads), out));
	CHECK(out.size() == kMaxPayloads);
	out.clear();
	CHECK(parse_payloads(PT::vendor, vendors(kMaxPayloads + 1), out).error ==
	      ParseError::too_many_payloads);
	// The limit counts payloads, not bytes: a long chain of empty vendor IDs
	// is refused before its end is reached.
	CHECK(parse_error(test::message(PT::vendor, vendors(1000))) == ParseError::too_many_payloads);
}

TEST_CASE("critical bit: unknown + critical is refused with its type, otherwise kept or ignored") {
	// Type 49 (not one esptun knows) with the critical bit.
	ParseResult r;
	Message m;
	Bytes crit = test::message(PT::nonce, cat({payload(49, kNonce), payload(PT::none, {1, 2}, 0x80)}));
	r = parse_message(crit, m);
	CHECK(r.error == ParseError::unsupported_critical);
	CHECK(r.payload_type == 49);
	// The same without the bit: kept as a RawPayload, and re-encoded as it came.
	Bytes skip = test::message(PT::nonce, cat({payload(49, kNonce), payload(PT::none, {1, 2})}));
	REQUIRE(parse_message(skip, m));
	REQUIRE(m.payloads.size() == 2);
	CHECK(std::get<RawPayload>(m.payloads[1]) == RawPayload{PayloadType(49), false, {1, 2}});
	CHECK(build_message(m.header, m.payloads) == skip);
	// IKEv1 payload numbers (1..32) and 0xff are unknown too.
	for (uint8_t t : std::initializer_list<uint8_t>{1, 32, 54, 255}) {
		r = parse_message(test::message(PayloadType(t), payload(PT::none, {}, 0x80)), m);
		CHECK(r.error == ParseError::unsupported_critical);
		CHECK(r.payload_type == t);
	}
	// A known payload with the critical bit (and reserved bits) set: the bits
	// are ignored (section 3.2) and written back as zero.
	Bytes known = test::message(PT::nonce, payload(PT::none, kNonce, 0xff));
	REQUIRE(parse_message(known, m));
	CHECK(std::get<NoncePayload>(m.payloads[0]).data == kNonce);
	CHECK(build_message(m.header, m.payloads)[kHeaderLen + 1] == 0);
	// Known but not interpreted (CERT, CERTREQ, VID, EAP): raw, critical bit kept.
	for (PayloadType t : {PT::cert, PT::certreq, PT::vendor, PT::eap}) {
		Bytes w = test::message(t, payload(PT::none, {9}, 0x80));
		REQUIRE(parse_message(w, m));
		CHECK(std::get<RawPayload>(m.payloads[0]) == RawPayload{t, true, {9}});
		CHECK(build_message(m.header, m.payloads) == w);
	}
}

TEST_CASE("SK: ends the chain, must reach the end of the message, only in a message") {
	const Bytes sk_body = filled(48, 0xee);
	Message m;
	// Valid: a notify, then SK whose Next Payload is the first inner type.
	Bytes wire = test::message(
	    PT::notify, cat({payload(PT::sk, cat({{0, 0}, be16(16430)})), payload(PT::idi, sk_body)}));
	REQUIRE(parse_message(wire, m));
	REQUIRE(m.payloads.size() == 2);
	const SkPayload* sk = m.find<SkPayload>();
	REQUIRE(sk);
	CHECK(sk->first_inner == PT::idi);
	CHECK(sk->offset == kHeaderLen + 8);
	CHECK(sk->length == 4 + sk_body.size());
	// SK length short of the end: bytes after the SK payload.
	Bytes w = test::message(PT::sk, cat({payload(PT::idi, sk_body), payload(PT::none, kNonce)}));
	ParseResult r = parse_message(w, m);
	CHECK(r.error == ParseError::sk_not_last);
	CHECK(r.payload_type == uint8_t(PT::sk));
	CHECK(parse_error(test::message(PT::sk, cat({payload(PT::idi, sk_body), {0}}))) ==
	      ParseError::sk_not_last);
	// SK length past the end of the message.
	w = test::message(PT::sk, payload(PT::idi, sk_body));
	store_be16(&w[kHeaderLen + 2], uint16_t(4 + sk_body.size() + 1));
	CHECK(parse_error(w) == ParseError::bad_length);
	// An empty SK body still parses (too short to open is SkCipher's call).
	REQUIRE(parse_message(test::message(PT::sk, payload(PT::none, {})), m));
	CHECK(m.find<SkPayload>()->length == 4);
	// SK or SKF inside a decrypted chain is malformed.
	std::vector<Payload> out = {NoncePayload{kNonce}};
	r = parse_payloads(PT::nonce, cat({payload(PT::sk, kNonce), payload(PT::idi, sk_body)}), out);
	CHECK(r.error == ParseError::malformed_payload);
	CHECK(r.payload_type == uint8_t(PT::sk));
	CHECK(out.size() == 1); // nothing appended on an error
	CHECK(parse_payloads(PT::skf, payload(PT::none, sk_body), out).error ==
	      ParseError::malformed_payload);
	// SKF not last.
	CHECK(parse_error(
	          test::message(PT::skf, cat({payload(PT::nonce, sk_body), payload(PT::none, kNonce)}))) ==
	      ParseError::sk_not_last);
}

TEST_CASE("nonce 16..256 bytes; KE, ID and AUTH bodies at least 4 bytes") {
	CHECK(body_error(PT::nonce, filled(15, 1)) == ParseError::malformed_payload);
	CHECK(body_error(PT::nonce, filled(16, 1)) == ParseError::ok);
	CHECK(body_error(PT::nonce, filled(256, 1)) == ParseError::ok);
	CHECK(body_error(PT::nonce, filled(257, 1)) == ParseError::malformed_payload);
	CHECK(body_error(PT::nonce, {}) == ParseError::malformed_payload);
	for (PayloadType t : {PT::ke, PT::idi, PT::idr, PT::auth}) {
		INFO(int(t));
		for (size_t n = 0; n < 4; n++)
			CHECK(body_error(t, filled(n, 1)) == ParseError::malformed_payload);
		CHECK(body_error(t, filled(4, 1)) == ParseError::ok);
	}
	CHECK(std::get<KePayload>(body_parses(PT::ke, {0, 31, 0xff, 0xff, 7})) == KePayload{31, {7}});
	CHECK(std::get<IdPayload>(body_parses(PT::idr, {2, 9, 9, 9, 'x'})) ==
	      IdPayload{false, IdType::fqdn, {'x'}});
	CHECK(std::get<AuthPayload>(body_parses(PT::auth, {2, 0, 0, 0})) == AuthPayload{AuthMethod::psk, {}});
}

/// sa() - an SA body with one proposal made of @transforms (count as given).
Bytes sa(uint8_t protocol, const Bytes& spi, uint8_t count, const Bytes& transforms) {
	return proposal(0, 1, protocol, spi, count, transforms);
}
const Bytes kEncr = transform(0, 1, 12, cat({be16(0x800e), be16(128)}));

TEST_CASE("SA: proposal and transform lengths, counts and last-substructure markers must agree") {
	CHECK(body_error(PT::sa, sa(1, {}, 1, kEncr)) == ParseError::ok);
	CHECK(body_error(PT::sa, {}) == ParseError::malformed_payload); // no proposal
	CHECK(body_error(PT::sa, {0, 0, 0}) == ParseError::malformed_payload);

	// Transform count one more or one less than the transforms present.
	CHECK(body_error(PT::sa, sa(1, {}, 2, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(1, {}, 0, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(1, {}, 0, {})) == ParseError::ok); // an empty proposal is syntax-valid
	// Last-substructure values: 3 on the last transform, 0 on an earlier one, others.
	CHECK(body_error(PT::sa, sa(1, {}, 1, transform(3, 1, 12))) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(1, {}, 2, cat({transform(0, 1, 12), transform(0, 2, 5)}))) ==
	      ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(1, {}, 2, cat({transform(3, 1, 12), transform(0, 2, 5)}))) ==
	      ParseError::ok);
	CHECK(body_error(PT::sa, sa(1, {}, 2, cat({transform(2, 1, 12), transform(0, 2, 5)}))) ==
	      ParseError::malformed_payload);
	Bytes two = cat({proposal(2, 1, 1, {}, 1, kEncr), proposal(0, 2, 1, {}, 1, kEncr)});
	CHECK(body_error(PT::sa, two) == ParseError::ok);
	CHECK(body_error(PT::sa, cat({proposal(0, 1, 1, {}, 1, kEncr), proposal(0, 2, 1, {}, 1, kEncr)})) ==
	      ParseError::malformed_payload); // last = 0 but another follows
	CHECK(body_error(PT::sa, proposal(2, 1, 1, {}, 1, kEncr)) ==
	      ParseError::malformed_payload); // 2, none follows
	CHECK(body_error(PT::sa, cat({proposal(3, 1, 1, {}, 1, kEncr), proposal(0, 2, 1, {}, 1, kEncr)})) ==
	      ParseError::malformed_payload); // 3 is for transforms

	// Proposal length one off either way, and below its fixed 8 bytes.
	for (int delta : {-1, 1}) {
		Bytes b = two;
		store_be16(&b[2], uint16_t(load_be16(&b[2]) + delta));
		CHECK(body_error(PT::sa, b) == ParseError::malformed_payload);
	}
	for (uint16_t len : std::initializer_list<uint16_t>{0, 4, 7}) {
		Bytes b = sa(1, {}, 0, {});
		store_be16(&b[2], len);
		CHECK(body_error(PT::sa, b) == ParseError::malformed_payload);
	}
	// Transform length one off either way, and below 8.
	for (uint16_t len : std::initializer_list<uint16_t>{0, 4, 7, 11, 13}) {
		Bytes t = kEncr;
		store_be16(&t[2], len);
		CHECK(body_error(PT::sa, sa(1, {}, 1, t)) == ParseError::malformed_payload);
	}
	// Trailing byte inside the proposal after its transforms.
	CHECK(body_error(PT::sa, sa(1, {}, 1, cat({kEncr, {0}}))) == ParseError::malformed_payload);
}

TEST_CASE("SA: SPI sizes per protocol (IKE 0 or 8, AH/ESP 4)") {
	CHECK(body_error(PT::sa, sa(1, {}, 1, kEncr)) == ParseError::ok);
	CHECK(body_error(PT::sa, sa(1, filled(8, 1), 1, kEncr)) == ParseError::ok);
	CHECK(body_error(PT::sa, sa(1, filled(4, 1), 1, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(3, filled(4, 1), 1, kEncr)) == ParseError::ok);
	CHECK(body_error(PT::sa, sa(2, filled(4, 1), 1, kEncr)) == ParseError::ok);
	CHECK(body_error(PT::sa, sa(3, {}, 1, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(3, filled(8, 1), 1, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(0, {}, 1, kEncr)) == ParseError::malformed_payload);
	CHECK(body_error(PT::sa, sa(4, filled(4, 1), 1, kEncr)) == ParseError::malformed_payload);
	// An SPI size larger than the proposal.
	Bytes b = sa(3, filled(4, 1), 0, {});
	b[6] = 200;
	CHECK(body_error(PT::sa, b) == ParseError::malformed_payload);
}

TEST_CASE("SA: transform attributes (TV Key Length kept; anything else drops the transform)") {
	auto transforms_of = [](const Bytes& attrs) {
		Bytes body = sa(1, {}, 2, cat({transform(3, 1, 12, attrs), transform(0, 2, 5)}));
		return std::get<SaPayload>(body_parses(PT::sa, body)).proposals.at(0).transforms;
	};
	using TT = TransformType;
	CHECK(transforms_of({}) == std::vector<Transform>{{TT::encr, 12, 0}, {TT::prf, 5, 0}});
	CHECK(transforms_of(cat({be16(0x800e), be16(256)})) ==
	      std::vector<Transform>{{TT::encr, 12, 256}, {TT::prf, 5, 0}});
	// An unknown TV attribute, or any TLV attribute, makes the transform
	// unacceptable (section 3.3.6): it is left out, the others stay.
	CHECK(transforms_of(cat({be16(0x800e), be16(128), be16(0x8011), be16(1)})) ==
	      std::vector<Transform>{{TT::prf, 5, 0}});
	CHECK(transforms_of(cat({be16(0x0011), be16(3), {1, 2, 3}})) ==
	      std::vector<Transform>{{TT::prf, 5, 0}});
	CHECK(transforms_of(cat({be16(0x0011), be16(0)})) == std::vector<Transform>{{TT::prf, 5, 0}});

	auto error_of = [](const Bytes& attrs) {
		return body_error(PT::sa, sa(1, {}, 1, transform(0, 1, 12, attrs)));
	};
	CHECK(error_of(cat({be16(0x000e), be16(2), {0, 128}})) ==
	      ParseError::malformed_payload);                                           // Key Length as TLV
	CHECK(error_of(cat({be16(0x800e), be16(0)})) == ParseError::malformed_payload); // zero bits
	CHECK(error_of(cat({be16(0x800e), be16(128), be16(0x800e), be16(128)})) ==
	      ParseError::malformed_payload);
	CHECK(error_of(cat({be16(0x0011), be16(4), {1, 2, 3}})) ==
	      ParseError::malformed_payload); // TLV past the end
	CHECK(error_of(cat({be16(0x0011), be16(0xffff)})) == ParseError::malformed_payload);
	CHECK(error_of({0x80, 0x0e}) == ParseError::malformed_payload); // half an attribute
	CHECK(error_of({0x80, 0x0e, 0}) == ParseError::malformed_payload);
}

TEST_CASE("Notify: SPI size must fit the protocol and the body") {
	auto n = [](uint8_t protocol, const Bytes& spi, const Bytes& data = {}) {
		return cat({{protocol, uint8_t(spi.size())}, be16(notify::rekey_sa), spi, data});
	};
	CHECK(body_error(PT::notify, n(0, {})) == ParseError::ok);
	CHECK(body_error(PT::notify, n(3, {})) ==
	      ParseError::ok); // protocol of an SPI-less notify is ignored
	CHECK(body_error(PT::notify, n(3, filled(4, 1), {5})) == ParseError::ok);
	CHECK(body_error(PT::notify, n(2, filled(4, 1))) == ParseError::ok);
	CHECK(body_error(PT::notify, n(1, filled(8, 1))) == ParseError::ok);
	CHECK(body_error(PT::notify, n(0, filled(4, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::notify, n(1, filled(4, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::notify, n(3, filled(8, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::notify, n(3, filled(3, 1))) == ParseError::malformed_payload);
	// SPI size larger than what is left.
	CHECK(body_error(PT::notify, cat({{3, 4}, be16(1), {1, 2, 3}})) == ParseError::malformed_payload);
	for (size_t len = 0; len < 4; len++)
		CHECK(body_error(PT::notify, filled(len, 0)) == ParseError::malformed_payload);
	CHECK(std::get<NotifyPayload>(body_parses(PT::notify, n(3, {1, 2, 3, 4}, {9}))) ==
	      NotifyPayload{Protocol::esp, {1, 2, 3, 4}, notify::rekey_sa, {9}});
}

TEST_CASE("Delete: ESP/AH with 4-byte SPIs filling the body; IKE with no SPI at all") {
	auto d = [](uint8_t protocol, uint8_t spi_size, uint16_t count, const Bytes& spis) {
		return cat({{protocol, spi_size}, be16(count), spis});
	};
	CHECK(body_error(PT::del, d(3, 4, 2, filled(8, 1))) == ParseError::ok);
	CHECK(body_error(PT::del, d(2, 4, 1, filled(4, 1))) == ParseError::ok);
	CHECK(body_error(PT::del, d(3, 4, 0, {})) == ParseError::ok);
	CHECK(body_error(PT::del, d(1, 0, 0, {})) == ParseError::ok);
	CHECK(body_error(PT::del, d(3, 4, 2, filled(7, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(3, 4, 2, filled(9, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(3, 4, 3, filled(8, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(3, 8, 1, filled(8, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(3, 0, 0, {})) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(1, 8, 1, filled(8, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(1, 0, 1, {})) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(1, 0, 0, {0})) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(0, 0, 0, {})) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, d(3, 4, 0xffff, filled(8, 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::del, {3, 4, 0}) == ParseError::malformed_payload);
	CHECK(std::get<DeletePayload>(body_parses(PT::del, d(3, 4, 2, cat({be32(7), be32(0xffffffff)})))) ==
	      DeletePayload{Protocol::esp, {7, 0xffffffff}});
}

TEST_CASE("TS: at least one selector, 16 bytes for IPv4, 40 for IPv6, count matches the body") {
	const Bytes v4 = cat({{7, 6}, be16(16), be16(0), be16(65535), {10, 0, 0, 1}, {10, 0, 0, 9}});
	const Bytes v6 = cat({{8, 0}, be16(40), be16(0), be16(65535), filled(16, 0), filled(16, 0xff)});
	auto ts = [](uint8_t count, const Bytes& selectors) { return cat({{count, 0, 0, 0}, selectors}); };
	CHECK(body_error(PT::tsi, ts(1, v4)) == ParseError::ok);
	CHECK(body_error(PT::tsr, ts(2, cat({v4, v6}))) == ParseError::ok);
	CHECK(body_error(PT::tsi, ts(0, {})) == ParseError::malformed_payload);
	CHECK(body_error(PT::tsi, ts(2, v4)) == ParseError::malformed_payload);
	CHECK(body_error(PT::tsi, ts(1, cat({v4, v4}))) == ParseError::malformed_payload);
	CHECK(body_error(PT::tsi, ts(1, cat({v4, {0}}))) == ParseError::malformed_payload);
	CHECK(body_error(PT::tsi, {1, 0, 0}) == ParseError::malformed_payload);
	// A selector cut short.
	CHECK(body_error(PT::tsi, ts(1, Bytes(v4.begin(), v4.end() - 1))) == ParseError::malformed_payload);
	CHECK(body_error(PT::tsi, ts(1, Bytes(v6.begin(), v6.begin() + 3))) == ParseError::malformed_payload);
	// Length field wrong for its type, and unknown types.
	for (uint16_t len : std::initializer_list<uint16_t>{0, 15, 17, 40}) {
		Bytes b = v4;
		store_be16(&b[2], len);
		CHECK(body_error(PT::tsi, ts(1, b)) == ParseError::malformed_payload);
	}
	for (uint16_t len : std::initializer_list<uint16_t>{16, 39, 41}) {
		Bytes b = v6;
		store_be16(&b[2], len);
		CHECK(body_error(PT::tsi, ts(1, b)) == ParseError::malformed_payload);
	}
	for (uint8_t type : std::initializer_list<uint8_t>{0, 9, 10, 255}) {
		Bytes b = v4;
		b[0] = type;
		CHECK(body_error(PT::tsi, ts(1, b)) == ParseError::malformed_payload);
	}
	TsPayload parsed = std::get<TsPayload>(body_parses(PT::tsr, ts(2, cat({v4, v6}))));
	CHECK_FALSE(parsed.initiator);
	REQUIRE(parsed.selectors.size() == 2);
	CHECK(parsed.selectors[0].start == IpAddress::v4(0x0a000001));
	CHECK(parsed.selectors[0].end == IpAddress::v4(0x0a000009));
	CHECK(parsed.selectors[0].ip_protocol == 6);
	CHECK(parsed.selectors[1].start.family == Family::v6);
	CHECK(parsed.selectors[1].end.bytes[15] == 0xff);
}

TEST_CASE("CP: attribute headers and lengths inside the body, known attributes at their sizes") {
	auto cp = [](const Bytes& attrs) { return cat({{2, 0, 0, 0}, attrs}); };
	auto attr = [](uint16_t type, const Bytes& value) {
		return cat({be16(type), be16(uint16_t(value.size())), value});
	};
	CHECK(body_error(PT::cp, cp({})) == ParseError::ok);
	CHECK(body_error(PT::cp, {2, 0, 0}) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(1, {10, 0, 0, 1}))) == ParseError::ok);
	CHECK(body_error(PT::cp, cp(attr(1, {}))) == ParseError::ok);
	CHECK(body_error(PT::cp, cp(attr(1, {10, 0, 0}))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(2, filled(5, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(3, filled(16, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(8, filled(17, 0)))) == ParseError::ok);
	CHECK(body_error(PT::cp, cp(attr(8, filled(16, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(10, filled(16, 0)))) == ParseError::ok);
	CHECK(body_error(PT::cp, cp(attr(10, filled(4, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(13, filled(8, 0)))) == ParseError::ok);
	CHECK(body_error(PT::cp, cp(attr(13, filled(4, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(14, filled(3, 0)))) == ParseError::malformed_payload);
	CHECK(body_error(PT::cp, cp(attr(999, filled(3, 0)))) == ParseError::ok); // unknown: any length
	// Attribute header cut short, value past the end.
	CHECK(body_error(PT::cp, cp({0, 1, 0})) == ParseError::malformed_payload);
	Bytes past = attr(1, {10, 0, 0, 1});
	past.pop_back();
	CHECK(body_error(PT::cp, cp(past)) == ParseError::malformed_payload);
	// The reserved top bit of the type is ignored on receipt.
	CpPayload parsed =
	    std::get<CpPayload>(body_parses(PT::cp, cp(cat({attr(0x8001, {}), attr(7, {'x'})}))));
	CHECK(parsed == CpPayload{CpType::reply, {{1, {}}, {7, {'x'}}}});
}

TEST_CASE("a failed parse_payloads leaves what was already in its output vector") {
	std::vector<Payload> out = {NoncePayload{kNonce}};
	// Two good payloads, then a bad one: none of the three is appended.
	Bytes chain = cat({payload(PT::vendor, kNonce), payload(PT::nonce, {}), payload(PT::none, {1})});
	ParseResult r = parse_payloads(PT::nonce, chain, out);
	CHECK(r.error == ParseError::malformed_payload);
	CHECK(r.payload_type == uint8_t(PT::nonce));
	CHECK(out == std::vector<Payload>{NoncePayload{kNonce}});
	// And a good chain appends after what was there.
	CHECK(parse_payloads(PT::nonce, payload(PT::none, kNonce), out));
	CHECK(out.size() == 2);
}

} // namespace
} // namespace esptun::ike
