// IKE_SA_INIT against unauthenticated hostile parties. As responder: one
// source flooding half-open SAs (answering cookies, reusing one key share),
// a full half-open table, cookie secret rotation, and the initiator's choice
// of an expensive group. As initiator: forged errors in answer to our
// IKE_SA_INIT (RFC 7296 section 2.21.1).
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

std::vector<IkeSuite> suites(std::initializer_list<const char*> names) {
	std::vector<IkeSuite> out;
	std::string err;
	for (const char* n : names)
		out.push_back(*parse_ike_proposal(n, err));
	return out;
}

/// What the gateway answered to one IKE_SA_INIT.
struct Answer {
	enum Kind { none, cookie, invalid_ke, sa, other } kind = none;
	std::vector<uint8_t> data; ///< the COOKIE or INVALID_KE_PAYLOAD notify data
};

/// A gateway for one road warrior, and initiators as hostile as they like.
struct Gateway {
	FakeHost hg;
	std::unique_ptr<Engine> gw;
	Clock::time_point now = Clock::now();

	Gateway() {
		hg.self = ep("10.0.0.2:4500");
		PeerPolicy p = policy("alice", "gw.example", "alice.example");
		p.allowed_ips = {*parse_prefix("10.9.3.0/24")};
		p.dpd_interval_s = 0;
		gw = std::make_unique<Engine>(std::vector<PeerPolicy>{p}, hg);
	}

	/**
	 * send() - one IKE_SA_INIT from @from; return the gateway's answer to it
	 * @spi_i: the initiator's SPI (a flooder takes a new one each time)
	 * @offer: its proposals; @dh: its key share (a flooder reuses one)
	 * @cookie: returned with the request when not empty
	 */
	Answer send(const Endpoint& from, uint64_t spi_i, std::span<const IkeSuite> offer,
	            const DhKeyPair& dh, std::span<const uint8_t> cookie = {}) {
		Header h;
		h.spi_i = spi_i;
		h.exchange = Exchange::ike_sa_init;
		h.flags = kFlagInitiator;
		std::vector<Payload> p;
		if (!cookie.empty())
			p.push_back(NotifyPayload{
			    Protocol::none, {}, notify::cookie, {cookie.begin(), cookie.end()}});
		p.push_back(ike_offer(offer));
		p.push_back(KePayload{uint16_t(dh.group()), std::vector<uint8_t>(dh.public_value().begin(),
		                                                                 dh.public_value().end())});
		std::vector<uint8_t> ni(32);
		store_be64(ni.data(), spi_i); // the same request gets the same nonce
		p.push_back(NoncePayload{ni});
		gw->receive(Port::natt, from, build_message(h, p), now);
		Answer a;
		for (auto it = hg.out.begin(); it != hg.out.end();) {
			if (!(it->to == from)) {
				++it;
				continue;
			}
			Message m;
			REQUIRE(parse_message(it->bytes, m));
			if (const NotifyPayload* c = m.find_notify(notify::cookie))
				a = {Answer::cookie, c->data};
			else if (const NotifyPayload* k = m.find_notify(notify::invalid_ke_payload))
				a = {Answer::invalid_ke, k->data};
			else
				a = {m.find<KePayload>() && m.header.spi_r ? Answer::sa : Answer::other, {}};
			it = hg.out.erase(it);
		}
		return a;
	}

	/// send(), and once more with the cookie if one is demanded.
	Answer send_with_cookie(const Endpoint& from, uint64_t spi_i, std::span<const IkeSuite> offer,
	                        const DhKeyPair& dh) {
		Answer a = send(from, spi_i, offer, dh);
		if (a.kind == Answer::cookie) a = send(from, spi_i, offer, dh, a.data);
		return a;
	}

	/// @n IKE_SA_INITs from @from with fresh SPIs, answering cookies; how many got an SA.
	size_t flood(const Endpoint& from, size_t n, std::span<const IkeSuite> offer, const DhKeyPair& dh,
	             uint64_t spi_base) {
		size_t got = 0;
		for (size_t i = 0; i < n; i++)
			got += send_with_cookie(from, spi_base + i, offer, dh).kind == Answer::sa;
		return got;
	}

