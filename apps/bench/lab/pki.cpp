// Per-run certificates via libcrypto; see pki.hpp.
#include "apps/bench/lab/pki.hpp"

#include "apps/bench/lab/sa_keys.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdexcept>
#include <vector>

namespace esptun::bench::lab {
namespace {

struct OsslFree {
	void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
	void operator()(X509* x) const noexcept { X509_free(x); }
	void operator()(BIO* b) const noexcept { BIO_free(b); }
	void operator()(X509_EXTENSION* e) const noexcept { X509_EXTENSION_free(e); }
};
using Pkey = std::unique_ptr<EVP_PKEY, OsslFree>;
using Cert = std::unique_ptr<X509, OsslFree>;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("OpenSSL: " + what + " failed"); }

Pkey p256_key() {
	Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
	if (!key) fail("P-256 keygen");
	return key;
}

/// with_bio() - what @write puts into a fresh memory BIO (secure memory for
/// a key: OpenSSL cleanses it when freed), as @Text
template <class Text, class F> Text with_bio(bool secret, F&& write) {
	std::unique_ptr<BIO, OsslFree> bio(BIO_new(secret ? BIO_s_secmem() : BIO_s_mem()));
	if (!bio) fail("BIO_new");
	if (!write(bio.get())) fail("PEM write");
	char* data = nullptr;
	const long len = BIO_get_mem_data(bio.get(), &data);
	return Text(std::string_view(data, size_t(len)));
}

/**
 * new_cert() - a v3 certificate for CN=@cn and @key's public half, signed
 * by @issuer_key as @issuer (nullptr: self-signed), with @extensions
 * ({NID, value} in openssl's config spelling)
 */
Cert new_cert(const std::string& cn, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
              const std::vector<std::pair<int, std::string>>& extensions) {
	Cert cert(X509_new());
	if (!cert) fail("X509_new");
	X509* x = cert.get();
	std::vector<uint8_t> serial = random_bytes(8);
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
	    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name) != 1 ||
	    X509_set_pubkey(x, key) != 1)
		fail("certificate names");
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, nullptr, nullptr, 0);
	for (const auto& [nid, value] : extensions) {
		std::unique_ptr<X509_EXTENSION, OsslFree> ext(
		    X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
		if (!ext || X509_add_ext(x, ext.get(), -1) != 1) fail("certificate extension " + value);
	}
	if (X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) <= 0) fail("certificate signing");
	return cert;
}

Issued issued(X509* cert, EVP_PKEY* key, KeyPem form) {
	Issued out;
	out.cert_pem = with_bio<std::string>(false, [&](BIO* b) { return PEM_write_bio_X509(b, cert) == 1; });
	out.key_pem = with_bio<SecretString>(true, [&](BIO* b) {
		return (form == KeyPem::traditional
		            ? PEM_write_bio_PrivateKey_traditional(b, key, nullptr, nullptr, 0, nullptr,
		                                                   nullptr)
		            : PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr)) == 1;
	});
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	if (X509_digest(cert, EVP_sha256(), md, &len) != 1) fail("X509_digest");
	out.sha256 = hex_text({md, len}, ':', true);
	return out;
}

} // namespace

Issued self_signed(const std::string& cn) {
	Pkey key = p256_key();
	Cert cert = new_cert(cn, key.get(), nullptr, nullptr, {});
	return issued(cert.get(), key.get(), KeyPem::pkcs8);
}

struct CertAuthority::Impl {
	Pkey key;
	Cert cert;
};

CertAuthority::CertAuthority(const std::string& cn) : impl_(std::make_unique<Impl>()) {
	impl_->key = p256_key();
	impl_->cert = new_cert(
	    cn, impl_->key.get(), nullptr, nullptr,
	    {{NID_basic_constraints, "critical,CA:TRUE"}, {NID_key_usage, "critical,keyCertSign,cRLSign"}});
	cert_pem_ = with_bio<std::string>(
	    false, [&](BIO* b) { return PEM_write_bio_X509(b, impl_->cert.get()) == 1; });
}

CertAuthority::~CertAuthority() = default;

Issued CertAuthority::issue(const std::string& dns_name, KeyPem form) const {
	Pkey key = p256_key();
	Cert cert = new_cert(dns_name, key.get(), impl_->cert.get(), impl_->key.get(),
	                     {{NID_basic_constraints, "critical,CA:FALSE"},
	                      {NID_key_usage, "critical,digitalSignature"},
	                      {NID_subject_alt_name, "DNS:" + dns_name}});
	return issued(cert.get(), key.get(), form);
}

} // namespace esptun::bench::lab
