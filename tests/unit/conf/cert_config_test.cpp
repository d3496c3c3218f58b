// IKE peers that authenticate with certificates: cert_file, private_key_file,
// cert_chain_file, ca_dir and crl_files, read at load time and checked
// (key matches certificate, local_id in it, key file private, a CA in the
// folder). Certificates are made at test time.
#include "conf/diff.hpp"
#include "conf/file_source.hpp"
#include "tests/unit/conf/pki_files_test_util.hpp"

#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;
using esptun::ike::test::Chain;
using esptun::ike::test::KeyKind;

namespace {

/// A folder with our chain and key, a CA folder and CRLs.
struct CertFiles {
	TempDir dir;
	Chain chain{KeyKind::p256};
	CertFiles() {
		write_pki(dir, chain);
		dir.write("chain.pem", chain.inter.pem(), 0644);
		dir.write("ca/README", "not a certificate", 0644);
		dir.write("root.crl", chain.root.crl_pem({}), 0644);
		dir.write("inter.crl", chain.inter.crl_pem({}), 0644);
	}
};

std::string config(const std::string& extra = "", const std::string& local_id = "gw.example.com") {
	return R"([tunnel]
listen = "0.0.0.0:4500"
local_id = ")" +
	       local_id + R"("

[[peer]]
name = "site-b"
allowed_ips = ["10.77.0.0/24"]
remote_id = "b.example.com"
cert_file = "gw.pem"
private_key_file = "gw.key"
cert_chain_file = "chain.pem"
ca_dir = "ca"
crl_files = ["root.crl", "inter.crl"]
)" + extra;
}

std::string error_in(const CertFiles& f, const std::string& text) {
	try {
		parse_config(text, "test.toml", Role::gateway, f.dir.path());
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

} // namespace

TEST_CASE("cert config: a peer with certificates loads its credentials, CAs and CRLs") {
	CertFiles f;
	const Config c = parse_config(config(), "test.toml", Role::gateway, f.dir.path());
	REQUIRE(c.peers.size() == 1);
	REQUIRE(c.peers[0].ike);
	const IkePeerConfig& ike = *c.peers[0].ike;
	CHECK(ike.psk.empty());
	REQUIRE(ike.credentials);
	REQUIRE(ike.trust);
	CHECK(ike.credentials->key_type() == "ECDSA-P256");
	CHECK(ike.credentials->certs_der().size() == 2);
	CHECK(ike.trust->ca_count() == 1); // README is not read
	CHECK(ike.trust->crl_count() == 2);
	// Loaded again from the same files: the same peer for a reload; a new
	// CRL makes it another.
	const Config again = parse_config(config(), "test.toml", Role::gateway, f.dir.path());
	CHECK(same_peer(c.peers[0], again.peers[0]));
	f.dir.write("inter.crl", f.chain.inter.crl_pem({100}), 0644);
	const Config revoked = parse_config(config(), "test.toml", Role::gateway, f.dir.path());
	CHECK_FALSE(same_peer(c.peers[0], revoked.peers[0]));
}

TEST_CASE("cert config: the private key must be private and owned by root") {
	CertFiles f;
	for (mode_t mode : {0644, 0640, 0604}) {
		f.dir.write("gw.key", f.chain.ee.key.pem(), mode);
		const std::string err = error_in(f, config());
		CHECK(err.find("test.toml:10: ") == 0);
		CHECK(err.find("chmod 600") != std::string::npos);
	}
	f.dir.write("gw.key", f.chain.ee.key.pem(), 0400);
	CHECK(error_in(f, config()) == "(no error)");
	// The loader runs as root in CI and in a deployment: another owner is refused.
	REQUIRE(::geteuid() == 0);
	REQUIRE(::chown((f.dir.path() / "gw.key").c_str(), 65534, 65534) == 0);
	CHECK(error_in(f, config()).find("is owned by uid 65534; a private key must be owned by root") !=
	      std::string::npos);
}

TEST_CASE("cert config: each missing or wrong piece is named") {
	CertFiles f;
	Chain other(KeyKind::rsa2048);
	f.dir.write("other.key", other.ee.key.pem(), 0600);
	auto replace = [](std::string s, const std::string& from, const std::string& to) {
		s.replace(s.find(from), from.size(), to);
		return s;
	};
	CHECK(error_in(f, replace(config(), "gw.key", "other.key")).find("not the certificate's key") !=
	      std::string::npos);
	CHECK(error_in(f, config("", "other.example.com"))
	          .find("local_id 'other.example.com' of peer 'site-b' is not in its certificate") !=
	      std::string::npos);
	CHECK(error_in(f, replace(config(), "private_key_file = \"gw.key\"\n", ""))
	          .find("has cert_file but no private_key_file") != std::string::npos);
	CHECK(error_in(f, replace(config(), "ca_dir = \"ca\"\n", "")).find("(auth = 'cert') needs ca_dir") !=
	      std::string::npos);
	std::filesystem::create_directory(f.dir.path() / "empty");
	CHECK(error_in(f, replace(config(), "ca_dir = \"ca\"", "ca_dir = \"empty\""))
	          .find("holds no CA certificate") != std::string::npos);
	CHECK(error_in(f, replace(config(), "ca_dir = \"ca\"", "ca_dir = \"nowhere\""))
	          .find("cannot list ca_dir") != std::string::npos);
	f.dir.write("ca/leaf.pem", f.chain.ee.pem(), 0644);
	CHECK(error_in(f, config()).find("is not a CA certificate") != std::string::npos);
	std::filesystem::remove(f.dir.path() / "ca/leaf.pem");
	f.dir.write("bad.crl", "junk", 0644);
	CHECK(error_in(f, replace(config(), "\"inter.crl\"", "\"bad.crl\"")).find("holds no CRL") !=
	      std::string::npos);
	CHECK(error_in(f, config("psk = \"a-pre-shared-key-long-enough\"\n"))
	          .find("both a pre-shared key and cert_file") != std::string::npos);
	CHECK(error_in(f, replace(config(), "gw.pem", "missing.pem")).find("cannot read cert_file") !=
	      std::string::npos);
}

TEST_CASE("cert config: a config reader's recording replays the CA folder listing") {
	CertFiles f;
	const auto path = f.dir.write("test.toml", config(), 0644);
	RecordingFileSource rec(real_files());
	const Config a = load_config(path, Role::gateway, rec);
	ReplayFileSource replay(rec.records());
	const Config b = load_config(path, Role::gateway, replay);
	CHECK(replay.used_up());
	CHECK(same_peer(a.peers[0], b.peers[0]));
}

TEST_CASE("cert config: the man page documents every certificate key") {
	std::ifstream man(std::string(ESPTUN_TEST_DATA_DIR) + "/../../docs/man/esptun.toml.5");
	REQUIRE(man);
	std::stringstream text;
	text << man.rdbuf();
	for (const char* key : {"cert_file", "private_key_file", "cert_chain_file", "ca_dir", "crl_files"}) {
		CAPTURE(key);
		CHECK(text.str().find(".BR " + std::string(key) + " ") != std::string::npos);
	}
}