	/// Half-open load from @n sources of one SA each (10.2.x.y).
	void load(size_t n, const DhKeyPair& dh, uint64_t spi_base) {
		for (size_t i = 0; i < n; i++) {
			Endpoint from = ep("10.2.0.0:4500");
			from.addr.bytes[2] = uint8_t(i >> 8);
			from.addr.bytes[3] = uint8_t(i);
			REQUIRE(send_with_cookie(from, spi_base + i, default_ike_proposals(), dh).kind ==
			        Answer::sa);
		}
	}

	size_t half_open() const {
		size_t n = 0;
		for (const IkeSaStatus& s : gw->status(now))
			n += s.state == "half-open";
		return n;
	}

	/// A well-behaved initiator (an Engine of its own, from @self) connects; true when it is up.
	bool alice_connects(const char* self) {
		FakeHost ha;
		ha.self = ep(self);
		PeerPolicy to_gw = policy("gw", "alice.example", "gw.example");
		to_gw.endpoint = hg.self;
		to_gw.initiate = true;
		to_gw.allowed_ips = {*parse_prefix("0.0.0.0/0")};
		Engine alice({to_gw}, ha);
		alice.start(now);
		for (int round = 0; round < 8; round++) {
			while (!ha.out.empty()) {
				gw->receive(Port::natt, ha.self, ha.out.front().bytes, now);
				ha.out.pop_front();
			}
			for (auto it = hg.out.begin(); it != hg.out.end();)
				if (it->to == ha.self) {
					alice.receive(Port::natt, hg.self, it->bytes, now);
					it = hg.out.erase(it);
				} else {
					++it;
				}
		}
		return ha.installed.size() == 1;
	}
};

const std::vector<IkeSuite> kX25519 = suites({"aes128gcm16-prfsha256-x25519"});

} // namespace

TEST_CASE("one source answering cookies is held to its half-open bound; a new source still gets in") {
	Gateway g;
	const DhKeyPair share(DhGroup::curve25519);
	// The attack of issue 16: one address, one key share, as many INITs as
	// the whole table holds, every cookie answered.
	const size_t got = g.flood(ep("192.0.2.66:4500"), Engine::kHalfOpenLimit, kX25519, share, 0x1000);
	CHECK(got == Engine::kHalfOpenPerSource);
	CHECK(g.half_open() == Engine::kHalfOpenPerSource);
	CHECK(g.gw->counters().half_open_source_dropped ==
	      Engine::kHalfOpenLimit - Engine::kHalfOpenPerSource);
	CHECK(g.alice_connects("10.0.0.1:4500"));

	// Addresses of one IPv6 /64 are one source.
	size_t v6 = 0;
	for (unsigned i = 0; i < 2 * Engine::kHalfOpenPerSource; i++) {
		Endpoint from = ep("[2001:db8:1:2::1]:4500");
		from.addr.bytes[15] = uint8_t(i + 1);
		v6 += g.send_with_cookie(from, 0x900000 + i, kX25519, share).kind == Answer::sa;
	}
	CHECK(v6 == Engine::kHalfOpenPerSource);
}

TEST_CASE("in a full half-open table a new source takes room from the busiest one") {
	Gateway g;
	const DhKeyPair share(DhGroup::curve25519);
	const size_t sources = Engine::kHalfOpenLimit / Engine::kHalfOpenPerSource;
	auto source = [](size_t i) {
		Endpoint e = ep("198.18.0.0:4500");
		e.addr.bytes[2] = uint8_t(i >> 8);
		e.addr.bytes[3] = uint8_t(i);
		return e;
	};
	for (size_t i = 0; i < sources; i++)
		REQUIRE(g.flood(source(i), Engine::kHalfOpenPerSource, kX25519, share, (i + 1) << 16) ==
		        Engine::kHalfOpenPerSource);
	REQUIRE(g.half_open() == Engine::kHalfOpenLimit);

	// A new source gets an answer; one half-open SA of a full source made room.
	CHECK(g.send_with_cookie(ep("203.0.113.7:4500"), 0x77, kX25519, share).kind == Answer::sa);
	CHECK(g.gw->counters().half_open_evicted == 1);
	CHECK(g.half_open() == Engine::kHalfOpenLimit);
	// The source that lost it cannot take it back from a source no busier
	// than it would be: dropped, not evicting in turn.
	size_t back = 0;
	for (size_t i = 0; i < sources; i++)
		back += g.send_with_cookie(source(i), 0x99, kX25519, share).kind == Answer::sa;
	CHECK(back == 0);
	CHECK(g.gw->counters().half_open_evicted == 1);
	CHECK(g.gw->counters().half_open_dropped >= 1);
	// And a real client still connects.
	CHECK(g.alice_connects("10.0.0.1:4500"));
	CHECK(g.gw->counters().half_open_evicted == 2);
}

