// The demo's private files: a 0700 temp dir and the two gateway configs with
// fresh random keys and SPIs, mirror images of each other.
#pragma once

#include "crypto/esp_transform.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace esptun::bench {

/// TempDir - a mkdtemp() folder (mode 0700), removed with its contents.
class TempDir {
public:
	explicit TempDir(const std::string& prefix);
	~TempDir();
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;
	const std::string& path() const noexcept { return path_; }
	/// file() - @name inside the folder
	std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
	std::string path_;
};

/**
 * remove_stale_temp_dirs() - delete /tmp/esptun-demo-<pid>-* folders whose
 * esptun-bench is gone (killed with SIGKILL). Return: how many.
 */
int remove_stale_temp_dirs();

/// Key material of one SA direction, random.
struct SaKeys {
	uint32_t spi = 0;
	std::vector<uint8_t> enc_key;  ///< GCM: key || salt
	std::vector<uint8_t> auth_key; ///< CBC-HMAC only
};

/// The addresses of one side of the demo.
struct DemoSide {
	std::string name;         ///< peer name the *other* side uses for it
	std::string tunnel_addr;  ///< e.g. "10.99.0.1"
	std::string underlay;     ///< e.g. "10.201.0.1"
	std::string control_path; ///< control socket
};

/**
 * random_bytes() - @n bytes from OpenSSL's CSPRNG (RAND_bytes)
 * Throws std::runtime_error when the generator fails.
 */
std::vector<uint8_t> random_bytes(size_t n);

/**
 * make_sa_keys() - a random SPI (0x100..0xffffffff, never @avoid) and keys
 * of the lengths @spec needs
 */
SaKeys make_sa_keys(const crypto::CipherSpec& spec, uint32_t avoid = 0);

/**
 * gateway_config() - the TOML for side @self talking to side @peer
 * @out: the SA @self sends with (the peer's inbound SA)
 * @in:  the SA @self receives with
 */
std::string gateway_config(const DemoSide& self, const DemoSide& peer, const crypto::CipherSpec& spec,
                           const SaKeys& out, const SaKeys& in);

/**
 * write_private_file() - create @path with mode 0600 and write @text
 * (configs hold keys). Throws on failure.
 */
void write_private_file(const std::string& path, const std::string& text);

} // namespace esptun::bench
