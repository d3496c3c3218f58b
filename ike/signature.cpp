// AUTH signatures (RFC 7296 section 3.8, RFC 7427 digital signatures,
// RFC 4754 ECDSA, RFC 8420 Ed25519): what a peer's AUTH says it signed
// with, whether it verifies with its certificate's key, the hash
// algorithms both sides announce, and our own signature. The certificate
// checks around them are in cert.cpp.
#include "ike/cert_internal.hpp"

#include "ike/keymat.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/core_names.h>
#include <openssl/objects.h>

#include <stdexcept>

namespace esptun::ike {

using namespace cert_detail;

namespace {

const EVP_MD* md_of(SigHash h) {
	switch (h) {
	case SigHash::sha1:
		return EVP_sha1();
	case SigHash::sha256:
		return EVP_sha256();
	case SigHash::sha384:
		return EVP_sha384();
	case SigHash::sha512:
		return EVP_sha512();
	default:
		return nullptr;
	}
}

std::string_view hash_name(SigHash h) {
	switch (h) {
	case SigHash::sha1:
		return "SHA-1";
	case SigHash::sha256:
		return "SHA2-256";
	case SigHash::sha384:
		return "SHA2-384";
	case SigHash::sha512:
		return "SHA2-512";
	default:
		return "Identity";
	}
}

std::optional<SigHash> hash_of_nid(int nid) {
	switch (nid) {
	case NID_sha1:
		return SigHash::sha1;
	case NID_sha256:
		return SigHash::sha256;
	case NID_sha384:
		return SigHash::sha384;
	case NID_sha512:
		return SigHash::sha512;
	default:
		return std::nullopt;
	}
}

/// RSASSA-PSS parameters (RFC 4055): hash, MGF1 with the same hash, salt length.
std::optional<std::string> pss_params(const X509_ALGOR* alg, SigScheme& s) {
	int ptype = 0;
	const void* pval = nullptr;
	X509_ALGOR_get0(nullptr, &ptype, &pval, alg);
	if (ptype != V_ASN1_SEQUENCE || !pval) return "RSASSA-PSS without parameters";
	const ASN1_STRING* seq = static_cast<const ASN1_STRING*>(pval);
	const unsigned char* p = ASN1_STRING_get0_data(seq);
	Ptr<RSA_PSS_PARAMS> pss(d2i_RSA_PSS_PARAMS(nullptr, &p, ASN1_STRING_length(seq)));
	if (!pss) return "RSASSA-PSS parameters that do not parse";
	const int hnid = pss->hashAlgorithm ? OBJ_obj2nid(pss->hashAlgorithm->algorithm) : NID_sha1;
	std::optional<SigHash> h = hash_of_nid(hnid);
	if (!h) return "RSASSA-PSS with an unknown hash";
	if (pss->maskGenAlgorithm && OBJ_obj2nid(pss->maskGenAlgorithm->algorithm) != NID_mgf1)
		return "RSASSA-PSS with a mask generation function other than MGF1";
	// MGF1's parameter is the AlgorithmIdentifier of its hash (RFC 4055
	// section 3.1); absent means SHA-1.
	int mnid = NID_sha1;
	if (pss->maskGenAlgorithm) {
		int mtype = 0;
		const void* mval = nullptr;
		X509_ALGOR_get0(nullptr, &mtype, &mval, pss->maskGenAlgorithm);
		if (mtype != V_ASN1_SEQUENCE || !mval)
			return "RSASSA-PSS with MGF1 parameters that do not parse";
		const ASN1_STRING* mseq = static_cast<const ASN1_STRING*>(mval);
		const unsigned char* mp = ASN1_STRING_get0_data(mseq);
		Ptr<X509_ALGOR> mhash(d2i_X509_ALGOR(nullptr, &mp, ASN1_STRING_length(mseq)));
		if (!mhash) return "RSASSA-PSS with MGF1 parameters that do not parse";
		mnid = OBJ_obj2nid(mhash->algorithm);
	}
	if (mnid != hnid) return "RSASSA-PSS whose MGF1 hash differs from its hash";
	long salt = 20;
	if (pss->saltLength) salt = ASN1_INTEGER_get(pss->saltLength);
	if (salt < 0 || salt > 1024) return "RSASSA-PSS with a salt length out of range";
	if (pss->trailerField && ASN1_INTEGER_get(pss->trailerField) != 1)
		return "RSASSA-PSS with a trailer field other than 1";
	s.kind = SigScheme::Kind::rsa_pss;
	s.hash = *h;
	s.pss_salt = int(salt);
	return std::nullopt;
}

} // namespace

namespace cert_detail {

std::string key_type_of(EVP_PKEY* k) {
	switch (EVP_PKEY_get_base_id(k)) {
	case EVP_PKEY_RSA:
	case EVP_PKEY_RSA_PSS:
		return "RSA-" + std::to_string(EVP_PKEY_get_bits(k));
	case EVP_PKEY_EC: {
		char group[64] = {};
		size_t len = 0;
		if (EVP_PKEY_get_utf8_string_param(k, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group,
		                                   &len) != 1) {
			ERR_clear_error();
			return "ECDSA-unknown";
		}
		const std::string_view g(group, len);
		if (g == "prime256v1" || g == "P-256") return "ECDSA-P256";
		if (g == "secp384r1" || g == "P-384") return "ECDSA-P384";
		if (g == "secp521r1" || g == "P-521") return "ECDSA-P521";
		return "ECDSA-" + std::string(g);
	}
	case EVP_PKEY_ED25519:
		return "Ed25519";
	default:
		return "unsupported";
	}
}

std::optional<std::string> parse_auth(const AuthPayload& auth, SigScheme& s) {
	const std::vector<uint8_t>& d = auth.data;
	switch (unsigned(auth.method)) {
	case unsigned(AuthMethod::digital_signature): {
		// RFC 7427 section 3: [length][AlgorithmIdentifier][signature].
		if (d.empty() || size_t(d[0]) + 1 >= d.size()) return "a malformed Digital Signature AUTH";
		const size_t alen = d[0];
		const unsigned char* p = d.data() + 1;
		Ptr<X509_ALGOR> alg(d2i_X509_ALGOR(nullptr, &p, long(alen)));
		if (!alg || p != d.data() + 1 + alen)
			return "a Digital Signature AUTH whose AlgorithmIdentifier does not parse";
		s.signature = std::span<const uint8_t>(d).subspan(1 + alen);
		const int nid = OBJ_obj2nid(alg->algorithm);
		// RSA PKCS#1 v1.5 and ECDSA: OpenSSL's signature table names the
		// digest and the key type of the algorithm's OID.
		int md_nid = NID_undef, pkey_nid = NID_undef;
		const bool in_table = OBJ_find_sigid_algs(nid, &md_nid, &pkey_nid) == 1;
		const std::optional<SigHash> md = hash_of_nid(md_nid);
		if (nid == NID_ED25519) {
			s.kind = SigScheme::Kind::ed25519;
			s.hash = SigHash::identity;
		} else if (nid == NID_rsassaPss) {
			if (auto err = pss_params(alg.get(), s)) return err;
		} else if (in_table && md &&
		           (pkey_nid == NID_rsaEncryption || pkey_nid == NID_X9_62_id_ecPublicKey)) {
			s.kind =
			    pkey_nid == NID_rsaEncryption ? SigScheme::Kind::rsa : SigScheme::Kind::ecdsa;
			s.hash = *md;
		} else {
			char buf[80] = {};
			OBJ_obj2txt(buf, sizeof buf, alg->algorithm, 1);
			return "signature algorithm " + std::string(buf) + ", which esptun does not support";
		}
		if (!(kOurSigHashes & sig_hash_bit(s.hash)))
			return "hash " + std::string(hash_name(s.hash)) + ", which we did not offer";
		s.text =
		    std::string(s.kind == SigScheme::Kind::rsa       ? "RSA PKCS#1 v1.5"
		                : s.kind == SigScheme::Kind::rsa_pss ? "RSASSA-PSS"
		                : s.kind == SigScheme::Kind::ecdsa   ? "ECDSA"
		                                                     : "Ed25519") +
		    (s.kind == SigScheme::Kind::ed25519 ? "" : " with " + std::string(hash_name(s.hash))) +
		    " (RFC 7427)";
		return std::nullopt;
	}
	case unsigned(AuthMethod::rsa_sig):
		// RFC 7296 section 3.8: PKCS#1 v1.5, SHA-1 in practice (RFC 7427 section 1).
		s.kind = SigScheme::Kind::rsa;
		s.hash = SigHash::sha1;
		s.signature = d;
		s.text = "RSA PKCS#1 v1.5 with SHA-1 (method 1)";
		return std::nullopt;
	case 9:
	case 10:
	case 11: {
		// RFC 4754: ECDSA with the curve's own hash, the signature r | s.
		const int m = int(auth.method);
		s.kind = SigScheme::Kind::ecdsa;
		s.hash = m == 9 ? SigHash::sha256 : m == 10 ? SigHash::sha384 : SigHash::sha512;
		s.curve_bytes = m == 9 ? 32 : m == 10 ? 48 : 66;
		if (d.size() != size_t(2 * s.curve_bytes))
			return "an ECDSA AUTH (method " + std::to_string(m) + ") of the wrong length";
		Ptr<ECDSA_SIG> sig(ECDSA_SIG_new());
		BIGNUM* r = BN_bin2bn(d.data(), s.curve_bytes, nullptr);
		BIGNUM* sv = BN_bin2bn(d.data() + s.curve_bytes, s.curve_bytes, nullptr);
		if (!sig || !r || !sv || ECDSA_SIG_set0(sig.get(), r, sv) != 1) {
			BN_free(r);
			BN_free(sv);
			throw std::bad_alloc();
		}
		const int len = i2d_ECDSA_SIG(sig.get(), nullptr);
		if (len <= 0) return "an ECDSA AUTH that does not encode";
		s.der_signature.resize(size_t(len));
		unsigned char* out = s.der_signature.data();
		i2d_ECDSA_SIG(sig.get(), &out);
		s.signature = s.der_signature;
		s.text =
		    "ECDSA with " + std::string(hash_name(s.hash)) + " (method " + std::to_string(m) + ")";
		return std::nullopt;
	}
	default:
		return "AUTH method " + std::to_string(int(auth.method)) + " instead of a signature";
	}
}

std::optional<std::string> check_signature(EVP_PKEY* pub, const SigScheme& s,
                                           std::span<const uint8_t> octets) {
	const int base = EVP_PKEY_get_base_id(pub);
	const bool rsa_key = base == EVP_PKEY_RSA || base == EVP_PKEY_RSA_PSS;
	const bool fits = s.kind == SigScheme::Kind::ecdsa     ? base == EVP_PKEY_EC
	                  : s.kind == SigScheme::Kind::ed25519 ? base == EVP_PKEY_ED25519
	                                                       : rsa_key;
	if (!fits)
		return "it signed with " + s.text + ", which does not fit its " + key_type_of(pub) + " key";
	if (s.curve_bytes) {
		const std::string want = s.curve_bytes == 32   ? "ECDSA-P256"
		                         : s.curve_bytes == 48 ? "ECDSA-P384"
		                                               : "ECDSA-P521";
		if (key_type_of(pub) != want)
			return "it signed with " + s.text + ", which names another curve than its " +
			       key_type_of(pub) + " key";
	}
	Ptr<EVP_MD_CTX> ctx(EVP_MD_CTX_new());
	if (!ctx) throw std::bad_alloc();
	EVP_PKEY_CTX* pctx = nullptr;
	const EVP_MD* md = s.kind == SigScheme::Kind::ed25519 ? nullptr : md_of(s.hash);
	bool ok = EVP_DigestVerifyInit(ctx.get(), &pctx, md, nullptr, pub) == 1;
	if (ok && s.kind == SigScheme::Kind::rsa)
		ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
	if (ok && s.kind == SigScheme::Kind::rsa_pss)
		ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
		     EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) == 1 &&
		     EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, s.pss_salt) == 1;
	ok = ok && EVP_DigestVerify(ctx.get(), s.signature.data(), s.signature.size(), octets.data(),
	                            octets.size()) == 1;
	ERR_clear_error();
	if (!ok) return "its AUTH signature (" + s.text + ") does not verify with its certificate's key";
	return std::nullopt;
}

} // namespace cert_detail

