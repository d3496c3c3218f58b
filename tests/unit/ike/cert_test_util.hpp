// A small PKI made at test time with OpenSSL (no private key is ever in the
// repository): keys of each kind, CA, intermediate and end-entity
// certificates with chosen names, validity and extensions, and CRLs, all as
// PEM text for Credentials::load() and TrustStore::load().
#pragma once

#include "ike/cert.hpp"

#include <doctest/doctest.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <vector>

namespace esptun::ike::test {

enum class KeyKind { rsa2048, rsa1024, p256, p384, p521, ed25519 };

struct PkeyFree {
	void operator()(EVP_PKEY* p) const noexcept { EVP_PKEY_free(p); }
	void operator()(X509* p) const noexcept { X509_free(p); }
};

/// One key pair.
struct TestKey {
	std::shared_ptr<EVP_PKEY> pkey;
	KeyKind kind = KeyKind::p256;

	explicit TestKey(KeyKind k) : kind(k) {
		EVP_PKEY* p = nullptr;
		switch (k) {
		case KeyKind::rsa2048:
			p = EVP_RSA_gen(2048);
			break;
		case KeyKind::rsa1024:
			p = EVP_RSA_gen(1024);
			break;
		case KeyKind::p256:
			p = EVP_EC_gen("P-256");
			break;
		case KeyKind::p384:
			p = EVP_EC_gen("P-384");
			break;
		case KeyKind::p521:
			p = EVP_EC_gen("P-521");
			break;
		case KeyKind::ed25519:
			p = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
			break;
		}
		REQUIRE(p != nullptr);
		pkey.reset(p, PkeyFree{});
	}
	std::string pem() const {
		BIO* b = BIO_new(BIO_s_mem());
		REQUIRE(PEM_write_bio_PrivateKey(b, pkey.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1);
		char* data = nullptr;
		const long len = BIO_get_mem_data(b, &data);
		std::string out(data, size_t(len));
		BIO_free(b);
		return out;
	}
};

/// What a certificate should say.
struct CertSpec {
	std::string cn;
	bool ca = false;
	std::vector<std::string> dns, email, ip; ///< subjectAltNames
	long not_before_s = -3600;               ///< relative to now
	long not_after_s = 86400;
	std::string key_usage; ///< e.g. "digitalSignature"; empty: none
	long serial = 1;
};

/// A certificate with its key, able to issue others.
struct TestCert {
	std::shared_ptr<X509> x509;
	TestKey key;

