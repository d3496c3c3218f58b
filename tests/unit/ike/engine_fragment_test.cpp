// IKEv2 message fragmentation (RFC 7383) in the engine: negotiation in
// IKE_SA_INIT, large messages sent as fragments (and resent whole), and the
// reassembly of a peer's fragments against hostile input: out of order,
// duplicated, tampered, inconsistent, too many, and floods that must stay
// within the memory bounds (engine_fragments.cpp).
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

using Datagram = std::vector<uint8_t>;

TrafficSelector ts(const char* prefix) { return selector_of(*parse_prefix(prefix)); }

/// @n /24 networks: TS payloads long enough to push IKE_AUTH past a small fragment size.
std::vector<IpPrefix> many_prefixes(int n) {
	std::vector<IpPrefix> out;
	for (int i = 0; i < n; i++)
		out.push_back(*parse_prefix(("10.50." + std::to_string(i) + ".0/24").c_str()));
	return out;
}

std::vector<TrafficSelector> selectors_of(const std::vector<IpPrefix>& ps) {
	std::vector<TrafficSelector> out;
	for (const IpPrefix& p : ps)
		out.push_back(selector_of(p));
	return out;
}

/// The largest IKE message a 576-byte fragment leaves room for (IPv4, UDP, non-ESP marker).
constexpr size_t kSmallLimit = 576 - 20 - 8 - 4;

Header header_of(const Datagram& d) {
	Header h;
	REQUIRE(parse_header(d, h));
	return h;
}

/// Fragment Number and Total Fragments of an SKF message.
std::pair<uint16_t, uint16_t> fields_of(const Datagram& d) {
	Message m;
	REQUIRE(parse_message(d, m));
	const auto* skf = std::get_if<RawPayload>(&m.payloads.back());
	REQUIRE(skf);
	REQUIRE(skf->type == PayloadType::skf);
	return {load_be16(skf->body.data()), load_be16(skf->body.data() + 2)};
}

/// Takes everything @h has queued.
std::vector<Datagram> take(FakeHost& h) {
	std::vector<Datagram> out;
	for (Sent& s : h.out)
		out.push_back(std::move(s.bytes));
	h.out.clear();
	return out;
}

/// A pair whose IKE_AUTH goes as fragments both ways: 576-byte fragments
/// and 40 networks on A's side, which both TS payloads carry.
Pair fragmenting_pair() {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.allowed_ips = many_prefixes(40);
	pa.fragment_size = pb.fragment_size = 576;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	pa.child_rekey_s = pb.child_rekey_s = pa.ike_rekey_s = pb.ike_rekey_s = 0;
	return Pair(pa, pb);
}

/**
 * Gw - a gateway engine with one peer, "mallory" (a RawPeer that announces
 * fragmentation unless told otherwise), 40 networks on her side and
 * 576-byte fragments.
 */
struct Gw {
	FakeHost h;
	std::unique_ptr<Engine> e;
	Clock::time_point now = Clock::now();
	RawPeer m;

	Gw() {
		h.self = ep("10.0.0.2:4500");
		PeerPolicy pm = policy("mallory", "gw.example", "mallory.example");
		pm.allowed_ips = many_prefixes(40);
		pm.fragment_size = 576;
		pm.dpd_interval_s = 0;
		pm.child_rekey_s = pm.ike_rekey_s = 0;
		e = std::make_unique<Engine>(std::vector<PeerPolicy>{pm}, h);
		m.t = {e.get(), &h, &now};
		m.id = *parse_identity("mallory.example");
		m.fragmentation = true;
	}
	const IkeCounters& c() const { return e->counters(); }

	/// Hands @d to the gateway as from mallory; returns what it sent back.
	std::vector<Datagram> send(const Datagram& d) { return m.transport(d); }

	/// A fragment of mallory's: @number of @total of request @id, any @data.
	Datagram fragment(uint32_t id, uint16_t number, uint16_t total, std::span<const uint8_t> data,
	                  Exchange ex = Exchange::informational, uint8_t first = 0,
	                  uint8_t flags = kFlagInitiator) {
		return m.fragment(id, number, total, data, ex, first, flags);
	}

