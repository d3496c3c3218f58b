// IKE Redirect (RFC 5685) between engines: gateways that send clients
// elsewhere by policy (in IKE_SA_INIT, and established ones by
// INFORMATIONAL), clients that follow, and what a client refuses to follow
// (a nonce not its own, a malformed or unusable target, a loop).
// strongSwan on either side is in tests/netns/test_ike_redirect.py.
#include "tests/unit/ike/gateway_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

/// Gateways with the same peers (gateway_peers()) at 10.0.0.1, .2, ... and
/// client engines, wired by address: what a client sends goes to the
/// gateway at its destination, what a gateway sends to the client there.
struct Cluster {
	struct Node {
		FakeHost h;
		std::unique_ptr<Engine> e;
	};
	std::vector<std::unique_ptr<Node>> gws, clients;
	Clock::time_point now = Clock::now();
	/// Every IKE_SA_INIT request a client sent, with where it went.
	std::vector<Sent> inits;

	explicit Cluster(size_t gateways) {
		for (size_t i = 0; i < gateways; i++) {
			auto n = std::make_unique<Node>();
			n->h.self = ep(("10.0.0." + std::to_string(i + 1) + ":4500").c_str());
			n->e = std::make_unique<Engine>(gateway_peers(), n->h);
			n->e->start(now);
			gws.push_back(std::move(n));
		}
	}
	Engine& gw(size_t i) { return *gws[i]->e; }
	FakeHost& hg(size_t i) { return gws[i]->h; }
	/// A client of gateway peer @peer (0 alice, 1 bob, 2 carol) at @self,
	/// configured to connect to gateway @to; started and pumped.
	Node& client(size_t peer, const char* self, size_t to = 0) {
		auto n = std::make_unique<Node>();
		n->h.self = ep(self);
		PeerPolicy pol = client_of(gateway_peers()[peer]);
		pol.endpoint = hg(to).self;
		n->e = std::make_unique<Engine>(std::vector<PeerPolicy>{pol}, n->h);
		n->e->start(now);
		clients.push_back(std::move(n));
		pump();
		return *clients.back();
	}
	void pump() {
		for (int guard = 0; guard < 400; guard++) {
			bool moved = false;
			for (auto& c : clients)
				while (!c->h.out.empty()) {
					Sent s = std::move(c->h.out.front());
					c->h.out.pop_front();
					Message m;
					if (parse_message(s.bytes, m) &&
					    m.header.exchange == Exchange::ike_sa_init &&
					    !m.header.is_response())
						inits.push_back(s);
					for (auto& g : gws)
						if (g->h.self.addr == s.to.addr)
							g->e->receive(s.via, c->h.self, s.bytes, now);
					moved = true;
				}
			for (auto& g : gws)
				while (!g->h.out.empty()) {
					Sent s = std::move(g->h.out.front());
					g->h.out.pop_front();
					for (auto& c : clients)
						if (c->h.self == s.to)
							c->e->receive(s.via, g->h.self, s.bytes, now);
					moved = true;
				}
			if (!moved) return;
		}
	}
	void advance(std::chrono::milliseconds d) {
		for (auto t = std::chrono::milliseconds(0); t < d; t += std::chrono::milliseconds(200)) {
			now += std::chrono::milliseconds(200);
			for (auto& g : gws)
				g->e->tick(now);
			for (auto& c : clients)
				c->e->tick(now);
			pump();
		}
	}
	/// The established IKE SAs @e holds.
	static size_t established(const Engine& e, Clock::time_point now) {
		size_t n = 0;
		for (const IkeSaStatus& s : e.status(now))
			n += s.state == "established";
		return n;
	}
};

RedirectPolicy policy_to(RedirectPolicy::When when, std::initializer_list<const char*> to) {
	RedirectPolicy p;
	p.when = when;
	for (const char* t : to)
		p.to.push_back(*parse_redirect_target(t));
	return p;
}

