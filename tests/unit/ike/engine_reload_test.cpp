// Peers added and removed at run time (a live reload of the gateway's
// config, issue 17): a removed peer is deleted on the wire and can no longer
// authenticate, an added one comes up, and the peers left alone keep their
// IKE SAs and CHILD_SAs exactly as they were.
#include "tests/unit/ike/gateway_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

/// The gateway's peers with rekey timers running.
std::vector<PeerPolicy> timed_peers() {
	std::vector<PeerPolicy> peers = gateway_peers();
	for (PeerPolicy& p : peers) {
		p.child_rekey_s = 3600;
		p.ike_rekey_s = 14400;
	}
	return peers;
}

/// Gives the gateway an address pool (its peers have no fixed addresses).
void add_pool(Gateway& g) {
	g.hg.pool = {*parse_ip("10.77.0.1"), *parse_ip("10.77.0.2"), *parse_ip("10.77.0.3")};
}

/// The client of gateway peer @p, asking for a pool address.
PeerPolicy pooled_client(const PeerPolicy& p) {
	PeerPolicy c = client_of(p);
	c.request_address = true;
	c.child_rekey_s = c.ike_rekey_s = 0; // the gateway's timers are the ones watched
	return c;
}

/// Every CHILD_SA inbound SPI of @s.
std::vector<uint32_t> child_spis(const IkeSaStatus& s) {
	std::vector<uint32_t> out;
	for (const ChildStatus& c : s.children)
		out.push_back(c.spi_in);
	return out;
}

size_t sas_of(const Engine& e, const std::string& peer, Clock::time_point now) {
	const std::vector<IkeSaStatus> st = e.status(now);
	return size_t(
	    std::count_if(st.begin(), st.end(), [&](const IkeSaStatus& s) { return s.peer == peer; }));
}

} // namespace

TEST_CASE("a removed peer is deleted on the wire while another peer keeps its SAs untouched") {
	Gateway g(timed_peers());
	add_pool(g);
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway::Client& a = g.start_client(pooled_client(peers[0]), "10.0.0.11:4500");
	Gateway::Client& b = g.start_client(pooled_client(peers[1]), "10.0.0.12:4500");
	REQUIRE(g.sa_of("alice"));
	REQUIRE(g.sa_of("bob"));
	REQUIRE(a.h.installed.size() == 1);
	REQUIRE(b.h.installed.size() == 1);
	REQUIRE(g.hg.leases.count(0) == 1);
	const std::vector<uint32_t> alice_children = child_spis(*g.sa_of("alice"));
	const IkeSaStatus bob_before = *g.sa_of("bob");
	const std::map<uint32_t, ChildKeys> bob_host_before = b.h.installed;
	const uint64_t bob_received = b.e->counters().received;
	g.now += std::chrono::seconds(5);

	g.gw->remove_peer(0, g.now);
	CHECK_FALSE(g.gw->peer_active(0));
	CHECK(g.gw->peer_active(1));
	// The gateway's side is gone at once: CHILD_SA, pool address, IKE SA.
	for (uint32_t spi : alice_children)
		CHECK(g.hg.installed.count(spi) == 0);
	CHECK(g.hg.releases == 1);
	CHECK(g.hg.leases.count(0) == 0);
	CHECK_FALSE(g.sa_of("alice"));
	CHECK(sas_of(*g.gw, "alice", g.now) == 0);
	CHECK(g.gw->peers()[0].psk.empty());
	// The Delete reaches alice, who removes her side.
	REQUIRE(g.hg.out.size() == 1);
	CHECK(g.hg.out.front().to == a.h.self);
	g.pump();
	CHECK(a.h.installed.empty());
	CHECK(a.e->status(g.now).empty());
	CHECK(a.h.logged("deleted by the peer"));

	// Bob saw nothing, and the gateway holds his SAs as before: same SPIs,
	// same keys, same rekey deadlines (5 s nearer), same pool address.
	CHECK(b.e->counters().received == bob_received);
	CHECK(b.h.installed.size() == 1);
	CHECK(b.h.installed.begin()->first == bob_host_before.begin()->first);
	const std::optional<IkeSaStatus> bob_after = g.sa_of("bob");
	REQUIRE(bob_after);
	CHECK(bob_after->spi_i == bob_before.spi_i);
	CHECK(bob_after->spi_r == bob_before.spi_r);
	CHECK(bob_after->rekey_in_s == bob_before.rekey_in_s - 5);
	CHECK(child_spis(*bob_after) == child_spis(bob_before));
	REQUIRE(bob_after->children.size() == 1);
	CHECK(bob_after->children[0].rekey_in_s == bob_before.children[0].rekey_in_s - 5);
	CHECK(bob_after->virtual_ips == bob_before.virtual_ips);
	for (uint32_t spi : child_spis(bob_before)) {
		REQUIRE(g.hg.installed.count(spi) == 1);
		CHECK(g.hg.installed[spi].enc_in == b.h.installed.begin()->second.enc_out);
	}
	CHECK(g.hg.leases.count(1) == 1);
	CHECK(g.gw->counters().internal_errors == 0);
}