	/// @inner as request @id, cut into fragments of @piece inner bytes, in order.
	std::vector<Datagram> fragments(Exchange ex, uint32_t id, std::span<const Payload> inner,
	                                size_t piece) {
		PayloadType first = PayloadType::none;
		const std::vector<uint8_t> chain = encode_payloads(inner, first);
		const size_t n = (chain.size() + piece - 1) / piece;
		std::vector<Datagram> out;
		for (size_t i = 0; i < n; i++) {
			const auto part =
			    std::span(chain).subspan(i * piece, std::min(piece, chain.size() - i * piece));
			out.push_back(fragment(id, uint16_t(i + 1), uint16_t(n), part, ex,
			                       i == 0 ? uint8_t(first) : 0));
		}
		return out;
	}

	/// Mallory's IKE_AUTH as @piece-byte fragments (her TSi: all 40 networks).
	std::vector<Datagram> auth_fragments(size_t piece) {
		const std::vector<Payload> p =
		    m.auth_payloads(selectors_of(many_prefixes(40)), {ts("0.0.0.0/0")}, 0xa0000001);
		return fragments(Exchange::ike_auth, 1, p, piece);
	}

	/// Mallory authenticates with one unfragmented IKE_AUTH.
	void up() {
		REQUIRE(m.init());
		bool got = false;
		m.auth({ts("10.50.1.0/24")}, {ts("0.0.0.0/0")}, 0xa0000001, &got);
		REQUIRE(got);
	}

	std::string state() const {
		auto st = e->status(now);
		return st.empty() ? "none" : st.front().state;
	}
};

/**
 * open_answer() - the gateway's answer, whole or in fragments (reassembled
 * here with mallory's keys, independently of the engine's reassembly).
 */
std::optional<std::vector<Payload>> open_answer(const RawPeer& m, const std::vector<Datagram>& got) {
	std::vector<uint8_t> chain;
	PayloadType first = PayloadType::none;
	uint16_t expect = 1;
	for (const Datagram& d : got) {
		Message msg;
		if (!parse_message(d, msg)) return std::nullopt;
		if (const auto* sk = msg.find<SkPayload>()) {
			if (got.size() != 1) return std::nullopt;
			auto plain = m.sk_in->open(d, sk->offset);
			if (!plain) return std::nullopt;
			chain = *plain;
			first = sk->first_inner;
			continue;
		}
		const auto* skf = std::get_if<RawPayload>(&msg.payloads.back());
		if (!skf || skf->type != PayloadType::skf) return std::nullopt;
		auto plain = m.sk_in->open_fragment(d, d.size() - 4 - skf->body.size());
		if (!plain || load_be16(skf->body.data()) != expect ||
		    load_be16(skf->body.data() + 2) != got.size())
			return std::nullopt;
		if (expect++ == 1) first = skf->first_inner;
		chain.insert(chain.end(), plain->begin(), plain->end());
	}
	std::vector<Payload> out;
	if (!parse_payloads(first, chain, out)) return std::nullopt;
	return out;
}

} // namespace

TEST_CASE("IKE_SA_INIT announces fragmentation both ways; a responder answers it only to those that did") {
	Pair p = fragmenting_pair();
	p.a->start(p.now);
	REQUIRE(p.ha.out.size() == 1);
	Message init;
	REQUIRE(parse_message(p.ha.out.front().bytes, init));
	CHECK(init.find_notify(notify::ikev2_fragmentation_supported));
	p.b->receive(Port::natt, p.ha.self, p.ha.out.front().bytes, p.now);
	REQUIRE(p.hb.out.size() == 1);
	Message resp;
	REQUIRE(parse_message(p.hb.out.front().bytes, resp));
	CHECK(resp.find_notify(notify::ikev2_fragmentation_supported));

	Gw g;
	g.m.fragmentation = false;
	REQUIRE(g.m.init());
	CHECK(!g.m.peer_fragmentation);
	Gw g2;
	REQUIRE(g2.m.init());
	CHECK(g2.m.peer_fragmentation);
}

