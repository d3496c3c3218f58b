// One gateway engine serving several peers, each with its own PSK, identity,
// IKE and ESP proposals, allowed_ips and local_ts: every peer comes up with
// its own suite and selectors, and none can use what only another one is
// allowed (issue 16, item 5).
#include "tests/unit/ike/gateway_test_util.hpp"
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

TrafficSelector ts(const char* prefix) { return selector_of(*parse_prefix(prefix)); }

/// Makes @r speak to @g as gateway peer @p (its PSK, identity and first suite).
/// (RawPeer is not copyable: its transport points at itself.)
void raw_as(RawPeer& r, Gateway& g, const PeerPolicy& p, const char* self) {
	r.t = {g.gw.get(), &g.hg, &g.now};
	r.self = ep(self);
	r.psk.assign(p.psk.begin(), p.psk.end());
	r.id = p.remote_id;
	r.suite = p.ike_proposals.front();
}

/// A CREATE_CHILD_SA request for a CHILD_SA of suite @s (rekeying @rekey_spi when non-zero).
std::vector<Payload> child_request(const EspSuite& s, uint32_t spi, uint32_t rekey_spi,
                                   std::vector<TrafficSelector> tsi, std::vector<TrafficSelector> tsr) {
	const std::vector<EspSuite> one{s};
	std::vector<uint8_t> n(32);
	random_bytes(n);
	std::vector<Payload> p;
	if (rekey_spi) {
		NotifyPayload r;
		r.type = notify::rekey_sa;
		r.protocol = Protocol::esp;
		r.spi = {uint8_t(rekey_spi >> 24), uint8_t(rekey_spi >> 16), uint8_t(rekey_spi >> 8),
		         uint8_t(rekey_spi)};
		p.push_back(r);
	}
	p.push_back(esp_offer(one, spi, ChildExchange::create_child_sa));
	p.push_back(NoncePayload{n});
	p.push_back(TsPayload{true, std::move(tsi)});
	p.push_back(TsPayload{false, std::move(tsr)});
	return p;
}

} // namespace

TEST_CASE("three peers on one gateway each come up with their own suites and selectors") {
	Gateway g;
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway::Client& a = g.start_client(client_of(peers[0]), "10.0.0.11:4500");
	Gateway::Client& b = g.start_client(client_of(peers[1]), "10.0.0.12:4500");
	Gateway::Client& c = g.start_client(client_of(peers[2]), "10.0.0.13:4500");
	REQUIRE(g.sa_of("alice"));
	REQUIRE(g.sa_of("bob"));
	REQUIRE(g.sa_of("carol"));
	CHECK(g.sa_of("alice")->suite == "aes256gcm16-prfsha384-x25519");
	CHECK(g.sa_of("bob")->suite == "aes128-sha256-prfsha256-modp2048");
	CHECK(g.sa_of("carol")->suite == "aes128gcm16-prfsha256-ecp256");
	REQUIRE(a.h.installed.size() == 1);
	REQUIRE(b.h.installed.size() == 1);
	REQUIRE(c.h.installed.size() == 1);
	CHECK(a.h.installed.begin()->second.cipher == crypto::Cipher::aes256_gcm);
	CHECK(b.h.installed.begin()->second.cipher == crypto::Cipher::aes128_cbc_sha256);
	CHECK(c.h.installed.begin()->second.cipher == crypto::Cipher::aes128_gcm);
	// Each client's selectors were narrowed to its own allowed_ips.
	CHECK(g.sa_of("alice")->children.at(0).remote_ts == std::vector<std::string>{"10.9.1.0/24"});
	CHECK(g.sa_of("bob")->children.at(0).remote_ts == std::vector<std::string>{"10.9.2.0/24"});
	CHECK(g.sa_of("carol")->children.at(0).remote_ts == std::vector<std::string>{"10.9.3.0/24"});
	CHECK(g.hg.installed.size() == 3);
	CHECK(g.gw->counters().auth_failed == 0);
}

