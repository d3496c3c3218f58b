// Certificates for the bench's peers, made per run with libcrypto (no key
// tool needs to be installed and no key is ever stored): a CA that issues
// P-256 end-entity certificates with a DNS subjectAltName (ike-load's
// clients and responders), and self-signed ones (compare's OpenVPN peers).
#pragma once

#include "base/secret.hpp"

#include <memory>
#include <string>

namespace esptun::bench::lab {

/// A P-256 key and its certificate, as PEM.
struct Issued {
	std::string cert_pem;
	SecretString key_pem; ///< PKCS#8, or SEC1 ("EC PRIVATE KEY") when asked for traditional
	std::string sha256; ///< the certificate's SHA-256, "AB:CD:..." as OpenVPN's peer-fingerprint wants it
};

/// How the key of an Issued is written.
enum class KeyPem { pkcs8, traditional };

/**
 * self_signed() - a fresh P-256 key and a self-signed certificate for
 * CN=@cn, valid from an hour ago for two days. Throws std::runtime_error
 * on an OpenSSL error.
 */
Issued self_signed(const std::string& cn);

/**
 * CertAuthority - a CA of one run: a P-256 key and a self-signed CA
 * certificate (basicConstraints CA, keyCertSign), valid from an hour ago
 * for two days. Its key stays in memory and is freed (and cleansed by
 * OpenSSL) with it.
 */
class CertAuthority {
public:
	explicit CertAuthority(const std::string& cn);
	~CertAuthority();
	CertAuthority(const CertAuthority&) = delete;
	CertAuthority& operator=(const CertAuthority&) = delete;

	const std::string& cert_pem() const noexcept { return cert_pem_; }
	/**
	 * issue() - a fresh P-256 key and a certificate for CN=@dns_name with
	 * @dns_name as its DNS subjectAltName (keyUsage digitalSignature), signed
	 * by this CA. Throws std::runtime_error on an OpenSSL error.
	 */
	Issued issue(const std::string& dns_name, KeyPem form = KeyPem::pkcs8) const;

private:
	struct Impl;
	std::unique_ptr<Impl> impl_;
	std::string cert_pem_;
};

} // namespace esptun::bench::lab