TEST_CASE("a removed peer that tries again is refused") {
	std::vector<PeerPolicy> peers = gateway_peers();
	SUBCASE("in IKE_AUTH, when its suite is still another peer's") {
		peers[1].ike_proposals.push_back(peers[0].ike_proposals.front());
		Gateway g(peers);
		Gateway::Client& a = g.start_client(client_of(peers[0]), "10.0.0.11:4500");
		REQUIRE(g.sa_of("alice"));
		g.gw->remove_peer(0, g.now);
		g.pump();
		REQUIRE(a.h.installed.empty());
		// Alice's client restarts after its backoff; her identity is no
		// longer configured, so the gateway refuses her in IKE_AUTH.
		g.advance(std::chrono::seconds(3));
		CHECK(g.gw->counters().auth_failed == 1);
		CHECK(g.hg.logged("identity 'alice.example' is not configured for any peer"));
		CHECK(a.h.logged("AUTHENTICATION_FAILED"));
		CHECK(a.h.installed.empty());
		CHECK(g.hg.installed.empty());
		CHECK(g.gw->status(g.now).empty());
	}
	SUBCASE("in IKE_SA_INIT, when its suite was its own") {
		Gateway g(peers);
		Gateway::Client& a = g.start_client(client_of(peers[0]), "10.0.0.11:4500");
		REQUIRE(g.sa_of("alice"));
		g.gw->remove_peer(0, g.now);
		g.pump();
		const uint64_t no_proposal = g.gw->counters().no_proposal;
		g.advance(std::chrono::seconds(3));
		CHECK(g.gw->counters().no_proposal > no_proposal);
		CHECK(a.h.installed.empty());
		CHECK(g.gw->status(g.now).empty());
		// Bob's suite is still accepted.
		g.start_client(client_of(peers[1]), "10.0.0.12:4500");
		CHECK(g.sa_of("bob"));
	}
}

TEST_CASE("a peer added to a started engine is initiated at once and comes up") {
	std::vector<PeerPolicy> peers = gateway_peers();
	const PeerPolicy carol = peers[2];
	peers.pop_back();
	Gateway g(peers);
	// Carol's suite is no one else's: the gateway accepts it only once she is added.
	g.gw->remove_peer(1, g.now);
	CHECK(g.gw->add_peer(carol, g.now) == 2); // index 1 stays bob's, removed
	CHECK(g.hg.out.empty());                  // a responder's peer initiates nothing

	Gateway::Client& c = g.started_client("10.0.0.13:4500");
	PeerPolicy to_gw = client_of(carol);
	to_gw.endpoint = g.hg.self;
	CHECK(c.e->add_peer(to_gw, g.now) == 0);
	REQUIRE(c.h.out.size() == 1); // IKE_SA_INIT, before any tick
	g.pump();
	REQUIRE(g.sa_of("carol"));
	CHECK(g.sa_of("carol")->suite == "aes128gcm16-prfsha256-ecp256");
	REQUIRE(c.h.installed.size() == 1);
	CHECK(g.hg.installed.size() == 1);
	CHECK(c.e->status(g.now).at(0).state == "established");

	// An engine not started yet waits for start().
	FakeHost h;
	h.self = ep("10.0.0.14:4500");
	Engine idle({}, h);
	CHECK(idle.add_peer(to_gw, g.now) == 0);
	CHECK(h.out.empty());
	idle.start(g.now);
	CHECK(h.out.size() == 1);
}

