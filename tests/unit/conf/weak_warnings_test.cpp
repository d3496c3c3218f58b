// conf::weak_peer_warnings(): the lines the gateway logs at start and reload (and check prints) for
// IKE peers that use weak algorithms by their allow_weak opt-in.
#include "conf/config.hpp"

#include <doctest/doctest.h>

using namespace esptun;

namespace {

std::string gateway(const std::string& peer_b) {
	return R"([tunnel]
listen = "0.0.0.0:4500"

[[peer]]
name = "strong"
allowed_ips = ["10.77.0.10/32"]
psk = "alice-pre-shared-key-0123456789"
ike_proposals = ["aes256-sha384-ecp384"]

[[peer]]
name = "old-box"
allowed_ips = ["10.77.0.11/32"]
psk = "bob-pre-shared-key-0123456789ab"
)" + peer_b;
}

} // namespace

TEST_CASE("a warning per peer with weak algorithms, naming the peer and each algorithm once") {
	const conf::Config weak = conf::parse_config(
	    gateway("allow_weak = true\nike_proposals = [\"aes128-sha1-modp1024\", "
	            "\"aes256-sha1-modp2048\"]\nesp_proposals = [\"aes128-sha1-modp1024\"]\n"),
	    "t.toml", conf::Role::gateway);
	const std::vector<std::string> lines = conf::weak_peer_warnings(weak);
	REQUIRE(lines.size() == 1);
	CAPTURE(lines[0]);
	CHECK(lines[0].find("peer old-box uses weak algorithms (sha1, prfsha1, modp1024) by its "
	                    "allow_weak = true") == 0);

	// The opt-in alone, with nothing weak named, warns of nothing.
	const conf::Config unused =
	    conf::parse_config(gateway("allow_weak = true\n"), "t.toml", conf::Role::gateway);
	CHECK(conf::weak_peer_warnings(unused).empty());
	const conf::Config none = conf::parse_config(gateway(""), "t.toml", conf::Role::gateway);
	CHECK(conf::weak_peer_warnings(none).empty());
}