/// An IKE_SA_INIT request as a client would send it, with @notifies.
std::vector<uint8_t> init_request(uint64_t spi_i, std::span<const uint16_t> notifies,
                                  std::vector<uint8_t> nonce = std::vector<uint8_t>(32, 7)) {
	static DhKeyPair dh(DhGroup::curve25519);
	Header h;
	h.spi_i = spi_i;
	h.exchange = Exchange::ike_sa_init;
	h.flags = kFlagInitiator;
	std::vector<Payload> p;
	p.push_back(ike_offer(gateway_peers()[0].ike_proposals));
	p.push_back(KePayload{uint16_t(DhGroup::curve25519),
	                      std::vector<uint8_t>(dh.public_value().begin(), dh.public_value().end())});
	p.push_back(NoncePayload{std::move(nonce)});
	for (uint16_t n : notifies) {
		NotifyPayload np;
		np.type = n;
		if (n == notify::redirected_from) np.data = redirect_data(*parse_redirect_target("10.0.0.9"));
		p.push_back(np);
	}
	return build_message(h, p);
}

/// The notify of @type in @bytes (a message), or nullopt.
std::optional<NotifyPayload> notify_in(std::span<const uint8_t> bytes, uint16_t type) {
	Message m;
	if (!parse_message(bytes, m)) return std::nullopt;
	if (const NotifyPayload* n = m.find_notify(type)) return *n;
	return std::nullopt;
}

} // namespace