// ---- hash algorithms and signed octets -------------------------------------

std::vector<uint8_t> sig_hashes_notify_data() {
	std::vector<uint8_t> out;
	for (SigHash h : {SigHash::sha256, SigHash::sha384, SigHash::sha512, SigHash::identity}) {
		out.push_back(0);
		out.push_back(uint8_t(h));
	}
	return out;
}

SigHashSet parse_sig_hashes(std::span<const uint8_t> data) noexcept {
	SigHashSet set = 0;
	for (size_t i = 0; i + 1 < data.size(); i += 2) {
		const unsigned id = unsigned(data[i]) << 8 | data[i + 1];
		if (id >= 1 && id <= 5) set |= SigHashSet(1u << id);
	}
	return set;
}

std::vector<uint8_t> signed_octets(PrfId p, std::span<const uint8_t> message, std::span<const uint8_t> nonce,
                                   std::span<const uint8_t> sk_p, std::span<const uint8_t> id_body) {
	const SecretBytes mac = prf(p, sk_p, id_body);
	std::vector<uint8_t> out;
	out.reserve(message.size() + nonce.size() + mac.size());
	out.insert(out.end(), message.begin(), message.end());
	out.insert(out.end(), nonce.begin(), nonce.end());
	out.insert(out.end(), mac.begin(), mac.end());
	return out;
}

