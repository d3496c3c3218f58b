// [redirect]: a gateway's IKE Redirect policy in the config, its defaults,
// every error it can make, and what a reload sees of a change to it.
#include "conf/diff.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

#include <doctest/doctest.h>

namespace esptun::conf {
namespace {

using test::Lines;

/// An IKE gateway with one road warrior and a [redirect] table from line 9.
Lines redirect_lines() {
	return Lines{{
	    "[tunnel]",                                                     // 1
	    "listen = \"0.0.0.0:4500\"",                                    // 2
	    "address_pool = [\"10.77.0.0/24\"]",                            // 3
	    "",                                                             // 4
	    "[[peer]]",                                                     // 5
	    "name = \"alice\"",                                             // 6
	    "psk = \"alice-pre-shared-key-0123456789\"",                    // 7
	    "",                                                             // 8
	    "[redirect]",                                                   // 9
	    "to = [\"192.0.2.2\", \"2001:DB8:0::2\", \"gw3.example.net\"]", // 10
	    "when = \"all\"",                                               // 11
	}};
}

Config parse(const Lines& lines, Role role = Role::gateway) {
	return parse_config(lines.text(), "test.toml", role);
}

using Names = std::vector<std::string>;

TEST_CASE("[redirect] parses every key; addresses are kept in their one written form") {
	Lines lines = redirect_lines();
	lines.insert_after(11, "capacity = 5000")
	    .insert_after(12, "share = 25")
	    .insert_after(13, "move_rate = 7");
	const RedirectConfig r = parse(lines).redirect;
	CHECK(r.when == RedirectWhen::all);
	CHECK(r.to == Names{"192.0.2.2", "2001:db8::2", "gw3.example.net"});
	CHECK(r.capacity == 5000);
	CHECK(r.share == 25);
	CHECK(r.move_rate == 7);
}

TEST_CASE("without [redirect] nobody is redirected; move_rate defaults to 100 a second") {
	Lines lines = redirect_lines();
	lines.erase(8, 11);
	const RedirectConfig r = parse(lines).redirect;
	CHECK(r.when == RedirectWhen::never);
	CHECK(r.to.empty());
	CHECK(r.move_rate == kDefaultRedirectMoveRate);
	CHECK(r == RedirectConfig{});

	// A table with only `to` is ready but sends nobody: when defaults to never.
	const RedirectConfig ready = parse(redirect_lines().erase(11, 11)).redirect;
	CHECK(ready.when == RedirectWhen::never);
	CHECK(ready.to.size() == 3);
	CHECK(ready.move_rate == 100);
	// never needs no gateways at all.
	CHECK(parse(redirect_lines().set(10, "when = \"never\"").erase(11, 11)).redirect.to.empty());
}

TEST_CASE("when capacity and share parse with their numbers, and redirect_when_name() spells each") {
	const RedirectConfig cap =
	    parse(redirect_lines().set(11, "when = \"capacity\"").insert_after(11, "capacity = 1")).redirect;
	CHECK(cap.when == RedirectWhen::capacity);
	CHECK(cap.capacity == 1);
	const RedirectConfig share =
	    parse(redirect_lines().set(11, "when = \"share\"").insert_after(11, "share = 100")).redirect;
	CHECK(share.when == RedirectWhen::share);
	CHECK(share.share == 100);
	CHECK(parse(redirect_lines().insert_after(11, "capacity = 10000000")).redirect.capacity == 10000000);
	CHECK(parse(redirect_lines().insert_after(11, "move_rate = 100000")).redirect.move_rate == 100000);
	for (RedirectWhen w :
	     {RedirectWhen::never, RedirectWhen::capacity, RedirectWhen::share, RedirectWhen::all})
		CHECK(parse(redirect_lines()
		                .set(11, "when = \"" + std::string(redirect_when_name(w)) + "\"")
		                .insert_after(11, "capacity = 3")
		                .insert_after(12, "share = 3"))
		          .redirect.when == w);
}

TEST_CASE("a `to` entry that is no address or DNS name is named with the forms that work") {
	for (const char* bad : {"192.0.2.300", "192.0.2.2:500", "gw_2.example", "10.0.0.0/24", "",
	                        ".gw.example", "-gw.example", "gw..example"}) {
		INFO(bad);
		CHECK_CONFIG_ERROR(
		    redirect_lines().set(10, std::string("to = [\"") + bad + "\"]"), Role::gateway, 10,
		    "to entry '" + std::string(bad) + "' is neither an IP address nor a DNS name");
	}
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"0.0.0.0\"]"), Role::gateway, 10,
	                   "unspecified address");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"::\"]"), Role::gateway, 10,
	                   "unspecified address");
	// Each entry on its own line: the error names that line.
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"192.0.2.2\",").insert_after(10, "  \"gw 2\"]"),
	                   Role::gateway, 11, "'gw 2'");
}