TEST_CASE("redirect targets and notify data: addresses, names, and what is refused") {
	auto v4 = parse_redirect_target("192.0.2.7");
	REQUIRE(v4);
	CHECK(v4->type == RedirectTarget::Type::ipv4);
	CHECK(v4->data == std::vector<uint8_t>{192, 0, 2, 7});
	auto v6 = parse_redirect_target("2001:db8::2");
	REQUIRE(v6);
	CHECK(v6->type == RedirectTarget::Type::ipv6);
	CHECK(v6->data.size() == 16);
	CHECK(redirect_target_text(*v6) == "2001:db8::2");
	auto name = parse_redirect_target("gw-2.Example.net");
	REQUIRE(name);
	CHECK(name->type == RedirectTarget::Type::fqdn);
	CHECK(redirect_target_text(*name) == "gw-2.Example.net");
	for (const char* bad : {"", ".example", "-gw", "a..b", "gw_2.example", "gw 2", "10.0.0.1:500"})
		CHECK_MESSAGE(!parse_redirect_target(bad), bad);
	CHECK(!parse_redirect_target(std::string(256, 'a')));
	CHECK(parse_redirect_target(std::string(255, 'a')));

	// Section 10's layout: type, length, identity, then the nonce data.
	const std::vector<uint8_t> nonce(16, 0xab);
	const std::vector<uint8_t> d = redirect_data(*v4, nonce);
	CHECK(d.size() == 2 + 4 + 16);
	CHECK(d[0] == 1);
	CHECK(d[1] == 4);
	auto back = parse_redirect_data(d);
	REQUIRE(back);
	CHECK(back->first == *v4);
	CHECK(back->second == nonce);
	auto named = parse_redirect_data(redirect_data(*name));
	REQUIRE(named);
	CHECK(named->first == *name);
	CHECK(named->second.empty());
	// Lengths that do not fit the type, unknown types, truncation.
	for (std::vector<uint8_t> bad :
	     {std::vector<uint8_t>{}, std::vector<uint8_t>{1}, std::vector<uint8_t>{1, 4, 192, 0, 2},
	      std::vector<uint8_t>{1, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	      std::vector<uint8_t>{2, 4, 1, 2, 3, 4}, std::vector<uint8_t>{3, 0},
	      std::vector<uint8_t>{4, 4, 1, 2, 3, 4}, std::vector<uint8_t>{3, 9, 'a'},
	      // A name with a byte no DNS name has (it would reach a log line), or a leading dot.
	      std::vector<uint8_t>{3, 3, 'g', '\n', 'w'}, std::vector<uint8_t>{3, 2, '.', 'a'}})
		CHECK(!parse_redirect_data(bad));
}

TEST_CASE("a gateway redirects a new client in IKE_SA_INIT; the client connects to the other gateway") {
	Cluster c(2);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.2"}));
	auto& alice = c.client(0, "10.1.0.1:4500");
	// Gateway 1 kept nothing and did no key exchange: one REDIRECT answer.
	CHECK(c.gw(0).counters().redirects_sent == 1);
	CHECK(c.gw(0).status(c.now).empty());
	CHECK(c.gw(0).counters().sent == 1);
	CHECK(alice.e->counters().redirects_followed == 1);
	CHECK(Cluster::established(c.gw(1), c.now) == 1);
	CHECK(Cluster::established(*alice.e, c.now) == 1);
	REQUIRE(alice.h.installed.size() == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(1).self);
	CHECK(c.hg(1).installed.size() == 1);
	CHECK(c.hg(0).installed.empty());
	CHECK(alice.h.logged("10.0.0.1:4500 redirects us to 10.0.0.2:4500 (in IKE_SA_INIT)"));

	// The first request announced support; the one to gateway 2 names
	// gateway 1 in REDIRECTED_FROM instead (section 4).
	REQUIRE(c.inits.size() == 2);
	CHECK(notify_in(c.inits[0].bytes, notify::redirect_supported));
	CHECK(!notify_in(c.inits[0].bytes, notify::redirected_from));
	CHECK(c.inits[1].to == c.hg(1).self);
	auto from = notify_in(c.inits[1].bytes, notify::redirected_from);
	REQUIRE(from);
	CHECK(from->data == redirect_data(*parse_redirect_target("10.0.0.1")));
	CHECK(!notify_in(c.inits[1].bytes, notify::redirect_supported));
}

TEST_CASE("without REDIRECT_SUPPORTED a client is served; with REDIRECTED_FROM it counts as supported") {
	Cluster c(1);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.2"}));
	const Endpoint from = ep("10.1.0.9:4500");
	const std::vector<uint8_t> none = init_request(0x1111, {});
	c.gw(0).receive(Port::natt, from, none, c.now);
	REQUIRE(c.hg(0).out.size() == 1);
	CHECK(!notify_in(c.hg(0).out.back().bytes, notify::redirect));
	CHECK(c.gw(0).counters().redirects_sent == 0);

	const uint16_t redirected[] = {notify::redirected_from};
	c.gw(0).receive(Port::natt, from, init_request(0x2222, redirected), c.now);
	REQUIRE(c.hg(0).out.size() == 2);
	auto r = notify_in(c.hg(0).out.back().bytes, notify::redirect);
	REQUIRE(r);
	// The answer carries the initiator's nonce after the target (section 4).
	auto parsed = parse_redirect_data(r->data);
	REQUIRE(parsed);
	CHECK(redirect_target_text(parsed->first) == "10.0.0.2");
	CHECK(parsed->second == std::vector<uint8_t>(32, 7));
}

TEST_CASE("share: about the configured share of new clients goes, the same answer per request, never twice") {
	Cluster c(1);
	RedirectPolicy p = policy_to(RedirectPolicy::When::share, {"10.0.0.2", "10.0.0.3"});
	p.share_percent = 30;
	c.gw(0).set_redirect(p);
	const uint16_t supported[] = {notify::redirect_supported};
	size_t redirected = 0, to_second = 0;
	constexpr size_t kClients = 600;
	for (size_t i = 0; i < kClients; i++) {
		const Endpoint from =
		    ep(("10.2." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1) + ":4500")
		           .c_str());
		const std::vector<uint8_t> req = init_request(0x100000 + i, supported);
		c.gw(0).receive(Port::natt, from, req, c.now);
		REQUIRE(!c.hg(0).out.empty());
		auto r = notify_in(c.hg(0).out.back().bytes, notify::redirect);
		if (r) {
			redirected++;
			to_second += redirect_target_text(parse_redirect_data(r->data)->first) == "10.0.0.3";
		}
		// A retransmission gets the same decision.
		c.gw(0).receive(Port::natt, from, req, c.now);
		CHECK(notify_in(c.hg(0).out.back().bytes, notify::redirect).has_value() == r.has_value());
		c.hg(0).out.clear();
	}
	// 30 % of 600 is 180 (binomial: sd 11); the targets half each (sd 7).
	CHECK(redirected > 120);
	CHECK(redirected < 240);
	CHECK(to_second * 10 > redirected * 3);
	CHECK(to_second * 10 < redirected * 7);
	CHECK(c.gw(0).counters().redirects_sent == 2 * redirected);

	// A client another gateway already sent here is never shed again.
	const uint16_t was[] = {notify::redirected_from};
	for (uint64_t spi = 1; spi <= 100; spi++) {
		c.gw(0).receive(Port::natt, ep("10.3.0.1:4500"), init_request(spi, was), c.now);
		REQUIRE(!c.hg(0).out.empty());
		CHECK(!notify_in(c.hg(0).out.back().bytes, notify::redirect));
		c.hg(0).out.clear();
	}
}

