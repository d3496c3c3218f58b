// Certificates for IKE_AUTH through OpenSSL: our credentials, trust stores,
// the peer's chain and identity (see cert.hpp for the order of the checks),
// distinguished names. The AUTH signature itself is in signature.cpp.
// Everything a peer sent is parsed with full length checks and every
// OpenSSL failure becomes a reason, not an exception.
#include "ike/cert_internal.hpp"

#include "ike/engine.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <stdexcept>

namespace esptun::ike {

using namespace cert_detail;

struct TrustAccess {
	static const std::vector<void*>& cas(const TrustStore& t) { return t.cas_; }
	static const std::vector<void*>& crls(const TrustStore& t) { return t.crls_; }
};

namespace {

Ptr<BIO> mem_bio(std::string_view text) {
	if (text.size() > size_t(INT_MAX)) throw std::length_error("PEM text too long");
	Ptr<BIO> b(BIO_new_mem_buf(text.data(), int(text.size())));
	if (!b) throw std::bad_alloc();
	return b;
}

/// Every certificate in a PEM text, in order.
std::vector<Ptr<X509>> read_certs(std::string_view pem) {
	std::vector<Ptr<X509>> out;
	Ptr<BIO> b = mem_bio(pem);
	while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr))
		out.emplace_back(x);
	ERR_clear_error(); // the end of the text leaves "no start line" queued
	return out;
}

/// A passphrase callback that gives none: an encrypted key fails instead of prompting.
int no_passphrase(char*, int, int, void*) { return -1; }

std::vector<uint8_t> der_of(X509* x) {
	const int len = i2d_X509(x, nullptr);
	if (len <= 0) openssl_util::fail("encoding a certificate");
	std::vector<uint8_t> out(static_cast<size_t>(len));
	unsigned char* p = out.data();
	i2d_X509(x, &p);
	return out;
}

std::string name_text(const X509_NAME* name) {
	std::string out;
	const int n = X509_NAME_entry_count(name);
	for (int i = 0; i < n; i++) {
		const X509_NAME_ENTRY* e = X509_NAME_get_entry(name, i);
		const ASN1_OBJECT* obj = X509_NAME_ENTRY_get_object(e);
		const int nid = OBJ_obj2nid(obj);
		std::string key;
		if (nid != NID_undef) {
			key = OBJ_nid2sn(nid);
		} else {
			char buf[80];
			OBJ_obj2txt(buf, sizeof buf, obj, 1);
			key = buf;
		}
		unsigned char* utf8 = nullptr;
		const int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(e));
		std::string value;
		if (len >= 0) {
			for (int k = 0; k < len; k++) {
				const unsigned char c = utf8[k];
				value += (c >= 0x20 && c != 0x7f) ? char(c) : '?';
			}
			OPENSSL_free(utf8);
		}
		out += (out.empty() ? "" : ", ") + key + "=" + value;
	}
	return out;
}

Ptr<X509_NAME> name_of(std::span<const uint8_t> der) {
	if (der.empty() || der.size() > kMaxCertLen) return nullptr;
	const unsigned char* p = der.data();
	Ptr<X509_NAME> n(d2i_X509_NAME(nullptr, &p, long(der.size())));
	if (!n || p != der.data() + der.size()) {
		ERR_clear_error();
		return nullptr;
	}
	return n;
}

bool iequal(const unsigned char* a, size_t alen, std::span<const uint8_t> b) {
	if (alen != b.size()) return false;
	for (size_t i = 0; i < alen; i++)
		if (std::tolower(a[i]) != std::tolower(b[i])) return false;
	return true;
}