TEST_CASE("`to` must be a list of strings, each gateway once, at most 16") {
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = \"192.0.2.2\""), Role::gateway, 10,
	                   "'to' in [redirect] must be an array, not a string; write a list in brackets, "
	                   "e.g. to = [\"192.0.2.2\"");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [4]"), Role::gateway, 10, "must be a string");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"192.0.2.2\", \"192.0.2.2\"]"), Role::gateway, 10,
	                   "names '192.0.2.2' a second time");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"2001:db8::2\", \"2001:DB8:0:0::2\"]"),
	                   Role::gateway, 10, "names '2001:db8::2' a second time");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = [\"gw.Example.net\", \"GW.example.NET\"]"),
	                   Role::gateway, 10, "names 'gw.Example.net' a second time");

	std::string sixteen = "to = [";
	for (int i = 1; i <= 16; i++)
		sixteen += (i > 1 ? ", \"192.0.2." : "\"192.0.2.") + std::to_string(i) + "\"";
	CHECK(parse(redirect_lines().set(10, sixteen + "]")).redirect.to.size() == kMaxRedirectTargets);
	CHECK_CONFIG_ERROR(redirect_lines().set(10, sixteen + ", \"192.0.2.17\"]"), Role::gateway, 10,
	                   "more than 16 gateways");
}

TEST_CASE("a `when` that sends clients needs somewhere to send them") {
	CHECK_CONFIG_ERROR(redirect_lines().set(10, "to = []"), Role::gateway, 10,
	                   "when = \"all\" needs the gateways to send clients to; add e.g. to = [");
	CHECK_CONFIG_ERROR(redirect_lines().set(10, ""), Role::gateway, 11,
	                   "when = \"all\" needs the gateways");
	CHECK_CONFIG_ERROR(
	    redirect_lines().set(10, "").set(11, "when = \"share\"").insert_after(11, "share = 5"),
	    Role::gateway, 11, "when = \"share\" needs the gateways");
}

TEST_CASE("when capacity needs capacity and when share needs share") {
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = \"capacity\""), Role::gateway, 11,
	                   "when = \"capacity\" needs capacity");
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = \"capacity\"").insert_after(11, "share = 5"),
	                   Role::gateway, 11, "add e.g. capacity = 5000");
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = \"share\"").insert_after(11, "capacity = 5"),
	                   Role::gateway, 11, "when = \"share\" needs share");
}

TEST_CASE("capacity, share and move_rate are range checked") {
	struct Case {
		const char* line;
		const char* hint;
	};
	for (const Case& c : {
	         Case{"capacity = 0", "capacity 0 is out of range; use 1 up to 10000000"},
	         Case{"capacity = 10000001", "capacity 10000001 is out of range"},
	         Case{"capacity = -5", "capacity -5 is out of range"},
	         Case{"share = 0", "share 0 is out of range; use 1 up to 100"},
	         Case{"share = 101", "share 101 is out of range"},
	         Case{"move_rate = 0", "move_rate 0 is out of range; use 1 up to 100000"},
	         Case{"move_rate = 100001", "move_rate 100001 is out of range"},
	         Case{"capacity = \"5000\"", "'capacity' in [redirect] must be an integer, not a string"},
	         Case{"move_rate = 1.5", "'move_rate' in [redirect] must be an integer"},
	     }) {
		INFO(c.line);
		CHECK_CONFIG_ERROR(redirect_lines().insert_after(11, c.line), Role::gateway, 12, c.hint);
	}
}