	TestCert(const CertSpec& spec, TestKey k, const TestCert* issuer) : key(std::move(k)) {
		X509* x = X509_new();
		REQUIRE(x);
		x509.reset(x, PkeyFree{});
		X509_set_version(x, 2);
		ASN1_INTEGER_set(X509_get_serialNumber(x), spec.serial);
		X509_gmtime_adj(X509_getm_notBefore(x), spec.not_before_s);
		X509_gmtime_adj(X509_getm_notAfter(x), spec.not_after_s);
		X509_NAME* name = X509_get_subject_name(x);
		X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
		                           reinterpret_cast<const unsigned char*>("esptun test"), -1, -1, 0);
		X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
		                           reinterpret_cast<const unsigned char*>(spec.cn.c_str()), -1, -1,
		                           0);
		X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->x509.get()) : name);
		REQUIRE(X509_set_pubkey(x, key.pkey.get()) == 1);
		X509V3_CTX ctx;
		X509V3_set_ctx_nodb(&ctx);
		X509V3_set_ctx(&ctx, issuer ? issuer->x509.get() : x, x, nullptr, nullptr, 0);
		auto add = [&](int nid, const std::string& value) {
			X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
			REQUIRE(e);
			X509_add_ext(x, e, -1);
			X509_EXTENSION_free(e);
		};
		add(NID_basic_constraints, spec.ca ? "critical,CA:TRUE" : "CA:FALSE");
		if (spec.ca)
			add(NID_key_usage, "critical,keyCertSign,cRLSign");
		else if (!spec.key_usage.empty())
			add(NID_key_usage, spec.key_usage);
		add(NID_subject_key_identifier, "hash");
		std::string san;
		for (const auto& d : spec.dns)
			san += (san.empty() ? "" : ",") + ("DNS:" + d);
		for (const auto& d : spec.email)
			san += (san.empty() ? "" : ",") + ("email:" + d);
		for (const auto& d : spec.ip)
			san += (san.empty() ? "" : ",") + ("IP:" + d);
		if (!san.empty()) add(NID_subject_alt_name, san);
		EVP_PKEY* signer = issuer ? issuer->key.pkey.get() : key.pkey.get();
		const bool ed = EVP_PKEY_get_base_id(signer) == EVP_PKEY_ED25519;
		REQUIRE(X509_sign(x, signer, ed ? nullptr : EVP_sha256()) > 0);
	}

	std::string pem() const {
		BIO* b = BIO_new(BIO_s_mem());
		REQUIRE(PEM_write_bio_X509(b, x509.get()) == 1);
		char* data = nullptr;
		const long len = BIO_get_mem_data(b, &data);
		std::string out(data, size_t(len));
		BIO_free(b);
		return out;
	}
	std::vector<uint8_t> der() const {
		const int len = i2d_X509(x509.get(), nullptr);
		std::vector<uint8_t> out(static_cast<size_t>(len));
		unsigned char* p = out.data();
		i2d_X509(x509.get(), &p);
		return out;
	}
	/// A CRL issued by this CA revoking @serials, valid from an hour ago for @valid_s.
	std::string crl_pem(std::vector<long> serials, long valid_s = 86400) const {
		X509_CRL* c = X509_CRL_new();
		REQUIRE(c);
		X509_CRL_set_version(c, 1);
		X509_CRL_set_issuer_name(c, X509_get_subject_name(x509.get()));
		ASN1_TIME* t = ASN1_TIME_adj(nullptr, time(nullptr), 0, -3600);
		X509_CRL_set1_lastUpdate(c, t);
		ASN1_TIME_adj(t, time(nullptr), 0, valid_s);
		X509_CRL_set1_nextUpdate(c, t);
		for (long s : serials) {
			X509_REVOKED* r = X509_REVOKED_new();
			ASN1_INTEGER* n = ASN1_INTEGER_new();
			ASN1_INTEGER_set(n, s);
			X509_REVOKED_set_serialNumber(r, n);
			ASN1_TIME_adj(t, time(nullptr), 0, -60);
			X509_REVOKED_set_revocationDate(r, t);
			X509_CRL_add0_revoked(c, r);
			ASN1_INTEGER_free(n);
		}
		ASN1_TIME_free(t);
		X509_CRL_sort(c);
		const bool ed = EVP_PKEY_get_base_id(key.pkey.get()) == EVP_PKEY_ED25519;
		REQUIRE(X509_CRL_sign(c, key.pkey.get(), ed ? nullptr : EVP_sha256()) > 0);
		BIO* b = BIO_new(BIO_s_mem());
		REQUIRE(PEM_write_bio_X509_CRL(b, c) == 1);
		char* data = nullptr;
		const long len = BIO_get_mem_data(b, &data);
		std::string out(data, size_t(len));
		BIO_free(b);
		X509_CRL_free(c);
		return out;
	}
};

/// Root CA -> intermediate CA -> end entity "gw.example.com" (and the other SANs given).
struct Chain {
	TestCert root, inter, ee;
	Chain(KeyKind ee_kind, CertSpec ee_spec = {}, KeyKind ca_kind = KeyKind::p256,
	      std::string root_cn = "Test Root")
	    : root({root_cn, true, {}, {}, {}, -3600, 10 * 86400, "", 1}, TestKey(ca_kind), nullptr),
	      inter({"Test Intermediate", true, {}, {}, {}, -3600, 10 * 86400, "", 2}, TestKey(ca_kind),
	            &root),
	      ee(fill(std::move(ee_spec)), TestKey(ee_kind), &inter) {}

	static CertSpec fill(CertSpec s) {
		if (s.cn.empty()) s.cn = "gw.example.com";
		if (s.dns.empty() && s.email.empty() && s.ip.empty()) s.dns = {"gw.example.com"};
		if (s.serial == 1) s.serial = 100;
		return s;
	}

	std::shared_ptr<const Credentials> credentials() const {
		std::string err;
		auto c = Credentials::load(ee.pem(), ee.key.pem(), inter.pem(), err);
		INFO(err);
		REQUIRE(c);
		return c;
	}
	std::shared_ptr<const TrustStore> trust(std::vector<std::string> crls = {}) const {
		const std::string ca = root.pem();
		std::vector<std::string_view> cas{ca};
		std::vector<std::string_view> crl_views(crls.begin(), crls.end());
		std::string err;
		auto t = TrustStore::load(cas, crl_views, err);
		INFO(err);
		REQUIRE(t);
		return t;
	}
	/// CERT payload bodies as a peer sends them: encoding 4, then DER.
	std::vector<std::vector<uint8_t>> cert_bodies() const {
		std::vector<std::vector<uint8_t>> out;
		for (const TestCert* c : {&ee, &inter}) {
			std::vector<uint8_t> b{kCertX509Signature};
			const std::vector<uint8_t> d = c->der();
			b.insert(b.end(), d.begin(), d.end());
			out.push_back(std::move(b));
		}
		return out;
	}
};

inline std::vector<std::span<const uint8_t>> spans(const std::vector<std::vector<uint8_t>>& v) {
	return {v.begin(), v.end()};
}

} // namespace esptun::ike::test
