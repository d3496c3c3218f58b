// Template peers (a gateway [[peer]] whose remote_id has '*') and the users
// file's per-user data: what a template takes with each auth kind, the
// addresses and networks of its users, every refusal, the overlap checks
// across users, peers and the gateway's own addresses, and reload diffs.
#include "conf/diff.hpp"
#include "ike/eap_mschapv2.hpp"
#include "tests/unit/conf/pki_files_test_util.hpp"

#include <chrono>

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;
using esptun::ike::test::Chain;
using esptun::ike::test::KeyKind;

namespace {

struct Files {
	TempDir dir;
	Chain chain{KeyKind::p256};
	Files() {
		write_pki(dir, chain);
		users("[[user]]\nname = \"carol\"\npassword = \"carol's password\"\n"
		      "addresses = [\"10.9.0.5\", \"fd09::5\"]\nallowed_ips = [\"192.168.60.0/24\"]\n\n"
		      "[[user]]\nname = \"dave\"\npassword = \"dave's password\"\n");
	}
	void users(const std::string& text, const char* name = "users.toml") const {
		dir.write(name, text, 0600);
	}
};

constexpr const char* kTunnel = "[tunnel]\n"
                                "listen = \"0.0.0.0:4500\"\n"
                                "addresses = [\"10.9.0.1/24\"]\n"
                                "local_id = \"gw.example.com\"\n"
                                "address_pool = [\"10.9.0.0/24\", \"fd09::/112\"]\n\n";

/// A template peer "users" with @auth; @extra is appended to its table.
std::string tmpl(const std::string& auth = "eap-mschapv2", const std::string& extra = "") {
	std::string peer = "[[peer]]\nname = \"users\"\nremote_id = \"*\"\nauth = \"" + auth +
	                   "\"\ncert_file = \"gw.pem\"\nprivate_key_file = \"gw.key\"\n";
	if (auth == "eap-mschapv2") peer += "users_file = \"users.toml\"\n";
	if (auth != "eap-mschapv2") peer += "ca_dir = \"ca\"\n";
	return std::string(kTunnel) + peer + extra;
}

constexpr const char* kSite = "\n[[peer]]\nname = \"site\"\nremote_id = \"site.example.com\"\n"
                              "psk = \"a-pre-shared-key-long-enough\"\n"
                              "allowed_ips = [\"192.168.50.0/24\"]\n";

Config load(const Files& f, const std::string& text) {
	return parse_config(text, "test.toml", Role::gateway, f.dir.path());
}

std::string error_in(const Files& f, const std::string& text, Role role = Role::gateway) {
	try {
		parse_config(text, "test.toml", role, f.dir.path());
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
	REQUIRE(s.find(from) != std::string::npos);
	s.replace(s.find(from), from.size(), to);
	return s;
}

#define CHECK_SAYS(err, says)                                                                                \
	do {                                                                                                 \
		const std::string e_ = (err);                                                                \
		INFO(e_);                                                                                    \
		CHECK(e_.find(says) != std::string::npos);                                                   \
	} while (0)

} // namespace

TEST_CASE("template config: an EAP-MSCHAPv2 template keeps its pattern and its users' data") {
	Files f;
	const Config c = load(f, tmpl());
	REQUIRE(c.peers.size() == 1);
	const IkePeerConfig& ike = *c.peers[0].ike;
	CHECK(ike.remote_pattern == "*");
	CHECK(ike.remote_id.empty());
	CHECK(c.peers[0].allowed_ips.empty());
	REQUIRE(ike.users);
	REQUIRE(ike.users->size() == 2);
	const ike::User& carol = ike.users->at("carol");
	CHECK(carol.nt_hash == ike::eap::nt_password_hash("carol's password"));
	CHECK(carol.addresses == std::vector<IpAddress>{*parse_ip("10.9.0.5"), *parse_ip("fd09::5")});
	CHECK(carol.allowed_ips == std::vector<IpPrefix>{*parse_prefix("192.168.60.0/24")});
	const ike::User& dave = ike.users->at("dave");
	CHECK(dave.addresses.empty());
	CHECK(dave.allowed_ips.empty());
}

TEST_CASE("template config: cert and EAP-TLS templates, with or without a users file") {
	Files f;
	for (const char* auth : {"cert", "eap-tls"}) {
		INFO(auth);
		const Config plain =
		    load(f, replace(tmpl(auth), "remote_id = \"*\"", "remote_id = \"*@example.com\""));
		CHECK(plain.peers[0].ike->remote_pattern == "*@example.com");
		CHECK_FALSE(plain.peers[0].ike->users);
		CHECK(plain.peers[0].ike->trust);
		// Users without passwords: addresses and networks only.
		f.users("[[user]]\nname = \"CN=carol, O=Example\"\naddresses = [\"10.9.0.7\"]\n"
		        "allowed_ips = [\"192.168.61.0/24\", \"fd61::/64\"]\n",
		        "certusers.toml");
		const Config c = load(f, tmpl(auth, "users_file = \"certusers.toml\"\n"));
		REQUIRE(c.peers[0].ike->users);
		const ike::User& u = c.peers[0].ike->users->at("CN=carol, O=Example");
		CHECK(u.nt_hash.empty());
		CHECK(u.addresses == std::vector<IpAddress>{*parse_ip("10.9.0.7")});
		CHECK(u.allowed_ips.size() == 2);
	}
}

TEST_CASE("template config: two templates and an exact peer coexist") {
	Files f;
	f.users("[[user]]\nname = \"eve\"\npassword = \"eve's password\"\naddresses = [\"10.9.0.9\"]\n",
	        "more.toml");
	const std::string second = "\n[[peer]]\nname = \"more\"\nremote_id = \"*.example.org\"\n"
	                           "auth = \"eap-mschapv2\"\ncert_file = \"gw.pem\"\n"
	                           "private_key_file = \"gw.key\"\nusers_file = \"more.toml\"\n";
	const Config c = load(f, tmpl() + second + kSite);
	REQUIRE(c.peers.size() == 3);
	CHECK(c.peers[0].ike->remote_pattern == "*");
	CHECK(c.peers[1].ike->remote_pattern == "*.example.org");
	CHECK(c.peers[2].ike->remote_pattern.empty());
	CHECK(c.peers[2].ike->remote_id == "site.example.com");
}

TEST_CASE("template config: each rule of a template is named") {
	Files f;
	struct Case {
		std::string text;
		Role role;
		const char* says;
	};
	const std::string client = "[tunnel]\nlocal_id = \"carol@example.com\"\n\n[[peer]]\n"
	                           "name = \"gw\"\nendpoint = \"192.0.2.1:4500\"\n"
	                           "allowed_ips = [\"0.0.0.0/0\"]\nremote_id = \"*.example.com\"\n"
	                           "auth = \"cert\"\ncert_file = \"gw.pem\"\n"
	                           "private_key_file = \"gw.key\"\nca_dir = \"ca\"\n";
	const std::string psk = std::string(kTunnel) + "[[peer]]\nname = \"users\"\nremote_id = \"*\"\n"
	                                               "psk = \"a-pre-shared-key-long-enough\"\n";
	const Case cases[] = {
	    {client, Role::client, "only a gateway has templates"},
	    {psk, Role::gateway, "every user would know the key and could pose as the gateway"},
	    {replace(psk, "psk = ", "auth = \"psk\"\npsk = "), Role::gateway,
	     "peer 'users' is a template (remote_id '*' has '*') with a pre-shared key"},
	    {tmpl("eap-mschapv2", "endpoint = \"192.0.2.9:4500\"\n"), Role::gateway,
	     "has an endpoint, but its users connect to the gateway"},
	    {tmpl("cert", "initiate = true\n"), Role::gateway, "remove initiate = true"},
	    {tmpl("eap-tls", "allowed_ips = [\"10.9.0.5/32\"]\n"), Role::gateway,
	     "a template has none of its own"},
	    {replace(tmpl(), "address_pool = [\"10.9.0.0/24\", \"fd09::/112\"]\n", ""), Role::gateway,
	     "[tunnel] has no address_pool"},
	    {replace(tmpl(), "remote_id = \"*\"", "remote_id = \"*" + std::string(255, 'a') + "\""),
	     Role::gateway, "remote_id of peer 'users' is longer than 255 bytes"},
	    {replace(tmpl(), "users_file = \"users.toml\"\n", ""), Role::gateway, "needs users_file"},
	    // users_file elsewhere: a cert or EAP-TLS peer that is not a template, a client.
	    {replace(tmpl("cert", "users_file = \"users.toml\"\n"), "remote_id = \"*\"",
	             "remote_id = \"carol@example.com\""),
	     Role::gateway, "'users_file' of peer 'users' is not used with auth = 'cert'"},
	    {replace(tmpl("eap-tls", "users_file = \"users.toml\"\n"), "remote_id = \"*\"",
	             "remote_id = \"carol@example.com\""),
	     Role::gateway, "'users_file' of peer 'users' is not used with auth = 'eap-tls' on a gateway"},
	    {replace(client, "\"*.example.com\"", "\"gw.example.com\"") + "users_file = \"users.toml\"\n",
	     Role::client, "'users_file' of peer 'gw' is not used with auth = 'cert'"},
	    // A template's passwords are only for EAP-MSCHAPv2.
	    {tmpl("eap-tls", "users_file = \"users.toml\"\n"), Role::gateway,
	     "only EAP-MSCHAPv2 users have passwords"},
	    {tmpl("cert", "users_file = \"users.toml\"\n"), Role::gateway,
	     "user 'carol' has a password, but peer 'users' has auth = 'cert'"},
	};
	for (const Case& c : cases) {
		INFO(std::string(c.says));
		CHECK_SAYS(error_in(f, c.text, c.role), c.says);
	}
}

TEST_CASE("template config: each bad user entry is named with its file and line") {
	Files f;
	struct Case {
		const char* text;
		const char* says;
	};
	const Case cases[] = {
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.5/32\"]\n",
	     "users.toml) line 4: addresses entry '10.9.0.5/32' of user 'carol' is not an IP address"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.5\", \"10.9.0.6\"]\n",
	     "user 'carol' has two IPv4 addresses"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = \"10.9.0.5\"\n",
	     "addresses of user 'carol' must be a list"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [5]\n", "must be a string"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.60.1/24\"]\n",
	     "has host bits set; did you mean '192.168.60.0/24'?"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"nonsense\"]\n",
	     "allowed_ips entry 'nonsense' of user 'carol' is not an address or prefix"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.0\"]\n",
	     "is the network address of [tunnel] address_pool entry '10.9.0.0/24'"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.255\"]\n",
	     "is the broadcast address of [tunnel] address_pool entry '10.9.0.0/24'"},
	    {"[[user]]\nname = \"\"\npassword = \"pw\"\n", "needs name = \"...\" (1 to 255 bytes)"},
	};
	for (const Case& c : cases) {
		f.users(c.text);
		INFO(std::string(c.says));
		CHECK_SAYS(error_in(f, tmpl()), c.says);
	}
	// A long name is refused; 255 bytes is fine.
	f.users("[[user]]\nname = \"" + std::string(256, 'n') + "\"\npassword = \"pw\"\n");
	CHECK_SAYS(error_in(f, tmpl()), "1 to 255 bytes");
	f.users("[[user]]\nname = \"" + std::string(255, 'n') + "\"\npassword = \"pw\"\n");
	CHECK(error_in(f, tmpl()) == "(no error)");
	// A fixed address outside every pool network is fine, and so is the
	// IPv6 pool's first address (no network address in IPv6 pools).
	f.users("[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.10.0.1\", \"fd09::\"]\n");
	CHECK(error_in(f, tmpl()) == "(no error)");
}

