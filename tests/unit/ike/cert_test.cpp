// Certificate authentication (ike/cert.hpp): signatures of each key kind
// over a chain through an intermediate, and each reason a peer's
// certificate or AUTH is refused. Every certificate is made at test time.
#include "ike/cert.hpp"
#include "ike/engine.hpp"
#include "tests/unit/ike/cert_test_util.hpp"

#include <openssl/ecdsa.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

const std::vector<uint8_t> kOctets = [] {
	std::vector<uint8_t> v(300);
	for (size_t i = 0; i < v.size(); i++)
		v[i] = uint8_t(i * 7);
	return v;
}();

Identity id(const char* text) { return *parse_identity(text); }

PeerAuth check(const Chain& c, const AuthPayload& auth, const Identity& who,
               std::vector<std::string> crls = {}, std::span<const uint8_t> octets = kOctets) {
	const auto bodies = c.cert_bodies();
	return verify_peer(*c.trust(std::move(crls)), spans(bodies), who, auth, octets);
}

} // namespace

TEST_CASE("cert: each key kind signs through an intermediate and verifies") {
	struct Case {
		KeyKind kind;
		bool pss;
		const char* type;
		const char* method;
	};
	for (const Case& k : {Case{KeyKind::rsa2048, false, "RSA-2048", "RSA PKCS#1 v1.5 with SHA2-256"},
	                      Case{KeyKind::rsa2048, true, "RSA-2048", "RSASSA-PSS with SHA2-256"},
	                      Case{KeyKind::p256, false, "ECDSA-P256", "ECDSA with SHA2-256"},
	                      Case{KeyKind::p384, false, "ECDSA-P384", "ECDSA with SHA2-384"},
	                      Case{KeyKind::ed25519, false, "Ed25519", "Ed25519 (RFC 7427)"}}) {
		CAPTURE(k.type);
		CAPTURE(k.pss);
		Chain c(k.kind);
		auto creds = c.credentials();
		CHECK(creds->key_type() == k.type);
		CHECK(creds->certs_der().size() == 2);
		const AuthPayload auth = creds->sign(kOctets, kOurSigHashes, k.pss);
		CHECK(auth.method == AuthMethod::digital_signature);
		const PeerAuth r = check(c, auth, id("gw.example.com"));
		INFO(r.error);
		CHECK(r.ok);
		CHECK(r.method.find(k.method) != std::string::npos);
		CHECK(r.subject == "O=esptun test, CN=gw.example.com");
		CHECK(r.issuer == "O=esptun test, CN=Test Intermediate");
	}
}

TEST_CASE("cert: the AlgorithmIdentifiers are RFC 7427's") {
	// RFC 7427 appendix A.1 (sha256WithRSAEncryption) and A.3 (ecdsa-with-sha256).
	const std::vector<uint8_t> rsa{0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86,
	                               0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05, 0x00};
	const std::vector<uint8_t> ec{0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02};
	for (auto [kind, want] : {std::pair{KeyKind::rsa2048, rsa}, std::pair{KeyKind::p256, ec}}) {
		const AuthPayload a = Chain(kind).credentials()->sign(kOctets, kOurSigHashes);
		REQUIRE(a.data.size() > want.size() + 1);
		CHECK(a.data[0] == want.size());
		CHECK(std::vector<uint8_t>(a.data.begin() + 1, a.data.begin() + 1 + long(want.size())) ==
		      want);
	}
}

TEST_CASE("cert: the hash follows the peer's SIGNATURE_HASH_ALGORITHMS") {
	Chain c(KeyKind::p256);
	auto creds = c.credentials();
	const std::vector<uint8_t> only384{0, 3};
	const PeerAuth r = check(c, creds->sign(kOctets, parse_sig_hashes(only384)), id("gw.example.com"));
	CHECK(r.ok);
	CHECK(r.method.find("SHA2-384") != std::string::npos);
	CHECK(parse_sig_hashes(sig_hashes_notify_data()) == kOurSigHashes);
	const std::vector<uint8_t> odd{0, 1, 0, 2, 0x7f, 0xff, 0};
	CHECK(parse_sig_hashes(odd) == (sig_hash_bit(SigHash::sha1) | sig_hash_bit(SigHash::sha256)));
}

