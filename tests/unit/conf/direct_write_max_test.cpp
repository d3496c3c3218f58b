// [tunnel] direct_write_max: the vhost TX ring's direct-write threshold.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

TEST_CASE("direct_write_max defaults to 4 and accepts 0 (always the ring) up to 256") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.direct_write_max ==
	      kDefaultDirectWriteMax);
	CHECK(kDefaultDirectWriteMax == 4);
	for (uint32_t n : {0u, 1u, 4u, 32u, 256u}) {
		Lines lines = gateway_lines().insert_after(6, "direct_write_max = " + std::to_string(n));
		CHECK(parse_config(lines.text(), "test.toml", Role::gateway).tunnel.direct_write_max == n);
	}
}

TEST_CASE("direct_write_max out of range or of the wrong type is refused with its line") {
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "direct_write_max = 257"), Role::gateway, 7,
	                   "use 0 (always the vhost ring) up to 256");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "direct_write_max = -1"), Role::gateway, 7,
	                   "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "direct_write_max = \"4\""), Role::gateway, 7,
	                   "must be an integer");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "direct_write_maxx = 4"), Role::gateway, 7,
	                   "did you mean 'direct_write_max'?");
}