TEST_CASE("a large IKE_AUTH goes as fragments both ways, out of order and duplicated, and the SA comes up") {
	Pair p = fragmenting_pair();
	p.a->start(p.now);
	p.b->receive(Port::natt, p.ha.self, take(p.ha).at(0), p.now);
	p.a->receive(Port::natt, p.hb.self, take(p.hb).at(0), p.now);

	// A's IKE_AUTH request: fragments 1..n of message 1, each within the size.
	const std::vector<Datagram> req = take(p.ha);
	REQUIRE(req.size() >= 2);
	for (size_t i = 0; i < req.size(); i++) {
		const Header h = header_of(req[i]);
		CHECK(h.next == PayloadType::skf);
		CHECK(h.exchange == Exchange::ike_auth);
		CHECK(h.message_id == 1);
		CHECK(req[i].size() <= kSmallLimit);
		CHECK(fields_of(req[i]) ==
		      std::pair<uint16_t, uint16_t>(uint16_t(i + 1), uint16_t(req.size())));
	}
	CHECK(p.a->counters().fragments_sent == req.size());

	// Delivered last first, each twice: nothing is answered until the last
	// one missing (fragment 1) arrives; the duplicates are counted.
	for (size_t i = req.size(); i-- > 1;) {
		p.b->receive(Port::natt, p.ha.self, req[i], p.now);
		p.b->receive(Port::natt, p.ha.self, req[i], p.now);
		CHECK(p.hb.out.empty());
	}
	CHECK(p.b->reassembly_bytes() > 0);
	p.b->receive(Port::natt, p.ha.self, req[0], p.now);
	CHECK(p.b->counters().fragments_received == req.size());
	CHECK(p.b->counters().fragments_dropped == req.size() - 1);
	CHECK(p.b->reassembly_bytes() == 0);

	// B's answer is long too (it narrows A's 40 networks and returns them).
	const std::vector<Datagram> resp = take(p.hb);
	REQUIRE(resp.size() >= 2);
	for (const Datagram& d : resp) {
		CHECK(header_of(d).next == PayloadType::skf);
		CHECK(header_of(d).is_response());
		CHECK(d.size() <= kSmallLimit);
	}
	for (size_t i = resp.size(); i-- > 0;)
		p.a->receive(Port::natt, p.hb.self, resp[i], p.now);
	CHECK(p.state(*p.a) == "established");
	CHECK(p.state(*p.b) == "established");
	check_keys_cross(p.ha, p.hb);
	CHECK(p.a->counters().fragments_received == resp.size());
	CHECK(p.a->counters().bad_icv == 0);
	CHECK(p.b->counters().bad_icv == 0);
}

TEST_CASE("a retransmitted fragmented request is resent whole, and answered once, on its fragment 1") {
	Pair p = fragmenting_pair();
	p.a->start(p.now);
	p.b->receive(Port::natt, p.ha.self, take(p.ha).at(0), p.now);
	p.a->receive(Port::natt, p.hb.self, take(p.hb).at(0), p.now);
	const std::vector<Datagram> req = take(p.ha);
	REQUIRE(req.size() >= 2);
	for (const Datagram& d : req)
		p.b->receive(Port::natt, p.ha.self, d, p.now);
	const std::vector<Datagram> lost = take(p.hb); // B's answer never arrives
	REQUIRE(lost.size() >= 2);

	// A's retransmission timer (1 s) resends every fragment.
	p.now += std::chrono::milliseconds(1100);
	p.a->tick(p.now);
	const std::vector<Datagram> again = take(p.ha);
	CHECK(again.size() == req.size());
	CHECK(p.a->counters().retransmits == 1);
	// B answers the retransmission once, all fragments, not once per fragment.
	for (const Datagram& d : again)
		p.b->receive(Port::natt, p.ha.self, d, p.now);
	const std::vector<Datagram> answer = take(p.hb);
	CHECK(answer.size() == lost.size());
	for (const Datagram& d : answer)
		p.a->receive(Port::natt, p.hb.self, d, p.now);
	CHECK(p.state(*p.a) == "established");
	check_keys_cross(p.ha, p.hb);
}

