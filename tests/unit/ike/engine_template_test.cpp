// Templates (PeerPolicy::remote_pattern): one gateway policy that serves
// many users, each an instance of its own (IKE SA, CHILD_SAs, address), the
// same instance when a user comes back, ended with its last IKE SA, its slot
// reused. EAP-MSCHAPv2 and certificate templates, a gateway engine with
// client engines through fake hosts (gateway_test_util.hpp).
#include "ike/eap_mschapv2.hpp"
#include "tests/unit/ike/cert_test_util.hpp"
#include "tests/unit/ike/gateway_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr const char* kCarolPw = "carol's long passphrase";
constexpr const char* kDavePw = "dave's long passphrase";

/// The gateway's certificate chain; user certificates come from its intermediate CA.
struct Pki {
	Chain gw{KeyKind::p256};
	TestCert user(const char* email, long serial) const {
		CertSpec s;
		s.cn = email;
		s.email = {email};
		s.serial = serial;
		return TestCert(s, TestKey(KeyKind::p256), &gw.inter);
	}
};

PeerPolicy quiet(PeerPolicy p) {
	p.dpd_interval_s = 0;
	p.child_rekey_s = p.ike_rekey_s = 0;
	return p;
}

/// Template "users": anyone, EAP-MSCHAPv2; dave has a fixed address and a network.
PeerPolicy eap_template(const Pki& pki, const char* pattern = "*") {
	PeerPolicy p = quiet(policy("users", "gw.example.com", "unused.example"));
	p.psk.clear();
	p.remote_id = {};
	p.remote_pattern = pattern;
	p.eap_role = EapRole::server;
	p.eap_method = eap::type::mschapv2;
	p.credentials = pki.gw.credentials();
	auto users = std::make_shared<Users>();
	users->emplace("carol", User{eap::nt_password_hash(kCarolPw), {}, {}});
	users->emplace("dave", User{eap::nt_password_hash(kDavePw),
	                            {*parse_ip("10.9.9.50")},
	                            {*parse_prefix("192.168.50.0/24")}});
	p.users = users;
	return p;
}

/// Template "certs": identities *@users.example with a certificate of the CA.
PeerPolicy cert_template(const Pki& pki) {
	PeerPolicy p = quiet(policy("certs", "gw.example.com", "unused.example"));
	p.psk.clear();
	p.remote_id = {};
	p.remote_pattern = "*@users.example";
	p.credentials = pki.gw.credentials();
	p.trust = pki.gw.trust();
	return p;
}

PeerPolicy eap_client(const Pki& pki, const char* idi, const char* user, const char* pw) {
	PeerPolicy p = quiet(policy("gw", idi, "gw.example.com"));
	p.psk.clear();
	p.eap_role = EapRole::client;
	p.eap_method = eap::type::mschapv2;
	p.eap_identity = user;
	p.eap_password = SecretString(std::string_view(pw));
	p.trust = pki.gw.trust();
	p.request_address = true;
	p.initiate = true;
	p.allowed_ips = {*parse_prefix("0.0.0.0/0")};
	return p;
}

PeerPolicy cert_client(const Pki& pki, const TestCert& cert, const char* idi) {
	PeerPolicy p = quiet(policy("gw", idi, "gw.example.com"));
	p.psk.clear();
	std::string err;
	p.credentials = Credentials::load(cert.pem(), cert.key.pem(), pki.gw.inter.pem(), err);
	REQUIRE_MESSAGE(p.credentials, err);
	p.trust = pki.gw.trust();
	p.request_address = true;
	p.initiate = true;
	p.allowed_ips = {*parse_prefix("0.0.0.0/0")};
	return p;
}

/// The gateway's index of the active peer named @name, or nullopt.
std::optional<size_t> index_of(const Engine& e, const std::string& name) {
	for (size_t i = 0; i < e.peers().size(); i++)
		if (e.peer_active(i) && e.peers()[i].name == name) return i;
	return std::nullopt;
}

bool established(Gateway::Client& c, const Gateway& g) {
	const auto s = c.e->status(g.now);
	return s.size() == 1 && s[0].state == "established";
}

/// The EAP template's gateway with two users connected: carol and dave
/// (dave's IKE identity @dave_idi), and two pool addresses.
struct TwoUsers {
	Pki pki;
	Gateway g;
	Gateway::Client* carol = nullptr;
	Gateway::Client* dave = nullptr;
	explicit TwoUsers(const char* dave_idi = "dave@x.example") : g({eap_template(pki)}) {
		g.hg.pool = {*parse_ip("10.9.0.10"), *parse_ip("10.9.0.11")};
		carol = &g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw),
		                        "10.0.1.1:4500");
		dave = &g.start_client(eap_client(pki, dave_idi, "dave", kDavePw), "10.0.1.2:4500");
		REQUIRE(established(*carol, g));
		REQUIRE(established(*dave, g));
	}
};

} // namespace

