// Issue 16, item 2: a config that holds keys or PSKs inline is a key file,
// so load_config() refuses it when group or others may access it, as it does
// key files; and no error message repeats a secret.
#include "conf/checks.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

/// What load_config() throws for the file @path, or "(no error)".
std::string load_error(const std::filesystem::path& path, Role role = Role::gateway) {
	try {
		load_config(path, role);
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

/// The gateway config with every static key moved into 0600 key files in @dir.
Lines keys_in_files(const TempDir& dir) {
	Lines l = gateway_lines();
	for (size_t n : {18, 19, 22, 23, 31, 34}) {
		std::string& line = l.lines.at(n - 1);
		const size_t eq = line.find(" = \"");
		const std::string name = line.substr(0, eq);
		const std::string file = name + std::to_string(n) + ".key";
		dir.write(file, line.substr(eq + 4, line.size() - eq - 5), 0600);
		line = name + "_file = \"" + file + "\"";
	}
	return l;
}

constexpr const char* kIkeGateway = R"([tunnel]
listen = "0.0.0.0:4500"
local_id = "gw.example"
address_pool = ["10.77.0.0/24"]

[[peer]]
name = "alice"
allowed_ips = ["10.77.0.10/32"]
psk = "alice-inline-secret-0123456789"
)";

} // namespace

TEST_CASE("a config with inline keys readable by group or others is refused, naming file, mode and chmod") {
	TempDir dir;
	for (mode_t mode : {0644, 0640, 0604, 0660, 0606}) {
		auto path = dir.write("gw.toml", gateway_lines().text(), mode);
		const std::string msg = load_error(path);
		INFO(msg);
		// At the first inline key's line, with the file's name, mode and the fix.
		CHECK(msg.rfind(path.string() + ":18: ", 0) == 0);
		char octal[8];
		std::snprintf(octal, sizeof octal, "%04o", unsigned(mode));
		CHECK(msg.find(std::string("has mode ") + octal) != std::string::npos);
		CHECK(msg.find("run: chmod 600 " + path.string()) != std::string::npos);
		// The message is about the file, never the key.
		CHECK(msg.find(hex_key(16, 1)) == std::string::npos);
		CHECK(msg.find(hex_key(16, 1).substr(2)) == std::string::npos);
	}
}

TEST_CASE("a config with inline keys at 0600 or 0400 loads") {
	TempDir dir;
	for (mode_t mode : {0600, 0400}) {
		auto path = dir.write("gw.toml", gateway_lines().text(), mode);
		CHECK(load_error(path) == "(no error)");
	}
}

TEST_CASE("a config whose keys are all in key files may be world-readable") {
	TempDir dir;
	auto path = dir.write("gw.toml", keys_in_files(dir).text(), 0644);
	CHECK(load_error(path) == "(no error)");
	const Config c = load_config(path, Role::gateway);
	CHECK(c.peers.at(0).out.enc_key.size() == 16);
}

TEST_CASE("a config with an inline PSK is refused at 0644, with psk_file it is not") {
	TempDir dir;
	auto path = dir.write("ike.toml", kIkeGateway, 0644);
	const std::string msg = load_error(path);
	INFO(msg);
	CHECK(msg.rfind(path.string() + ":9: ", 0) == 0);
	CHECK(msg.find("chmod 600") != std::string::npos);
	CHECK(msg.find("alice-inline-secret") == std::string::npos);

	dir.write("alice.psk", "alice-file-secret-0123456789\n", 0600);
	std::string text = kIkeGateway;
	text.replace(text.find("psk = "), std::string("psk = \"alice-inline-secret-0123456789\"").size(),
	             "psk_file = \"alice.psk\"");
	path = dir.write("ike-file.toml", text, 0644);
	CHECK(load_error(path) == "(no error)");
	const Config c = load_config(path, Role::gateway);
	CHECK(std::string(c.peers.at(0).ike->psk.begin(), c.peers.at(0).ike->psk.end()) ==
	      "alice-file-secret-0123456789");
}

TEST_CASE("errors about a bad key or PSK never repeat it") {
	// Each bad secret below is long and distinctive, so any echo would show.
	const std::string bad_hex = "0x00112233445566778899aabbccddeeffzz";
	const std::string wrong_len = "0x00112233445566778899aabbccddeeff0011"; // 18 bytes, GCM wants 20
	const std::string odd = "0x00112233445566778899aabbccddeeff001";
	for (const std::string& key : {bad_hex, wrong_len, odd}) {
		const std::string msg = error_of(gateway_lines().set(31, "key = \"" + key + "\"").text());
		INFO(msg);
		CHECK(msg.rfind("test.toml:31: ", 0) == 0);
		CHECK(msg.find("00112233445566778899") == std::string::npos);
	}
	for (const std::string psk :
	     {"short-psk-xyz", "0xnothexatall-but-long-enough", "0x0011223344556677"}) {
		std::string text = kIkeGateway;
		text.replace(text.find("alice-inline-secret-0123456789"), 30, psk);
		const std::string msg = error_of(text);
		INFO(msg);
		CHECK(msg.rfind("test.toml:9: ", 0) == 0);
		CHECK(msg.find(psk.substr(2)) == std::string::npos);
	}
}