TEST_CASE("a peer that did not announce fragmentation gets whole messages and its fragments are dropped") {
	Gw g;
	g.m.fragmentation = false;
	REQUIRE(g.m.init());
	for (const Datagram& d : g.auth_fragments(200))
		CHECK(g.send(d).empty());
	CHECK(g.c().fragments_dropped > 0);
	CHECK(g.c().fragments_received == 0);
	CHECK(g.e->reassembly_bytes() == 0);
	// The same IKE_AUTH whole: the long answer comes whole too.
	const std::vector<Payload> p =
	    g.m.auth_payloads(selectors_of(many_prefixes(40)), {ts("0.0.0.0/0")}, 0xa0000001);
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(p, first);
	const Datagram answer = g.m.send_sealed(Exchange::ike_auth, kFlagInitiator, 1, uint8_t(first), chain);
	CHECK(g.state() == "established");
	CHECK(header_of(answer).next == PayloadType::sk);
	CHECK(answer.size() > kSmallLimit);
	CHECK(g.c().fragments_sent == 0);
}

TEST_CASE(
    "mallory's fragmented IKE_AUTH, reversed and duplicated, is reassembled and answered in fragments") {
	Gw g;
	REQUIRE(g.m.init());
	const std::vector<Datagram> frags = g.auth_fragments(100);
	REQUIRE(frags.size() >= 4);
	std::vector<Datagram> answer;
	for (size_t i = frags.size(); i-- > 0;) {
		for (int copy = 0; copy < 2; copy++) {
			std::vector<Datagram> got = g.send(frags[i]);
			if (i == 0 && copy == 0)
				answer = got;
			else if (i == 0)
				// The duplicate of fragment 1 now belongs to a request
				// already answered: the whole answer again (RFC 7383 2.6.1).
				CHECK(got.size() == answer.size());
			else
				CHECK(got.empty());
		}
	}
	CHECK(g.state() == "established");
	REQUIRE(answer.size() >= 2);
	for (const Datagram& d : answer)
		CHECK(d.size() <= kSmallLimit);
	auto payloads = open_answer(g.m, answer);
	REQUIRE(payloads);
	CHECK(std::any_of(payloads->begin(), payloads->end(),
	                  [](const Payload& x) { return std::holds_alternative<AuthPayload>(x); }));
	const TsPayload* tsi = ts_of(*payloads, true);
	REQUIRE(tsi);
	CHECK(tsi->selectors.size() == 40);
	CHECK(g.c().fragments_received == frags.size());
	CHECK(g.c().fragments_dropped == frags.size() - 1);
}

TEST_CASE(
    "a tampered fragment is dropped before it is stored, and the genuine one still completes the message") {
	Gw g;
	REQUIRE(g.m.init());
	const std::vector<Datagram> frags = g.auth_fragments(150);
	REQUIRE(frags.size() >= 3);
	g.send(frags[0]);
	const size_t held = g.e->reassembly_bytes();
	CHECK(held > 0);
	// A flipped ciphertext bit, a changed Fragment Number, a larger Total
	// Fragments: all under the ICV, so none of them is believed or kept.
	Datagram flipped = frags[1];
	flipped[flipped.size() - 20] ^= 0x01;
	Datagram renumbered = frags[1];
	renumbered[kHeaderLen + 5] = 3;
	Datagram retotalled = frags[1];
	retotalled[kHeaderLen + 7] = uint8_t(frags.size() + 1);
	for (const Datagram* d : {&flipped, &renumbered, &retotalled}) {
		CHECK(g.send(*d).empty());
		CHECK(g.e->reassembly_bytes() == held);
	}
	CHECK(g.c().bad_icv == 3);
	CHECK(g.c().fragments_received == 1);
	CHECK(g.c().reassembly_abandoned == 0);
	std::vector<Datagram> answer;
	for (size_t i = 1; i < frags.size(); i++)
		answer = g.send(frags[i]);
	CHECK(g.state() == "established");
	CHECK(open_answer(g.m, answer));
}

TEST_CASE("Total Fragments: fewer than before is dropped, more restarts, a number past it is dropped") {
	Gw g;
	REQUIRE(g.m.init());
	const std::vector<uint8_t> data(100, 0x5a);
	g.send(g.fragment(1, 1, 3, data, Exchange::ike_auth, uint8_t(PayloadType::idi)));
	CHECK(g.c().fragments_received == 1);
	CHECK(g.e->reassembly_bytes() == 100);

	g.send(g.fragment(1, 2, 2, data, Exchange::ike_auth)); // fewer than 3
	CHECK(g.c().fragments_dropped == 1);
	CHECK(g.e->reassembly_bytes() == 100);
	g.send(g.fragment(1, 4, 3, data, Exchange::ike_auth));      // number past the total
	g.send(g.fragment(1, 0, 3, data, Exchange::ike_auth));      // number 0
	g.send(g.fragment(1, 2, 3, data, Exchange::informational)); // another exchange, same ID
	CHECK(g.c().fragments_dropped == 4);
	CHECK(g.e->reassembly_bytes() == 100);

	// More than before (section 2.6: the sender cut it smaller): start over.
	const std::vector<uint8_t> other(60, 0x33);
	g.send(g.fragment(1, 2, 4, other, Exchange::ike_auth));
	CHECK(g.c().reassembly_abandoned == 1);
	CHECK(g.e->reassembly_bytes() == 60);
	CHECK(g.c().fragments_received == 2);
}

