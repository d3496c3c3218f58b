// diff_configs(): what a reload of a changed config would do.
#include "conf/diff.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

#include <doctest/doctest.h>

namespace esptun::conf {
namespace {

using test::gateway_lines;

Config parse(const test::Lines& lines) { return parse_config(lines.text(), "gw.toml", Role::gateway); }

using Names = std::vector<std::string>;

TEST_CASE("the same config again: nothing to do, every peer unchanged") {
	const ConfigDiff d = diff_configs(parse(gateway_lines()), parse(gateway_lines()));
	CHECK(d.restart_only.empty());
	CHECK_FALSE(d.peers_differ());
	CHECK_FALSE(d.redirect_changed);
	CHECK_FALSE(d.anything());
	CHECK(d.unchanged == Names{"site-b", "road-1"});
}

TEST_CASE("a peer moved further down (comment lines in front) is unchanged") {
	auto lines = gateway_lines();
	lines.insert_after(24, "# road warriors").insert_after(24, "");
	const ConfigDiff d = diff_configs(parse(gateway_lines()), parse(lines));
	CHECK_FALSE(d.peers_differ());
}

TEST_CASE("peers added, removed and changed are told apart by name") {
	auto next = gateway_lines();
	next.set(26, "name = \"road-2\"");                                     // road-1 removed, road-2 added
	next.set(12, "allowed_ips = [\"10.99.0.2/32\", \"192.168.51.0/24\"]"); // site-b changed
	const ConfigDiff d = diff_configs(parse(gateway_lines()), parse(next));
	CHECK(d.restart_only.empty());
	CHECK(d.added == Names{"road-2"});
	CHECK(d.removed == Names{"road-1"});
	CHECK(d.changed == Names{"site-b"});
	CHECK(d.unchanged.empty());
}

TEST_CASE("a new key alone makes a changed peer") {
	auto next = gateway_lines();
	next.set(31, "key = \"" +
	                 test::hex_key(crypto::cipher_spec(crypto::Cipher::aes128_gcm).enc_key_len, 9) +
	                 "\"");
	const ConfigDiff d = diff_configs(parse(gateway_lines()), parse(next));
	CHECK(d.changed == Names{"road-1"});
	CHECK(d.unchanged == Names{"site-b"});
}

TEST_CASE("[tunnel] settings are named as needing a restart") {
	auto next = gateway_lines();
	next.set(2, "interface = \"esp9\"")
	    .set(4, "listen = \"0.0.0.0:4501\"")
	    .insert_after(7, "workers = 2");
	const ConfigDiff d = diff_configs(parse(gateway_lines()), parse(next));
	CHECK(d.restart_only == Names{"[tunnel] interface", "[tunnel] listen", "[tunnel] workers"});
	CHECK_FALSE(d.peers_differ());
}

TEST_CASE("a template whose users alone changed keeps its users: users_changed, not changed") {
	Config running = parse(gateway_lines());
	PeerConfig& t = running.peers.back(); // its static keys do not matter to diff_configs()
	t.ike.emplace();
	t.ike->remote_pattern = "*@example.com";
	auto users = std::make_shared<ike::Users>();
	users->emplace("carol", ike::User{{}, {*parse_ip("10.9.9.50")}, {}});
	t.ike->users = users;

	Config next = running;
	auto more = std::make_shared<ike::Users>(*users);
	more->emplace("dave", ike::User{});
	next.peers.back().ike->users = more;
	ConfigDiff d = diff_configs(running, next);
	CHECK(d.users_changed == Names{t.name});
	CHECK(d.changed.empty());
	CHECK(d.peers_differ());

	// Anything else changed with them: the template is re-established.
	next.peers.back().ike->dpd_interval += 5;
	d = diff_configs(running, next);
	CHECK(d.changed == Names{t.name});
	CHECK(d.users_changed.empty());

	// An ordinary peer's users (EAP-MSCHAPv2 passwords) are no template's: changed.
	Config plain = parse(gateway_lines());
	plain.peers.back().ike.emplace();
	Config plain_next = plain;
	plain.peers.back().ike->users = users;
	plain_next.peers.back().ike->users = more;
	d = diff_configs(plain, plain_next);
	CHECK(d.changed == Names{t.name});
	CHECK(d.users_changed.empty());
}

} // namespace
} // namespace esptun::conf
