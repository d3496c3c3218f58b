// A gateway engine serving several peers and client engines of its peers,
// wired through fake hosts (engine_test_util.hpp): the bench of the
// multi-peer and live-reload tests.
#pragma once

#include "tests/unit/ike/engine_test_util.hpp"

namespace esptun::ike::test {

inline IkeSuite ike(const char* text) {
	std::string err;
	std::optional<IkeSuite> s = parse_ike_proposal(text, err);
	REQUIRE_MESSAGE(s, err);
	return *s;
}

inline EspSuite esp(const char* text) {
	std::string err;
	std::optional<EspSuite> s = parse_esp_proposal(text, err);
	REQUIRE_MESSAGE(s, err);
	return *s;
}

/// The gateway's three peers, each allowing IKE and ESP suites none of
/// the others allows.
inline std::vector<PeerPolicy> gateway_peers() {
	PeerPolicy a = policy("alice", "gw.example", "alice.example", "alice-pre-shared-key-0123456789");
	a.ike_proposals = {ike("aes256gcm16-prfsha384-x25519")};
	a.esp_proposals = {esp("aes256gcm16")};
	a.allowed_ips = {*parse_prefix("10.9.1.0/24")};
	PeerPolicy b = policy("bob", "gw.example", "bob.example", "bob-pre-shared-key-0123456789ab");
	b.ike_proposals = {ike("aes128-sha256-modp2048")};
	b.esp_proposals = {esp("aes128-sha256")};
	b.allowed_ips = {*parse_prefix("10.9.2.0/24")};
	PeerPolicy c = policy("carol", "gw.example", "carol.example", "carol-pre-shared-key-012345678");
	c.ike_proposals = {ike("aes128gcm16-prfsha256-ecp256")};
	c.esp_proposals = {esp("aes128gcm16")};
	c.allowed_ips = {*parse_prefix("10.9.3.0/24")};
	for (PeerPolicy* p : {&a, &b, &c}) {
		p->dpd_interval_s = 0;
		p->child_rekey_s = p->ike_rekey_s = 0;
	}
	return {a, b, c};
}

/// The client side of gateway peer @p: same PSK and proposals, identities swapped.
inline PeerPolicy client_of(const PeerPolicy& p) {
	PeerPolicy c = p;
	c.name = "gw";
	std::swap(c.local_id, c.remote_id);
	c.allowed_ips = {*parse_prefix("0.0.0.0/0")};
	c.initiate = true;
	return c;
}

/// A gateway engine and client engines of its peers, wired through fake hosts.
struct Gateway {
	struct Client {
		FakeHost h;
		std::unique_ptr<Engine> e;
	};
	FakeHost hg;
	std::unique_ptr<Engine> gw;
	std::vector<std::unique_ptr<Client>> clients;
	Clock::time_point now = Clock::now();

	explicit Gateway(std::vector<PeerPolicy> peers = gateway_peers()) {
		hg.self = ep("10.0.0.1:4500");
		gw = std::make_unique<Engine>(std::move(peers), hg);
	}

	/// A client engine at @self with the one peer @pol (the gateway), started.
	Client& start_client(PeerPolicy pol, const char* self) {
		auto c = std::make_unique<Client>();
		c->h.self = ep(self);
		pol.endpoint = hg.self;
		c->e = std::make_unique<Engine>(std::vector<PeerPolicy>{std::move(pol)}, c->h);
		c->e->start(now);
		clients.push_back(std::move(c));
		pump();
		return *clients.back();
	}

	/// A client engine at @self with no peer yet, started: its peers come
	/// through add_peer(), as in a live reload.
	Client& started_client(const char* self) {
		auto c = std::make_unique<Client>();
		c->h.self = ep(self);
		c->e = std::make_unique<Engine>(std::vector<PeerPolicy>{}, c->h);
		c->e->start(now);
		clients.push_back(std::move(c));
		return *clients.back();
	}

	/// Delivers what the clients and the gateway send each other until all are quiet.
	void pump() {
		for (int guard = 0; guard < 200; guard++) {
			bool moved = false;
			for (auto& c : clients)
				while (!c->h.out.empty()) {
					Sent s = std::move(c->h.out.front());
					c->h.out.pop_front();
					gw->receive(s.via, c->h.self, s.bytes, now);
					moved = true;
				}
			while (!hg.out.empty()) {
				Sent s = std::move(hg.out.front());
				hg.out.pop_front();
				for (auto& c : clients)
					if (c->h.self == s.to) c->e->receive(s.via, hg.self, s.bytes, now);
				moved = true;
			}
			if (!moved) return;
		}
	}

	/// Time passes in steps of 200 ms: every engine's timers, then delivery.
	void advance(std::chrono::milliseconds d) {
		for (auto t = std::chrono::milliseconds(0); t < d; t += std::chrono::milliseconds(200)) {
			now += std::chrono::milliseconds(200);
			gw->tick(now);
			for (auto& c : clients)
				c->e->tick(now);
			pump();
		}
	}

	/// The gateway's established IKE SA of @peer, or nullopt.
	std::optional<IkeSaStatus> sa_of(const char* peer) const {
		for (IkeSaStatus& s : gw->status(now))
			if (s.peer == peer && s.state == "established") return s;
		return std::nullopt;
	}
};

} // namespace esptun::ike::test
