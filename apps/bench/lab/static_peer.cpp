// A static-key [[peer]] table (static_peer.hpp).
#include "apps/bench/lab/static_peer.hpp"

#include <cstdio>
#include <sstream>

namespace esptun::bench::lab {
namespace {

std::string spi_hex(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%08x", spi);
	return buf;
}

/// sa_table() - one [peer.out] / [peer.in] table (the config's names for ip
/// xfrm's enc and auth keys)
std::string sa_table(const char* dir, const crypto::CipherSpec& spec, const SaKeys& sa) {
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

std::string static_peer_toml(const StaticPeer& p) {
	std::ostringstream t;
	t << "[[peer]]\n"
	  << "name = \"" << p.name << "\"\n"
	  << "endpoint = \"" << p.endpoint << "\"\n"
	  << "allowed_ips = [\"" << p.allowed_ips << "\"]\n"
	  << "cipher = \"" << p.spec.name << "\"\n"
	  << "esn = true\n"
	  << "replay_window = 1024\n"
	  << sa_table("out", p.spec, p.out) << sa_table("in", p.spec, p.in);
	return t.str();
}

} // namespace esptun::bench::lab
