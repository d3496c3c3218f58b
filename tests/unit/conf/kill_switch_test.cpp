// [tunnel] kill_switch: a route_all client's leak protection; refused anywhere else.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

TEST_CASE("kill_switch is off by default and taken by a route_all client") {
	CHECK_FALSE(parse_config(client_lines().text(), "test.toml", Role::client).tunnel.kill_switch);
	Lines on = client_lines().insert_after(4, "kill_switch = true");
	CHECK(parse_config(on.text(), "test.toml", Role::client).tunnel.kill_switch);
	Lines off = client_lines().insert_after(4, "kill_switch = false");
	CHECK_FALSE(parse_config(off.text(), "test.toml", Role::client).tunnel.kill_switch);
}

TEST_CASE("kill_switch without route_all, on a gateway, or not a boolean is refused with its line") {
	CHECK_CONFIG_ERROR(client_lines().set(4, "route_all = false").insert_after(4, "kill_switch = true"),
	                   Role::client, 5,
	                   "kill_switch = true blocks all traffic outside the tunnel, which "
	                   "needs route_all = true");
	CHECK_CONFIG_ERROR(client_lines().set(4, "kill_switch = true"), Role::client, 4,
	                   "needs route_all = true");
	// Off without route_all is fine.
	CHECK(error_of(client_lines().set(4, "kill_switch = false").text(), Role::client) == "(no error)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "kill_switch = true"), Role::gateway, 7,
	                   "kill_switch is only for a client with route_all");
	CHECK_CONFIG_ERROR(client_lines().insert_after(4, "kill_switch = 1"), Role::client, 5, "boolean");
}
