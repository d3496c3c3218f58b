// The TOML-free checks in conf/checks.cpp: typo suggestions and hex keys.
#include "conf/checks.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::conf;

TEST_CASE("edit_distance counts inserts, deletes, substitutions and neighbour swaps") {
	CHECK(edit_distance("", "") == 0);
	CHECK(edit_distance("spi", "spi") == 0);
	CHECK(edit_distance("alowed_ips", "allowed_ips") == 1);
	CHECK(edit_distance("allowde_ips", "allowed_ips") == 1);
	CHECK(edit_distance("mtu", "mtux") == 1);
	CHECK(edit_distance("key", "") == 3);
	CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("closest_match suggests only near misses") {
	constexpr std::string_view keys[] = {"name", "endpoint", "allowed_ips", "cipher"};
	CHECK(closest_match("alowed_ips", keys) == "allowed_ips");
	CHECK(closest_match("endpiont", keys) == "endpoint");
	CHECK(closest_match("Name", keys) == "name");
	CHECK(closest_match("colour", keys).empty());
	CHECK(closest_match(std::string(1000, 'a'), keys).empty());
}

TEST_CASE("decode_hex_key decodes hex with or without 0x and explains malformed input") {
	SecretBytes out;
	CHECK(decode_hex_key("0x00ff10Ab", out).empty());
	CHECK(out == std::vector<uint8_t>{0x00, 0xff, 0x10, 0xab});
	CHECK(decode_hex_key("00ff10ab", out).empty());
	CHECK(out == std::vector<uint8_t>{0x00, 0xff, 0x10, 0xab});
	CHECK(decode_hex_key("", out).find("empty") != std::string::npos);
	CHECK(decode_hex_key("0g", out).find("position 2") != std::string::npos);
	CHECK(decode_hex_key("0x0", out).find("odd number") != std::string::npos);
	CHECK(decode_hex_key("0x0g", out).find("position 4") != std::string::npos);
	CHECK(decode_hex_key("0x 00", out).find("not a hex digit") != std::string::npos);
	CHECK(out.empty());
}

TEST_CASE("check_spi accepts 256..0xffffffff only") {
	CHECK(check_spi(256).empty());
	CHECK(check_spi(0xffffffff).empty());
	CHECK(!check_spi(0).empty());
	CHECK(!check_spi(255).empty());
	CHECK(!check_spi(-1).empty());
	CHECK(!check_spi(0x100000000).empty());
}

TEST_CASE("check_interface_name follows the kernel's dev_valid_name and IFNAMSIZ") {
	CHECK(check_interface_name("esp0").empty());
	CHECK(check_interface_name("esp-site_b.12345").size() > 0); // 16 characters
	CHECK(check_interface_name("esp-site_b.1234").empty());     // 15 characters
	for (const char* bad : {"", ".", "..", "a/b", "a:b", "esp%d", "a b", "a\tb"})
		CHECK_MESSAGE(!check_interface_name(bad).empty(), bad);
}

TEST_CASE("check_interface_address refuses networks, broadcasts and special addresses") {
	CHECK(check_interface_address(*parse_prefix("10.99.0.1/24")).empty());
	CHECK(check_interface_address(*parse_prefix("10.99.0.1/32")).empty());
	CHECK(check_interface_address(*parse_prefix("10.99.0.0/31")).empty()); // RFC 3021 point-to-point
	CHECK(check_interface_address(*parse_prefix("fd99::1/64")).empty());
	CHECK(check_interface_address(*parse_prefix("fd99::/127")).empty());
	for (const char* bad : {"10.99.0.0/24", "10.99.0.255/24", "10.99.0.1/0", "0.0.0.0/8", "127.0.0.1/8",
	                        "224.0.0.1/24", "fd99::/64", "::1/128", "ff02::1/64", "::/0"})
		CHECK_MESSAGE(!check_interface_address(*parse_prefix(bad)).empty(), bad);
}
