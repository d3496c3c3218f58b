// What ike/cert.cpp (certificates, trust stores, the peer's chain) and
// ike/signature.cpp (AUTH signatures: reading, checking, signing) share.
// Internal to ike/: OpenSSL's types appear here, never in ike/cert.hpp.
#pragma once

#include "ike/cert.hpp"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace esptun::ike::cert_detail {

/// Frees each OpenSSL object with its own function.
struct Del {
	void operator()(X509* p) const noexcept { X509_free(p); }
	void operator()(X509_CRL* p) const noexcept { X509_CRL_free(p); }
	void operator()(X509_STORE* p) const noexcept { X509_STORE_free(p); }
	void operator()(X509_STORE_CTX* p) const noexcept { X509_STORE_CTX_free(p); }
	void operator()(BIO* p) const noexcept { BIO_free(p); }
	void operator()(EVP_PKEY* p) const noexcept { EVP_PKEY_free(p); }
	void operator()(EVP_MD_CTX* p) const noexcept { EVP_MD_CTX_free(p); }
	void operator()(X509_ALGOR* p) const noexcept { X509_ALGOR_free(p); }
	void operator()(RSA_PSS_PARAMS* p) const noexcept { RSA_PSS_PARAMS_free(p); }
	void operator()(X509_NAME* p) const noexcept { X509_NAME_free(p); }
	void operator()(GENERAL_NAMES* p) const noexcept { GENERAL_NAMES_free(p); }
	void operator()(ECDSA_SIG* p) const noexcept { ECDSA_SIG_free(p); }
	void operator()(STACK_OF(X509) * p) const noexcept { sk_X509_free(p); }
	void operator()(BIGNUM* p) const noexcept { BN_free(p); }
};
template <class T> using Ptr = std::unique_ptr<T, Del>;

/// key_type_of() - "RSA-2048", "ECDSA-P256", "Ed25519", ... or "unsupported"
std::string key_type_of(EVP_PKEY* k);

/// How a peer's AUTH says it signed.
struct SigScheme {
	enum class Kind : uint8_t { rsa, rsa_pss, ecdsa, ed25519 } kind = Kind::rsa;
	SigHash hash = SigHash::sha256;
	int pss_salt = 0;
	std::span<const uint8_t> signature;
	std::vector<uint8_t> der_signature; ///< classic ECDSA: r | s turned into DER
	int curve_bytes = 0;                ///< classic ECDSA: the curve the method names
	std::string text;
};

/**
 * parse_auth() - what a peer's AUTH payload says it signed with
 * Return: an error text when it is not a signature we take (the peer's
 * input: nothing is thrown for it)
 */
std::optional<std::string> parse_auth(const AuthPayload& auth, SigScheme& s);

/**
 * check_signature() - @s over @octets with the certificate key @pub
 * Return: an error text when the key does not fit or the signature does not verify
 */
std::optional<std::string> check_signature(EVP_PKEY* pub, const SigScheme& s,
                                           std::span<const uint8_t> octets);

} // namespace esptun::ike::cert_detail