TEST_CASE("template: pattern matching") {
	CHECK(pattern_matches("*", ""));
	CHECK(pattern_matches("*", "anything at all"));
	CHECK(pattern_matches("*@example.com", "carol@example.com"));
	CHECK(pattern_matches("*@example.com", "Carol@EXAMPLE.com")); // ASCII case does not matter
	CHECK_FALSE(pattern_matches("*@example.com", "carol@example.com.evil"));
	CHECK_FALSE(pattern_matches("*@example.com", "carol@sub.example.org"));
	CHECK(pattern_matches("*@*.example.com", "carol@vpn.example.com"));
	CHECK_FALSE(pattern_matches("*@*.example.com", "carol@example.com"));
	CHECK(pattern_matches("user*", "user"));
	CHECK(pattern_matches("a*b*c", "aXbYbZc"));
	CHECK_FALSE(pattern_matches("a*b*c", "aXbYbZ"));
	CHECK(pattern_matches("exact.example", "exact.example"));
	CHECK_FALSE(pattern_matches("exact.example", "exact.example2"));
	CHECK_FALSE(pattern_matches("", "x"));
	// Many stars against a long text that never matches: bounded work, no recursion.
	CHECK_FALSE(pattern_matches(std::string(100, '*') + "x", std::string(255, 'a')));
}

TEST_CASE("template: two EAP users get instances of their own, with addresses and selectors of their own") {
	TwoUsers t("10.0.1.2"); // dave's identity: its IP address, as Windows sends it
	Gateway& g = t.g;
	Gateway::Client &carol = *t.carol, &dave = *t.dave;

	const std::optional<size_t> ic = index_of(*g.gw, "users/carol"), id = index_of(*g.gw, "users/dave");
	REQUIRE(ic);
	REQUIRE(id);
	CHECK(*ic != *id);
	CHECK(g.hg.instances_added == std::vector<size_t>{*ic, *id});
	const PeerPolicy& pc = g.gw->peers()[*ic];
	const PeerPolicy& pd = g.gw->peers()[*id];
	CHECK(pc.template_of == size_t(0));
	CHECK(pc.instance_user == "carol");
	CHECK(pc.remote_id == *parse_identity("carol@laptop.example")); // its IDi
	CHECK(pc.allowed_ips.empty());
	// dave's users-file data: his fixed address, then his network.
	CHECK(pd.assign == std::vector<IpAddress>{*parse_ip("10.9.9.50")});
	CHECK(pd.allowed_ips ==
	      std::vector<IpPrefix>{*parse_prefix("10.9.9.50/32"), *parse_prefix("192.168.50.0/24")});

	// Addresses: carol from the pool, dave his own (the pool is not asked for him).
	CHECK(carol.h.got_addresses == std::vector<IpAddress>{*parse_ip("10.9.0.10")});
	CHECK(dave.h.got_addresses == std::vector<IpAddress>{*parse_ip("10.9.9.50")});
	CHECK(g.hg.leases.size() == 1);
	CHECK(g.hg.leases.count(*ic) == 1);

	// Status names each IKE SA by its instance, with the EAP identity.
	const auto sc = g.sa_of("users/carol"), sd = g.sa_of("users/dave");
	REQUIRE(sc);
	REQUIRE(sd);
	CHECK(sc->eap_identity == "carol");
	CHECK(sd->eap_identity == "dave");
	REQUIRE(sd->children.size() == 1);
	CHECK(sd->children[0].remote_ts ==
	      std::vector<std::string>{"10.9.9.50/32", "192.168.50.0/24"}); // narrowed to his own
	REQUIRE(sc->children.size() == 1);
	CHECK(sc->children[0].remote_ts == std::vector<std::string>{"10.9.0.10/32"});
	CHECK(g.hg.logged("peer users: user 'carol' connected as peer users/carol"));
}