TEST_CASE("cert: classic ECDSA (RFC 4754 method 9) and RSA (method 1) are accepted") {
	Chain c(KeyKind::p256);
	// Method 9: r | s, 32 bytes each, SHA2-256.
	EVP_PKEY* k = c.ee.key.pkey.get();
	EVP_MD_CTX* ctx = EVP_MD_CTX_new();
	REQUIRE(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, k) == 1);
	size_t len = 0;
	REQUIRE(EVP_DigestSign(ctx, nullptr, &len, kOctets.data(), kOctets.size()) == 1);
	std::vector<uint8_t> der(len);
	REQUIRE(EVP_DigestSign(ctx, der.data(), &len, kOctets.data(), kOctets.size()) == 1);
	EVP_MD_CTX_free(ctx);
	const unsigned char* p = der.data();
	ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, long(len));
	REQUIRE(sig);
	AuthPayload a{AuthMethod(9), std::vector<uint8_t>(64)};
	BN_bn2binpad(ECDSA_SIG_get0_r(sig), a.data.data(), 32);
	BN_bn2binpad(ECDSA_SIG_get0_s(sig), a.data.data() + 32, 32);
	ECDSA_SIG_free(sig);
	PeerAuth r = check(c, a, id("gw.example.com"));
	INFO(r.error);
	CHECK(r.ok);
	a.method = AuthMethod(10); // the P-384 method on a P-256 key
	a.data.resize(96);
	r = check(c, a, id("gw.example.com"));
	CHECK_FALSE(r.ok);

	Chain rc(KeyKind::rsa2048);
	ctx = EVP_MD_CTX_new();
	REQUIRE(EVP_DigestSignInit(ctx, nullptr, EVP_sha1(), nullptr, rc.ee.key.pkey.get()) == 1);
	REQUIRE(EVP_DigestSign(ctx, nullptr, &len, kOctets.data(), kOctets.size()) == 1);
	AuthPayload m1{AuthMethod::rsa_sig, std::vector<uint8_t>(len)};
	REQUIRE(EVP_DigestSign(ctx, m1.data.data(), &len, kOctets.data(), kOctets.size()) == 1);
	EVP_MD_CTX_free(ctx);
	r = check(rc, m1, id("gw.example.com"));
	INFO(r.error);
	CHECK(r.ok);
}

TEST_CASE("cert: a CA we do not trust is refused") {
	Chain c(KeyKind::p256);
	Chain other(KeyKind::p256, {}, KeyKind::p256, "Other Root");
	const auto bodies = c.cert_bodies();
	const PeerAuth r = verify_peer(*other.trust(), spans(bodies), id("gw.example.com"),
	                               c.credentials()->sign(kOctets, kOurSigHashes), kOctets);
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("unknown CA") != std::string::npos);
}

TEST_CASE("cert: without the intermediate the chain does not verify") {
	Chain c(KeyKind::p256);
	const auto bodies = c.cert_bodies();
	const std::vector<std::span<const uint8_t>> only_ee{bodies[0]};
	const PeerAuth r = verify_peer(*c.trust(), only_ee, id("gw.example.com"),
	                               c.credentials()->sign(kOctets, kOurSigHashes), kOctets);
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("unknown CA") != std::string::npos);
}

TEST_CASE("cert: an expired or not yet valid certificate is refused") {
	CertSpec old;
	old.not_before_s = -2 * 86400;
	old.not_after_s = -86400;
	Chain c(KeyKind::p256, old);
	PeerAuth r = check(c, c.credentials()->sign(kOctets, kOurSigHashes), id("gw.example.com"));
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("expired") != std::string::npos);
	CertSpec future;
	future.not_before_s = 86400;
	future.not_after_s = 2 * 86400;
	Chain f(KeyKind::p256, future);
	r = check(f, f.credentials()->sign(kOctets, kOurSigHashes), id("gw.example.com"));
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("not valid yet") != std::string::npos);
}

TEST_CASE("cert: a revoked certificate is refused once CRLs are configured") {
	Chain c(KeyKind::p256);
	const AuthPayload a = c.credentials()->sign(kOctets, kOurSigHashes);
	// Without CRLs nothing is known to be revoked; with both CAs' CRLs, one
	// that does not list it passes and one that does refuses it.
	CHECK(check(c, a, id("gw.example.com")).ok);
	PeerAuth r = check(c, a, id("gw.example.com"), {c.root.crl_pem({}), c.inter.crl_pem({7})});
	INFO(r.error);
	CHECK(r.ok);
	r = check(c, a, id("gw.example.com"), {c.root.crl_pem({}), c.inter.crl_pem({7, 100})});
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("revoked") != std::string::npos);
	// The intermediate revoked by the root.
	r = check(c, a, id("gw.example.com"), {c.root.crl_pem({2}), c.inter.crl_pem({})});
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("revoked") != std::string::npos);
	// CRL_CHECK_ALL: a CA in the chain without a CRL is an error, not a pass.
	r = check(c, a, id("gw.example.com"), {c.root.crl_pem({})});
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("there is none") != std::string::npos);
}

