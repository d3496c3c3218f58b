// IKE_AUTH with EAP (RFC 7296 section 2.16) between two engines: a client
// (EapRole::client, EAP-MSCHAPv2) and a gateway (EapRole::server, signing
// with its certificate). The conversation's shape on the wire, the CHILD_SA
// and status on success, and each refusal with its reason and no SA.
#include "ike/eap_mschapv2.hpp"
#include "tests/unit/ike/cert_test_util.hpp"
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr const char* kPassword = "correct horse battery staple";

/// The gateway "gw.example.com" (B) with a P-256 (or @kind) certificate, and its users.
struct EapSides {
	Chain gw;
	explicit EapSides(KeyKind kind = KeyKind::p256) : gw(kind) {}
	PeerPolicy client(const char* user = "carol", const char* password = kPassword) const {
		PeerPolicy p = policy("gw", "carol@example.com", "gw.example.com");
		p.psk.clear();
		p.eap_role = EapRole::client;
		p.eap_method = eap::type::mschapv2;
		p.eap_identity = user;
		p.eap_password = SecretString(std::string_view(password));
		p.trust = gw.trust();
		return p;
	}
	PeerPolicy gateway() const {
		PeerPolicy p = policy("carol", "gw.example.com", "carol@example.com");
		p.psk.clear();
		p.eap_role = EapRole::server;
		p.eap_method = eap::type::mschapv2;
		p.credentials = gw.credentials();
		auto users = std::make_shared<Users>();
		users->emplace("carol", User{eap::nt_password_hash(kPassword), {}, {}});
		users->emplace("dave", User{eap::nt_password_hash("something else"), {}, {}});
		p.users = users;
		return p;
	}
};

/// IKE_AUTH requests the initiator @e sent: all it sent but IKE_SA_INIT (no retransmissions here).
uint64_t auth_exchanges(const Engine& e) { return e.counters().sent - 1; }

} // namespace

TEST_CASE("engine eap: MSCHAPv2 client and certificate gateway establish, MSK in AUTH both ways") {
	EapSides s;
	Pair p(s.client(), s.gateway());
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) == "established");
	CHECK(p.state(*p.b) == "established");
	check_keys_cross(p.ha, p.hb);
	// IKE_AUTH: 1 (IDs, gateway's AUTH, EAP-Identity), 2 (identity ->
	// challenge), 3 (response -> success request), 4 (ack -> EAP-Success),
	// 5 (AUTH with the MSK both ways): five requests from the client.
	CHECK(auth_exchanges(*p.a) == 5);
	const auto sa = p.a->status(p.now), sb = p.b->status(p.now);
	REQUIRE(sa.size() == 1);
	REQUIRE(sb.size() == 1);
	CHECK(sb[0].peer_auth == "EAP-MSCHAPv2");
	CHECK(sb[0].eap_identity == "carol");
	CHECK(sa[0].peer_subject == "O=esptun test, CN=gw.example.com");
	CHECK(sa[0].peer_auth.find("ECDSA-P256") != std::string::npos);
	CHECK(p.hb.logged("peer carol: authenticated by EAP-MSCHAPv2 as 'carol'"));
	CHECK(p.a->counters().eap_failed == 0);
}

TEST_CASE("engine eap: a wrong password or an unknown user is refused with the reason, no SA") {
	struct Case {
		const char* user;
		const char* password;
		const char* reason;
	};
	for (const Case& c : {Case{"carol", "not the password", "wrong password"},
	                      Case{"mallory", kPassword, "not in the users file"}}) {
		CAPTURE(c.reason);
		EapSides s;
		Pair p(s.client(c.user, c.password), s.gateway());
		p.a->start(p.now);
		p.pump();
		CHECK(p.state(*p.a) != "established");
		CHECK(p.state(*p.b) != "established");
		CHECK(p.ha.installed.empty());
		CHECK(p.hb.installed.empty());
		CHECK(p.hb.logged(c.reason));
		CHECK(p.ha.logged("refused our EAP-MSCHAPv2 as '" + std::string(c.user) + "'"));
		CHECK(p.b->counters().eap_failed == 1);
		CHECK(p.b->counters().auth_failed == 1);
	}
}

TEST_CASE("engine eap: the client refuses a gateway whose certificate it does not trust") {
	EapSides s;
	PeerPolicy client = s.client();
	client.trust = Chain(KeyKind::p256, {}, KeyKind::p256, "Other Root").trust();
	Pair p(client, s.gateway());
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) != "established");
	CHECK(p.ha.logged("unknown CA"));
	// It never answered EAP-Identity: the password did not leave.
	CHECK(auth_exchanges(*p.a) == 1);
	CHECK(p.ha.installed.empty());
}

TEST_CASE("engine eap: a PSK initiator at an EAP peer, and an EAP initiator at a PSK peer, are refused") {
	EapSides s;
	{
		PeerPolicy psk_client = policy("gw", "carol@example.com", "gw.example.com");
		Pair p(psk_client, s.gateway());
		p.a->start(p.now);
		p.pump();
		CHECK(p.state(*p.b) != "established");
		CHECK(p.hb.logged("must use EAP (auth = EAP-MSCHAPv2)"));
	}
	{
		Pair p(s.client(), policy("carol", "gw.example.com", "carol@example.com"));
		p.a->start(p.now);
		p.pump();
		CHECK(p.state(*p.b) != "established");
		CHECK(p.hb.logged("asks for EAP (no AUTH payload)"));
	}
}

TEST_CASE("engine eap: a gateway with rsa_pss signs its AUTH with RSASSA-PSS") {
	EapSides s(KeyKind::rsa2048);
	for (bool pss : {true, false}) {
		CAPTURE(pss);
		PeerPolicy gw = s.gateway();
		gw.rsa_pss = pss;
		Pair p(s.client(), gw);
		p.a->start(p.now);
		p.pump();
		REQUIRE(p.state(*p.a) == "established");
		const auto sa = p.a->status(p.now);
		REQUIRE(sa.size() == 1);
		CHECK(sa[0].peer_auth.find(pss ? "RSA-2048, RSASSA-PSS with SHA2-256"
		                               : "RSA-2048, RSA PKCS#1 v1.5") == 0);
	}
}
