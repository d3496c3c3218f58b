// IKE peers with EAP (auth = "eap-mschapv2" / "eap-tls"): what each role
// needs (a gateway its certificate and users, a client its CA, identity and
// password), what it must not have, the users file and its checks.
#include "conf/diff.hpp"
#include "ike/eap_mschapv2.hpp"
#include "tests/unit/conf/pki_files_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;
using esptun::ike::test::Chain;
using esptun::ike::test::KeyKind;

namespace {

struct EapFiles {
	TempDir dir;
	Chain chain{KeyKind::p256};
	EapFiles() {
		write_pki(dir, chain);
		dir.write("users.toml",
		          "[[user]]\nname = \"carol\"\npassword = \"carol's password\"\n\n"
		          "[[user]]\nname = \"dave\"\npassword = \"dave's password\"\n",
		          0600);
		dir.write("password", "carol's password\n", 0600);
	}
};

constexpr const char* kTunnel = "[tunnel]\nlisten = \"0.0.0.0:4500\"\nlocal_id = \"gw.example.com\"\n"
                                "address_pool = [\"10.9.0.0/24\"]\n\n";

std::string gateway(const std::string& extra = "") {
	return std::string(kTunnel) + R"([[peer]]
name = "carol"
remote_id = "carol@example.com"
auth = "eap-mschapv2"
cert_file = "gw.pem"
private_key_file = "gw.key"
users_file = "users.toml"
)" + extra;
}

std::string client(const std::string& extra = "") {
	return R"([tunnel]
local_id = "carol@example.com"

[[peer]]
name = "gw"
endpoint = "192.0.2.1:4500"
allowed_ips = ["0.0.0.0/0"]
remote_id = "gw.example.com"
auth = "eap-mschapv2"
eap_identity = "carol"
eap_password_file = "password"
ca_dir = "ca"
)" + extra;
}

std::string error_in(const EapFiles& f, const std::string& text, Role role) {
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

} // namespace

TEST_CASE("eap config: a gateway's EAP-MSCHAPv2 peer keeps its certificate and the users' NT hashes") {
	EapFiles f;
	const Config c = parse_config(gateway(), "test.toml", Role::gateway, f.dir.path());
	REQUIRE(c.peers.size() == 1);
	const IkePeerConfig& ike = *c.peers[0].ike;
	CHECK(ike.auth == IkeAuth::eap_mschapv2);
	CHECK(ike.psk.empty());
	REQUIRE(ike.credentials);
	CHECK_FALSE(ike.trust);
	REQUIRE(ike.users);
	REQUIRE(ike.users->size() == 2);
	CHECK(ike.users->at("carol").nt_hash == ike::eap::nt_password_hash("carol's password"));
	CHECK(ike.users->at("dave").nt_hash == ike::eap::nt_password_hash("dave's password"));
	CHECK(ike.users->at("carol").addresses.empty());
	CHECK(ike.users->at("carol").allowed_ips.empty());
	CHECK(ike.remote_id == "carol@example.com"); // an exact identity: not a template
	CHECK(ike.remote_pattern.empty());
	// A changed password makes it another peer for a reload.
	const Config again = parse_config(gateway(), "test.toml", Role::gateway, f.dir.path());
	CHECK(same_peer(c.peers[0], again.peers[0]));
	f.dir.write("users.toml", "[[user]]\nname = \"carol\"\npassword = \"new\"\n", 0600);
	const Config changed = parse_config(gateway(), "test.toml", Role::gateway, f.dir.path());
	CHECK_FALSE(same_peer(c.peers[0], changed.peers[0]));
}

TEST_CASE("eap config: a client's EAP-MSCHAPv2 peer has its identity, password and CA") {
	EapFiles f;
	const Config c = parse_config(client(), "test.toml", Role::client, f.dir.path());
	const IkePeerConfig& ike = *c.peers[0].ike;
	CHECK(ike.auth == IkeAuth::eap_mschapv2);
	CHECK(ike.eap_identity == "carol");
	CHECK(ike.eap_password.view() == "carol's password"); // the file's newline is not part of it
	CHECK(ike.trust);
	CHECK_FALSE(ike.credentials);
	const Config inline_pw =
	    parse_config(replace(client(), "eap_password_file = \"password\"", "eap_password = \"pw\""),
	                 "test.toml", Role::client, f.dir.path());
	CHECK(inline_pw.peers[0].ike->eap_password.view() == "pw");
}

