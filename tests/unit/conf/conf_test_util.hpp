// Helpers shared by the config tests: configs as numbered lines (so a test can
// say which line an error must name), deterministic keys, a scratch folder.
#pragma once

#include "conf/config.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace esptun::conf::test {

/**
 * hex_key() - a key as a config writes it: "0x" and @len bytes of hex
 * @len: the key length in bytes
 * @seed: picks the bytes; keys with different seeds differ (not random: test keys)
 *
 * Return: the text for an enc_key, auth_key or key field.
 */
inline std::string hex_key(size_t len, unsigned seed) {
	::esptun::test::Bytes k(len);
	for (size_t i = 0; i < len; i++)
		k[i] = static_cast<uint8_t>(seed * 37 + static_cast<unsigned>(i) * 11 + 5);
	return "0x" + ::esptun::test::to_hex(k);
}

inline std::string cipher_name(crypto::Cipher c) { return std::string(crypto::cipher_spec(c).name); }

/// A config as lines; line(n) is 1-based, like the error messages.
struct Lines {
	std::vector<std::string> lines;

	Lines& set(size_t n, std::string text) {
		lines.at(n - 1) = std::move(text);
		return *this;
	}
	Lines& insert_after(size_t n, std::string text) {
		lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(n), std::move(text));
		return *this;
	}
	Lines& erase(size_t first, size_t last) {
		lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(first - 1),
		            lines.begin() + static_cast<std::ptrdiff_t>(last));
		return *this;
	}
	std::string text() const {
		std::string t;
		for (const auto& l : lines)
			t += l + "\n";
		return t;
	}
};

/**
 * gateway_lines() - a valid gateway config with two peers (CBC and GCM).
 * The line numbers in the comments are what the tests rely on.
 */
inline Lines gateway_lines() {
	using crypto::Cipher;
	const size_t cbc_enc = crypto::cipher_spec(Cipher::aes128_cbc_sha1).enc_key_len;
	const size_t cbc_auth = crypto::cipher_spec(Cipher::aes128_cbc_sha1).auth_key_len;
	const size_t gcm = crypto::cipher_spec(Cipher::aes128_gcm).enc_key_len;
	return Lines{{
	    "[tunnel]",                                                  // 1
	    "interface = \"esp0\"",                                      // 2
	    "addresses = [\"10.99.0.1/24\", \"fd99::1/64\"]",            // 3
	    "listen = \"0.0.0.0:4500\"",                                 // 4
	    "mtu = 1400",                                                // 5
	    "tun_io = \"vhost\"",                                        // 6
	    "control_socket = \"/run/esptun/test.sock\"",                // 7
	    "",                                                          // 8
	    "[[peer]]",                                                  // 9
	    "name = \"site-b\"",                                         // 10
	    "endpoint = \"10.201.0.2:4500\"",                            // 11
	    "allowed_ips = [\"10.99.0.2/32\", \"192.168.50.0/24\"]",     // 12
	    "cipher = \"" + cipher_name(Cipher::aes128_cbc_sha1) + "\"", // 13
	    "esn = false",                                               // 14
	    "replay_window = 2048",                                      // 15
	    "[peer.out]",                                                // 16
	    "spi = 0x1001",                                              // 17
	    "enc_key = \"" + hex_key(cbc_enc, 1) + "\"",                 // 18
	    "auth_key = \"" + hex_key(cbc_auth, 2) + "\"",               // 19
	    "[peer.in]",                                                 // 20
	    "spi = 0x2001",                                              // 21
	    "enc_key = \"" + hex_key(cbc_enc, 3) + "\"",                 // 22
	    "auth_key = \"" + hex_key(cbc_auth, 4) + "\"",               // 23
	    "",                                                          // 24
	    "[[peer]]",                                                  // 25
	    "name = \"road-1\"",                                         // 26
	    "allowed_ips = [\"10.99.0.3/32\", \"fd99::3/128\"]",         // 27
	    "cipher = \"" + cipher_name(Cipher::aes128_gcm) + "\"",      // 28
	    "[peer.out]",                                                // 29
	    "spi = 0x1002",                                              // 30
	    "key = \"" + hex_key(gcm, 5) + "\"",                         // 31
	    "[peer.in]",                                                 // 32
	    "spi = 0x2002",                                              // 33
	    "key = \"" + hex_key(gcm, 6) + "\"",                         // 34
	}};
}

/// A valid client config: one peer with an endpoint, route_all.
inline Lines client_lines() {
	using crypto::Cipher;
	const auto& spec = crypto::cipher_spec(Cipher::aes256_cbc_sha256);
	return Lines{{
	    "[tunnel]",                                                    // 1
	    "interface = \"esp1\"",                                        // 2
	    "addresses = [\"10.99.0.2/24\"]",                              // 3
	    "route_all = true",                                            // 4
	    "",                                                            // 5
	    "[[peer]]",                                                    // 6
	    "name = \"gw\"",                                               // 7
	    "endpoint = \"198.51.100.7\"",                                 // 8
	    "allowed_ips = [\"0.0.0.0/0\"]",                               // 9
	    "cipher = \"" + cipher_name(Cipher::aes256_cbc_sha256) + "\"", // 10
	    "[peer.out]",                                                  // 11
	    "spi = 0x2001",                                                // 12
	    "enc_key = \"" + hex_key(spec.enc_key_len, 7) + "\"",          // 13
	    "auth_key = \"" + hex_key(spec.auth_key_len, 8) + "\"",        // 14
	    "[peer.in]",                                                   // 15
	    "spi = 0x1001",                                                // 16
	    "enc_key = \"" + hex_key(spec.enc_key_len, 9) + "\"",          // 17
	    "auth_key = \"" + hex_key(spec.auth_key_len, 10) + "\"",       // 18
	}};
}

/// The what() of the ConfigError parsing @text throws, or "(no error)".
inline std::string error_of(const std::string& text, Role role = Role::gateway,
                            const std::filesystem::path& base = ".") {
	try {
		parse_config(text, "test.toml", role, base);
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

/// Checks that parsing fails at @line with a message containing @hint.
#define CHECK_CONFIG_ERROR(lines, role, line, hint)                                                          \
	do {                                                                                                 \
		std::string msg_ = ::esptun::conf::test::error_of((lines).text(), role);                     \
		INFO(msg_);                                                                                  \
		CHECK(msg_.rfind("test.toml:" + std::to_string(line) + ": ", 0) == 0);                       \
		CHECK(msg_.find(hint) != std::string::npos);                                                 \
	} while (0)

/// A folder made with mkdtemp, removed with everything in it at scope end.
class TempDir {
public:
	TempDir() {
		std::string tmpl = (std::filesystem::temp_directory_path() / "esptun-conf-XXXXXX").string();
		if (!::mkdtemp(tmpl.data())) FAIL("mkdtemp failed");
		path_ = tmpl;
	}
	~TempDir() {
		std::error_code ec;
		std::filesystem::remove_all(path_, ec);
	}
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;

	const std::filesystem::path& path() const { return path_; }
	/// Writes @text to @name in this folder with permission bits @mode.
	std::filesystem::path write(const std::string& name, const std::string& text, mode_t mode) const {
		auto p = path_ / name;
		std::ofstream(p) << text;
		REQUIRE(::chmod(p.c_str(), mode) == 0);
		return p;
	}

private:
	std::filesystem::path path_;
};

} // namespace esptun::conf::test