TEST_CASE("capacity: new clients go elsewhere once that many peers hold an IKE SA") {
	Cluster c(2);
	RedirectPolicy p = policy_to(RedirectPolicy::When::capacity, {"10.0.0.2"});
	p.capacity = 2;
	c.gw(0).set_redirect(p);
	auto& alice = c.client(0, "10.1.0.1:4500");
	auto& bob = c.client(1, "10.1.0.2:4500");
	auto& carol = c.client(2, "10.1.0.3:4500");
	CHECK(Cluster::established(c.gw(0), c.now) == 2);
	CHECK(Cluster::established(c.gw(1), c.now) == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(0).self);
	CHECK(bob.h.installed.begin()->second.remote == c.hg(0).self);
	CHECK(carol.h.installed.begin()->second.remote == c.hg(1).self);
	CHECK(c.gw(0).counters().redirects_sent == 1);
	// Back under capacity (bob leaves), the next one is served here again.
	bob.e->shutdown();
	c.pump();
	CHECK(Cluster::established(c.gw(0), c.now) == 1);
	carol.e->shutdown();
	c.pump();
	c.clients.pop_back();
	auto& carol2 = c.client(2, "10.1.0.4:4500");
	CHECK(carol2.h.installed.begin()->second.remote == c.hg(0).self);
}

TEST_CASE("a REDIRECT in IKE_SA_INIT is followed only with our nonce; a bad one is counted and waited out") {
	Cluster c(2);
	auto n = std::make_unique<Cluster::Node>();
	n->h.self = ep("10.1.0.1:4500");
	PeerPolicy pol = client_of(gateway_peers()[0]);
	pol.endpoint = c.hg(0).self;
	n->e = std::make_unique<Engine>(std::vector<PeerPolicy>{pol}, n->h);
	n->e->start(c.now);
	REQUIRE(n->h.out.size() == 1);
	const Sent req = n->h.out.front();
	Message m;
	REQUIRE(parse_message(req.bytes, m));
	const std::vector<uint8_t> ni = m.find<NoncePayload>()->data;

	auto answer = [&](std::vector<uint8_t> data) {
		Header h;
		h.spi_i = m.header.spi_i;
		h.exchange = Exchange::ike_sa_init;
		h.flags = kFlagResponse;
		NotifyPayload np;
		np.type = notify::redirect;
		np.data = std::move(data);
		const Payload p[] = {np};
		n->e->receive(Port::natt, c.hg(0).self, build_message(h, p), c.now);
	};
	const RedirectTarget gw2 = *parse_redirect_target("10.0.0.2");
	answer(redirect_data(gw2, std::vector<uint8_t>(ni.size(), 0)));   // someone else's nonce
	answer(redirect_data(gw2));                                       // none at all
	answer({1, 4, 10, 0});                                            // malformed
	answer(redirect_data(*parse_redirect_target("gw2.example"), ni)); // a name
	CHECK(n->e->counters().redirects_ignored == 4);
	CHECK(n->e->counters().redirects_followed == 0);
	CHECK(n->e->counters().malformed == 1);
	CHECK(n->h.logged("its nonce data is not our nonce"));
	CHECK(n->h.logged("a DNS name (esptun follows redirects to addresses)"));
	CHECK(n->h.out.size() == 1); // nothing sent in answer to any of them
	// The real gateway's answer still counts.
	c.clients.push_back(std::move(n));
	c.pump();
	Cluster::Node& alice = *c.clients.back();
	CHECK(Cluster::established(*alice.e, c.now) == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(0).self);
}

