// Demo configs: random SAs written inline into two mirror-image TOML files.
#include "apps/bench/demo/gateway_config.hpp"

#include <cstdio>
#include <sstream>

namespace esptun::bench::demo {

using lab::hex0x;

using namespace lab;
namespace {

std::string spi_hex(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%08x", spi);
	return buf;
}

/// sa_table() - one [peer.out] / [peer.in] table; GCM takes `key`, CBC
/// `enc_key` + `auth_key` (the config's names for ip xfrm's enc and auth keys)
std::string sa_table(const char* dir, const crypto::CipherSpec& spec, const lab::SaKeys& sa) {
	std::ostringstream t;
	t << "  [peer." << dir << "]\n  spi = " << spi_hex(sa.spi) << "\n";
	if (spec.aead) {
		t << "  key = \"" << hex0x(sa.enc_key) << "\"\n";
	} else {
		t << "  enc_key = \"" << hex0x(sa.enc_key) << "\"\n";
		t << "  auth_key = \"" << hex0x(sa.auth_key) << "\"\n";
	}
	return t.str();
}

} // namespace

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
	  << "[[peer]]\n"
	  << "name = \"" << peer.name << "\"\n"
	  << "endpoint = \"" << peer.underlay << ":4500\"\n"
	  << "allowed_ips = [\"" << peer.tunnel_addr << "/32\"]\n"
	  << "cipher = \"" << spec.name << "\"\n"
	  << "esn = true\n"
	  << "replay_window = 1024\n"
	  << sa_table("out", spec, out) << sa_table("in", spec, in);
	return t.str();
}

} // namespace esptun::bench::demo
