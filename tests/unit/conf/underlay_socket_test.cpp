// [tunnel] udp_gso and socket_buffer: the underlay socket's knobs.
#include "conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

TunnelConfig tunnel_with(const std::string& line) {
	return parse_config(gateway_lines().insert_after(6, line).text(), "test.toml", Role::gateway).tunnel;
}

} // namespace

TEST_CASE("udp_gso defaults to on and can be switched off") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.udp_gso);
	CHECK_FALSE(tunnel_with("udp_gso = false").udp_gso);
	CHECK(tunnel_with("udp_gso = true").udp_gso);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "udp_gso = 1"), Role::gateway, 7, "must be");
}

TEST_CASE("socket_buffer defaults to 4 MiB and takes 64 KiB up to 1 GiB") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.socket_buffer ==
	      4u << 20);
	CHECK(tunnel_with("socket_buffer = 65536").socket_buffer == 65536);
	CHECK(tunnel_with("socket_buffer = 33554432").socket_buffer == 32u << 20);
	CHECK(tunnel_with("socket_buffer = 1073741824").socket_buffer == 1u << 30);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = 65535"), Role::gateway, 7,
	                   "use 65536 (64 KiB) up to 1073741824 (1 GiB) bytes");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = 1073741825"), Role::gateway, 7,
	                   "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = \"4M\""), Role::gateway, 7,
	                   "must be an integer");
}
