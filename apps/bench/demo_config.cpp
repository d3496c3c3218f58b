// Demo configs: random SAs written inline into two mirror-image TOML files.
#include "apps/bench/demo_config.hpp"

#include "apps/bench/process.hpp"
#include "platform/unique_fd.hpp"

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <openssl/rand.h>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace esptun::bench {
namespace {

std::string hex(const std::vector<uint8_t>& bytes) {
	static constexpr char kDigits[] = "0123456789abcdef";
	std::string s = "0x";
	for (uint8_t b : bytes) {
		s += kDigits[b >> 4];
		s += kDigits[b & 15];
	}
	return s;
}

std::string spi_hex(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%08x", spi);
	return buf;
}

/// sa_table() - one [peer.out] / [peer.in] table; GCM takes `key`, CBC
/// `enc_key` + `auth_key` (the config's names for ip xfrm's enc and auth keys)
std::string sa_table(const char* dir, const crypto::CipherSpec& spec, const SaKeys& sa) {
	std::ostringstream t;
	t << "  [peer." << dir << "]\n  spi = " << spi_hex(sa.spi) << "\n";
	if (spec.aead) {
		t << "  key = \"" << hex(sa.enc_key) << "\"\n";
	} else {
		t << "  enc_key = \"" << hex(sa.enc_key) << "\"\n";
		t << "  auth_key = \"" << hex(sa.auth_key) << "\"\n";
	}
	return t.str();
}

} // namespace

TempDir::TempDir(const std::string& prefix) {
	std::string tmpl = prefix + "XXXXXX";
	if (!mkdtemp(tmpl.data())) throw_errno("mkdtemp " + tmpl);
	path_ = tmpl; // mkdtemp creates it with mode 0700
}

TempDir::~TempDir() {
	std::error_code ec;
	std::filesystem::remove_all(path_, ec);
}

int remove_stale_temp_dirs() {
	namespace fs = std::filesystem;
	std::error_code ec;
	int removed = 0;
	for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
		std::string name = entry.path().filename().string();
		if (entry.is_directory(ec) && owner_is_gone(name, "esptun-demo-") &&
		    fs::remove_all(entry.path(), ec) > 0)
			removed++;
	}
	return removed;
}

std::vector<uint8_t> random_bytes(size_t n) {
	std::vector<uint8_t> out(n);
	if (n > 0 && RAND_bytes(out.data(), static_cast<int>(n)) != 1)
		throw std::runtime_error("RAND_bytes failed: no random numbers for the keys");
	return out;
}

SaKeys make_sa_keys(const crypto::CipherSpec& spec, uint32_t avoid) {
	SaKeys sa;
	do {
		auto b = random_bytes(4);
		sa.spi = uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
	} while (sa.spi < 0x100 || sa.spi == avoid); // 1..255 are reserved (RFC 4303 section 2.1)
	sa.enc_key = random_bytes(spec.enc_key_len);
	sa.auth_key = random_bytes(spec.auth_key_len);
	return sa;
}

std::string gateway_config(const DemoSide& self, const DemoSide& peer, const crypto::CipherSpec& spec,
                           const SaKeys& out, const SaKeys& in) {
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

void write_private_file(const std::string& path, const std::string& text) {
	platform::UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
	if (!fd) throw_errno("create " + path);
	for (size_t off = 0; off < text.size();) {
		ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) throw_errno("write " + path);
		off += static_cast<size_t>(n);
	}
}

} // namespace esptun::bench