TEST_CASE("unknown keys and `when` values in [redirect] are refused with what is known") {
	CHECK_CONFIG_ERROR(redirect_lines().insert_after(11, "movee_rate = 5"), Role::gateway, 12,
	                   "unknown key 'movee_rate' in [redirect]; did you mean 'move_rate'?");
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = \"sometimes\""), Role::gateway, 11,
	                   "when 'sometimes' is unknown; use \"never\" (the default), \"capacity\"");
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = \"ALL\""), Role::gateway, 11,
	                   "when 'ALL' is unknown");
	CHECK_CONFIG_ERROR(redirect_lines().set(11, "when = true"), Role::gateway, 11, "must be a string");
	CHECK_CONFIG_ERROR(redirect_lines().erase(9, 11).insert_after(0, "redirect = \"all\""), Role::gateway,
	                   1, "'redirect' in the top level must be a table");
}

TEST_CASE("[redirect] is refused in a client config and on a gateway with no IKE peer") {
	const Lines client{{
	    "[[peer]]",                                  // 1
	    "name = \"gw\"",                             // 2
	    "endpoint = \"198.51.100.7\"",               // 3
	    "allowed_ips = [\"0.0.0.0/0\"]",             // 4
	    "psk = \"alice-pre-shared-key-0123456789\"", // 5
	    "",                                          // 6
	    "[redirect]",                                // 7
	    "when = \"all\"",                            // 8
	}};
	CHECK_CONFIG_ERROR(client, Role::client, 7, "[redirect] is for a gateway");
	CHECK(parse(Lines(client).erase(6, 8), Role::client).redirect == RedirectConfig{});

	Lines static_gw = test::gateway_lines();
	static_gw.lines.insert(static_gw.lines.end(),
	                       {"", "[redirect]", "to = [\"192.0.2.2\"]", "when = \"all\""});
	CHECK_CONFIG_ERROR(static_gw, Role::gateway, 36,
	                   "no peer here is keyed by IKEv2, so there is nobody to redirect");
	// Even a [redirect] that sends nobody: it can only be a mistake there.
	static_gw.lines.pop_back();
	CHECK_CONFIG_ERROR(static_gw, Role::gateway, 36, "nobody to redirect");
}

TEST_CASE("a reload sees a change of [redirect] alone as its own, needing no restart") {
	const Config running = parse(redirect_lines());
	ConfigDiff d = diff_configs(running, parse(redirect_lines()));
	CHECK_FALSE(d.redirect_changed);
	CHECK_FALSE(d.anything());

	// Another spelling of the same address, comments, another order of keys: the same policy.
	d = diff_configs(running,
	                 parse(redirect_lines()
	                           .set(10, "when = \"all\"")
	                           .set(11, "to = [\"192.0.2.2\", \"2001:db8::0:2\", \"gw3.example.net\"]")
	                           .insert_after(8, "# maintenance")));
	CHECK_FALSE(d.redirect_changed);

	for (const Lines& next :
	     {redirect_lines().set(11, "when = \"never\""),
	      redirect_lines().insert_after(11, "move_rate = 5"),
	      redirect_lines().set(10, "to = [\"gw3.example.net\", \"192.0.2.2\", \"2001:DB8:0::2\"]"),
	      redirect_lines().erase(8, 11)}) {
		d = diff_configs(running, parse(next));
		INFO(next.text());
		CHECK(d.redirect_changed);
		CHECK(d.restart_only.empty());
		CHECK_FALSE(d.peers_differ());
		CHECK(d.anything());
		CHECK(d.unchanged == Names{"alice"});
	}
}

} // namespace
} // namespace esptun::conf
