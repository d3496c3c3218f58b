// The IKE message encoder: each payload kind against its wire layout written
// out by hand from RFC 7296 section 3, parse(encode(x)) == x for every kind,
// and the values the encoder refuses because the parser would refuse them.
#include "tests/unit/ike/message_test_util.hpp"

#include <stdexcept>

namespace esptun::ike {
namespace {

using test::be16;
using test::be32;
using test::Bytes;
using test::cat;
using test::filled;
using test::zeros;

/// encode_one() - @p as a one-payload chain, checking the type it is written as.
Bytes encode_one(const Payload& p) {
	PayloadType first = PayloadType::none;
	Bytes b = encode_payloads(std::span(&p, 1), first);
	CHECK(first == payload_type(p));
	return b;
}

IpAddress v6(std::initializer_list<uint8_t> head) {
	IpAddress a;
	a.family = Family::v6;
	std::copy(head.begin(), head.end(), a.bytes.begin());
	return a;
}

SaPayload sample_sa() {
	SaPayload sa;
	sa.proposals.push_back(
	    {1, Protocol::ike, {}, {{TransformType::encr, 20, 256}, {TransformType::prf, 7, 0}}});
	sa.proposals.push_back({2, Protocol::ike, filled(8, 0xab), {{TransformType::dh, 31, 0}}});
	sa.proposals.push_back({3, Protocol::esp, {1, 2, 3, 4}, {}});
	sa.proposals.push_back({3, Protocol::ah, {5, 6, 7, 8}, {{TransformType(9), 0xffff, 0xffff}}});
	return sa;
}

/// One value of every payload kind, with lengths at their limits where they have any.
std::vector<Payload> every_kind() {
	TsPayload tsi{true,
	              {{6, 80, 443, IpAddress::v4(0x0a000001), IpAddress::v4(0x0a0000ff)},
	               {0, 0, 65535, v6({0xfd, 0}), v6({0xfd, 0, 0xff})}}};
	TsPayload tsr{false, {{17, 500, 500, IpAddress::v4(0), IpAddress::v4(0xffffffff)}}};
	CpPayload cp{CpType::reply,
	             {{cp_attr::internal_ip4_address, {10, 0, 0, 2}},
	              {cp_attr::internal_ip4_dns, {}},
	              {cp_attr::internal_ip6_address, filled(17, 1)},
	              {7, Bytes{'e', 's', 'p'}},
	              {0x7fff, filled(300, 9)}}};
	return {
	    sample_sa(),
	    KePayload{31, filled(32, 0x11)},
	    KePayload{14, {}},
	    IdPayload{true, IdType::fqdn, Bytes{'a', '.', 's', 'w'}},
	    IdPayload{false, IdType::ipv4, {192, 0, 2, 1}},
	    AuthPayload{AuthMethod::psk, filled(32, 0x22)},
	    NoncePayload{filled(16, 0x33)},
	    NoncePayload{filled(256, 0x34)},
	    NotifyPayload{Protocol::none, {}, notify::nat_detection_source_ip, filled(20, 0x44)},
	    NotifyPayload{Protocol::esp, {1, 2, 3, 4}, notify::rekey_sa, {}},
	    NotifyPayload{Protocol::ike, filled(8, 5), notify::invalid_ike_spi, {}},
	    DeletePayload{Protocol::esp, {0x01020304, 0xfffffffe}},
	    DeletePayload{Protocol::ah, {}},
	    DeletePayload{Protocol::ike, {}},
	    tsi,
	    tsr,
	    cp,
	    RawPayload{PayloadType::vendor, false, Bytes{'v', 'i', 'd'}},
	    RawPayload{PayloadType::certreq, true, {}},
	    RawPayload{PayloadType(200), false, filled(5, 7)},
	};
}

TEST_CASE("parse(encode(x)) == x for one of every payload kind, alone and all in one chain") {
	const std::vector<Payload> all = every_kind();
	for (const Payload& p : all) {
		INFO("payload type ", int(payload_type(p)));
		CHECK(test::roundtrip({p}) == std::vector<Payload>{p});
	}
	CHECK(test::roundtrip(all) == all);
	// A second pass gives the same bytes: the encoding is canonical.
	PayloadType f1 = PayloadType::none, f2 = PayloadType::none;
	CHECK(encode_payloads(test::roundtrip(all), f1) == encode_payloads(all, f2));
}

TEST_CASE("a whole message round-trips through build_message and parse_message") {
	Header h;
	h.spi_i = 0x0102030405060708;
	h.spi_r = 0xfffefdfcfbfaf9f8;
	h.exchange = Exchange::informational;
	h.flags = kFlagResponse | kFlagInitiator;
	h.message_id = 0x7fffffff;
	h.next = PayloadType::cp; // overwritten
	h.length = 1;             // overwritten
	const std::vector<Payload> payloads = every_kind();
	Bytes wire = build_message(h, payloads);
	Message m;
	REQUIRE(parse_message(wire, m));
	CHECK(m.payloads == payloads);
	CHECK(m.header.length == wire.size());
	CHECK(m.header.next == PayloadType::sa);
	h.next = PayloadType::sa;
	h.length = uint32_t(wire.size());
	CHECK(m.header == h);

	// No payloads at all: a bare header with next = none.
	Bytes empty = build_message(h, {});
	CHECK(empty.size() == kHeaderLen);
	REQUIRE(parse_message(empty, m));
	CHECK(m.payloads.empty());
	CHECK(m.header.next == PayloadType::none);
}

TEST_CASE("encode_header writes the section 3.1 layout") {
	Header h;
	h.spi_i = 0x1122334455667788;
	h.spi_r = 0x99aabbccddeeff00;
	h.next = PayloadType::sk;
	h.exchange = Exchange::create_child_sa;
	h.flags = kFlagInitiator;
	h.message_id = 0x01020304;
	h.length = 0x0000abcd;
	uint8_t out[kHeaderLen];
	encode_header(h, out);
	CHECK(Bytes(out, out + kHeaderLen) == cat({be32(0x11223344),
	                                           be32(0x55667788),
	                                           be32(0x99aabbcc),
	                                           be32(0xddeeff00),
	                                           {46, 0x20, 36, 0x08},
	                                           be32(0x01020304),
	                                           be32(0xabcd)}));
}

TEST_CASE("each payload body has the byte layout of RFC 7296 section 3") {
	// 3.3: proposal (last 0, length, number, protocol, SPI size, count) and a
	// transform with a TV Key Length attribute (0x800e).
	SaPayload sa{{{1,
	               Protocol::esp,
	               {0xde, 0xad, 0xbe, 0xef},
	               {{TransformType::encr, 20, 128}, {TransformType::esn, 0, 0}}}}};
	CHECK(encode_one(sa) == cat({{0, 0},
	                             be16(4 + 8 + 4 + 12 + 8),
	                             {0, 0},
	                             be16(8 + 4 + 12 + 8),
	                             {1, 3, 4, 2},
	                             {0xde, 0xad, 0xbe, 0xef},
	                             {3, 0},
	                             be16(12),
	                             {1, 0},
	                             be16(20),
	                             be16(0x800e),
	                             be16(128),
	                             {0, 0},
	                             be16(8),
	                             {5, 0},
	                             be16(0)}));
	// 3.4: DH group, 2 reserved, data.
	CHECK(encode_one(KePayload{19, {1, 2}}) == cat({{0, 0}, be16(10), be16(19), zeros(2), {1, 2}}));
	// 3.5: ID type, 3 reserved, data; IDr is type 36.
	CHECK(encode_one(IdPayload{false, IdType::key_id, {7}}) == cat({{0, 0}, be16(9), {11, 0, 0, 0, 7}}));
	// 3.8: auth method, 3 reserved, data.
	CHECK(encode_one(AuthPayload{AuthMethod::digital_signature, {9}}) ==
	      cat({{0, 0}, be16(9), {14, 0, 0, 0, 9}}));
	// 3.10: protocol, SPI size, type, SPI, data.
	CHECK(encode_one(NotifyPayload{Protocol::esp, {1, 2, 3, 4}, notify::child_sa_not_found, {5}}) ==
	      cat({{0, 0}, be16(13), {3, 4}, be16(44), {1, 2, 3, 4, 5}}));
	// 3.11: protocol, SPI size, count, SPIs; an IKE SA delete is 4 bytes of body.
	CHECK(encode_one(DeletePayload{Protocol::esp, {0xa1a2a3a4, 0xb1b2b3b4}}) ==
	      cat({{0, 0}, be16(16), {3, 4}, be16(2), be32(0xa1a2a3a4), be32(0xb1b2b3b4)}));
	CHECK(encode_one(DeletePayload{Protocol::ike, {}}) == cat({{0, 0}, be16(8), {1, 0}, be16(0)}));
	// 3.13.1: IPv4 range: type 7, protocol, length 16, ports, addresses.
	TsPayload ts{true, {{6, 1, 2, IpAddress::v4(0x0a000001), IpAddress::v4(0x0a000002)}}};
	CHECK(encode_one(ts) == cat({{0, 0},
	                             be16(24),
	                             {1, 0, 0, 0},
	                             {7, 6},
	                             be16(16),
	                             be16(1),
	                             be16(2),
	                             {10, 0, 0, 1},
	                             {10, 0, 0, 2}}));
	TsPayload ts6{false, {{0, 0, 65535, v6({0x20, 0x01}), v6({0x20, 0x02})}}};
	CHECK(encode_one(ts6) == cat({{0, 0},
	                              be16(48),
	                              {1, 0, 0, 0},
	                              {8, 0},
	                              be16(40),
	                              be16(0),
	                              be16(65535),
	                              {0x20, 1},
	                              zeros(14),
	                              {0x20, 2},
	                              zeros(14)}));
	// 3.15: CFG type, 3 reserved, attributes (type, length, value).
	CpPayload cp{CpType::request, {{cp_attr::internal_ip4_address, {}}, {cp_attr::internal_ip6_dns, {}}}};
	CHECK(encode_one(cp) == cat({{0, 0}, be16(16), {1, 0, 0, 0}, be16(1), be16(0), be16(10), be16(0)}));
	// A raw payload keeps its critical bit.
	CHECK(encode_one(RawPayload{PayloadType(99), true, {1}}) == cat({{0, 0x80}, be16(5), {1}}));
}

TEST_CASE("encode_payloads links the chain through each generic header's Next Payload") {
	std::vector<Payload> ps = {NoncePayload{filled(16, 1)}, RawPayload{PayloadType::vendor, false, {}},
	                           KePayload{2, {}}};
	PayloadType first = PayloadType::none;
	Bytes b = encode_payloads(ps, first);
	CHECK(first == PayloadType::nonce);
	CHECK(b ==
	      cat({{43, 0}, be16(20), filled(16, 1), {34, 0}, be16(4), {0, 0}, be16(8), be16(2), zeros(2)}));
	CHECK(encode_payloads({}, first).empty());
	CHECK(first == PayloadType::none);
}

TEST_CASE("an SKF payload ends the chain and carries its first inner type through a round trip") {
	Header h;
	h.exchange = Exchange::ike_auth;
	h.spi_i = 1;
	h.spi_r = 2;
	h.message_id = 1;
	const Bytes body = cat({be16(1), be16(3), filled(40, 0x5a)}); // fragment 1 of 3, IV, data, ICV
	for (PayloadType inner : {PayloadType::idi, PayloadType::none}) {
		std::vector<Payload> ps = {RawPayload{PayloadType::skf, false, body, inner}};
		Bytes wire = build_message(h, ps);
		CHECK(wire[kHeaderLen] == uint8_t(inner));
		Message m;
		REQUIRE(parse_message(wire, m));
		CHECK(m.payloads == ps);
		CHECK(build_message(m.header, m.payloads) == wire);
	}
}

TEST_CASE("IdPayload::body is the ID payload minus its generic header (what AUTH signs)") {
	IdPayload id{true, IdType::fqdn, Bytes{'a', '.', 's', 'w'}};
	CHECK(id.body() == Bytes{2, 0, 0, 0, 'a', '.', 's', 'w'});
	Bytes enc = encode_one(id);
	CHECK(Bytes(enc.begin() + 4, enc.end()) == id.body());
}

TEST_CASE("payload_type, find, find_notify and parse_error_name") {
	CHECK(payload_type(IdPayload{true, IdType::fqdn, {}}) == PayloadType::idi);
	CHECK(payload_type(IdPayload{false, IdType::fqdn, {}}) == PayloadType::idr);
	CHECK(payload_type(TsPayload{true, {}}) == PayloadType::tsi);
	CHECK(payload_type(TsPayload{false, {}}) == PayloadType::tsr);
	CHECK(payload_type(SkPayload{}) == PayloadType::sk);
	CHECK(payload_type(DeletePayload{}) == PayloadType::del);
	CHECK(payload_type(RawPayload{PayloadType(77), false, {}}) == PayloadType(77));

	Message m;
	m.payloads = {NotifyPayload{Protocol::none, {}, notify::cookie, {1}},
	              NotifyPayload{Protocol::none, {}, notify::cookie, {2}}, NoncePayload{filled(16, 0)}};
	REQUIRE(m.find_notify(notify::cookie));
	CHECK(m.find_notify(notify::cookie)->data == Bytes{1}); // the first one
	CHECK(m.find_notify(notify::nat_detection_source_ip) == nullptr);
	CHECK(m.find<NoncePayload>() != nullptr);
	CHECK(m.find<SaPayload>() == nullptr);

	CHECK(parse_error_name(ParseError::ok) == "ok");
	CHECK(parse_error_name(ParseError::unsupported_critical) == "unsupported_critical");
	CHECK(parse_error_name(ParseError::sk_not_last) == "sk_not_last");
	CHECK(parse_error_name(ParseError(200)) == "unknown");
}

TEST_CASE("the encoder refuses every value the parser would refuse") {
	auto refused = [](Payload p) {
		PayloadType first;
		std::vector<Payload> v{std::move(p)};
		CHECK_THROWS_AS(encode_payloads(v, first), std::invalid_argument);
	};
	refused(NoncePayload{filled(15, 0)});
	refused(NoncePayload{filled(257, 0)});
	refused(SaPayload{});
	refused(SaPayload{{{1, Protocol::ike, {1, 2, 3, 4}, {}}}}); // IKE: 0 or 8
	refused(SaPayload{{{1, Protocol::esp, {}, {}}}});           // ESP: 4
	refused(SaPayload{{{1, Protocol::none, {}, {}}}});          // no protocol
	refused(SaPayload{{{1, Protocol::esp, {1, 2, 3, 4}, std::vector<Transform>(256)}}});
	refused(NotifyPayload{Protocol::none, {1, 2, 3, 4}, notify::rekey_sa, {}}); // SPI without AH/ESP
	refused(NotifyPayload{Protocol::esp, {1, 2}, notify::rekey_sa, {}});
	refused(DeletePayload{Protocol::ike, {1}});
	refused(DeletePayload{Protocol::none, {}});
	refused(TsPayload{true, {}});
	refused(TsPayload{true, std::vector<TrafficSelector>(256)});
	TrafficSelector mixed;
	mixed.end.family = Family::v6;
	refused(TsPayload{true, {mixed}});
	refused(CpPayload{CpType::reply, {{0x8001, {}}}}); // reserved bit
	refused(CpPayload{CpType::reply, {{cp_attr::internal_ip4_address, {1, 2, 3}}}});
	refused(CpPayload{CpType::reply, {{cp_attr::internal_ip6_address, filled(16, 0)}}});
	refused(RawPayload{PayloadType::sa, false, {}}); // has its own struct
	refused(RawPayload{PayloadType::none, false, {}});
	refused(RawPayload{PayloadType::vendor, false, {}, PayloadType::idi}); // first_inner is SKF's
	refused(SkPayload{PayloadType::idi, 28, 40});
	refused(RawPayload{PayloadType::vendor, false, filled(65532, 0)}); // 65536 with its header
	refused(KePayload{31, filled(65532, 0)});

	PayloadType first;
	// SKF must be last.
	std::vector<Payload> skf_first = {RawPayload{PayloadType::skf, false, {}},
	                                  NoncePayload{filled(16, 0)}};
	CHECK_THROWS_AS(encode_payloads(skf_first, first), std::invalid_argument);
	// kMaxPayloads is the most a chain may hold.
	std::vector<Payload> many(kMaxPayloads, RawPayload{PayloadType::vendor, false, {}});
	CHECK_NOTHROW(encode_payloads(many, first));
	many.push_back(RawPayload{PayloadType::vendor, false, {}});
	CHECK_THROWS_AS(encode_payloads(many, first), std::invalid_argument);
	// A message past 64 KiB, and a header with another major version.
	std::vector<Payload> big(2, RawPayload{PayloadType::vendor, false, filled(40000, 0)});
	CHECK_THROWS_AS(build_message(Header{}, big), std::invalid_argument);
	Header v1;
	v1.version = 0x10;
	CHECK_THROWS_AS(build_message(v1, {}), std::invalid_argument);

	// The largest values that still fit are accepted.
	CHECK_NOTHROW(encode_one(RawPayload{PayloadType::vendor, false, filled(65531, 0)}));
	CHECK_NOTHROW(encode_one(TsPayload{true, std::vector<TrafficSelector>(255)}));
}

} // namespace
} // namespace esptun::ike
