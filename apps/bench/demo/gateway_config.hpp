// The demo's two gateway configs: mirror images of each other, with fresh
// random SPIs and keys written inline.
#pragma once

#include "apps/bench/lab/sa_keys.hpp"
#include "crypto/esp_transform.hpp"

#include <string>

namespace esptun::bench::demo {

/// The addresses of one side of the demo.
struct DemoSide {
	std::string name;         ///< peer name the *other* side uses for it
	std::string tunnel_addr;  ///< e.g. "10.99.0.1"
	std::string underlay;     ///< e.g. "10.201.0.1"
	std::string control_path; ///< control socket
};

/**
 * gateway_config() - the TOML for side @self talking to side @peer
 * @out: the SA @self sends with (the peer's inbound SA)
 * @in:  the SA @self receives with
 */
std::string gateway_config(const DemoSide& self, const DemoSide& peer, const crypto::CipherSpec& spec,
                           const lab::SaKeys& out, const lab::SaKeys& in);

} // namespace esptun::bench::demo
