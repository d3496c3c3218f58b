// [tunnel] crypto_impl: which implementation the CBC-HMAC suites use.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

TEST_CASE("crypto_impl defaults to auto and accepts auto, stitched and two-pass") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.crypto_impl ==
	      crypto::CryptoImpl::automatic);
	struct Case {
		const char* text;
		crypto::CryptoImpl want;
	};
	for (Case c :
	     {Case{"auto", crypto::CryptoImpl::automatic}, Case{"stitched", crypto::CryptoImpl::stitched},
	      Case{"two-pass", crypto::CryptoImpl::two_pass}}) {
		Lines lines =
		    gateway_lines().insert_after(6, std::string("crypto_impl = \"") + c.text + "\"");
		CHECK(parse_config(lines.text(), "test.toml", Role::gateway).tunnel.crypto_impl == c.want);
	}
}

TEST_CASE("crypto_impl unknown or of the wrong type is refused with its line and the choices") {
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "crypto_impl = \"fast\""), Role::gateway, 7,
	                   "use \"auto\", \"stitched\" or \"two-pass\"");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "crypto_impl = 1"), Role::gateway, 7,
	                   "must be a string");
}