TEST_CASE("two gateways redirecting to each other: the client stops after five redirects") {
	Cluster c(2);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.2"}));
	c.gw(1).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.1"}));
	auto& alice = c.client(0, "10.1.0.1:4500");
	CHECK(alice.e->counters().redirects_followed == Engine::kMaxRedirects);
	CHECK(alice.e->counters().redirects_ignored == 1);
	CHECK(alice.h.logged("followed 5 redirects in the last 300 s"));
	CHECK(alice.h.installed.empty());
	CHECK(alice.h.reserved.empty());
	// Waiting out the ignored answer, it starts over later (backoff), and
	// is stopped again within the loop period: a bounded number of tries.
	c.advance(std::chrono::seconds(120));
	CHECK(alice.e->counters().redirects_followed == Engine::kMaxRedirects);
	CHECK(alice.h.installed.empty());
	// After the loop period, one of them is out of maintenance: it connects.
	c.gw(1).set_redirect({});
	c.advance(std::chrono::seconds(240));
	CHECK(Cluster::established(*alice.e, c.now) == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(1).self);
}

TEST_CASE("maintenance: established clients are sent away by INFORMATIONAL and move make-before-break") {
	Cluster c(2);
	auto& alice = c.client(0, "10.1.0.1:4500");
	auto& bob = c.client(1, "10.1.0.2:4500");
	REQUIRE(Cluster::established(c.gw(0), c.now) == 2);
	REQUIRE(alice.h.installed.size() == 1);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.2"}));
	c.advance(std::chrono::seconds(2));
	CHECK(c.gw(0).counters().redirects_established == 2);
	CHECK(alice.e->counters().redirects_followed == 1);
	CHECK(bob.e->counters().redirects_followed == 1);
	// Both now live on gateway 2; gateway 1 got their Deletes.
	CHECK(Cluster::established(c.gw(1), c.now) == 2);
	CHECK(Cluster::established(c.gw(0), c.now) == 0);
	CHECK(c.hg(0).installed.empty());
	for (Cluster::Node* n : {&alice, &bob}) {
		REQUIRE(n->h.installed.size() == 1);
		CHECK(n->h.installed.begin()->second.remote == c.hg(1).self);
		CHECK(Cluster::established(*n->e, c.now) == 1);
	}
	CHECK(alice.h.current_out == alice.h.installed.begin()->second.spi_out);
	CHECK(alice.h.logged("(the IKE SA with it stays until the new one is up)"));
	// The requests to gateway 2 named gateway 1.
	REQUIRE(c.inits.size() == 4);
	CHECK(notify_in(c.inits[3].bytes, notify::redirected_from));
}

