// [tunnel] drop_privileges and user: on and "nobody" unless set.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

TEST_CASE("drop_privileges defaults to on as user nobody; both can be set") {
	const Config def = parse_config(gateway_lines().text(), "test.toml", Role::gateway);
	CHECK(def.tunnel.drop_privileges);
	CHECK(def.tunnel.user == "nobody");
	Lines lines =
	    gateway_lines().insert_after(6, "drop_privileges = false").insert_after(6, "user = \"esptun\"");
	const Config set = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK_FALSE(set.tunnel.drop_privileges);
	CHECK(set.tunnel.user == "esptun");
}

TEST_CASE("drop_privileges and user: wrong types and names are refused with their line") {
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "drop_privileges = \"yes\""), Role::gateway, 7,
	                   "must be");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "user = \"\""), Role::gateway, 7,
	                   "is not a user name");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "user = \"a:b\""), Role::gateway, 7,
	                   "is not a user name");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "user = \"../root\""), Role::gateway, 7,
	                   "is not a user name");
}
