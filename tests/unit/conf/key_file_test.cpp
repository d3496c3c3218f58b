// Keys read from *_file paths: resolved against the config's folder, trimmed,
// and refused when group or others could read or write them.
#include "conf/checks.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

const crypto::CipherSpec& cbc() { return crypto::cipher_spec(crypto::Cipher::aes128_cbc_sha1); }

/// The gateway config with site-b's outbound enc_key read from @file.
Lines with_key_file(const std::string& file) {
	return gateway_lines().set(18, "enc_key_file = \"" + file + "\"");
}

} // namespace

TEST_CASE("a key file with mode 0600 is read relative to the base folder, whitespace trimmed") {
	TempDir dir;
	std::string key = hex_key(cbc().enc_key_len, 42);
	dir.write("out.key", "  " + key + "\n\n", 0600);
	Config c = parse_config(with_key_file("out.key").text(), "test.toml", Role::gateway, dir.path());
	Config inline_key = parse_config(gateway_lines().set(18, "enc_key = \"" + key + "\"").text(),
	                                 "test.toml", Role::gateway);
	CHECK(c.peers[0].out.enc_key == inline_key.peers[0].out.enc_key);
	CHECK(c.peers[0].out.enc_key.size() == cbc().enc_key_len);
}

TEST_CASE("a key file with mode 0400 or an absolute path is accepted") {
	TempDir dir;
	auto path = dir.write("k", hex_key(cbc().enc_key_len, 1), 0400);
	CHECK(error_of(with_key_file(path.string()).text()) == "(no error)");
}

TEST_CASE("a key file readable by group or others (0644, 0640, 0606) is rejected with chmod 600") {
	TempDir dir;
	for (mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
		auto path = dir.write("open.key", hex_key(cbc().enc_key_len, 1), mode);
		std::string msg = error_of(with_key_file("open.key").text(), Role::gateway, dir.path());
		INFO(msg);
		CHECK(msg.rfind("test.toml:18: ", 0) == 0);
		CHECK(msg.find("run: chmod 600 " + path.string()) != std::string::npos);
	}
}

TEST_CASE("a missing key file, a folder and a wrong-length key in a file are reported at the _file line") {
	TempDir dir;
	CHECK_CONFIG_ERROR(with_key_file("/nonexistent/esptun.key"), Role::gateway, 18,
	                   "cannot read key file");
	std::string msg = error_of(with_key_file(".").text(), Role::gateway, dir.path());
	CHECK(msg.find("not a regular file") != std::string::npos);
	dir.write("short.key", hex_key(cbc().enc_key_len - 2, 1), 0600);
	msg = error_of(with_key_file("short.key").text(), Role::gateway, dir.path());
	CHECK(msg.rfind("test.toml:18: ", 0) == 0);
	CHECK(msg.find("short.key") != std::string::npos);
	CHECK(msg.find("needs " + std::to_string(cbc().enc_key_len) + " bytes") != std::string::npos);
	dir.write("bad.key", "not hex", 0600);
	msg = error_of(with_key_file("bad.key").text(), Role::gateway, dir.path());
	CHECK(msg.find("not a hex digit at position 1") != std::string::npos);
}

TEST_CASE("GCM key_file works like key") {
	TempDir dir;
	const auto& gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm);
	dir.write("in.key", hex_key(gcm.enc_key_len, 6) + "\n", 0600);
	Config c = parse_config(gateway_lines().set(34, "key_file = \"in.key\"").text(), "t", Role::gateway,
	                        dir.path());
	Config ref = parse_config(gateway_lines().text(), "t", Role::gateway);
	CHECK(c.peers[1].in.enc_key == ref.peers[1].in.enc_key);
}

TEST_CASE("load_config resolves key files against the config file's folder") {
	TempDir dir;
	std::filesystem::create_directory(dir.path() / "etc");
	dir.write("etc/out.key", hex_key(cbc().enc_key_len, 1), 0600);
	auto conf = dir.write("etc/gw.toml", with_key_file("out.key").text(), 0600); // other keys inline
	Config c = load_config(conf, Role::gateway);
	CHECK(c.source == conf.string());
	CHECK(c.peers.size() == 2);
}

TEST_CASE("load_config reports an unreadable path as a ConfigError naming the file") {
	try {
		load_config("/nonexistent/esptun.toml", Role::gateway);
		FAIL("no error");
	} catch (const ConfigError& e) {
		CHECK(std::string(e.what()).rfind("/nonexistent/esptun.toml: cannot read config", 0) == 0);
		CHECK(e.line() == 0);
	}
	TempDir dir;
	CHECK_THROWS_AS(load_config(dir.path(), Role::gateway), ConfigError);
}

TEST_CASE("load_config reports errors with the file's path and line") {
	TempDir dir;
	auto conf = dir.write("gw.toml", gateway_lines().set(5, "mtu = 1").text(), 0644);
	try {
		load_config(conf, Role::gateway);
		FAIL("no error");
	} catch (const ConfigError& e) {
		CHECK(std::string(e.what()).rfind(conf.string() + ":5: mtu 1 is out of range", 0) == 0);
		CHECK(e.line() == 5);
	}
}
