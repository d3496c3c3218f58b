// ike_fragment_size (RFC 7383 fragments): a [tunnel] default for every IKE
// peer, a peer's own value over it, and the range.
#include "conf/config.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace esptun;
using namespace esptun::conf;

namespace {

/// Two IKE peers; @tunnel and @bob are extra lines of [tunnel] and of bob's [[peer]].
std::string gateway(const std::string& tunnel, const std::string& bob) {
	return "[tunnel]\nlisten = \"0.0.0.0:4500\"\nlocal_id = \"gw.example\"\n" + tunnel +
	       "\n\n[[peer]]\nname = \"alice\"\nallowed_ips = [\"10.77.0.10/32\"]\n"
	       "psk = \"alice-pre-shared-key-0123456789\"\n\n"
	       "[[peer]]\nname = \"bob\"\nallowed_ips = [\"10.77.0.11/32\"]\n"
	       "psk = \"bob-pre-shared-key-0123456789ab\"\n" +
	       bob + "\n";
}

std::string error_of(const std::string& text) {
	try {
		parse_config(text, "t.toml", Role::gateway);
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "";
}

} // namespace

TEST_CASE("ike_fragment_size: 1280 unless [tunnel] or the peer says otherwise") {
	Config def = parse_config(gateway("", ""), "t.toml", Role::gateway);
	CHECK(def.tunnel.ike_fragment_size == 1280);
	CHECK(def.peers.at(0).ike->fragment_size == 1280);
	CHECK(def.peers.at(1).ike->fragment_size == 1280);

	Config set = parse_config(gateway("ike_fragment_size = 1400", "ike_fragment_size = 576"), "t.toml",
	                          Role::gateway);
	CHECK(set.tunnel.ike_fragment_size == 1400);
	CHECK(set.peers.at(0).ike->fragment_size == 1400); // the [tunnel] default
	CHECK(set.peers.at(1).ike->fragment_size == 576);  // its own
}

TEST_CASE("ike_fragment_size out of range names the line and the range") {
	CHECK(error_of(gateway("ike_fragment_size = 575", ""))
	          .find("t.toml:4: ike_fragment_size 575 is out of "
	                "range; use bytes from 576 to 65535") != std::string::npos);
	CHECK(error_of(gateway("", "ike_fragment_size = 65536"))
	          .find("ike_fragment_size 65536 is out of range") != std::string::npos);
	CHECK(error_of(gateway("", "ike_fragment_size = \"big\"")).find("ike_fragment_size") !=
	      std::string::npos);
}

TEST_CASE("a statically keyed peer has no ike_fragment_size") {
	const std::string text = "[tunnel]\nlisten = \"0.0.0.0:4500\"\n\n[[peer]]\nname = \"s\"\n"
	                         "allowed_ips = [\"10.1.0.0/24\"]\nike_fragment_size = 600\n";
	CHECK(error_of(text).find("ike_fragment_size") != std::string::npos);
}
