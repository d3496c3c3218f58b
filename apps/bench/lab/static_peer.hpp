// A [[peer]] of static keys as a gateway config writes it: the demo's two
// gateways, and the site that ike-load's storm sends a transfer through.
#pragma once

#include "apps/bench/lab/sa_keys.hpp"
#include "crypto/esp_transform.hpp"

#include <string>

namespace esptun::bench::lab {

/// One peer with static keys, from the side of the gateway that lists it.
struct StaticPeer {
	std::string name;
	std::string endpoint;    ///< "ADDR:PORT"
	std::string allowed_ips; ///< one prefix, e.g. "10.99.0.2/32"
	crypto::CipherSpec spec;
	SaKeys out; ///< the SA this gateway sends with (the peer's inbound one)
	SaKeys in;  ///< the SA this gateway receives with
};

/**
 * static_peer_toml() - the [[peer]] table for @p with its [peer.out] and
 * [peer.in] tables, ESN on and a 1024-packet replay window; GCM takes
 * `key`, CBC `enc_key` and `auth_key`
 */
std::string static_peer_toml(const StaticPeer& p);

} // namespace esptun::bench::lab