TEST_CASE("removing a peer whose IKE SA is still being set up leaves nothing behind") {
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway g;
	Gateway::Client& a = g.started_client("10.0.0.11:4500");
	PeerPolicy to_gw = client_of(peers[0]);
	to_gw.endpoint = g.hg.self;
	SUBCASE("IKE_SA_INIT sent") {
		a.e->add_peer(to_gw, g.now);
		REQUIRE(a.e->status(g.now).at(0).state == "connecting");
	}
	SUBCASE("IKE_AUTH sent, its CHILD_SA's SPI reserved") {
		a.e->add_peer(to_gw, g.now);
		// IKE_SA_INIT there and back by hand, so IKE_AUTH stays unanswered.
		g.gw->receive(Port::natt, a.h.self, a.h.out.front().bytes, g.now);
		a.h.out.clear();
		REQUIRE(g.hg.out.size() == 1);
		a.e->receive(Port::natt, g.hg.self, g.hg.out.front().bytes, g.now);
		g.hg.out.clear();
		REQUIRE(a.e->status(g.now).at(0).state == "authenticating");
		REQUIRE(a.h.reserved.size() == 1);
	}
	a.h.out.clear();
	a.e->remove_peer(0, g.now);
	CHECK(a.e->status(g.now).empty());
	CHECK(a.h.reserved.empty()); // every SPI allocated was released
	CHECK(a.h.installed.empty());
	CHECK(a.h.out.empty()); // nothing established: nothing to delete on the wire
	// Answers still in flight find nothing, and no restart follows.
	g.advance(std::chrono::seconds(70));
	CHECK(a.e->status(g.now).empty());
	CHECK(a.h.out.empty());
	CHECK(a.h.installed.empty());
	CHECK(a.h.reserved.empty());
	CHECK(a.e->counters().internal_errors == 0);
}

TEST_CASE("a removed peer stays removed, and its name can be added again under a new index") {
	Gateway g(timed_peers());
	add_pool(g);
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway::Client& a = g.start_client(pooled_client(peers[0]), "10.0.0.11:4500");
	REQUIRE(g.sa_of("alice"));
	// An active peer's name or identity cannot be added twice.
	CHECK_THROWS_AS(g.gw->add_peer(peers[0], g.now), std::invalid_argument);
	PeerPolicy same_id = peers[2];
	same_id.remote_id = peers[0].remote_id;
	CHECK_THROWS_AS(g.gw->add_peer(same_id, g.now), std::invalid_argument);
	CHECK(g.gw->peers().size() == 3);
	CHECK_THROWS_AS(g.gw->remove_peer(3, g.now), std::out_of_range);

	g.gw->remove_peer(0, g.now);
	g.pump();
	const size_t lines = g.hg.logs.size();
	g.gw->remove_peer(0, g.now); // again: nothing happens
	CHECK(g.hg.logs.size() == lines);
	CHECK(g.hg.releases == 1);
	CHECK(g.hg.out.empty());
	CHECK_FALSE(g.gw->peer_active(0));
	CHECK_FALSE(g.gw->peer_active(3));
	CHECK(sas_of(*g.gw, "alice", g.now) == 0);

	// Alice is configured again: a new index, and her client's next try comes up.
	CHECK(g.gw->add_peer(peers[0], g.now) == 3);
	CHECK(g.gw->peer_active(3));
	CHECK(g.gw->peers()[3].name == "alice");
	g.advance(std::chrono::seconds(3));
	REQUIRE(g.sa_of("alice"));
	REQUIRE(a.h.installed.size() == 1);
	CHECK(g.hg.installed.size() == 1);
	CHECK(g.hg.leases.count(3) == 1); // the pool address is leased under the new index
	CHECK(g.hg.leases.count(0) == 0);
}

TEST_CASE("a host that cannot send the Delete does not stop a peer's removal") {
	Gateway g;
	const std::vector<PeerPolicy> peers = gateway_peers();
	Gateway::Client& a = g.start_client(client_of(peers[0]), "10.0.0.11:4500");
	g.start_client(client_of(peers[1]), "10.0.0.12:4500");
	REQUIRE(g.sa_of("alice"));
	REQUIRE(g.hg.installed.size() == 2);
	g.hg.fail_send_to = a.h.self;
	CHECK_NOTHROW(g.gw->remove_peer(0, g.now));
	CHECK(g.gw->counters().internal_errors == 1);
	CHECK_FALSE(g.gw->peer_active(0));
	CHECK_FALSE(g.sa_of("alice"));
	CHECK(g.hg.installed.size() == 1); // alice's CHILD_SA went all the same
	CHECK(g.sa_of("bob"));
	CHECK(g.hg.out.empty());
}