/// Whether @x certifies @id: a subjectAltName of the ID's kind that equals
/// it (DNS names and e-mail addresses without regard to case), or for a DN
/// the certificate's subject.
bool cert_matches(X509* x, const Identity& id) {
	if (id.type == IdType::der_asn1_dn) {
		Ptr<X509_NAME> n = name_of(id.data);
		return n && X509_NAME_cmp(X509_get_subject_name(x), n.get()) == 0;
	}
	int want = 0;
	switch (id.type) {
	case IdType::fqdn:
		want = GEN_DNS;
		break;
	case IdType::rfc822:
		want = GEN_EMAIL;
		break;
	case IdType::ipv4:
	case IdType::ipv6:
		want = GEN_IPADD;
		break;
	default:
		return false;
	}
	Ptr<GENERAL_NAMES> names(
	    static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr)));
	ERR_clear_error();
	if (!names) return false;
	for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); i++) {
		const GENERAL_NAME* g = sk_GENERAL_NAME_value(names.get(), i);
		if (g->type != want) continue;
		const ASN1_STRING* s = want == GEN_DNS     ? g->d.dNSName
		                       : want == GEN_EMAIL ? g->d.rfc822Name
		                                           : g->d.iPAddress;
		const unsigned char* d = ASN1_STRING_get0_data(s);
		const size_t len = size_t(ASN1_STRING_length(s));
		if (want == GEN_IPADD ? (len == id.data.size() && std::equal(d, d + len, id.data.begin()))
		                      : iequal(d, len, id.data))
			return true;
	}
	return false;
}

/// SHA-256 over @parts, each preceded by its length.
std::vector<uint8_t> fingerprint_of(const std::vector<std::vector<uint8_t>>& parts) {
	Ptr<EVP_MD_CTX> ctx(EVP_MD_CTX_new());
	if (!ctx) throw std::bad_alloc();
	openssl_util::check(EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256 init");
	for (const auto& p : parts) {
		const uint8_t len[4] = {uint8_t(p.size() >> 24), uint8_t(p.size() >> 16),
		                        uint8_t(p.size() >> 8), uint8_t(p.size())};
		openssl_util::check(EVP_DigestUpdate(ctx.get(), len, 4) == 1 &&
		                        EVP_DigestUpdate(ctx.get(), p.data(), p.size()) == 1,
		                    "SHA-256 update");
	}
	std::vector<uint8_t> out(32);
	unsigned n = 0;
	openssl_util::check(EVP_DigestFinal_ex(ctx.get(), out.data(), &n) == 1, "SHA-256 final");
	return out;
}

std::string verify_error_text(int err, X509* at) {
	std::string who = at ? " (" + name_text(X509_get_subject_name(at)) + ")" : "";
	switch (err) {
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
		return "its certificate does not lead to a trusted CA (unknown CA" + who + ")";
	case X509_V_ERR_CERT_HAS_EXPIRED:
		return "a certificate in its chain has expired" + who;
	case X509_V_ERR_CERT_NOT_YET_VALID:
		return "a certificate in its chain is not valid yet" + who;
	case X509_V_ERR_CERT_REVOKED:
		return "a certificate in its chain is revoked" + who;
	case X509_V_ERR_UNABLE_TO_GET_CRL:
		return "CRLs are checked, and there is none for a certificate in its chain" + who +
		       " (configure a CRL of each CA)";
	case X509_V_ERR_CRL_HAS_EXPIRED:
		return "the CRL for a certificate in its chain is out of date" + who;
	case X509_V_ERR_CRL_NOT_YET_VALID:
		return "the CRL for a certificate in its chain is not valid yet" + who;
	case X509_V_ERR_CERT_SIGNATURE_FAILURE:
		return "a certificate signature in its chain does not verify" + who;
	default:
		return std::string("its certificate chain does not verify: ") +
		       X509_verify_cert_error_string(err) + who;
	}
}

} // namespace

// ---- CERT payloads ----------------------------------------------------------

std::vector<uint8_t> cert_body(std::span<const uint8_t> data) {
	std::vector<uint8_t> out(1 + data.size());
	out[0] = kCertX509Signature;
	std::copy(data.begin(), data.end(), out.begin() + 1);
	return out;
}

// ---- our credentials -------------------------------------------------------

