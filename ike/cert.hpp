// IKEv2 authentication with certificates and signatures (RFC 7296 sections
// 2.15, 3.6-3.8; RFC 7427 "Digital Signature" with the hash algorithms of
// SIGNATURE_HASH_ALGORITHMS; RFC 4754 ECDSA; RFC 8420 Ed25519). Pure: no
// I/O. The service reads the PEM files at load time and hands their bytes
// here; the engine (engine_auth.cpp) signs and verifies AUTH with them.
//
// A peer's AUTH, in the order verify_peer() checks it:
//   1. its end-entity certificate is the first CERT payload (encoding 4);
//      the others are intermediates (at most kMaxPeerCerts, kMaxCertLen each);
//   2. the chain leads to one of our trusted CAs, every certificate is
//      within its validity, none is revoked (when CRLs are configured), and
//      the end-entity's keyUsage, where present, allows digitalSignature;
//   3. the peer's ID payload is one of the certificate's subjectAltNames
//      (an ID of type DER_ASN1_DN: the certificate's subject);
//   4. the AUTH signature verifies over the signed octets with its key.
#pragma once

#include "base/secret.hpp"
#include "ike/keymat.hpp"
#include "ike/message.hpp"

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::ike {

struct Identity;

/// CERT / CERTREQ encoding 4: "X.509 Certificate - Signature" (section 3.6).
inline constexpr uint8_t kCertX509Signature = 4;
/// At most this many CERT payloads from a peer (its certificate and intermediates).
inline constexpr size_t kMaxPeerCerts = 8;
/// A certificate longer than this (DER) is refused.
inline constexpr size_t kMaxCertLen = 16384;
/// At most this many CA hashes in a CERTREQ we send.
inline constexpr size_t kMaxCertreqCas = 32;

/// A CERT or CERTREQ body: encoding 4, then @data (a DER certificate, or CA key hashes).
std::vector<uint8_t> cert_body(std::span<const uint8_t> data);

/// RFC 7427 section 7 hash algorithm IDs (IANA "IKEv2 Hash Algorithms").
enum class SigHash : uint16_t { sha1 = 1, sha256 = 2, sha384 = 3, sha512 = 4, identity = 5 };

/// A set of SigHash values, one bit per ID.
using SigHashSet = uint8_t;
constexpr SigHashSet sig_hash_bit(SigHash h) noexcept { return SigHashSet(1u << unsigned(h)); }

/// What we announce in SIGNATURE_HASH_ALGORITHMS and accept in method 14:
/// SHA2-256, -384, -512 and Identity (for Ed25519). Not SHA-1.
inline constexpr SigHashSet kOurSigHashes = sig_hash_bit(SigHash::sha256) | sig_hash_bit(SigHash::sha384) |
                                            sig_hash_bit(SigHash::sha512) | sig_hash_bit(SigHash::identity);

/// The SIGNATURE_HASH_ALGORITHMS notify data for kOurSigHashes.
std::vector<uint8_t> sig_hashes_notify_data();
/// The known IDs a peer's SIGNATURE_HASH_ALGORITHMS data lists (unknown ones
/// are skipped; an odd length counts up to the last whole ID).
SigHashSet parse_sig_hashes(std::span<const uint8_t> data) noexcept;

/**
 * signed_octets() - what AUTH signs (section 2.15):
 *   message | nonce | prf(SK_p, id_body)
 * with the same arguments as psk_auth().
 */
std::vector<uint8_t> signed_octets(PrfId p, std::span<const uint8_t> message, std::span<const uint8_t> nonce,
                                   std::span<const uint8_t> sk_p, std::span<const uint8_t> id_body);

/**
 * Credentials - our certificate, its chain and its private key.
 * The key lives in an EVP_PKEY, which OpenSSL frees and cleanses; the PEM
 * text it came from is the caller's (a SecretString, wiped when freed).
 */
class Credentials {
public:
	/**
	 * load() - parse our credentials
	 * @cert_pem:  our certificate (PEM; the first certificate in it is ours)
	 * @key_pem:   its private key (PEM, PKCS#8 or traditional, unencrypted)
	 * @chain_pem: intermediate CA certificates to send after ours (PEM, may be empty)
	 * @err:       why not, on failure
	 * Return: the credentials, or nullptr when a file does not parse, the
	 * key is not RSA (2048 bits or more), ECDSA P-256/P-384 or Ed25519, or
	 * it is not the certificate's key.
	 */
	static std::shared_ptr<const Credentials> load(std::string_view cert_pem, std::string_view key_pem,
	                                               std::string_view chain_pem, std::string& err);
	~Credentials();
	Credentials(const Credentials&) = delete;
	Credentials& operator=(const Credentials&) = delete;

	/// Our certificate first, then the chain, each DER.
	const std::vector<std::vector<uint8_t>>& certs_der() const noexcept { return der_; }
	/// "RSA-3072", "ECDSA-P256", "ECDSA-P384", "Ed25519".
	const std::string& key_type() const noexcept { return key_type_; }
	/// SHA-256 over the certificates: equal for credentials loaded from the
	/// same files (the key is bound to the first certificate).
	const std::vector<uint8_t>& fingerprint() const noexcept { return fingerprint_; }
	std::string subject() const;
	std::string issuer() const;
	/// Whether @id is among our certificate's subjectAltNames (the subject for a DN).
	bool certifies(const Identity& id) const;
	/**
	 * sign() - the AUTH payload for @octets (signed_octets()): method 14
	 * with the strongest hash both sides allow (@peer_hashes: its
	 * SIGNATURE_HASH_ALGORITHMS; 0 when it sent none, then SHA2-256), RSA
	 * as PKCS#1 v1.5, or RSASSA-PSS when @rsa_pss. Throws std::runtime_error
	 * if OpenSSL fails.
	 */
	AuthPayload sign(std::span<const uint8_t> octets, SigHashSet peer_hashes, bool rsa_pss = false) const;

private:
	friend struct CertAccess;
	Credentials() = default;
	void* key_ = nullptr;  ///< EVP_PKEY*
	void* cert_ = nullptr; ///< X509*
	std::vector<std::vector<uint8_t>> der_;
	std::string key_type_;
	std::vector<uint8_t> fingerprint_;
};

/**
 * TrustStore - the CAs we trust for a peer's certificate, with their CRLs.
 */
class TrustStore {
public:
	/**
	 * load() - parse trusted CAs and CRLs
	 * @ca_pems:  PEM texts, each with one or more CA certificates
	 * @crl_pems: PEM texts, each with one or more CRLs (PEM or DER: DER for one CRL)
	 * @err:      why not
	 * Return: nullptr (and @err) when a text holds nothing usable or there is no CA at all.
	 */
	static std::shared_ptr<const TrustStore> load(std::span<const std::string_view> ca_pems,
	                                              std::span<const std::string_view> crl_pems,
	                                              std::string& err);
	~TrustStore();
	TrustStore(const TrustStore&) = delete;
	TrustStore& operator=(const TrustStore&) = delete;

	size_t ca_count() const noexcept { return cas_.size(); }
	size_t crl_count() const noexcept { return crls_.size(); }
	/// The CERTREQ body: encoding 4 and the SHA-1 of each CA's subjectPublicKeyInfo (section 3.7).
	std::vector<uint8_t> certreq_body() const;
	/// SHA-1 hashes of the CAs' public keys, concatenated (what certreq_body() carries).
	const std::vector<uint8_t>& ca_key_hashes() const noexcept { return hashes_; }
	/// SHA-256 over the CAs and CRLs: equal for stores loaded from the same contents.
	const std::vector<uint8_t>& fingerprint() const noexcept { return fingerprint_; }

private:
	friend struct TrustAccess;
	friend struct CertAccess;
	TrustStore() = default;
	std::vector<void*> cas_;  ///< X509*
	std::vector<void*> crls_; ///< X509_CRL*
	std::vector<uint8_t> hashes_, fingerprint_;
};

/**
 * CertAccess - the OpenSSL objects behind Credentials and TrustStore, for
 * EAP-TLS (eap_tls.cpp), which hands them to libssl and must judge a
 * certificate by the same rules as verify_peer(). Internal to ike/. The
 * pointers are OpenSSL's types as void*, as in the classes themselves.
 */
struct CertAccess {
	/// EVP_PKEY* and X509* of @c (owned by @c).
	static void* key(const Credentials& c) noexcept { return c.key_; }
	static void* cert(const Credentials& c) noexcept { return c.cert_; }
	/// A new X509_STORE* (the caller frees it) with @t's CAs and CRLs, and
	/// X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL when there are CRLs.
	/// nullptr when out of memory.
	static void* new_store(const TrustStore& t) noexcept;
	/// "CN=gw, O=Example": the subject of the X509* @x.
	static std::string subject(const void* x);
	/// Whether the X509* @x certifies @id (what Credentials::certifies() checks).
	static bool certifies(const void* x, const Identity& id);
	/// Why X509_verify_cert() failed with @err at the X509* @x (may be nullptr).
	static std::string verify_error(int err, const void* x);
};

/// What verify_peer() found.
struct PeerAuth {
	bool ok = false;
	std::string error;   ///< on failure: the reason, for the log line
	std::string subject; ///< the end-entity's subject and issuer (when it parsed)
	std::string issuer;
	std::string method; ///< e.g. "ECDSA-P256 with SHA2-256 (RFC 7427)"
};

/**
 * verify_peer() - steps 1-4 of the file head
 * @trust:       our trust anchors and CRLs for this peer
 * @cert_bodies: the bodies of the peer's CERT payloads in order (encoding byte first)
 * @id:          the peer's identity from its ID payload
 * @auth:        its AUTH payload
 * @octets:      what it must have signed (signed_octets())
 * @at:          the time to check validity at; nullopt: now
 * Never throws for anything the peer sent; every failure is a reason in
 * PeerAuth::error.
 */
PeerAuth verify_peer(const TrustStore& trust, std::span<const std::span<const uint8_t>> cert_bodies,
                     const Identity& id, const AuthPayload& auth, std::span<const uint8_t> octets,
                     std::optional<std::time_t> at = std::nullopt) noexcept;

/// "CN=gw, O=Example" for a DER Name (ID type DER_ASN1_DN); nullopt if it does not parse.
std::optional<std::string> dn_text(std::span<const uint8_t> der);
/// "CN=gw, O=Example" or "/CN=gw/O=Example" -> DER Name; nullopt if it is not one.
std::optional<std::vector<uint8_t>> parse_dn(std::string_view text);
/// Two DER Names are the same name (X509_NAME_cmp: canonical comparison).
bool dn_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

} // namespace esptun::ike