TEST_CASE("eap config: each missing, extra or wrong piece is named") {
	EapFiles f;
	struct Case {
		std::string text;
		Role role;
		const char* says;
	};
	const Case cases[] = {
	    {replace(gateway(), "eap-mschapv2", "eap-md5"), Role::gateway,
	     "auth 'eap-md5' of peer 'carol' is unknown"},
	    {replace(gateway(), "users_file = \"users.toml\"\n", ""), Role::gateway, "needs users_file"},
	    {replace(gateway(), "cert_file = \"gw.pem\"\n", ""), Role::gateway, "needs cert_file"},
	    {gateway("ca_dir = \"ca\"\n"), Role::gateway,
	     "'ca_dir' of peer 'carol' is not used with auth = 'eap-mschapv2' on a gateway"},
	    {gateway("psk = \"a-pre-shared-key-long-enough\"\n"), Role::gateway,
	     "both a pre-shared key and auth = 'eap-mschapv2'"},
	    {gateway("eap_identity = \"x\"\n"), Role::gateway, "'eap_identity' of peer 'carol' is not used"},
	    {replace(replace(gateway(), "eap-mschapv2", "eap-tls"), "users_file = \"users.toml\"\n", ""),
	     Role::gateway, "needs ca_dir"},
	    {replace(gateway(), "eap-mschapv2", "eap-tls"), Role::gateway,
	     "'users_file' of peer 'carol' is not used with auth = 'eap-tls' on a gateway"},
	    {replace(client(), "eap_identity = \"carol\"\n", ""), Role::client, "needs eap_identity"},
	    {replace(client(), "eap_password_file = \"password\"\n", ""), Role::client,
	     "needs eap_password or eap_password_file"},
	    {replace(client(), "ca_dir = \"ca\"\n", ""), Role::client, "needs ca_dir"},
	    {client("cert_file = \"gw.pem\"\n"), Role::client,
	     "'cert_file' of peer 'gw' is not used with auth = 'eap-mschapv2' on a client"},
	    {client("eap_password = \"x\"\n"), Role::client, "either eap_password or eap_password_file"},
	    {replace(client(), "auth = \"eap-mschapv2\"", "auth = \"psk\""), Role::client,
	     "has auth = \"psk\" but no pre-shared key"},
	};
	for (const Case& c : cases) {
		const std::string err = error_in(f, c.text, c.role);
		INFO(c.says);
		INFO(err);
		CHECK(err.find(c.says) != std::string::npos);
	}
}

TEST_CASE("eap config: the users file is private, well-formed and names each user once") {
	EapFiles f;
	f.dir.write("users.toml", "[[user]]\nname = \"carol\"\npassword = \"pw\"\n", 0644);
	CHECK(error_in(f, gateway(), Role::gateway).find("chmod 600") != std::string::npos);
	struct Case {
		const char* text;
		const char* says;
	};
	for (const Case& c :
	     {Case{"[[user]]\nname = \"carol\"\npassword = \"pw\"\n[[user]]\nname = "
	           "\"carol\"\npassword = \"x\"\n",
	           "user 'carol' is listed twice"},
	      Case{"[[user]]\nname = \"carol\"\n", "user 'carol' needs password"},
	      Case{"[[user]]\npassword = \"pw\"\n", "needs name"},
	      Case{"[[user]]\nname = \"carol\"\npassword = \"pw\"\nadress = \"10.0.0.1\"\n",
	           "unknown key 'adress'"},
	      Case{"[[user]]\nname = \"carol\"\npassword = \"\"\n", "user 'carol' needs password"},
	      Case{"[users]\n", "unknown key 'users'"}, Case{"", "lists no users"},
	      Case{"[[user]\n", "line 1"}}) {
		f.dir.write("users.toml", c.text, 0600);
		const std::string err = error_in(f, gateway(), Role::gateway);
		INFO(c.says);
		INFO(err);
		CHECK(err.find(c.says) != std::string::npos);
	}
}