std::shared_ptr<const Credentials> Credentials::load(std::string_view cert_pem, std::string_view key_pem,
                                                     std::string_view chain_pem, std::string& err) {
	std::shared_ptr<Credentials> c(new Credentials());
	std::vector<Ptr<X509>> own = read_certs(cert_pem);
	if (own.empty()) {
		err = "holds no PEM certificate";
		return nullptr;
	}
	Ptr<BIO> kb = mem_bio(key_pem);
	Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(kb.get(), nullptr, no_passphrase, nullptr));
	ERR_clear_error();
	if (!key) {
		err = "the private key does not parse (an unencrypted PEM private key is needed)";
		return nullptr;
	}
	const std::string type = key_type_of(key.get());
	const int base = EVP_PKEY_get_base_id(key.get());
	if (type == "unsupported" ||
	    (type.starts_with("ECDSA") && type != "ECDSA-P256" && type != "ECDSA-P384") ||
	    ((base == EVP_PKEY_RSA || base == EVP_PKEY_RSA_PSS) && EVP_PKEY_get_bits(key.get()) < 2048)) {
		err = "the private key is " + type +
		      "; use RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519";
		return nullptr;
	}
	if (X509_check_private_key(own.front().get(), key.get()) != 1) {
		ERR_clear_error();
		err = "the private key is not the certificate's key";
		return nullptr;
	}
	c->der_.push_back(der_of(own.front().get()));
	for (auto& x : read_certs(chain_pem))
		c->der_.push_back(der_of(x.get()));
	c->key_type_ = type;
	c->fingerprint_ = fingerprint_of(c->der_);
	c->key_ = key.release();
	c->cert_ = own.front().release();
	return c;
}

Credentials::~Credentials() {
	EVP_PKEY_free(static_cast<EVP_PKEY*>(key_));
	X509_free(static_cast<X509*>(cert_));
}

std::string Credentials::subject() const {
	return name_text(X509_get_subject_name(static_cast<X509*>(cert_)));
}
std::string Credentials::issuer() const { return name_text(X509_get_issuer_name(static_cast<X509*>(cert_))); }
bool Credentials::certifies(const Identity& id) const { return cert_matches(static_cast<X509*>(cert_), id); }

// ---- trust store -----------------------------------------------------------

std::shared_ptr<const TrustStore> TrustStore::load(std::span<const std::string_view> ca_pems,
                                                   std::span<const std::string_view> crl_pems,
                                                   std::string& err) {
	std::shared_ptr<TrustStore> t(new TrustStore());
	for (size_t i = 0; i < ca_pems.size(); i++) {
		std::vector<Ptr<X509>> certs = read_certs(ca_pems[i]);
		if (certs.empty()) {
			err = "CA file " + std::to_string(i + 1) + " holds no PEM certificate";
			return nullptr;
		}
		for (auto& x : certs) {
			if (X509_check_ca(x.get()) == 0) {
				err = "the certificate " + name_text(X509_get_subject_name(x.get())) +
				      " is not a CA certificate";
				return nullptr;
			}
			// CERTREQ (section 3.7): SHA-1 of the CA's subjectPublicKeyInfo.
			unsigned char* spki = nullptr;
			const int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x.get()), &spki);
			if (len <= 0) openssl_util::fail("encoding a CA public key");
			uint8_t h[SHA_DIGEST_LENGTH];
			SHA1(spki, size_t(len), h);
			OPENSSL_free(spki);
			t->hashes_.insert(t->hashes_.end(), h, h + sizeof h);
			t->cas_.push_back(x.release());
		}
	}
	if (t->cas_.empty()) {
		err = "no CA certificate";
		return nullptr;
	}
	for (size_t i = 0; i < crl_pems.size(); i++) {
		const size_t before = t->crls_.size();
		Ptr<BIO> b = mem_bio(crl_pems[i]);
		while (X509_CRL* c = PEM_read_bio_X509_CRL(b.get(), nullptr, nullptr, nullptr))
			t->crls_.push_back(c);
		ERR_clear_error();
		if (t->crls_.size() == before) {
			const unsigned char* p = reinterpret_cast<const unsigned char*>(crl_pems[i].data());
			X509_CRL* c = d2i_X509_CRL(nullptr, &p, long(crl_pems[i].size()));
			ERR_clear_error();
			if (!c) {
				err = "CRL file " + std::to_string(i + 1) + " holds no CRL (PEM or DER)";
				return nullptr;
			}
			t->crls_.push_back(c);
		}
	}
	std::vector<std::vector<uint8_t>> parts;
	for (void* x : t->cas_)
		parts.push_back(der_of(static_cast<X509*>(x)));
	for (void* c : t->crls_) {
		const int len = i2d_X509_CRL(static_cast<X509_CRL*>(c), nullptr);
		if (len <= 0) openssl_util::fail("encoding a CRL");
		std::vector<uint8_t>& d = parts.emplace_back(static_cast<size_t>(len));
		unsigned char* p = d.data();
		i2d_X509_CRL(static_cast<X509_CRL*>(c), &p);
	}
	t->fingerprint_ = fingerprint_of(parts);
	return t;
}

