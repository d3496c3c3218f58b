// Helpers the runtime tests share: a GCM peer for an SA table, a bounded
// wait for a readable descriptor, and a scratch folder.
#pragma once

#include "tunnel/sa.hpp"

#include <cstdint>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <poll.h>
#include <string>
#include <vector>

namespace esptun::test {

/// A peer with aes128-gcm SAs: @k_out/@k_in are key || salt (20 bytes).
inline tunnel::PeerParams gcm_peer(const char* name, Endpoint ep, const char* allowed, uint32_t out_spi,
                                   uint32_t in_spi, const std::vector<uint8_t>& k_out,
                                   const std::vector<uint8_t>& k_in) {
	tunnel::PeerParams p;
	p.name = name;
	p.endpoint = ep;
	p.allowed_ips = {*parse_prefix(allowed)};
	p.cipher = crypto::Cipher::aes128_gcm;
	p.out = {out_spi, k_out, {}};
	p.in = {in_spi, k_in, {}};
	return p;
}

/// True when @fd becomes readable within two seconds.
inline bool wait_readable(int fd) {
	pollfd p{fd, POLLIN, 0};
	return poll(&p, 1, 2000) == 1;
}

/// TempDir - a fresh folder under the system's temp dir, removed with its contents.
struct TempDir {
	explicit TempDir(const char* tag = "esptun-test") {
		std::string tmpl =
		    (std::filesystem::temp_directory_path() / (std::string(tag) + "-XXXXXX")).string();
		REQUIRE(mkdtemp(tmpl.data()) != nullptr);
		path = tmpl;
	}
	~TempDir() {
		std::error_code ec;
		std::filesystem::remove_all(path, ec);
	}
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;
	std::string path;
};

} // namespace esptun::test