TEST_CASE("template: a returning user gets its instance back; its end frees the slot for the next user") {
	Pki pki;
	Gateway g({eap_template(pki)});
	g.hg.pool = {*parse_ip("10.9.0.10"), *parse_ip("10.9.0.11")};
	auto& carol =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.1:4500");
	REQUIRE(established(carol, g));
	const size_t slot = *index_of(*g.gw, "users/carol");

	// carol again, from another address (her laptop lost its IKE SA): the
	// same instance, the newer IKE SA replaces the older, same address.
	auto& carol2 =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.9:4500");
	REQUIRE(established(carol2, g));
	CHECK(index_of(*g.gw, "users/carol") == slot);
	CHECK(g.hg.instances_added.size() == 1);
	CHECK(g.hg.instances_removed.empty());
	CHECK(carol2.h.got_addresses == std::vector<IpAddress>{*parse_ip("10.9.0.10")});
	size_t carol_sas = 0;
	for (const IkeSaStatus& s : g.gw->status(g.now))
		carol_sas += s.peer == "users/carol";
	CHECK(carol_sas == 1);

	// She leaves (Delete): the instance ends, address back first.
	carol2.e->shutdown();
	g.pump();
	CHECK(g.hg.instances_removed == std::vector<size_t>{slot});
	CHECK_FALSE(index_of(*g.gw, "users/carol"));
	CHECK(g.hg.leases.empty());
	CHECK(g.hg.logged("peer users/carol: user disconnected"));

	// The next user takes the slot; nothing of carol's is left in it.
	auto& dave = g.start_client(eap_client(pki, "dave@x.example", "dave", kDavePw), "10.0.1.2:4500");
	REQUIRE(established(dave, g));
	CHECK(index_of(*g.gw, "users/dave") == slot);
	CHECK(g.gw->peers()[slot].instance_user == "dave");
	CHECK(g.gw->peers().size() == slot + 1); // no new index
}

TEST_CASE("template: certificate users match the pattern; others and exact peers are told apart") {
	Pki pki;
	const TestCert alice = pki.user("alice@users.example", 201), bob = pki.user("bob@users.example", 202),
	               eve = pki.user("eve@other.example", 203);
	// An ordinary peer with an identity the pattern would match too: it wins.
	PeerPolicy fixed = quiet(policy("bob-fixed", "gw.example.com", "bob@users.example"));
	fixed.psk.clear();
	fixed.credentials = pki.gw.credentials();
	fixed.trust = pki.gw.trust();
	fixed.allowed_ips = {*parse_prefix("10.9.7.7/32")};
	Gateway g({cert_template(pki), fixed});
	g.hg.pool = {*parse_ip("10.9.0.10"), *parse_ip("10.9.0.11")};

	auto& a = g.start_client(cert_client(pki, alice, "alice@users.example"), "10.0.1.1:4500");
	auto& b = g.start_client(cert_client(pki, bob, "bob@users.example"), "10.0.1.2:4500");
	auto& e = g.start_client(cert_client(pki, eve, "eve@other.example"), "10.0.1.3:4500");
	CHECK(established(a, g));
	CHECK(established(b, g));
	CHECK_FALSE(established(e, g));
	CHECK(index_of(*g.gw, "certs/alice@users.example"));
	CHECK(g.sa_of("bob-fixed")); // the exact identity, not the template
	CHECK_FALSE(index_of(*g.gw, "certs/bob@users.example"));
	CHECK(g.hg.logged("identity 'eve@other.example' is not configured for any peer"));
	CHECK(g.hg.instances_added.size() == 1);
	// A certificate for another identity than the IDi is refused as ever.
	auto& liar = g.start_client(cert_client(pki, eve, "carl@users.example"), "10.0.1.4:4500");
	CHECK_FALSE(established(liar, g));
	CHECK(g.hg.instances_added.size() == 1);
}

TEST_CASE("template: a host that cannot add the user refuses it, and leaves nothing behind") {
	Pki pki;
	Gateway g({eap_template(pki)});
	g.hg.pool = {*parse_ip("10.9.0.10")};
	g.hg.refuse_instances = true;
	auto& carol =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.1:4500");
	CHECK_FALSE(established(carol, g));
	CHECK(g.hg.logged("could not set up a peer for this user"));
	CHECK_FALSE(index_of(*g.gw, "users/carol"));
	CHECK(g.hg.installed.empty());
	CHECK(g.hg.leases.empty());
	CHECK(g.gw->counters().auth_failed == 1);
	// Later it can: the same slot, clean.
	g.hg.refuse_instances = false;
	auto& again =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.5:4500");
	CHECK(established(again, g));
	CHECK(index_of(*g.gw, "users/carol") == size_t(1));
}