TEST_CASE(
    "more than Engine::kMaxFragments Total Fragments is dropped unstored; Engine::kMaxFragments is taken") {
	Gw g;
	REQUIRE(g.m.init());
	const std::vector<uint8_t> data(10, 0x11);
	g.send(g.fragment(1, 1, uint16_t(Engine::kMaxFragments + 1), data, Exchange::ike_auth));
	g.send(g.fragment(1, 2, 0xffff, data, Exchange::ike_auth));
	CHECK(g.c().fragments_dropped == 2);
	CHECK(g.c().fragments_received == 0);
	CHECK(g.e->reassembly_bytes() == 0);
	g.send(g.fragment(1, 1, Engine::kMaxFragments, data, Exchange::ike_auth));
	CHECK(g.c().fragments_received == 1);
	CHECK(g.e->reassembly_bytes() == 10);
}

TEST_CASE(
    "a flood of fragments for many message IDs stays within the reassembly bound, and the SA serves on") {
	Gw g;
	g.up();
	const std::vector<uint8_t> big(1100, 0x77);
	size_t most = 0;
	for (uint32_t id = 2; id < 200; id++) {
		for (uint16_t n = 1; n <= Engine::kMaxFragments; n++) {
			// Requests of every ID (only 2 is in the window) and responses
			// to requests never sent.
			g.send(g.fragment(id, n, Engine::kMaxFragments, big));
			g.send(g.fragment(id, n, Engine::kMaxFragments, big, Exchange::informational, 0,
			                  kFlagResponse | kFlagInitiator));
			most = std::max(most, g.e->reassembly_bytes());
			if (id > 2) break; // out of the window: one each is enough
		}
	}
	CHECK(most <= Engine::kMaxReassemblyBytes);
	CHECK(most >=
	      Engine::kMaxReassemblyBytes - big.size()); // the bound, not something smaller, stopped it
	CHECK(g.c().reassembly_abandoned >= 1);
	CHECK(g.c().unknown_sa >= 2 * 197); // out-of-window IDs: dropped before any decryption
	// Message 2 whole: answered, and the fragments held for it are let go.
	bool got = false;
	g.m.next_id = 2;
	g.m.request(Exchange::informational, {}, &got);
	CHECK(got);
	CHECK(g.e->reassembly_bytes() == 0);
}

TEST_CASE("a half-reassembled message is given up after Engine::kReassemblyTimeout") {
	Gw g;
	g.up();
	const std::vector<uint8_t> data(300, 0x42);
	g.send(g.fragment(2, 1, 2, data));
	CHECK(g.e->reassembly_bytes() == 300);
	g.now += Engine::kReassemblyTimeout - std::chrono::seconds(1);
	g.e->tick(g.now);
	CHECK(g.e->reassembly_bytes() == 300);
	g.now += std::chrono::seconds(2);
	g.e->tick(g.now);
	CHECK(g.e->reassembly_bytes() == 0);
	CHECK(g.c().reassembly_abandoned == 1);
	CHECK(g.state() == "established");
}

TEST_CASE("reassembly memory is given back when the IKE SA goes") {
	Gw g;
	g.up();
	const std::vector<uint8_t> data(500, 0x42);
	g.send(g.fragment(2, 1, 5, data));
	CHECK(g.e->reassembly_bytes() == 500);
	g.e->remove_peer(0, g.now);
	CHECK(g.e->status(g.now).empty());
	CHECK(g.e->reassembly_bytes() == 0);
	CHECK(g.c().reassembly_abandoned == 0); // freed with the SA, not by a timer
}