// ---- our signature ----------------------------------------------------------

AuthPayload Credentials::sign(std::span<const uint8_t> octets, SigHashSet peer_hashes, bool rsa_pss) const {
	using openssl_util::check;
	EVP_PKEY* key = static_cast<EVP_PKEY*>(key_);
	const bool ed = key_type_ == "Ed25519";
	// The strongest hash both allow; P-384 keys prefer SHA2-384. A peer that
	// announced none gets SHA2-256, which every RFC 7427 peer verifies.
	const SigHashSet allowed = peer_hashes & kOurSigHashes;
	std::vector<SigHash> order{SigHash::sha256, SigHash::sha384, SigHash::sha512};
	if (key_type_ == "ECDSA-P384") order = {SigHash::sha384, SigHash::sha512, SigHash::sha256};
	SigHash hash = SigHash::sha256;
	for (SigHash h : order)
		if (allowed & sig_hash_bit(h)) {
			hash = h;
			break;
		}
	Ptr<EVP_MD_CTX> ctx(EVP_MD_CTX_new());
	if (!ctx) throw std::bad_alloc();
	EVP_PKEY_CTX* pctx = nullptr;
	check(EVP_DigestSignInit(ctx.get(), &pctx, ed ? nullptr : md_of(hash), nullptr, key) == 1,
	      "signature init");
	const bool rsa = key_type_.starts_with("RSA");
	if (rsa && rsa_pss) {
		check(EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
		          EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md_of(hash)) == 1 &&
		          EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1,
		      "RSASSA-PSS parameters");
	}
	// OpenSSL writes the AlgorithmIdentifier of exactly what it signs with.
	unsigned char aid[128];
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_octet_string(OSSL_SIGNATURE_PARAM_ALGORITHM_ID, aid, sizeof aid),
	    OSSL_PARAM_construct_end()};
	check(EVP_PKEY_CTX_get_params(pctx, params) == 1 && OSSL_PARAM_modified(&params[0]) &&
	          params[0].return_size > 0 && params[0].return_size < 256,
	      "signature AlgorithmIdentifier");
	size_t len = 0;
	check(EVP_DigestSign(ctx.get(), nullptr, &len, octets.data(), octets.size()) == 1, "signature size");
	AuthPayload out;
	out.method = AuthMethod::digital_signature;
	out.data.resize(1 + params[0].return_size + len);
	out.data[0] = uint8_t(params[0].return_size);
	std::copy(aid, aid + params[0].return_size, out.data.begin() + 1);
	uint8_t* sig = out.data.data() + 1 + params[0].return_size;
	check(EVP_DigestSign(ctx.get(), sig, &len, octets.data(), octets.size()) == 1, "signing AUTH");
	out.data.resize(1 + params[0].return_size + len); // ECDSA: DER may be shorter than the bound
	return out;
}

} // namespace esptun::ike