TEST_CASE("a peer that negotiated another peer's IKE suite is refused at IKE_AUTH") {
	// Alice's client offers only bob's suite. IKE_SA_INIT, before the
	// gateway knows who is asking, accepts it (bob allows it); IKE_AUTH,
	// once alice has proven who she is, must not.
	Gateway g;
	const std::vector<PeerPolicy> peers = gateway_peers();
	PeerPolicy wrong = client_of(peers[0]);
	wrong.ike_proposals = peers[1].ike_proposals;
	Gateway::Client& a = g.start_client(wrong, "10.0.0.11:4500");
	CHECK_FALSE(g.sa_of("alice"));
	CHECK(g.hg.installed.empty());
	CHECK(a.h.installed.empty());
	CHECK(a.h.logged("AUTHENTICATION_FAILED"));
	CHECK(g.gw->counters().auth_failed == 1);
	CHECK(g.hg.logged("peer alice: refused after authentication"));
	CHECK(g.hg.logged("aes128-sha256-prfsha256-modp2048, which is not in this peer's ike_proposals "
	                  "(aes256gcm16-prfsha384-x25519)"));
	// Bob, whose suite it is, still comes up on it; so does alice with her own.
	g.start_client(client_of(peers[1]), "10.0.0.12:4500");
	REQUIRE(g.sa_of("bob"));
	CHECK(g.sa_of("bob")->suite == "aes128-sha256-prfsha256-modp2048");
	g.start_client(client_of(peers[0]), "10.0.0.13:4500");
	REQUIRE(g.sa_of("alice"));
	CHECK(g.sa_of("alice")->suite == "aes256gcm16-prfsha384-x25519");
}

TEST_CASE("a peer cannot use another peer's ESP suite or selectors in IKE_AUTH") {
	Gateway g;
	const std::vector<PeerPolicy> peers = gateway_peers();
	SUBCASE("ESP suite") {
		PeerPolicy wrong = client_of(peers[0]);
		wrong.esp_proposals = peers[1].esp_proposals;
		Gateway::Client& a = g.start_client(wrong, "10.0.0.11:4500");
		CHECK(a.h.logged("NO_PROPOSAL_CHOSEN"));
		CHECK(a.h.installed.empty());
		CHECK(g.hg.installed.empty());
	}
	SUBCASE("selectors") {
		RawPeer r;
		raw_as(r, g, peers[0], "10.0.0.11:4500");
		REQUIRE(r.init());
		bool got = false;
		std::vector<Payload> ans = r.auth({ts("10.9.2.0/24")}, {ts("0.0.0.0/0")}, 0xa0000001, &got);
		REQUIRE(got);
		CHECK(notify_of(ans, notify::ts_unacceptable));
		CHECK(g.hg.installed.empty());
	}
}

TEST_CASE("IKE SA rekeys and CHILD_SAs stay within the peer's own proposals") {
	Gateway g;
	const std::vector<PeerPolicy> peers = gateway_peers();
	RawPeer r;
	raw_as(r, g, peers[2], "10.0.0.13:4500"); // carol
	REQUIRE(r.init());
	bool got = false;
	r.auth({ts("10.9.3.0/24")}, {ts("0.0.0.0/0")}, 0xa0000001, &got);
	REQUIRE(got);
	REQUIRE(g.hg.installed.size() == 1);
	// Bob's suites are in no list of carol's: an IKE SA rekey to bob's
	// suite, a new CHILD_SA and a CHILD_SA rekey with bob's ESP suite are refused.
	const uint64_t no_proposal = g.gw->counters().no_proposal;
	r.suite = peers[1].ike_proposals.front();
	CHECK(notify_of(r.rekey_ike(), notify::no_proposal_chosen));
	const EspSuite bobs = peers[1].esp_proposals.front();
	std::vector<Payload> p = child_request(bobs, 0xa0000002, 0, {ts("10.9.3.0/24")}, {ts("0.0.0.0/0")});
	CHECK(notify_of(r.request(Exchange::create_child_sa, p), notify::no_proposal_chosen));
	p = child_request(bobs, 0xa0000003, 0xa0000001, {ts("10.9.3.0/24")}, {ts("0.0.0.0/0")});
	CHECK(notify_of(r.request(Exchange::create_child_sa, p), notify::no_proposal_chosen));
	CHECK(g.gw->counters().no_proposal == no_proposal + 3);
	CHECK(g.hg.installed.size() == 1);
	// Carol's own ESP suite in a CHILD_SA rekey is accepted.
	p = child_request(peers[2].esp_proposals.front(), 0xa0000004, 0xa0000001, {ts("10.9.3.0/24")},
	                  {ts("0.0.0.0/0")});
	CHECK(notify_of(r.request(Exchange::create_child_sa, p), notify::no_proposal_chosen) == nullptr);
	CHECK(g.hg.installed.size() == 2);
}

