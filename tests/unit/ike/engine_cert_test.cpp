// IKE_AUTH with certificates between two engines: CERT, CERTREQ and
// SIGNATURE_HASH_ALGORITHMS on the wire, a CHILD_SA on success, and
// AUTHENTICATION_FAILED with a log line naming the reason on each failure.
#include "tests/unit/ike/cert_test_util.hpp"
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

/// Two sides under one root and intermediate: A is "a.example", B "b.example".
struct CertSides {
	Chain a, b;
	explicit CertSides(KeyKind ka = KeyKind::p256, KeyKind kb = KeyKind::rsa2048, CertSpec sa = {},
	                   CertSpec sb = {})
	    : a(ka, with_name(std::move(sa), "a.example")), b(kb, with_name(std::move(sb), "b.example")) {}
	static CertSpec with_name(CertSpec s, const char* n) {
		if (s.cn.empty()) s.cn = n;
		if (s.dns.empty()) s.dns = {n};
		return s;
	}
	PeerPolicy pa() const {
		PeerPolicy p = policy("b", "a.example", "b.example");
		p.credentials = a.credentials();
		p.trust = b.trust(); // B's chain has its own root: A trusts it
		return p;
	}
	PeerPolicy pb() const {
		PeerPolicy p = policy("a", "b.example", "a.example");
		p.credentials = b.credentials();
		p.trust = a.trust();
		return p;
	}
};

size_t count_type(const std::vector<uint8_t>& msg, PayloadType t) {
	Message m;
	REQUIRE(parse_message(msg, m));
	size_t n = 0;
	for (const Payload& p : m.payloads)
		n += payload_type(p) == t;
	return n;
}

} // namespace

TEST_CASE("engine cert: both ways by certificate, each key kind, through intermediates") {
	for (auto [ka, kb] :
	     {std::pair{KeyKind::p256, KeyKind::rsa2048}, std::pair{KeyKind::ed25519, KeyKind::p384}}) {
		CertSides s(ka, kb);
		Pair p(s.pa(), s.pb());
		p.a->start(p.now);
		REQUIRE(p.ha.out.size() == 1);
		const std::vector<uint8_t> init = p.ha.out.front().bytes;
		Message m;
		REQUIRE(parse_message(init, m));
		const NotifyPayload* n = m.find_notify(notify::signature_hash_algorithms);
		REQUIRE(n);
		CHECK(parse_sig_hashes(n->data) == kOurSigHashes);
		p.b->receive(p.ha.out.front().via, p.ha.self, init, p.now);
		p.ha.out.pop_front();
		REQUIRE(p.hb.out.size() == 1);
		// The responder asks for certificates of its CAs in IKE_SA_INIT.
		CHECK(count_type(p.hb.out.front().bytes, PayloadType::certreq) == 1);
		p.pump();
		CHECK(p.state(*p.a) == "established");
		CHECK(p.state(*p.b) == "established");
		check_keys_cross(p.ha, p.hb);
		const auto sa = p.a->status(p.now), sb = p.b->status(p.now);
		REQUIRE(sa.size() == 1);
		REQUIRE(sb.size() == 1);
		CHECK(sa[0].peer_subject == "O=esptun test, CN=b.example");
		CHECK(sa[0].peer_issuer == "O=esptun test, CN=Test Intermediate");
		CHECK(sb[0].peer_subject == "O=esptun test, CN=a.example");
		CHECK(sb[0].peer_auth.find(ka == KeyKind::ed25519 ? "Ed25519" : "ECDSA-P256") !=
		      std::string::npos);
		CHECK(p.hb.logged("peer a: authenticated by certificate O=esptun test, CN=a.example"));
	}
}

TEST_CASE("engine cert: PSK peers send no certificate payloads") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	const std::vector<uint8_t> init = p.ha.out.front().bytes;
	Message m;
	REQUIRE(parse_message(init, m));
	CHECK_FALSE(m.find_notify(notify::signature_hash_algorithms));
	p.pump();
	CHECK(p.state(*p.a) == "established");
	CHECK(p.b->status(p.now)[0].peer_auth == "psk");
}