TEST_CASE("a cookie from before one rotation of the secret passes, one from two rotations ago does not") {
	Gateway g;
	const DhKeyPair share(DhGroup::curve25519);
	const Endpoint alice = ep("10.0.0.1:4500");
	g.gw->tick(g.now);
	g.load(Engine::kCookieThreshold, share, 0x10000);
	const Answer c1 = g.send(alice, 0xa1, kX25519, share);
	const Answer c2 = g.send(alice, 0xa2, kX25519, share);
	REQUIRE(c1.kind == Answer::cookie);
	REQUIRE(c2.kind == Answer::cookie);
	CHECK(g.send(alice, 0xa3, kX25519, share, c1.data).kind == Answer::cookie); // not its SPI

	// One rotation (half-open SAs expire meanwhile: the load is built again).
	g.now += Engine::kCookieSecretLifetime + std::chrono::seconds(1);
	g.gw->tick(g.now);
	g.load(Engine::kCookieThreshold, share, 0x20000);
	CHECK(g.send(alice, 0xa1, kX25519, share, c1.data).kind == Answer::sa);
	CHECK(g.gw->counters().cookies_rejected == 1);

	// Two rotations: c2's secret is retired; a fresh cookie (a new version) comes instead.
	g.now += Engine::kCookieSecretLifetime + std::chrono::seconds(1);
	g.gw->tick(g.now);
	g.load(Engine::kCookieThreshold, share, 0x30000);
	const Answer again = g.send(alice, 0xa2, kX25519, share, c2.data);
	REQUIRE(again.kind == Answer::cookie);
	CHECK(g.gw->counters().cookies_rejected == 2);
	REQUIRE(!again.data.empty());
	CHECK(again.data[0] != c2.data[0]);
	CHECK(g.send(alice, 0xa2, kX25519, share, again.data).kind == Answer::sa);

	// A forged cookie (one bit off) is refused.
	Answer c4 = g.send(alice, 0xa4, kX25519, share);
	REQUIRE(c4.kind == Answer::cookie);
	c4.data.back() ^= 1;
	CHECK(g.send(alice, 0xa4, kX25519, share, c4.data).kind == Answer::cookie);
	CHECK(g.gw->counters().cookies_rejected == 3);
}

TEST_CASE("the initiator's choice of group: steered to the cheapest under load, and weighted by its cost") {
	Gateway g;
	const DhKeyPair x(DhGroup::curve25519);
	const DhKeyPair modp(DhGroup::modp2048);
	const std::vector<IkeSuite> modp_first =
	    suites({"aes128-sha256-modp2048", "aes128gcm16-prfsha256-x25519"});
	const std::vector<IkeSuite> modp_only = suites({"aes128-sha256-modp2048"});

	// Without load the initiator's preference stands (section 2.7).
	CHECK(g.send(ep("10.3.0.1:4500"), 0xb1, modp_first, modp).kind == Answer::sa);
	CHECK(g.gw->counters().groups_steered == 0);

	// One source insisting on MODP-2048 gets a kModpCost-th of the SAs.
	CHECK(g.flood(ep("10.3.0.2:4500"), Engine::kHalfOpenPerSource, modp_only, modp, 0xc000) ==
	      Engine::kHalfOpenPerSource / Engine::kModpCost);

	// Under load an initiator that also allows X25519 is asked for it.
	g.load(Engine::kCookieThreshold, x, 0x10000);
	const Answer a = g.send_with_cookie(ep("10.3.0.3:4500"), 0xb3, modp_first, modp);
	REQUIRE(a.kind == Answer::invalid_ke);
	REQUIRE(a.data.size() == 2);
	CHECK(load_be16(a.data.data()) == uint16_t(DhGroup::curve25519));
	CHECK(g.gw->counters().groups_steered == 1);
	// It comes back with X25519 and is served; one that offers only
	// MODP-2048 is served with it (weighted).
	CHECK(g.send_with_cookie(ep("10.3.0.3:4500"), 0xb4, modp_first, x).kind == Answer::sa);
	CHECK(g.send_with_cookie(ep("10.3.0.4:4500"), 0xb5, modp_only, modp).kind == Answer::sa);
}

