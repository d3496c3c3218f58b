// Demo configs: random SAs written inline into two mirror-image TOML files.
#include "apps/bench/demo/gateway_config.hpp"

#include "apps/bench/lab/static_peer.hpp"

#include <sstream>

namespace esptun::bench::demo {

std::string gateway_config(const DemoSide& self, const DemoSide& peer, const crypto::CipherSpec& spec,
                           const lab::SaKeys& out, const lab::SaKeys& in) {
	std::ostringstream t;
	t << "# esptun-bench demo: side " << self.name << " (generated; keys are random per run)\n"
	  << "[tunnel]\n"
	  << "interface = \"esp0\"\n"
	  << "addresses = [\"" << self.tunnel_addr << "/24\"]\n"
	  << "listen = \"0.0.0.0:4500\"\n"
	  << "mtu = 0\n"
	  << "tun_io = \"auto\"\n"
	  << "control_socket = \"" << self.control_path
	  << "\"\n"
	  // Inside the run's temporary folder, removed with it.
	  << "state_dir = \"" << self.control_path << ".state\"\n\n"
	  << lab::static_peer_toml(
	         {peer.name, peer.underlay + ":4500", peer.tunnel_addr + "/32", spec, out, in});
	return t.str();
}

} // namespace esptun::bench::demo