TrustStore::~TrustStore() {
	for (void* x : cas_)
		X509_free(static_cast<X509*>(x));
	for (void* c : crls_)
		X509_CRL_free(static_cast<X509_CRL*>(c));
}

std::vector<uint8_t> TrustStore::certreq_body() const {
	const size_t n = std::min(hashes_.size(), kMaxCertreqCas * SHA_DIGEST_LENGTH);
	return cert_body(std::span<const uint8_t>(hashes_).first(n));
}

// ---- the peer's AUTH -------------------------------------------------------

PeerAuth verify_peer(const TrustStore& trust, std::span<const std::span<const uint8_t>> cert_bodies,
                     const Identity& id, const AuthPayload& auth, std::span<const uint8_t> octets,
                     std::optional<std::time_t> at) noexcept {
	PeerAuth r;
	try {
		SigScheme scheme;
		if (auto err = parse_auth(auth, scheme)) {
			r.error = "it uses " + *err;
			return r;
		}
		r.method = scheme.text;
		// 1. Its certificate, then the intermediates.
		if (cert_bodies.empty()) {
			r.error = "it sent no certificate (CERT payload)";
			return r;
		}
		if (cert_bodies.size() > kMaxPeerCerts) {
			r.error = "it sent " + std::to_string(cert_bodies.size()) +
			          " certificates; at most " + std::to_string(kMaxPeerCerts) + " are taken";
			return r;
		}
		std::vector<Ptr<X509>> certs;
		for (std::span<const uint8_t> body : cert_bodies) {
			if (body.empty() || body[0] != kCertX509Signature) {
				r.error = "it sent a certificate of encoding " +
				          std::to_string(body.empty() ? 0 : body[0]) +
				          " (only X.509 Certificate - Signature, 4, is taken)";
				return r;
			}
			if (body.size() - 1 > kMaxCertLen) {
				r.error = "it sent a certificate of " + std::to_string(body.size() - 1) +
				          " bytes; at most " + std::to_string(kMaxCertLen) + " are taken";
				return r;
			}
			const unsigned char* p = body.data() + 1;
			Ptr<X509> x(d2i_X509(nullptr, &p, long(body.size() - 1)));
			if (!x || p != body.data() + body.size()) {
				ERR_clear_error();
				r.error = "it sent a certificate that does not parse";
				return r;
			}
			certs.push_back(std::move(x));
		}
		X509* ee = certs.front().get();
		r.subject = name_text(X509_get_subject_name(ee));
		r.issuer = name_text(X509_get_issuer_name(ee));
		// 2. The chain to a trusted CA, validity, revocation.
		Ptr<X509_STORE> store(static_cast<X509_STORE*>(CertAccess::new_store(trust)));
		Ptr<STACK_OF(X509)> untrusted(sk_X509_new_null());
		Ptr<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
		if (!store || !untrusted || !ctx) throw std::bad_alloc();
		for (size_t i = 1; i < certs.size(); i++)
			if (!sk_X509_push(untrusted.get(), certs[i].get())) throw std::bad_alloc();
		if (X509_STORE_CTX_init(ctx.get(), store.get(), ee, untrusted.get()) != 1)
			throw std::bad_alloc();
		if (at) X509_STORE_CTX_set_time(ctx.get(), 0, *at);
		if (X509_verify_cert(ctx.get()) != 1) {
			r.error = verify_error_text(X509_STORE_CTX_get_error(ctx.get()),
			                            X509_STORE_CTX_get_current_cert(ctx.get()));
			ERR_clear_error();
			return r;
		}
		if ((X509_get_extension_flags(ee) & EXFLAG_KUSAGE) &&
		    !(X509_get_key_usage(ee) & KU_DIGITAL_SIGNATURE)) {
			r.error = "its certificate's keyUsage does not allow digitalSignature";
			return r;
		}
		// 3. The identity it claims is one its certificate names.
		if (!cert_matches(ee, id)) {
			r.error = "its identity '" +
			          (id.type == IdType::der_asn1_dn ? dn_text(id.data).value_or("?")
			                                          : identity_text(id)) +
			          "' is not in its certificate (" + r.subject + ") as a subjectAltName" +
			          (id.type == IdType::der_asn1_dn ? " or subject" : "");
			return r;
		}
		// 4. The signature.
		EVP_PKEY* pub = X509_get0_pubkey(ee);
		if (!pub) {
			ERR_clear_error();
			r.error = "its certificate's public key does not parse";
			return r;
		}
		r.method = key_type_of(pub) + ", " + scheme.text;
		if (auto err = check_signature(pub, scheme, octets)) {
			r.error = *err;
			return r;
		}
		r.ok = true;
	} catch (const std::exception& e) {
		ERR_clear_error();
		r.ok = false;
		r.error = std::string("internal error while verifying: ") + e.what();
	}
	return r;
}