TEST_CASE("cert: a bad signature is refused") {
	for (KeyKind k : {KeyKind::rsa2048, KeyKind::p256, KeyKind::ed25519}) {
		Chain c(k);
		AuthPayload a = c.credentials()->sign(kOctets, kOurSigHashes);
		std::vector<uint8_t> other = kOctets;
		other[10] ^= 1;
		PeerAuth r = check(c, a, id("gw.example.com"), {}, other);
		CHECK_FALSE(r.ok);
		CHECK(r.error.find("does not verify") != std::string::npos);
		a.data.back() ^= 0x40;
		r = check(c, a, id("gw.example.com"));
		CHECK_FALSE(r.ok);
	}
	// Another key's signature over the right octets.
	Chain c(KeyKind::p256), d(KeyKind::p256);
	const PeerAuth r = check(c, d.credentials()->sign(kOctets, kOurSigHashes), id("gw.example.com"));
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("does not verify") != std::string::npos);
}

TEST_CASE("cert: the identity must be in the certificate") {
	CertSpec s;
	s.dns = {"gw.example.com"};
	s.email = {"alice@example.com"};
	s.ip = {"192.0.2.7", "2001:db8::7"};
	Chain c(KeyKind::p256, s);
	const AuthPayload a = c.credentials()->sign(kOctets, kOurSigHashes);
	for (const char* good :
	     {"gw.example.com", "GW.Example.COM", "alice@example.com", "192.0.2.7", "2001:db8::7",
	      "O=esptun test, CN=gw.example.com", "/O=esptun test/CN=gw.example.com"}) {
		CAPTURE(good);
		const PeerAuth r = check(c, a, id(good));
		INFO(r.error);
		CHECK(r.ok);
	}
	for (const char* bad : {"other.example.com", "example.com", "bob@example.com", "192.0.2.8",
	                        "2001:db8::8", "O=esptun test, CN=other", "CN=gw.example.com"}) {
		CAPTURE(bad);
		const PeerAuth r = check(c, a, id(bad));
		CHECK_FALSE(r.ok);
		CHECK(r.error.find("is not in its certificate") != std::string::npos);
	}
}

TEST_CASE("cert: missing, foreign, oversized or too many certificates are refused") {
	Chain c(KeyKind::p256);
	const AuthPayload a = c.credentials()->sign(kOctets, kOurSigHashes);
	PeerAuth r = verify_peer(*c.trust(), {}, id("gw.example.com"), a, kOctets);
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("no certificate") != std::string::npos);

	auto bodies = c.cert_bodies();
	bodies[0][0] = 1; // PKCS #7 wrapped
	r = verify_peer(*c.trust(), spans(bodies), id("gw.example.com"), a, kOctets);
	CHECK(r.error.find("encoding 1") != std::string::npos);

	bodies = c.cert_bodies();
	bodies[0].push_back(0); // trailing garbage
	r = verify_peer(*c.trust(), spans(bodies), id("gw.example.com"), a, kOctets);
	CHECK(r.error.find("does not parse") != std::string::npos);

	std::vector<std::vector<uint8_t>> big{std::vector<uint8_t>(kMaxCertLen + 2, 0x30)};
	big[0][0] = kCertX509Signature;
	r = verify_peer(*c.trust(), spans(big), id("gw.example.com"), a, kOctets);
	CHECK(r.error.find("at most") != std::string::npos);

	bodies = c.cert_bodies();
	std::vector<std::vector<uint8_t>> many(kMaxPeerCerts + 1, bodies[1]);
	many[0] = bodies[0];
	r = verify_peer(*c.trust(), spans(many), id("gw.example.com"), a, kOctets);
	CHECK(r.error.find("certificates; at most") != std::string::npos);
}