TEST_CASE("engine cert: the responder refuses an initiator whose certificate fails") {
	struct Case {
		const char* what;
		const char* reason;
	};
	for (const Case& c : {Case{"unknown CA", "unknown CA"}, Case{"revoked", "revoked"},
	                      Case{"identity", "is not in its certificate"}, Case{"expired", "expired"}}) {
		CAPTURE(c.what);
		CertSpec sa;
		if (std::string(c.what) == "identity") sa.dns = {"someone-else.example"};
		if (std::string(c.what) == "expired") {
			sa.not_before_s = -2 * 86400;
			sa.not_after_s = -60;
		}
		CertSides s(KeyKind::p256, KeyKind::p256, sa);
		PeerPolicy pa = s.pa(), pb = s.pb();
		if (std::string(c.what) == "unknown CA")
			pb.trust = Chain(KeyKind::p256, {}, KeyKind::p256, "Other").trust();
		if (std::string(c.what) == "revoked")
			pb.trust = s.a.trust({s.a.root.crl_pem({}), s.a.inter.crl_pem({100})});
		Pair p(pa, pb);
		p.a->start(p.now);
		p.pump();
		CHECK(p.state(*p.a) != "established");
		CHECK(p.hb.installed.empty());
		CHECK(p.ha.installed.empty());
		CHECK(p.b->counters().auth_failed == 1);
		CHECK(p.hb.logged(
		    std::string("peer a: authentication failed: 10.0.0.1:4500 (ID 'a.example'): ")));
		CHECK(p.hb.logged(c.reason));
		CHECK(p.ha.logged("rejected our identity or certificate (AUTHENTICATION_FAILED)"));
	}
}

TEST_CASE("engine cert: the initiator refuses a responder whose certificate fails") {
	CertSides s(KeyKind::p256, KeyKind::p256);
	PeerPolicy pa = s.pa();
	pa.trust = Chain(KeyKind::p256, {}, KeyKind::p256, "Other").trust();
	Pair p(pa, s.pb());
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) != "established");
	CHECK(p.ha.installed.empty());
	CHECK(p.a->counters().auth_failed == 1);
	CHECK(p.ha.logged(
	    "peer b: IKE SA closed: authentication failed: 10.0.0.2:4500: its certificate does not lead "
	    "to a trusted CA (unknown CA"));
	// B had authenticated A and established: A's Delete ends B's IKE SA too.
	CHECK(p.state(*p.b) == "none");
	CHECK(p.hb.installed.empty());
}

TEST_CASE("engine cert: a peer with certificates refuses a PSK AUTH") {
	CertSides s;
	Pair p(policy("b", "a.example", "b.example"), s.pb());
	p.a->start(p.now);
	p.pump();
	CHECK(p.hb.installed.empty());
	CHECK(p.hb.logged("uses AUTH method 2 instead of a signature"));
}

TEST_CASE("engine cert: rsa_pss signs our AUTH with RSASSA-PSS, as initiator and as responder") {
	CertSides s(KeyKind::rsa2048, KeyKind::rsa2048);
	for (bool a_pss : {true, false}) {
		CAPTURE(a_pss);
		PeerPolicy pa = s.pa(), pb = s.pb();
		pa.rsa_pss = a_pss;
		pb.rsa_pss = !a_pss;
		Pair p(pa, pb);
		p.a->start(p.now);
		p.pump();
		REQUIRE(p.state(*p.a) == "established");
		REQUIRE(p.state(*p.b) == "established");
		const auto sa = p.a->status(p.now), sb = p.b->status(p.now);
		REQUIRE(sa.size() == 1);
		REQUIRE(sb.size() == 1);
		// Each side names the scheme the other signed with.
		const std::string pss = "RSA-2048, RSASSA-PSS with SHA2-256",
		                  v15 = "RSA-2048, RSA PKCS#1 v1.5";
		CHECK(sb[0].peer_auth.find(a_pss ? pss : v15) == 0);
		CHECK(sa[0].peer_auth.find(a_pss ? v15 : pss) == 0);
	}
}
