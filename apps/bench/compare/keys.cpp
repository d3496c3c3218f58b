// Key material for the comparison's peers, via libcrypto.
#include "apps/bench/compare/keys.hpp"

#include "apps/bench/lab/pki.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/temp_dir.hpp"

#include <memory>
#include <openssl/evp.h>
#include <stdexcept>
#include <vector>

namespace esptun::bench::compare {

using namespace lab;
namespace {

struct PkeyFree {
	void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("OpenSSL: " + what + " failed"); }

std::string base64(const uint8_t* p, size_t n) {
	std::string out(4 * ((n + 2) / 3) + 1, '\0');
	int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
	out.resize(static_cast<size_t>(len));
	return out;
}

} // namespace

WgKeyPair make_wg_keys() {
	Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
	if (!key) fail("X25519 keygen");
	uint8_t priv[32], pub[32];
	size_t plen = sizeof priv, qlen = sizeof pub;
	if (EVP_PKEY_get_raw_private_key(key.get(), priv, &plen) != 1 ||
	    EVP_PKEY_get_raw_public_key(key.get(), pub, &qlen) != 1 || plen != 32 || qlen != 32)
		fail("X25519 raw key export");
	return {base64(priv, plen), base64(pub, qlen)};
}

std::string make_self_signed(const std::string& cn, const std::string& cert_path,
                             const std::string& key_path) {
	const Issued made = self_signed(cn);
	write_private_file(key_path, made.key_pem);
	write_private_file(cert_path, made.cert_pem);
	return made.sha256;
}

std::string openvpn_static_key() {
	auto key = random_bytes(256);
	std::string text = "-----BEGIN OpenVPN Static key V1-----\n";
	for (size_t i = 0; i < key.size(); i += 16)
		text += hex_text({key.data() + i, 16}) + "\n";
	return text + "-----END OpenVPN Static key V1-----\n";
}

std::string random_hex(size_t bytes) {
	auto b = random_bytes(bytes);
	return hex_text(b);
}

} // namespace esptun::bench::compare
