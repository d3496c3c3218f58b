// Tests for base/inet.cpp: strict address, prefix and endpoint parsing,
// formatting, masking and overlap.
#include "base/inet.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace esptun;
using namespace std::string_literals;

TEST_CASE("parse_ip reads dotted IPv4 into network byte order") {
	auto a = parse_ip("10.99.0.1");
	REQUIRE(a);
	CHECK(a->family == Family::v4);
	CHECK(a->bytes[0] == 10);
	CHECK(a->bytes[1] == 99);
	CHECK(a->bytes[2] == 0);
	CHECK(a->bytes[3] == 1);
	CHECK(*a == IpAddress::v4(0x0a630001));
	CHECK(a->size() == 4);
}

TEST_CASE("parse_ip reads IPv6 including compressed and v4-embedded forms") {
	auto a = parse_ip("fd99::1");
	REQUIRE(a);
	CHECK(a->family == Family::v6);
	CHECK(a->bytes[0] == 0xfd);
	CHECK(a->bytes[1] == 0x99);
	CHECK(a->bytes[15] == 1);
	CHECK(parse_ip("::"));
	CHECK(parse_ip("::ffff:192.0.2.1"));
	CHECK(parse_ip("2001:db8:0:0:0:0:0:1") == parse_ip("2001:db8::1"));
}

TEST_CASE("parse_ip rejects garbage, trailing text, leading zeros and embedded NUL") {
	for (std::string bad :
	     {""s, "10.99.0"s, "10.99.0.1.2"s, "10.99.0.256"s, "10.99.0.1 "s, " 10.99.0.1"s, "10.99.0.1x"s,
	      "010.99.0.1"s, "0x0a.0.0.1"s, "10.99.0.1/24"s, "fd99::1::2"s, "fe80::1%eth0"s, "fd99::g"s,
	      "[fd99::1]"s, "10.99.0.1\0junk"s, "localhost"s, std::string(100, '1')})
		CHECK_MESSAGE(!parse_ip(bad), bad);
}

TEST_CASE("parse_prefix keeps host bits and defaults a bare address to a host prefix") {
	auto p = parse_prefix("10.99.0.1/24");
	REQUIRE(p);
	CHECK(p->len == 24);
	CHECK(p->addr == *parse_ip("10.99.0.1"));
	CHECK(p->network() == *parse_prefix("10.99.0.0/24"));
	CHECK(parse_prefix("10.99.0.1")->len == 32);
	CHECK(parse_prefix("fd99::1")->len == 128);
	CHECK(parse_prefix("::/0")->len == 0);
	CHECK(parse_prefix("0.0.0.0/0")->len == 0);
	CHECK(parse_prefix("fd99::/128")->len == 128);
}

TEST_CASE("parse_prefix rejects lengths past the family maximum and malformed lengths") {
	for (std::string bad :
	     {"10.0.0.0/33"s, "fd99::/129"s, "10.0.0.0/"s, "10.0.0.0/-1"s, "10.0.0.0/+8"s, "10.0.0.0/08"s,
	      "10.0.0.0/8 "s, "10.0.0.0/8/8"s, "10.0.0.0/1000"s, "/8"s, "10.0.0.0/8x"s, "10.0.0.0/0x8"s})
		CHECK_MESSAGE(!parse_prefix(bad), bad);
}

TEST_CASE("parse_endpoint reads IPv4 and bracketed IPv6 with ports") {
	auto e = parse_endpoint("10.201.0.2:4500");
	REQUIRE(e);
	CHECK(e->addr == *parse_ip("10.201.0.2"));
	CHECK(e->port == 4500);
	auto v6 = parse_endpoint("[2001:db8::7]:65535");
	REQUIRE(v6);
	CHECK(v6->addr == *parse_ip("2001:db8::7"));
	CHECK(v6->port == 65535);
	CHECK(parse_endpoint("10.0.0.1:1")->port == 1);
}

TEST_CASE("parse_endpoint uses the default port only when the port is absent") {
	CHECK(!parse_endpoint("10.201.0.2"));
	CHECK(parse_endpoint("10.201.0.2", 4500)->port == 4500);
	CHECK(parse_endpoint("[::]", 4500)->port == 4500);
	CHECK(parse_endpoint("10.201.0.2:4501", 4500)->port == 4501);
}