TEST_CASE("maintenance: a client that does not move is deleted after the grace; move_rate paces") {
	Cluster c(2);
	auto& alice = c.client(0, "10.1.0.1:4500");
	auto& bob = c.client(1, "10.1.0.2:4500");
	auto& carol = c.client(2, "10.1.0.3:4500");
	REQUIRE(Cluster::established(c.gw(0), c.now) == 3);
	// A DNS name: our clients acknowledge and stay (they follow addresses only).
	RedirectPolicy p = policy_to(RedirectPolicy::When::all, {"gw2.example"});
	p.move_rate = 1;
	c.gw(0).set_redirect(p);
	// A second's worth at once, then one a second.
	c.advance(std::chrono::milliseconds(400));
	CHECK(c.gw(0).counters().redirects_established == 1);
	c.advance(std::chrono::milliseconds(1200));
	CHECK(c.gw(0).counters().redirects_established == 2);
	c.advance(std::chrono::milliseconds(1200));
	CHECK(c.gw(0).counters().redirects_established == 3);
	for (Cluster::Node* n : {&alice, &bob, &carol}) {
		CHECK(n->e->counters().redirects_ignored == 1);
		CHECK(Cluster::established(*n->e, c.now) == 1);
	}
	CHECK(Cluster::established(c.gw(0), c.now) == 3);
	c.advance(Engine::kRedirectGrace);
	CHECK(c.hg(0).logged("redirected elsewhere, and the client did not delete it"));
	CHECK(alice.h.logged("IKE SA closed: deleted by the peer"));
	// They come back (to the configured gateway), are redirected in
	// IKE_SA_INIT to a name they do not follow, and keep waiting: the
	// gateway holds no state for them.
	c.advance(std::chrono::seconds(5));
	CHECK(c.gw(0).counters().redirects_sent >= 3);
	CHECK(Cluster::established(c.gw(0), c.now) == 0);
	for (const IkeSaStatus& s : c.gw(0).status(c.now))
		CHECK(s.state != "established");
}

TEST_CASE("a REDIRECT by INFORMATIONAL to a gateway that does not answer leaves the old IKE SA in place") {
	Cluster c(1);
	auto& alice = c.client(0, "10.1.0.1:4500");
	REQUIRE(Cluster::established(*alice.e, c.now) == 1);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.7"})); // nobody there
	c.advance(std::chrono::seconds(1));
	CHECK(alice.e->counters().redirects_followed == 1);
	// While the move is under way, data keeps flowing on the old CHILD_SA.
	REQUIRE(alice.h.installed.size() == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(0).self);
	CHECK(alice.h.current_out != 0);
	// The new gateway never answers: the old one deletes her after its
	// grace (30 s), and she gives up on the new one after her
	// retransmissions (1 + 2 + ... + 32 s).
	c.advance(std::chrono::seconds(70));
	CHECK(alice.h.logged("no answer from 10.0.0.7:4500"));
	CHECK(c.hg(0).logged("redirected elsewhere, and the client did not delete it"));
}

TEST_CASE("a peer with follow_redirects off does not announce them and is served; a REDIRECT is ignored") {
	Cluster c(2);
	c.gw(0).set_redirect(policy_to(RedirectPolicy::When::all, {"10.0.0.2"}));
	auto n = std::make_unique<Cluster::Node>();
	n->h.self = ep("10.1.0.1:4500");
	PeerPolicy pol = client_of(gateway_peers()[0]);
	pol.endpoint = c.hg(0).self;
	pol.follow_redirects = false;
	n->e = std::make_unique<Engine>(std::vector<PeerPolicy>{pol}, n->h);
	n->e->start(c.now);
	c.clients.push_back(std::move(n));
	c.pump();
	Cluster::Node& alice = *c.clients.back();
	REQUIRE(!c.inits.empty());
	CHECK(!notify_in(c.inits[0].bytes, notify::redirect_supported));
	CHECK(c.gw(0).counters().redirects_sent == 0);
	CHECK(Cluster::established(*alice.e, c.now) == 1);
	CHECK(alice.h.installed.begin()->second.remote == c.hg(0).self);
	// Nor is it moved by INFORMATIONAL: the gateway knows it cannot be.
	c.advance(std::chrono::seconds(2));
	CHECK(c.gw(0).counters().redirects_established == 0);
	CHECK(Cluster::established(c.gw(0), c.now) == 1);
}