namespace {

/// A forged unprotected answer to A's IKE_SA_INIT, as an on-path attacker sends it.
std::vector<uint8_t> forged_init_answer(const Pair& p, uint16_t type, std::vector<uint8_t> data = {}) {
	REQUIRE(!p.ha.out.empty());
	Header req;
	REQUIRE(parse_header(p.ha.out.back().bytes, req));
	Header h;
	h.spi_i = req.spi_i;
	h.exchange = Exchange::ike_sa_init;
	h.flags = kFlagResponse;
	const std::vector<Payload> n{NotifyPayload{Protocol::none, {}, type, std::move(data)}};
	return build_message(h, n);
}

} // namespace

TEST_CASE("a forged NO_PROPOSAL_CHOSEN does not end our IKE_SA_INIT: the real answer is used") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.a->receive(Port::natt, p.hb.self, forged_init_answer(p, notify::no_proposal_chosen), p.now);
	CHECK(p.state(*p.a) == "connecting");
	CHECK(p.a->counters().init_errors_ignored == 1);
	p.pump();
	CHECK(p.state(*p.a) == "established");
	check_keys_cross(p.ha, p.hb);
	CHECK(!p.ha.logged("closed"));
}

TEST_CASE("a forged INVALID_KE_PAYLOAD cannot take us outside our policy") {
	SUBCASE("a group we do not offer is ignored") {
		Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
		p.a->start(p.now);
		p.a->receive(Port::natt, p.hb.self, forged_init_answer(p, notify::invalid_ke_payload, {0, 5}),
		             p.now);
		CHECK(p.a->counters().init_errors_ignored == 1);
		p.pump();
		REQUIRE(p.state(*p.a) == "established");
		CHECK(p.a->status(p.now)[0].suite == "aes128gcm16-prfsha256-x25519");
	}
	SUBCASE("one we offer costs a round trip; the stale answer is ignored") {
		Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
		p.a->start(p.now);
		p.a->receive(Port::natt, p.hb.self,
		             forged_init_answer(p, notify::invalid_ke_payload, {0, 19}), p.now);
		p.pump();
		REQUIRE(p.state(*p.a) == "established");
		CHECK(p.a->status(p.now)[0].suite == "aes128gcm16-prfsha256-ecp256");
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("only errors in answer: the IKE SA ends after the retransmissions, naming the error") {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.ike_proposals = suites({"aes128-sha256-modp2048"});
	pb.ike_proposals = suites({"aes256gcm16-prfsha384-ecp256"});
	Pair p(pa, pb);
	p.a->start(p.now);
	p.pump();
	p.advance(std::chrono::seconds(30));
	CHECK(p.state(*p.a) == "connecting");
	CHECK(!p.ha.logged("closed"));
	CHECK(p.a->counters().init_errors_ignored >= 2);
	p.advance(std::chrono::seconds(34));
	CHECK(p.ha.logged("IKE SA closed: no answer from 10.0.0.2:4500 but an unauthenticated "
	                  "NO_PROPOSAL_CHOSEN (we offered aes128-sha256-prfsha256-modp2048)"));
	CHECK(p.a->counters().no_proposal == 1);
	CHECK(p.ha.installed.empty());
}