TEST_CASE("parse_endpoint rejects port 0, ports above 65535, bare IPv6 and trailing garbage") {
	for (std::string bad : {"10.0.0.1:0"s, "10.0.0.1:65536"s, "10.0.0.1:99999"s, "10.0.0.1:"s,
	                        "10.0.0.1:04500"s, "10.0.0.1:45x"s, "10.0.0.1:4500:1"s, "fd00::1:4500"s,
	                        "fd00::1"s, "[fd00::1]4500"s, "[fd00::1]:"s, "[fd00::1"s, "[10.0.0.1]:4500"s,
	                        "[fd00::1]:4500x"s, ":4500"s, ""s, "10.0.0.1:-1"s, "10.0.0.1: 4500"s})
		CHECK_MESSAGE(!parse_endpoint(bad, 4500), bad);
}

TEST_CASE("to_string formats addresses, prefixes and endpoints so they parse back") {
	CHECK(to_string(*parse_ip("10.99.0.1")) == "10.99.0.1");
	CHECK(to_string(*parse_ip("fd99:0::1")) == "fd99::1");
	CHECK(to_string(*parse_prefix("192.168.50.0/24")) == "192.168.50.0/24");
	CHECK(to_string(*parse_endpoint("10.201.0.2:4500")) == "10.201.0.2:4500");
	CHECK(to_string(*parse_endpoint("[::1]:4500")) == "[::1]:4500");
	for (std::string text : {"[2001:db8::7]:4500"s, "0.0.0.0:1"s})
		CHECK(to_string(*parse_endpoint(text)) == text);
}

TEST_CASE("masked clears every bit past the prefix length, also inside a byte") {
	auto a = *parse_ip("10.99.255.255");
	CHECK(a.masked(32) == a);
	CHECK(a.masked(24) == *parse_ip("10.99.255.0"));
	CHECK(a.masked(20) == *parse_ip("10.99.240.0"));
	CHECK(a.masked(0) == *parse_ip("0.0.0.0"));
	CHECK(a.masked(99) == a);
	auto b = *parse_ip("fd99:ffff::ffff");
	CHECK(b.masked(20) == *parse_ip("fd99:f000::"));
	CHECK(b.masked(128) == b);
}

TEST_CASE("same_prefix compares the leading bits and never matches across families") {
	auto a = *parse_ip("10.99.0.1");
	CHECK(a.same_prefix(*parse_ip("10.99.0.200"), 24));
	CHECK(!a.same_prefix(*parse_ip("10.99.1.1"), 24));
	CHECK(a.same_prefix(*parse_ip("10.99.1.1"), 23));
	CHECK(a.same_prefix(*parse_ip("200.1.1.1"), 0));
	CHECK(!a.same_prefix(*parse_ip("::"), 0));
}

TEST_CASE("contains and overlaps follow prefix containment") {
	auto net = *parse_prefix("192.168.50.0/24");
	CHECK(net.contains(*parse_ip("192.168.50.77")));
	CHECK(!net.contains(*parse_ip("192.168.51.1")));
	CHECK(net.overlaps(*parse_prefix("192.168.50.128/25")));
	CHECK(parse_prefix("192.168.50.128/25")->overlaps(net));
	CHECK(net.overlaps(*parse_prefix("0.0.0.0/0")));
	CHECK(!net.overlaps(*parse_prefix("192.168.51.0/24")));
	CHECK(!net.overlaps(*parse_prefix("::/0")));
	CHECK(parse_prefix("fd99::/64")->overlaps(*parse_prefix("fd99::3/128")));
}

TEST_CASE("is_unspecified is true only for all-zero addresses") {
	CHECK(parse_ip("0.0.0.0")->is_unspecified());
	CHECK(parse_ip("::")->is_unspecified());
	CHECK(!parse_ip("0.0.0.1")->is_unspecified());
	CHECK(!parse_ip("::1")->is_unspecified());
	CHECK(IpAddress::v4(0).is_unspecified());
}