TEST_CASE("local_ts narrows what a peer may reach in IKE_AUTH and CREATE_CHILD_SA") {
	std::vector<PeerPolicy> peers = gateway_peers();
	peers[2].local_ts = {*parse_prefix("10.8.0.0/24"), *parse_prefix("fd08::/64")};
	Gateway g(peers);
	const std::vector<TrafficSelector> want{ts("10.8.0.0/24")};
	SUBCASE("IKE_AUTH asking for everything gets local_ts, and the SA is installed with it") {
		RawPeer r;
		raw_as(r, g, peers[2], "10.0.0.13:4500");
		REQUIRE(r.init());
		std::vector<Payload> ans = r.auth({ts("10.9.3.0/24")}, {ts("0.0.0.0/0")}, 0xa0000001);
		REQUIRE(ts_of(ans, false));
		CHECK(ts_of(ans, false)->selectors == want);
		REQUIRE(g.hg.installed.size() == 1);
		CHECK(g.hg.installed.begin()->second.local_ts == want);
		REQUIRE(g.sa_of("carol"));
		CHECK(g.sa_of("carol")->children.at(0).local_ts == std::vector<std::string>{"10.8.0.0/24"});
		// CREATE_CHILD_SA: outside local_ts is refused, inside is narrowed.
		const EspSuite own = peers[2].esp_proposals.front();
		std::vector<Payload> p =
		    child_request(own, 0xa0000002, 0, {ts("10.9.3.0/24")}, {ts("192.168.0.0/16")});
		CHECK(notify_of(r.request(Exchange::create_child_sa, p), notify::ts_unacceptable));
		CHECK(g.hg.installed.size() == 1);
		p = child_request(own, 0xa0000003, 0, {ts("10.9.3.0/24")}, {ts("10.0.0.0/8"), ts("::/0")});
		ans = r.request(Exchange::create_child_sa, p);
		REQUIRE(ts_of(ans, false));
		CHECK(ts_of(ans, false)->selectors ==
		      std::vector<TrafficSelector>{ts("10.8.0.0/24"), ts("fd08::/64")});
		CHECK(g.hg.installed.size() == 2);
		// A CHILD_SA rekey the peer starts is narrowed the same way.
		p = child_request(own, 0xa0000004, 0xa0000001, {ts("10.9.3.0/24")}, {ts("0.0.0.0/0")});
		ans = r.request(Exchange::create_child_sa, p);
		REQUIRE(ts_of(ans, false));
		CHECK(ts_of(ans, false)->selectors == want);
	}
	SUBCASE("IKE_AUTH asking only for what is outside local_ts gets TS_UNACCEPTABLE") {
		RawPeer r;
		raw_as(r, g, peers[2], "10.0.0.13:4500");
		REQUIRE(r.init());
		std::vector<Payload> ans = r.auth({ts("10.9.3.0/24")}, {ts("10.9.0.0/16")}, 0xa0000001);
		CHECK(notify_of(ans, notify::ts_unacceptable));
		CHECK(g.hg.installed.empty());
		CHECK(g.hg.logged("outside local_ts"));
	}
	SUBCASE("without local_ts the peer's TSr is kept as it asked (the default)") {
		RawPeer r;
		raw_as(r, g, peers[1], "10.0.0.12:4500");
		REQUIRE(r.init());
		const std::vector<TrafficSelector> asked{ts("0.0.0.0/0"), ts("::/0")};
		std::vector<Payload> ans = r.auth({ts("10.9.2.0/24")}, asked, 0xa0000001);
		REQUIRE(ts_of(ans, false));
		CHECK(ts_of(ans, false)->selectors == asked);
	}
}

TEST_CASE("an initiator offers its local_ts as TSi and installs the side the responder left it") {
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway g;
	PeerPolicy alice = client_of(peers[0]);
	alice.local_ts = {*parse_prefix("10.9.1.0/25"), *parse_prefix("10.99.0.0/24")};
	Gateway::Client& a = g.start_client(alice, "10.0.0.11:4500");
	REQUIRE(a.h.installed.size() == 1);
	// The gateway narrowed alice's offer to her allowed_ips there (10.9.1.0/24).
	CHECK(a.h.installed.begin()->second.local_ts == std::vector<TrafficSelector>{ts("10.9.1.0/25")});
	REQUIRE(g.sa_of("alice"));
	CHECK(g.sa_of("alice")->children.at(0).remote_ts == std::vector<std::string>{"10.9.1.0/25"});
}
