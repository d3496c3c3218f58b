// rsa_pss in a [[peer]]: our RSA key signs AUTH with RSASSA-PSS. Taken only
// where we sign AUTH with our certificate (auth = "cert", an EAP gateway),
// only for an RSA key, and a change of it makes a changed peer on reload.
#include "conf/diff.hpp"
#include "tests/unit/conf/pki_files_test_util.hpp"

#include <fstream>
#include <sstream>

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;
using esptun::ike::test::Chain;
using esptun::ike::test::KeyKind;

namespace {

/// Our certificate with an RSA key (rsa.*) and one with an ECDSA key (ec.*),
/// a CA folder, a users file and a client's password.
struct PssFiles {
	TempDir dir;
	Chain rsa{KeyKind::rsa2048}, ec{KeyKind::p256};
	PssFiles() {
		write_pki(dir, rsa, "rsa");
		write_pki(dir, ec, "ec", false);
		dir.write("users.toml", "[[user]]\nname = \"carol\"\npassword = \"carol's password\"\n",
		          0600);
		dir.write("password", "carol's password\n", 0600);
	}
};

constexpr const char* kGatewayTunnel = "[tunnel]\nlisten = \"0.0.0.0:4500\"\nlocal_id = "
                                       "\"gw.example.com\"\naddress_pool = [\"10.9.0.0/24\"]\n\n";

/// A gateway's certificate peer; @key "rsa" or "ec". @extra starts on line 13.
std::string cert_peer(const std::string& key, const std::string& extra) {
	return std::string(kGatewayTunnel) +
	       "[[peer]]\nname = \"site-b\"\nallowed_ips = [\"10.77.0.0/24\"]\n" +
	       "remote_id = \"b.example.com\"\ncert_file = \"" + key + ".pem\"\nprivate_key_file = \"" + key +
	       ".key\"\nca_dir = \"ca\"\n" + extra;
}

std::string eap_gateway(const std::string& extra) {
	return std::string(kGatewayTunnel) +
	       "[[peer]]\nname = \"carol\"\nremote_id = \"carol@example.com\"\n" +
	       "auth = \"eap-mschapv2\"\ncert_file = \"rsa.pem\"\nprivate_key_file = \"rsa.key\"\n" +
	       "users_file = \"users.toml\"\n" + extra;
}

std::string client(const std::string& auth, const std::string& extra) {
	std::string s = "[tunnel]\nlocal_id = \"gw.example.com\"\n\n[[peer]]\nname = \"gw\"\n"
	                "endpoint = \"192.0.2.1:4500\"\nallowed_ips = [\"0.0.0.0/0\"]\n"
	                "remote_id = \"gw.example.com\"\nca_dir = \"ca\"\nauth = \"" +
	                auth + "\"\neap_identity = \"carol\"\n";
	s += auth == "eap-tls" ? "cert_file = \"rsa.pem\"\nprivate_key_file = \"rsa.key\"\n"
	                       : "eap_password_file = \"password\"\n";
	return s + extra;
}

std::string error_in(const PssFiles& f, const std::string& text, Role role = Role::gateway) {
	try {
		parse_config(text, "test.toml", role, f.dir.path());
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

bool has(const std::string& text, const std::string& part) {
	INFO(text);
	return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("rsa_pss config: off unless set; an RSA key of a certificate peer or EAP gateway takes it") {
	PssFiles f;
	auto pss = [&](const std::string& text) {
		const Config c = parse_config(text, "test.toml", Role::gateway, f.dir.path());
		REQUIRE(c.peers.size() == 1);
		REQUIRE(c.peers[0].ike);
		return c.peers[0].ike->rsa_pss;
	};
	CHECK_FALSE(pss(cert_peer("rsa", "")));
	CHECK(pss(cert_peer("rsa", "rsa_pss = true\n")));
	CHECK_FALSE(pss(cert_peer("rsa", "rsa_pss = false\n")));
	CHECK(pss(eap_gateway("rsa_pss = true\n")));
	// false asks nothing of the key: an ECDSA key may say so.
	CHECK_FALSE(pss(cert_peer("ec", "rsa_pss = false\n")));
}

TEST_CASE("rsa_pss config: refused for a key that is not RSA, naming the key's type and line") {
	PssFiles f;
	const std::string err = error_in(f, cert_peer("ec", "rsa_pss = true\n"));
	CHECK(has(err, "test.toml:13: "));
	CHECK(has(err, "rsa_pss of peer 'site-b' needs an RSA key; this key is ECDSA-P256"));
	CHECK(has(error_in(f, cert_peer("rsa", "rsa_pss = \"yes\"\n")), "test.toml:13: "));
}

TEST_CASE("rsa_pss config: refused where we sign no AUTH with our certificate, saying why") {
	PssFiles f;
	const std::string psk = std::string(kGatewayTunnel) +
	                        "[[peer]]\nname = \"site-b\"\nallowed_ips = [\"10.77.0.0/24\"]\n"
	                        "psk = \"a-pre-shared-key-long-enough\"\nrsa_pss = true\n";
	CHECK(
	    has(error_in(f, psk),
	        "'rsa_pss' of peer 'site-b' is not used with auth = 'psk': a pre-shared key signs nothing"));
	CHECK(has(error_in(f, client("eap-mschapv2", "rsa_pss = false\n"), Role::client),
	          "is not used with auth = 'eap-mschapv2' on a client: the client signs no AUTH"));
	CHECK(has(error_in(f, client("eap-tls", "rsa_pss = true\n"), Role::client),
	          "is not used with auth = 'eap-tls' on a client: an EAP-TLS client signs inside TLS"));
	// The client configs are valid without it.
	CHECK(error_in(f, client("eap-mschapv2", ""), Role::client) == "(no error)");
	CHECK(error_in(f, client("eap-tls", ""), Role::client) == "(no error)");
	// A statically keyed peer has no IKE at all.
	const std::string fixed =
	    std::string(kGatewayTunnel) +
	    "[[peer]]\nname = \"site-b\"\nallowed_ips = [\"10.77.0.0/24\"]\nrsa_pss = true\n";
	CHECK(has(error_in(f, fixed), "'rsa_pss' only applies to a peer keyed by IKEv2"));
}

TEST_CASE("rsa_pss config: turning it on or off changes the peer for a reload") {
	PssFiles f;
	const Config off = parse_config(cert_peer("rsa", ""), "test.toml", Role::gateway, f.dir.path());
	const Config off2 =
	    parse_config(cert_peer("rsa", "rsa_pss = false\n"), "test.toml", Role::gateway, f.dir.path());
	const Config on =
	    parse_config(cert_peer("rsa", "rsa_pss = true\n"), "test.toml", Role::gateway, f.dir.path());
	CHECK(same_peer(off.peers[0], off2.peers[0]));
	CHECK_FALSE(same_peer(off.peers[0], on.peers[0]));
	const ConfigDiff d = diff_configs(off, on);
	CHECK(d.changed == std::vector<std::string>{"site-b"});
}

TEST_CASE("rsa_pss config: the man page documents it") {
	std::ifstream man(std::string(ESPTUN_TEST_DATA_DIR) + "/../../docs/man/esptun.toml.5");
	REQUIRE(man);
	std::stringstream text;
	text << man.rdbuf();
	CHECK(has(text.str(), ".BR rsa_pss "));
}