TEST_CASE("template config: per-user data needs a template") {
	Files f;
	const std::string exact = replace(tmpl(), "remote_id = \"*\"", "remote_id = \"carol@example.com\"");
	CHECK_SAYS(error_in(f, exact), "user 'carol' has addresses, but peer 'users' is not a template");
	f.users("[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.60.0/24\"]\n");
	CHECK_SAYS(error_in(f, exact), "user 'carol' has allowed_ips, but peer 'users' is not a template");
	f.users("[[user]]\nname = \"carol\"\npassword = \"pw\"\n");
	CHECK(error_in(f, exact) == "(no error)");
}

TEST_CASE("template config: users' addresses and networks overlap nothing else") {
	Files f;
	struct Case {
		const char* users;
		std::string extra; // after the template
		const char* says;
	};
	const std::string more_peer = "\n[[peer]]\nname = \"more\"\nremote_id = \"*.example.org\"\n"
	                              "auth = \"eap-mschapv2\"\ncert_file = \"gw.pem\"\n"
	                              "private_key_file = \"gw.key\"\nusers_file = \"more.toml\"\n";
	f.users("[[user]]\nname = \"eve\"\npassword = \"pw\"\naddresses = [\"10.9.0.5\"]\n", "more.toml");
	const Case cases[] = {
	    // Two users of one file.
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.60.0/24\"]\n"
	     "[[user]]\nname = \"dave\"\npassword = \"pw\"\nallowed_ips = [\"192.168.60.128/25\"]\n",
	     "",
	     "allowed_ips entry '192.168.60.128/25' of user 'dave' (users_file 'users.toml' line 8, peer "
	     "'users') overlaps allowed_ips entry '192.168.60.0/24' of user 'carol' (users_file "
	     "'users.toml' line 4, peer 'users')"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.5\"]\n"
	     "[[user]]\nname = \"dave\"\npassword = \"pw\"\naddresses = [\"10.9.0.5\"]\n",
	     "", "address '10.9.0.5' of user 'carol'"},
	    // One user's own address inside its own network.
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"192.168.60.7\"]\n"
	     "allowed_ips = [\"192.168.60.0/24\"]\n",
	     "", "address '192.168.60.7' of user 'carol' (users_file 'users.toml' line 4"},
	    // Users of two templates.
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"10.9.0.4/30\"]\n", more_peer,
	     "address '10.9.0.5' of user 'eve' (users_file 'more.toml' line 4, peer 'more')"},
	    // A static peer's allowed_ips, before and after the template.
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.50.64/26\"]\n", kSite,
	     "overlaps allowed_ips entry '192.168.50.0/24' of peer 'site' (line "},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.0.0/16\"]\n", kSite,
	     "allowed_ips entry '192.168.0.0/16' of user 'carol' (users_file 'users.toml' line 4, peer "
	     "'users') overlaps allowed_ips entry '192.168.50.0/24' of peer 'site'"},
	    // The gateway's own address.
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.1\"]\n", "",
	     "overlaps the gateway's own address '10.9.0.1' ([tunnel] addresses)"},
	    {"[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"10.0.0.0/8\"]\n", "",
	     "overlaps the gateway's own address '10.9.0.1'"},
	};
	for (const Case& c : cases) {
		f.users(c.users);
		INFO(std::string(c.says));
		const std::string err = error_in(f, tmpl() + c.extra);
		CHECK_SAYS(err, c.says);
		// The error names the users_file line of the config (line 13 or 21).
		CHECK((err.starts_with("test.toml:13: ") || err.starts_with("test.toml:21: ")));
	}
	// The same site placed before the template.
	f.users("[[user]]\nname = \"carol\"\npassword = \"pw\"\nallowed_ips = [\"192.168.50.0/24\"]\n");
	const std::string site_first = std::string(kTunnel) + kSite + "\n" + replace(tmpl(), kTunnel, "");
	CHECK_SAYS(error_in(f, site_first), "of user 'carol' (users_file 'users.toml' line 4, peer 'users') "
	                                    "overlaps allowed_ips entry '192.168.50.0/24' of peer 'site'");
	// Apart, everything loads: a static peer, two templates, the gateway.
	f.users("[[user]]\nname = \"carol\"\npassword = \"pw\"\naddresses = [\"10.9.0.6\"]\n"
	        "allowed_ips = [\"192.168.60.0/24\"]\n");
	CHECK(error_in(f, tmpl() + more_peer + kSite) == "(no error)");
}