TEST_CASE("cert: AUTH that is not a signature we take is refused") {
	Chain c(KeyKind::p256);
	const auto bodies = c.cert_bodies();
	auto verify = [&](const AuthPayload& a) {
		return verify_peer(*c.trust(), spans(bodies), id("gw.example.com"), a, kOctets);
	};
	CHECK(verify(AuthPayload{AuthMethod::psk, std::vector<uint8_t>(32)}).error.find("AUTH method 2") !=
	      std::string::npos);
	AuthPayload a = c.credentials()->sign(kOctets, kOurSigHashes);
	AuthPayload cut = a;
	cut.data.resize(5);
	CHECK(verify(cut).error.find("malformed") != std::string::npos);
	// ecdsa-with-SHA1 (1.2.840.10045.4.1) in method 14: SHA-1 is not among what we offered.
	const uint8_t aid[] = {0x0b, 0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01};
	AuthPayload sha1{AuthMethod::digital_signature,
	                 std::vector<uint8_t>(a.data.size() - a.data[0] - 1 + sizeof aid)};
	std::copy(std::begin(aid), std::end(aid), sha1.data.begin());
	std::copy(a.data.begin() + 1 + a.data[0], a.data.end(), sha1.data.begin() + sizeof aid);
	CHECK(verify(sha1).error.find("hash SHA-1, which we did not offer") != std::string::npos);
	// An RSA signature scheme on an ECDSA key.
	AuthPayload wrong = Chain(KeyKind::rsa2048).credentials()->sign(kOctets, kOurSigHashes);
	CHECK(verify(wrong).error.find("does not fit") != std::string::npos);
}

TEST_CASE("cert: keyUsage without digitalSignature is refused") {
	CertSpec s;
	s.key_usage = "keyEncipherment";
	Chain c(KeyKind::p256, s);
	PeerAuth r = check(c, c.credentials()->sign(kOctets, kOurSigHashes), id("gw.example.com"));
	CHECK_FALSE(r.ok);
	CHECK(r.error.find("digitalSignature") != std::string::npos);
	s.key_usage = "digitalSignature";
	Chain ok(KeyKind::p256, s);
	CHECK(check(ok, ok.credentials()->sign(kOctets, kOurSigHashes), id("gw.example.com")).ok);
}

TEST_CASE("cert: our credentials: the key must be the certificate's and of a kind we sign with") {
	Chain c(KeyKind::p256), d(KeyKind::p256);
	std::string err;
	CHECK_FALSE(Credentials::load(c.ee.pem(), d.ee.key.pem(), "", err));
	CHECK(err.find("not the certificate's key") != std::string::npos);
	CHECK_FALSE(Credentials::load("", c.ee.key.pem(), "", err));
	CHECK(err.find("no PEM certificate") != std::string::npos);
	CHECK_FALSE(Credentials::load(
	    c.ee.pem(), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "", err));
	CHECK(err.find("does not parse") != std::string::npos);
	for (KeyKind k : {KeyKind::rsa1024, KeyKind::p521}) {
		Chain w(k);
		CHECK_FALSE(Credentials::load(w.ee.pem(), w.ee.key.pem(), "", err));
		CHECK(err.find("use RSA") != std::string::npos);
	}
	auto creds = Credentials::load(c.ee.pem(), c.ee.key.pem(), "", err);
	REQUIRE(creds);
	CHECK(creds->certifies(id("gw.example.com")));
	CHECK_FALSE(creds->certifies(id("other.example.com")));
	CHECK(creds->subject() == "O=esptun test, CN=gw.example.com");
}

TEST_CASE("cert: the trust store takes CAs only and hashes their keys for CERTREQ") {
	Chain c(KeyKind::p256);
	std::string err;
	const std::string root = c.root.pem(), inter = c.inter.pem(), ee = c.ee.pem();
	std::vector<std::string_view> cas{root, inter};
	auto t = TrustStore::load(cas, {}, err);
	REQUIRE(t);
	CHECK(t->ca_count() == 2);
	const std::vector<uint8_t> body = t->certreq_body();
	CHECK(body.size() == 1 + 2 * 20);
	CHECK(body[0] == kCertX509Signature);
	std::vector<std::string_view> not_ca{ee};
	CHECK_FALSE(TrustStore::load(not_ca, {}, err));
	CHECK(err.find("not a CA") != std::string::npos);
	std::vector<std::string_view> junk{"nothing here"};
	CHECK_FALSE(TrustStore::load(junk, {}, err));
	CHECK_FALSE(TrustStore::load(cas, junk, err));
	CHECK(err.find("holds no CRL") != std::string::npos);
}

TEST_CASE("cert: DN identities parse, print and compare as names") {
	const Identity a = id("CN=gw.example.com, O=Example");
	CHECK(a.type == IdType::der_asn1_dn);
	CHECK(identity_text(a) == "CN=gw.example.com, O=Example");
	CHECK(same_identity(a, id("/CN=gw.example.com/O=Example")));
	CHECK(same_identity(a, id("CN=GW.example.com,  O=example")));
	CHECK_FALSE(same_identity(a, id("CN=gw.example.com, O=Other")));
	CHECK_FALSE(parse_identity("XX=1, CN=y"));
	CHECK_FALSE(parse_identity("CN="));
}
