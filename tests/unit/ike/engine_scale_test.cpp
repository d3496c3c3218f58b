// A gateway engine with hundreds of peers (issue 19): the indexes that keep
// each message's work independent of how many IKE SAs the gateway holds
// (identities to peers, each peer's IKE SAs, the sorted SPI list, the
// SAs to sweep) must give the same answers the walks over everything gave.
#include "tests/unit/ike/gateway_test_util.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <map>
#include <string>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr size_t kPeers = 300;

std::vector<PeerPolicy> many_peers() {
	std::vector<PeerPolicy> peers;
	for (size_t i = 0; i < kPeers; i++) {
		const std::string n = std::to_string(i);
		const std::string psk = "pre-shared-key-of-client-" + n + "-0123456789";
		PeerPolicy p =
		    policy(("p" + n).c_str(), "gw.example", ("c" + n + ".example").c_str(), psk.c_str());
		p.ike_proposals = {test::ike("aes128gcm16-prfsha256-x25519")};
		p.esp_proposals = {test::esp("aes128gcm16")};
		p.allowed_ips = {
		    IpPrefix{IpAddress::v4((uint32_t(10) << 24 | uint32_t(20) << 16) + uint32_t(i) + 1), 32}};
		p.dpd_interval_s = 0;
		p.child_rekey_s = p.ike_rekey_s = 0;
		peers.push_back(std::move(p));
	}
	return peers;
}

std::string client_addr(size_t i, unsigned net = 1) {
	return "10." + std::to_string(net) + "." + std::to_string(i / 250) + "." +
	       std::to_string(i % 250 + 1) + ":4500";
}

/// The gateway's established IKE SAs: peer name -> (our SPI, the peer's address).
std::map<std::string, std::pair<uint64_t, std::string>> established(const Gateway& g) {
	std::map<std::string, std::pair<uint64_t, std::string>> out;
	for (const IkeSaStatus& s : g.gw->status(g.now))
		if (s.state == "established") {
			CHECK_MESSAGE(!out.count(s.peer), "two established IKE SAs of " << s.peer);
			out[s.peer] = {s.spi_r, s.remote};
		}
	return out;
}

/// our_spis() must be every IKE SA the gateway holds, sorted.
void check_spis(const Gateway& g) {
	std::vector<uint64_t> spis;
	g.gw->our_spis(spis);
	std::vector<uint64_t> want;
	for (const IkeSaStatus& s : g.gw->status(g.now))
		want.push_back(s.spi_r);
	std::sort(want.begin(), want.end());
	CHECK(std::is_sorted(spis.begin(), spis.end()));
	CHECK(spis == want);
}

} // namespace

TEST_CASE("300 peers: each found by identity; a restarted client replaces only its own IKE SA") {
	const std::vector<PeerPolicy> peers = many_peers();
	Gateway g(peers);
	const uint64_t version0 = g.gw->sas_version();
	for (size_t i = 0; i < kPeers; i++)
		g.start_client(client_of(peers[i]), client_addr(i).c_str());
	auto before = established(g);
	REQUIRE(before.size() == kPeers);
	for (size_t i = 0; i < kPeers; i++) {
		const auto it = before.find("p" + std::to_string(i));
		REQUIRE(it != before.end());
		CHECK(it->second.second == client_addr(i)); // each identity matched its own peer
	}
	CHECK(g.gw->sas_version() != version0);
	check_spis(g);

	// Client 150 restarts from another address: its new IKE SA replaces the
	// old one (which the gateway deletes), no other peer's SA changes.
	g.start_client(client_of(peers[150]), client_addr(150, 2).c_str());
	g.advance(std::chrono::milliseconds(400));
	auto after = established(g);
	REQUIRE(after.size() == kPeers);
	for (const auto& [name, sa] : before) {
		if (name == "p150") {
			CHECK(after[name].first != sa.first);
			CHECK(after[name].second == client_addr(150, 2));
		} else {
			CHECK(after[name] == sa);
		}
	}
	CHECK(g.gw->status(g.now).size() == kPeers); // the replaced SA is gone, not just closed
	check_spis(g);

	// A removed peer's identity no longer matches; added back, it does again.
	g.gw->remove_peer(42, g.now);
	g.advance(std::chrono::milliseconds(400));
	CHECK(established(g).count("p42") == 0);
	CHECK(g.gw->status(g.now).size() == kPeers - 1);
	check_spis(g);
	g.start_client(client_of(peers[42]), client_addr(42, 3).c_str());
	g.advance(std::chrono::milliseconds(400));
	CHECK(established(g).count("p42") == 0);
	const size_t again = g.gw->add_peer(peers[42], g.now);
	CHECK(again == kPeers);
	g.start_client(client_of(peers[42]), client_addr(42, 4).c_str());
	g.advance(std::chrono::milliseconds(400));
	const auto back = established(g);
	REQUIRE(back.count("p42"));
	CHECK(back.at("p42").second == client_addr(42, 4));
	check_spis(g);
}