// ---- access for EAP-TLS ----------------------------------------------------

void* CertAccess::new_store(const TrustStore& t) noexcept {
	X509_STORE* store = X509_STORE_new();
	if (!store) return nullptr;
	for (void* ca : TrustAccess::cas(t))
		if (X509_STORE_add_cert(store, static_cast<X509*>(ca)) != 1) ERR_clear_error();
	for (void* crl : TrustAccess::crls(t))
		if (X509_STORE_add_crl(store, static_cast<X509_CRL*>(crl)) != 1) ERR_clear_error();
	if (!TrustAccess::crls(t).empty())
		X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
	return store;
}

std::string CertAccess::subject(const void* x) {
	return name_text(X509_get_subject_name(static_cast<const X509*>(x)));
}

bool CertAccess::certifies(const void* x, const Identity& id) {
	return cert_matches(const_cast<X509*>(static_cast<const X509*>(x)), id);
}

std::string CertAccess::verify_error(int err, const void* x) {
	return verify_error_text(err, const_cast<X509*>(static_cast<const X509*>(x)));
}

// ---- distinguished names ---------------------------------------------------

std::optional<std::string> dn_text(std::span<const uint8_t> der) {
	Ptr<X509_NAME> n = name_of(der);
	if (!n) return std::nullopt;
	return name_text(n.get());
}

std::optional<std::vector<uint8_t>> parse_dn(std::string_view text) {
	const char sep = !text.empty() && text.front() == '/' ? '/' : ',';
	if (sep == '/') text.remove_prefix(1);
	Ptr<X509_NAME> n(X509_NAME_new());
	if (!n) throw std::bad_alloc();
	auto trim = [](std::string_view s) {
		while (!s.empty() && s.front() == ' ')
			s.remove_prefix(1);
		while (!s.empty() && s.back() == ' ')
			s.remove_suffix(1);
		return s;
	};
	while (!text.empty()) {
		const size_t end = text.find(sep);
		const std::string_view part = trim(text.substr(0, end));
		text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
		const size_t eq = part.find('=');
		if (eq == std::string_view::npos) return std::nullopt;
		const std::string key(trim(part.substr(0, eq)));
		const std::string value(trim(part.substr(eq + 1)));
		if (key.empty() || value.empty() ||
		    X509_NAME_add_entry_by_txt(n.get(), key.c_str(), MBSTRING_UTF8,
		                               reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1,
		                               0) != 1) {
			ERR_clear_error();
			return std::nullopt;
		}
	}
	if (X509_NAME_entry_count(n.get()) == 0) return std::nullopt;
	const int len = i2d_X509_NAME(n.get(), nullptr);
	if (len <= 0) return std::nullopt;
	std::vector<uint8_t> out(static_cast<size_t>(len));
	unsigned char* p = out.data();
	i2d_X509_NAME(n.get(), &p);
	return out;
}

bool dn_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
	Ptr<X509_NAME> x = name_of(a), y = name_of(b);
	return x && y && X509_NAME_cmp(x.get(), y.get()) == 0;
}

} // namespace esptun::ike
