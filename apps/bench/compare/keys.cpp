// Key material for the comparison's peers, via libcrypto.
#include "apps/bench/compare/keys.hpp"

#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/temp_dir.hpp"

#include <memory>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdexcept>
#include <vector>

namespace esptun::bench::compare {

using namespace lab;
namespace {

struct PkeyFree {
	void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
};
struct X509Free {
	void operator()(X509* x) const noexcept { X509_free(x); }
};
struct BioFree {
	void operator()(BIO* b) const noexcept { BIO_free(b); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("OpenSSL: " + what + " failed"); }

std::string base64(const uint8_t* p, size_t n) {
	std::string out(4 * ((n + 2) / 3) + 1, '\0');
	int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
	out.resize(static_cast<size_t>(len));
	return out;
}

std::string hex_of(const uint8_t* p, size_t n, const char* sep) {
	static constexpr char kDigits[] = "0123456789abcdef";
	static constexpr char kUpper[] = "0123456789ABCDEF";
	const char* d = *sep ? kUpper : kDigits;
	std::string s;
	for (size_t i = 0; i < n; i++) {
		if (i && *sep) s += sep;
		s += d[p[i] >> 4];
		s += d[p[i] & 15];
	}
	return s;
}

/// pem_to_file() - write @what through a BIO to @path (created 0600)
template <class F> void pem_to_file(const std::string& path, F&& what) {
	BIO* mem = BIO_new(BIO_s_mem());
	if (!mem) fail("BIO_new");
	std::unique_ptr<BIO, BioFree> bio(mem);
	if (!what(mem)) fail("PEM write");
	char* data = nullptr;
	long len = BIO_get_mem_data(mem, &data);
	write_private_file(path, std::string(data, static_cast<size_t>(len)));
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
	Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
	if (!key) fail("P-256 keygen");
	std::unique_ptr<X509, X509Free> cert(X509_new());
	if (!cert) fail("X509_new");
	X509* x = cert.get();
	auto serial = random_bytes(8);
	serial[0] &= 0x7f;
	uint64_t sn = 0;
	for (uint8_t b : serial)
		sn = sn << 8 | b;
	if (X509_set_version(x, 2) != 1 || ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), sn) != 1 ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), 2 * 24 * 3600))
		fail("certificate fields");
	X509_NAME* name = X509_get_subject_name(x);
	if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
	                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0) != 1 ||
	    X509_set_issuer_name(x, name) != 1 || X509_set_pubkey(x, key.get()) != 1 ||
	    X509_sign(x, key.get(), EVP_sha256()) <= 0)
		fail("certificate signing");
	pem_to_file(key_path, [&](BIO* b) {
		return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1;
	});
	pem_to_file(cert_path, [&](BIO* b) { return PEM_write_bio_X509(b, x) == 1; });
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (X509_digest(x, EVP_sha256(), md, &mdlen) != 1) fail("X509_digest");
	return hex_of(md, mdlen, ":");
}

std::string openvpn_static_key() {
	auto key = random_bytes(256);
	std::string text = "-----BEGIN OpenVPN Static key V1-----\n";
	for (size_t i = 0; i < key.size(); i += 16)
		text += hex_of(key.data() + i, 16, "") + "\n";
	return text + "-----END OpenVPN Static key V1-----\n";
}

std::string random_hex(size_t bytes) {
	auto b = random_bytes(bytes);
	return hex_of(b.data(), b.size(), "");
}

} // namespace esptun::bench::compare
