// ike/eap.cpp: the EAP packet codec (RFC 3748 section 4) that reads the EAP
// payload of IKE_AUTH. Round trips, and every kind of packet parse() refuses.
#include "ike/eap.hpp"

#include "base/bytes.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

#include <stdexcept>

using namespace esptun::ike::eap;
using esptun::test::Bytes;
using esptun::test::hex;

TEST_SUITE_BEGIN("eap");

TEST_CASE("EAP codec: an Identity response and a Success parse to the fields and encode back") {
	const Bytes identity = hex("02 07 000a 01 616c696365"); // Response, id 7, Identity "alice"
	const auto p = parse(identity);
	REQUIRE(p);
	CHECK(p->code == Code::response);
	CHECK(p->id == 7);
	CHECK(p->type == type::identity);
	CHECK(p->data == esptun::test::ascii("alice"));
	CHECK(encode(*p) == identity);

	const Bytes success = hex("03 2a 0004");
	const auto s = parse(success);
	REQUIRE(s);
	CHECK(s->code == Code::success);
	CHECK(s->id == 0x2a);
	CHECK(s->type == 0);
	CHECK(s->data.empty());
	CHECK(encode(*s) == success);
}

TEST_CASE("EAP codec: a request with a type and no data, and one of kMaxPacket bytes, round-trip") {
	Packet p{Code::request, 1, type::mschapv2, {}};
	CHECK(parse(encode(p)) == p);
	p.data.assign(kMaxPacket - 5, 0xab);
	const Bytes wire = encode(p);
	CHECK(wire.size() == kMaxPacket);
	CHECK(parse(wire) == p);
	Packet f{Code::failure, 9, 0, {}};
	CHECK(parse(encode(f)) == f);
}

TEST_CASE("EAP codec: refuses a length field that is not the size, in either direction") {
	CHECK_FALSE(parse(hex("01 01 0006 1a 01 02"))); // says 6, is 7
	CHECK_FALSE(parse(hex("01 01 0008 1a 01 02"))); // says 8, is 7
	CHECK_FALSE(parse(hex("03 01 0005 00")));       // success with a trailing byte in its length
	CHECK(parse(hex("01 01 0007 1a 01 02")));
}

TEST_CASE("EAP codec: refuses unknown codes, short headers and a request without a type") {
	for (int code : {0, 5, 6, 0xff}) {
		CAPTURE(code);
		Bytes b = hex("00 01 0005 01");
		b[0] = uint8_t(code);
		CHECK_FALSE(parse(b));
	}
	CHECK_FALSE(parse(Bytes{}));
	CHECK_FALSE(parse(hex("01")));
	CHECK_FALSE(parse(hex("01 01 00")));
	CHECK_FALSE(parse(hex("01 01 0004"))); // request, no type byte
	CHECK_FALSE(parse(hex("02 01 0004"))); // response, no type byte
}

TEST_CASE("EAP codec: Success and Failure with a payload are refused") {
	CHECK_FALSE(parse(hex("03 01 0005 1a")));
	CHECK_FALSE(parse(hex("04 01 0006 1a 00")));
	CHECK(parse(hex("04 01 0004")));
}

TEST_CASE("EAP codec: packets longer than kMaxPacket are refused, even with a right length") {
	Bytes big(kMaxPacket + 1, 0);
	big[0] = 1;
	big[1] = 1;
	esptun::store_be16(&big[2], uint16_t(big.size()));
	big[4] = type::tls;
	CHECK_FALSE(parse(big));
	Bytes max(big.begin(), big.end() - 1);
	esptun::store_be16(&max[2], uint16_t(max.size()));
	CHECK(parse(max));
}

TEST_CASE("EAP codec: encode() refuses what parse() would refuse") {
	CHECK_THROWS_AS(encode(Packet{Code::success, 1, type::mschapv2, {}}), std::invalid_argument);
	CHECK_THROWS_AS(encode(Packet{Code::failure, 1, 0, {1}}), std::invalid_argument);
	CHECK_THROWS_AS(encode(Packet{Code(7), 1, 1, {}}), std::invalid_argument);
	CHECK_THROWS_AS(encode(Packet{Code::request, 1, 1, Bytes(kMaxPacket - 4, 0)}), std::invalid_argument);
	CHECK_NOTHROW(encode(Packet{Code::request, 1, 1, Bytes(kMaxPacket - 5, 0)}));
}

TEST_SUITE_END();