TEST_CASE("template config: a changed pattern or changed user data changes the peer for a reload") {
	Files f;
	const Config a = load(f, tmpl());
	CHECK(same_peer(a.peers[0], load(f, tmpl()).peers[0]));
	const Config pattern = load(f, replace(tmpl(), "remote_id = \"*\"", "remote_id = \"*@example.com\""));
	CHECK_FALSE(same_peer(a.peers[0], pattern.peers[0]));
	const ConfigDiff d = diff_configs(a, pattern);
	CHECK(d.changed == std::vector<std::string>{"users"});
	f.users("[[user]]\nname = \"carol\"\npassword = \"carol's password\"\n"
	        "addresses = [\"10.9.0.6\", \"fd09::5\"]\nallowed_ips = [\"192.168.60.0/24\"]\n\n"
	        "[[user]]\nname = \"dave\"\npassword = \"dave's password\"\n");
	CHECK_FALSE(same_peer(a.peers[0], load(f, tmpl()).peers[0]));
	f.users("[[user]]\nname = \"carol\"\npassword = \"carol's password\"\n"
	        "addresses = [\"10.9.0.5\", \"fd09::5\"]\nallowed_ips = [\"192.168.61.0/24\"]\n\n"
	        "[[user]]\nname = \"dave\"\npassword = \"dave's password\"\n");
	CHECK_FALSE(same_peer(a.peers[0], load(f, tmpl()).peers[0]));
}