TEST_CASE("template: removing the template removes its users, each told by a Delete") {
	TwoUsers t;
	Gateway& g = t.g;
	Pki& pki = t.pki;
	Gateway::Client &carol = *t.carol, &dave = *t.dave;
	g.gw->remove_peer(0, g.now);
	g.pump();
	CHECK(g.hg.instances_removed.size() == 2);
	CHECK(g.gw->status(g.now).empty());
	CHECK(g.hg.installed.empty());
	CHECK(g.hg.leases.empty());
	CHECK_FALSE(established(carol, g));
	CHECK_FALSE(established(dave, g));
	CHECK(carol.h.logged("IKE SA closed"));
	// Nobody is let in by it any more (with no peer left, not even IKE_SA_INIT passes).
	auto& late =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.7:4500");
	CHECK_FALSE(established(late, g));
	CHECK(g.hg.instances_added.size() == 2);
}

TEST_CASE("template: a new users table ends only the users whose entry changed or went") {
	TwoUsers t;
	Gateway& g = t.g;
	Pki& pki = t.pki;
	Gateway::Client &carol = *t.carol, &dave = *t.dave;
	const auto carol_sa = g.sa_of("users/carol");
	REQUIRE(carol_sa);

	// erin added, dave's network changed, carol as before.
	auto users = std::make_shared<Users>(*g.gw->peers()[0].users);
	users->emplace("erin", User{eap::nt_password_hash("erin's passphrase"), {}, {}});
	users->at("dave").allowed_ips = {*parse_prefix("192.168.51.0/24")};
	CHECK(g.gw->update_users(0, users, g.now) == 1);
	g.pump();
	CHECK_FALSE(established(dave, g));
	CHECK_FALSE(index_of(*g.gw, "users/dave"));
	CHECK(g.hg.logged("peer users/dave: ended: its entry in the users file changed or went"));
	// carol's IKE SA is the same one, untouched.
	const auto carol_after = g.sa_of("users/carol");
	REQUIRE(carol_after);
	CHECK(carol_after->spi_r == carol_sa->spi_r);
	CHECK(established(carol, g));
	// dave logs in again and gets his new network; erin can log in now.
	auto& dave2 = g.start_client(eap_client(pki, "dave@x.example", "dave", kDavePw), "10.0.1.3:4500");
	REQUIRE(established(dave2, g));
	const size_t id = *index_of(*g.gw, "users/dave");
	CHECK(g.gw->peers()[id].allowed_ips ==
	      std::vector<IpPrefix>{*parse_prefix("10.9.9.50/32"), *parse_prefix("192.168.51.0/24")});
	auto& erin =
	    g.start_client(eap_client(pki, "erin@x.example", "erin", "erin's passphrase"), "10.0.1.4:4500");
	CHECK(established(erin, g));

	// carol taken out of the file: she is ended, and cannot log in again.
	auto fewer = std::make_shared<Users>(*users);
	fewer->erase("carol");
	CHECK(g.gw->update_users(0, fewer, g.now) == 1);
	g.pump();
	CHECK_FALSE(established(carol, g));
	auto& carol2 =
	    g.start_client(eap_client(pki, "carol@laptop.example", "carol", kCarolPw), "10.0.1.5:4500");
	CHECK_FALSE(established(carol2, g));
	CHECK(g.hg.logged("'carol' is not in the users file"));
	CHECK_THROWS_AS(g.gw->update_users(*index_of(*g.gw, "users/erin"), fewer, g.now),
	                std::invalid_argument);
}

// Each user that logs in adds a peer to the engine's tables. Room for it
// was reserved one element at a time (reserve(size + 1) allocates exactly
// that), so every login copied every peer's policy: with 10,000 users
// connected, a login cost the gateway about a millisecond of copying.
TEST_CASE("template: users logging in one by one do not copy the peers' policies each time") {
	Pki pki;
	Gateway g({cert_template(pki)});
	constexpr int kUsers = 120;
	for (int i = 0; i < kUsers; i++)
		g.hg.pool.push_back(IpAddress::v4(0x0a090000u + uint32_t(i) + 10));
	const PeerPolicy* storage = g.gw->peers().data();
	int moved = 0;
	for (int i = 0; i < kUsers; i++) {
		const std::string id = "u" + std::to_string(i) + "@users.example";
		const TestCert cert = pki.user(id.c_str(), 1000 + i);
		const std::string from =
		    "10.0." + std::to_string(1 + i / 200) + "." + std::to_string(1 + i % 200) + ":4500";
		auto& c = g.start_client(cert_client(pki, cert, id.c_str()), from.c_str());
		REQUIRE(established(c, g));
		if (g.gw->peers().data() != storage) {
			moved++;
			storage = g.gw->peers().data();
		}
	}
	CHECK(g.hg.instances_added.size() == kUsers);
	CHECK(g.gw->peers().size() == kUsers + 1);
	// Doubling needs about log2(120) = 7 moves; one per login is the defect.
	CHECK(moved <= 12);
}
