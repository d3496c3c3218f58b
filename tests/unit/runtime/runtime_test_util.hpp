// Helpers the runtime tests share: a GCM peer for an SA table and a bounded
// wait for a readable descriptor.
#pragma once

#include "tunnel/sa.hpp"

#include <cstdint>
#include <poll.h>
#include <vector>

namespace esptun::test {

/// A peer with aes128-gcm SAs: @k_out/@k_in are key || salt (20 bytes).
inline PeerParams gcm_peer(const char* name, Endpoint ep, const char* allowed, uint32_t out_spi,
                           uint32_t in_spi, const std::vector<uint8_t>& k_out,
                           const std::vector<uint8_t>& k_in) {
	PeerParams p;
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

} // namespace esptun::test