TEST_CASE("template config: 100,000 users with addresses and networks load, and the overlap check still "
          "finds the one overlap among them") {
	// The most a users file may hold. Each user: a fixed address from
	// 10.64.0.0/12 and a /28 from 10.128.0.0/9, both outside the pool.
	Files f;
	constexpr size_t kUsers = 100000;
	auto file = [](bool overlap) {
		std::string text;
		text.reserve(kUsers * 110);
		for (size_t i = 0; i < kUsers; i++) {
			const size_t net =
			    (i == kUsers - 1 && overlap) ? 0 : i; // the last one takes user 0's network
			text += "[[user]]\nname = \"u" + std::to_string(i) + "\"\npassword = \"pw" +
			        std::to_string(i) + "\"\naddresses = [\"10." +
			        std::to_string(64 + (i >> 16)) + "." + std::to_string((i >> 8) & 255) + "." +
			        std::to_string(i & 255) + "\"]\nallowed_ips = [\"10." +
			        std::to_string(128 + (net >> 12)) + "." + std::to_string((net >> 4) & 255) +
			        "." + std::to_string((net & 15) << 4) + "/28\"]\n";
		}
		return text;
	};
	f.users(file(false));
	const auto t0 = std::chrono::steady_clock::now();
	const Config c = load(f, tmpl());
	const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	MESSAGE("100,000 users: config loaded and checked in " << secs << " s");
	REQUIRE(c.peers.size() == 1);
	REQUIRE(c.peers[0].ike->users->size() == kUsers);
	const ike::User& last = c.peers[0].ike->users->at("u99999");
	CHECK(last.addresses == std::vector<IpAddress>{*parse_ip("10.65.134.159")});
	CHECK(last.allowed_ips == std::vector<IpPrefix>{*parse_prefix("10.152.105.240/28")});

	f.users(file(true));
	CHECK_SAYS(error_in(f, tmpl()), "allowed_ips entry '10.128.0.0/28' of user 'u99999'");
	f.users(file(false) + "[[user]]\nname = \"one-more\"\npassword = \"pw\"\n");
	CHECK_SAYS(error_in(f, tmpl()), "more than 100000 users");
}
