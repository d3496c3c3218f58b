// The IKEv2 engine between two instances wired back to back through fake
// hosts: the exchanges, their failure paths (wrong PSK, unknown identity, no
// common proposal, lost and malformed messages), cookies under load, rekeys
// the peer starts, and liveness checks. Interoperability with another
// implementation is tested against strongSwan in tests/netns/test_ike_strongswan.py.
#include "tunnel/bytes.hpp"
#include "tunnel/ike/engine.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <doctest/doctest.h>
#include <map>
#include <set>

using namespace esptun;
using namespace esptun::ike;

namespace {

struct Sent {
	Port via;
	Endpoint to;
	std::vector<uint8_t> bytes;
};

/// A Host that records what the engine does.
struct FakeHost : Host {
	Endpoint self;
	std::deque<Sent> out;
	std::map<uint32_t, ChildKeys> installed; ///< by inbound SPI
	std::map<uint32_t, ChildKeys> parked;    ///< outbound halves not switched to yet
	uint32_t current_out = 0;                ///< SPI we send with
	std::set<uint32_t> reserved;
	uint32_t next_spi = 0x1000;
	std::vector<std::string> logs;
	std::optional<Clock::time_point> esp_rx;

	void send(Port via, const Endpoint& to, std::span<const uint8_t> msg) override {
		out.push_back({via, to, {msg.begin(), msg.end()}});
	}
	std::optional<Endpoint> nat_inside; ///< set: we sit behind a NAT, this is our own address
	int keepalives = 0;
	std::vector<Endpoint> moved;
	void peer_moved(size_t, const Endpoint& to) override { moved.push_back(to); }
	std::optional<Endpoint> local_endpoint(Port, const Endpoint&) override {
		return nat_inside ? nat_inside : self;
	}
	void send_keepalive(const Endpoint& to) override {
		CHECK(to.port == 4500);
		keepalives++;
	}
	uint32_t allocate_spi() override {
		reserved.insert(next_spi);
		return next_spi++;
	}
	void release_spi(uint32_t spi) override { reserved.erase(spi); }
	void install_child(size_t, const ChildKeys& k, bool replace_out) override {
		REQUIRE(reserved.count(k.spi_in) == 1);
		reserved.erase(k.spi_in);
		installed[k.spi_in] = k;
		if (replace_out)
			current_out = k.spi_out;
		else
			parked[k.spi_in] = k;
	}
	void switch_outbound(size_t, uint32_t spi_in) override {
		REQUIRE(parked.count(spi_in) == 1);
		current_out = parked[spi_in].spi_out;
		parked.erase(spi_in);
	}
	void remove_child(size_t, uint32_t spi_in, uint32_t spi_out) override {
		installed.erase(spi_in);
		parked.erase(spi_in);
		if (current_out == spi_out) current_out = 0;
	}
	std::optional<Clock::time_point> last_esp_rx(size_t) override { return esp_rx; }
	void log(const std::string& line) override { logs.push_back(line); }
	std::vector<IpAddress> got_addresses, got_dns;
	void assigned(size_t, std::span<const IpAddress> a, std::span<const IpAddress> d) override {
		REQUIRE(installed.empty()); // before the CHILD_SA that uses the address
		got_addresses.assign(a.begin(), a.end());
		got_dns.assign(d.begin(), d.end());
	}

	std::vector<TrafficSelector> remote_ts; ///< from child_selectors()
	void child_selectors(size_t, std::span<const TrafficSelector> ts) override {
		remote_ts.assign(ts.begin(), ts.end());
	}
	/// A pool of client addresses, handed out in order (a gateway's AddressPool).
	std::vector<IpAddress> pool;
	std::map<size_t, IpAddress> leases;
	int releases = 0;
	std::optional<IpAddress> lease_address(size_t peer, Family f) override {
		if (auto it = leases.find(peer); it != leases.end()) return it->second;
		for (const IpAddress& a : pool)
			if (a.family == f && std::none_of(leases.begin(), leases.end(),
			                                  [&](const auto& l) { return l.second == a; }))
				return leases[peer] = a;
		return std::nullopt;
	}
	void release_addresses(size_t peer) override {
		releases++;
		leases.erase(peer);
	}

	bool logged(std::string_view needle) const {
		for (const std::string& l : logs)
			if (l.find(needle) != std::string::npos) return true;
		return false;
	}
};

Endpoint ep(const char* text) { return *parse_endpoint(text); }

const char* kPsk = "a-long-enough-pre-shared-key-123";

PeerPolicy policy(const char* name, const char* local, const char* remote, const char* psk = kPsk) {
	PeerPolicy p;
	p.name = name;
	p.psk.assign(psk, psk + std::strlen(psk));
	p.local_id = *parse_identity(local);
	p.remote_id = *parse_identity(remote);
	p.ike_proposals = default_ike_proposals();
	p.esp_proposals = default_esp_proposals();
	return p;
}

/// Two engines: A (10.0.0.1) initiates to B (10.0.0.2), which responds.
struct Pair {
	FakeHost ha, hb;
	std::unique_ptr<Engine> a, b;
	Clock::time_point now = Clock::now();
	/// Messages to lose on the way, by index of delivery (0 = first).
	std::set<int> lose;
	int delivered = 0;
	std::vector<size_t> sizes; ///< of every message delivered or lost, in order

	Pair(PeerPolicy pa, PeerPolicy pb) {
		ha.self = ep("10.0.0.1:4500");
		hb.self = ep("10.0.0.2:4500");
		pa.endpoint = hb.self;
		pa.initiate = true;
		if (pa.allowed_ips.empty()) pa.allowed_ips = {*parse_prefix("10.9.2.0/24")};
		if (pb.allowed_ips.empty()) pb.allowed_ips = {*parse_prefix("0.0.0.0/0")};
		a = std::make_unique<Engine>(std::vector<PeerPolicy>{pa}, ha);
		b = std::make_unique<Engine>(std::vector<PeerPolicy>{pb}, hb);
	}

	/// Make-before-break: whatever SA one side sends with, the other can
	/// receive with, at every moment (checked after each delivery).
	bool check_mbb = false;
	int mbb_violations = 0;
	void check_sending() {
		if (!check_mbb) return;
		if (ha.current_out && !hb.installed.count(ha.current_out)) mbb_violations++;
		if (hb.current_out && !ha.installed.count(hb.current_out)) mbb_violations++;
	}

	/// Delivers queued messages both ways until both are quiet.
	void pump() {
		for (int guard = 0; guard < 100 && (!ha.out.empty() || !hb.out.empty()); guard++) {
			if (!ha.out.empty()) {
				Sent s = std::move(ha.out.front());
				ha.out.pop_front();
				sizes.push_back(s.bytes.size());
				if (!lose.count(delivered++) && b) b->receive(s.via, ha.self, s.bytes, now);
				check_sending();
			}
			if (!hb.out.empty()) {
				Sent s = std::move(hb.out.front());
				hb.out.pop_front();
				sizes.push_back(s.bytes.size());
				if (!lose.count(delivered++)) a->receive(s.via, hb.self, s.bytes, now);
				check_sending();
			}
		}
	}

	void advance(std::chrono::milliseconds d) {
		for (auto t = std::chrono::milliseconds(0); t < d; t += std::chrono::milliseconds(200)) {
			now += std::chrono::milliseconds(200);
			a->tick(now);
			b->tick(now);
			pump();
		}
	}

	std::string state(const Engine& e) const {
		auto st = e.status(now);
		return st.empty() ? "none" : st.front().state;
	}
};

void check_keys_cross(const FakeHost& x, const FakeHost& y) {
	REQUIRE(x.installed.size() == 1);
	REQUIRE(y.installed.size() == 1);
	const ChildKeys& kx = x.installed.begin()->second;
	const ChildKeys& ky = y.installed.begin()->second;
	CHECK(kx.spi_out == ky.spi_in);
	CHECK(kx.spi_in == ky.spi_out);
	CHECK(kx.enc_out == ky.enc_in);
	CHECK(kx.auth_out == ky.auth_in);
	CHECK(kx.enc_in == ky.enc_out);
	CHECK(kx.enc_in != kx.enc_out);
	CHECK(kx.cipher == ky.cipher);
	CHECK(kx.esn == ky.esn);
	CHECK(x.current_out == kx.spi_out);
	CHECK(y.current_out == ky.spi_out);
}

} // namespace

TEST_CASE("IKE_SA_INIT and IKE_AUTH with a PSK give both sides matching CHILD_SA keys") {
	for (const char* ike : {"aes128gcm16-prfsha256-x25519", "aes256-sha256-modp2048",
	                        "aes256gcm16-prfsha384-ecp256", "aes128-sha512-x25519"}) {
		for (const char* esp : {"aes128gcm16-esn", "aes128-sha1-noesn", "aes256-sha256"}) {
			CAPTURE(ike);
			CAPTURE(esp);
			std::string err;
			PeerPolicy pa = policy("b", "a.example", "b.example");
			PeerPolicy pb = policy("a", "b.example", "a.example");
			pa.ike_proposals = {*parse_ike_proposal(ike, err)};
			pb.ike_proposals = pa.ike_proposals;
			pa.esp_proposals = {*parse_esp_proposal(esp, err)};
			pb.esp_proposals = default_esp_proposals();
			Pair p(pa, pb);
			p.a->start(p.now);
			p.pump();
			CHECK(p.state(*p.a) == "established");
			CHECK(p.state(*p.b) == "established");
			check_keys_cross(p.ha, p.hb);
			const ChildKeys& k = p.ha.installed.begin()->second;
			CHECK(k.cipher == pa.esp_proposals[0].cipher);
			CHECK(k.esn == (pa.esp_proposals[0].esn != EsnOffer::no));
			CHECK(k.remote == p.hb.self);
			auto st = p.a->status(p.now);
			REQUIRE(st.size() == 1);
			CHECK(st[0].suite == ike_suite_name(pa.ike_proposals[0]));
		}
	}
}

TEST_CASE("a wrong PSK fails on both ends and installs nothing") {
	Pair p(policy("b", "a.example", "b.example", "the-wrong-pre-shared-key-000000"),
	       policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	CHECK(p.ha.installed.empty());
	CHECK(p.hb.installed.empty());
	CHECK(p.hb.reserved.empty());
	CHECK(p.ha.reserved.empty());
	CHECK(p.a->counters().auth_failed == 1);
	CHECK(p.b->counters().auth_failed == 1);
	CHECK(p.ha.logged("peer b: IKE SA closed: authentication failed"));
	CHECK(p.hb.logged("peer a: authentication failed"));
	CHECK(p.state(*p.b) == "none");
	// The initiator tries again later, with backoff, and fails the same way.
	p.advance(std::chrono::seconds(3));
	CHECK(p.a->counters().auth_failed == 2);
	CHECK(p.ha.installed.empty());
}

TEST_CASE("an identity no peer has is refused") {
	Pair p(policy("b", "stranger.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	CHECK(p.hb.logged("identity 'stranger.example' is not configured for any peer"));
	CHECK(p.ha.installed.empty());
	CHECK(p.hb.installed.empty());
}

TEST_CASE("no common IKE proposal is reported with what was offered") {
	std::string err;
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.ike_proposals = {*parse_ike_proposal("aes128-sha256-modp2048", err)};
	pb.ike_proposals = {*parse_ike_proposal("aes256gcm16-prfsha384-ecp256", err)};
	Pair p(pa, pb);
	p.a->start(p.now);
	p.pump();
	CHECK(p.hb.logged("no IKE proposal in common; it offered aes128-sha256-prfsha256-modp2048"));
	CHECK(p.ha.logged("NO_PROPOSAL_CHOSEN"));
	CHECK(p.b->counters().no_proposal == 1);
	CHECK(p.ha.installed.empty());
}

TEST_CASE("a key share of another group is answered with INVALID_KE_PAYLOAD and retried") {
	std::string err;
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.ike_proposals = {*parse_ike_proposal("aes128gcm16-prfsha256-x25519", err),
	                    *parse_ike_proposal("aes128gcm16-prfsha256-ecp256", err)};
	pb.ike_proposals = {*parse_ike_proposal("aes128gcm16-prfsha256-ecp256", err)};
	Pair p(pa, pb);
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) == "established");
	CHECK(p.a->status(p.now)[0].suite == "aes128gcm16-prfsha256-ecp256");
	check_keys_cross(p.ha, p.hb);
}

TEST_CASE("lost messages are retransmitted and a retransmitted request gets the same answer") {
	for (int lost : {0, 1, 2, 3}) {
		CAPTURE(lost);
		Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
		p.lose = {lost};
		p.a->start(p.now);
		p.pump();
		p.advance(std::chrono::seconds(4));
		CHECK(p.state(*p.a) == "established");
		CHECK(p.state(*p.b) == "established");
		CHECK(p.a->counters().retransmits >= 1);
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("garbage and tampered messages are counted, not acted on") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.state(*p.b) == "established");
	const std::vector<uint8_t> junk = {1, 2, 3};
	p.b->receive(Port::natt, p.ha.self, junk, p.now);
	CHECK(p.b->counters().malformed == 1);
	// A liveness request from A with one flipped bit in its ciphertext.
	p.ha.esp_rx.reset();
	PeerPolicy q = policy("b", "a.example", "b.example");
	p.advance(std::chrono::seconds(1));
	p.now += std::chrono::seconds(31);
	p.a->tick(p.now);
	REQUIRE(p.ha.out.size() == 1);
	std::vector<uint8_t> msg = p.ha.out.front().bytes;
	msg[msg.size() - 20] ^= 1;
	p.b->receive(Port::natt, p.ha.self, msg, p.now);
	CHECK(p.b->counters().bad_icv == 1);
	CHECK(p.hb.out.empty());
	// The genuine one is answered.
	p.pump();
	CHECK(p.a->counters().retransmits == 0);
	CHECK(p.state(*p.a) == "established");
}

TEST_CASE("a dead peer is noticed by liveness checks and the initiator starts over") {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	pa.dpd_interval_s = 8;
	Pair p(pa, policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.state(*p.a) == "established");
	// B vanishes: nothing it would send arrives any more.
	p.b.reset();
	for (int i = 0; i < 20 * 5 && !p.ha.installed.empty(); i++) {
		p.now += std::chrono::milliseconds(200);
		p.a->tick(p.now);
		p.ha.out.clear();
	}
	CHECK(p.ha.installed.empty());
	CHECK(p.ha.logged("the peer is dead"));
	CHECK(p.ha.current_out == 0);
	// Detected within two intervals of the last sign of life.
	CHECK(p.a->status(p.now).size() <= 1);
}

TEST_CASE("ESP traffic counts as a sign of life: no liveness check while it flows") {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	pa.dpd_interval_s = 5;
	Pair p(pa, policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	for (int i = 0; i < 100; i++) {
		p.now += std::chrono::milliseconds(200);
		p.ha.esp_rx = p.now;
		p.a->tick(p.now);
	}
	CHECK(p.ha.out.empty());
	CHECK(p.a->counters().sent == 2);
}

TEST_CASE("under half-open load the responder demands cookies, and a returned cookie passes") {
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pb.allowed_ips = {*parse_prefix("0.0.0.0/0")};
	FakeHost hb;
	hb.self = ep("10.0.0.2:4500");
	Engine b({pb}, hb);
	const Clock::time_point now = Clock::now();
	// Fill the half-open table from many initiators that never continue.
	for (size_t i = 0; i < Engine::kCookieThreshold; i++) {
		FakeHost hx;
		hx.self = ep("10.1.0.1:4500");
		PeerPolicy px = policy("b", "x.example", "b.example");
		px.endpoint = hb.self;
		px.initiate = true;
		Engine x({px}, hx);
		x.start(now);
		REQUIRE(hx.out.size() == 1);
		Endpoint from = hx.self;
		from.port = uint16_t(1000 + i);
		b.receive(Port::natt, from, hx.out.front().bytes, now);
	}
	CHECK(b.counters().cookies_sent == 0);
	hb.out.clear();
	// The next initiator gets a cookie demand, repeats with it, and gets in.
	FakeHost ha;
	ha.self = ep("10.0.0.1:4500");
	PeerPolicy pa = policy("b", "a.example", "b.example");
	pa.endpoint = hb.self;
	pa.initiate = true;
	pa.allowed_ips = {*parse_prefix("10.9.2.0/24")};
	Engine a({pa}, ha);
	a.start(now);
	for (int round = 0; round < 6 && (!ha.out.empty() || !hb.out.empty()); round++) {
		while (!ha.out.empty()) {
			b.receive(Port::natt, ha.self, ha.out.front().bytes, now);
			ha.out.pop_front();
		}
		while (!hb.out.empty()) {
			a.receive(Port::natt, hb.self, hb.out.front().bytes, now);
			hb.out.pop_front();
		}
	}
	CHECK(b.counters().cookies_sent == 1);
	CHECK(ha.installed.size() == 1);
	CHECK(hb.installed.size() == 1);
}

TEST_CASE("a Delete of the IKE SA from the peer removes its CHILD_SAs and the initiator reconnects") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.hb.installed.size() == 1);
	p.b->shutdown();
	CHECK(p.hb.installed.empty());
	p.pump();
	CHECK(p.ha.installed.empty());
	CHECK(p.ha.logged("deleted by the peer"));
}

TEST_CASE("traffic selectors are narrowed to allowed_ips") {
	TrafficSelector any = selector_of(*parse_prefix("0.0.0.0/0"));
	std::vector<IpPrefix> allowed{*parse_prefix("10.1.0.0/16"), *parse_prefix("192.168.5.7/32")};
	auto n = narrow(std::span(&any, 1), allowed);
	REQUIRE(n.size() == 2);
	CHECK(to_string(n[0].start) == "10.1.0.0");
	CHECK(to_string(n[0].end) == "10.1.255.255");
	CHECK(to_string(n[1].start) == "192.168.5.7");
	CHECK(to_string(n[1].end) == "192.168.5.7");
	TrafficSelector outside = selector_of(*parse_prefix("172.16.0.0/12"));
	CHECK(narrow(std::span(&outside, 1), allowed).empty());
	TrafficSelector v6 = selector_of(*parse_prefix("::/0"));
	CHECK(narrow(std::span(&v6, 1), allowed).empty());
	TrafficSelector partial = selector_of(*parse_prefix("10.1.128.0/17"));
	partial.ip_protocol = 6;
	auto m = narrow(std::span(&partial, 1), allowed);
	REQUIRE(m.size() == 1);
	CHECK(m[0] == partial);
}

TEST_CASE("selectors turn into the fewest prefixes that cover them exactly") {
	auto prefixes = [](const char* from, const char* to) {
		TrafficSelector t;
		t.start = *parse_ip(from);
		t.end = *parse_ip(to);
		std::string out;
		for (const IpPrefix& p : selector_prefixes(t))
			out += (out.empty() ? "" : " ") + to_string(p);
		return out;
	};
	CHECK(prefixes("10.1.0.0", "10.1.255.255") == "10.1.0.0/16");
	CHECK(prefixes("10.0.0.5", "10.0.0.10") == "10.0.0.5/32 10.0.0.6/31 10.0.0.8/31 10.0.0.10/32");
	CHECK(prefixes("10.0.0.255", "10.0.1.0") == "10.0.0.255/32 10.0.1.0/32"); // the carry
	CHECK(prefixes("0.0.0.0", "255.255.255.255") == "0.0.0.0/0");
	CHECK(prefixes("0.0.0.1", "255.255.255.255").find("128.0.0.0/1") != std::string::npos);
	CHECK(prefixes("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") == "::/0");
	CHECK(prefixes("fd00::", "fd00::1:ffff") == "fd00::/111");
	CHECK(prefixes("10.0.0.9", "10.0.0.9") == "10.0.0.9/32");
	CHECK(prefixes("10.0.0.9", "10.0.0.8").empty());
	CHECK(prefixes("10.0.0.9", "fd00::1").empty());
	TrafficSelector web = selector_of(*parse_prefix("192.168.1.0/24"));
	web.ip_protocol = 6;
	web.start_port = web.end_port = 443;
	CHECK(selector_strings(std::span(&web, 1)) ==
	      std::vector<std::string>{"192.168.1.0/24 proto 6 ports 443-443"});
}

TEST_CASE("identities parse as addresses, e-mail style or FQDN") {
	CHECK(parse_identity("192.0.2.1")->type == IdType::ipv4);
	CHECK(parse_identity("2001:db8::1")->data.size() == 16);
	CHECK(parse_identity("alice@example.com")->type == IdType::rfc822);
	auto f = parse_identity("@gw.example.com");
	CHECK(f->type == IdType::fqdn);
	CHECK(identity_text(*f) == "gw.example.com");
	CHECK(!parse_identity(""));
	CHECK(!parse_identity("@"));
}

namespace {

/// A pair with short rekey timers on the sides named, already established.
Pair rekey_pair(uint32_t a_child, uint32_t a_ike, uint32_t b_child, uint32_t b_ike) {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.child_rekey_s = a_child;
	pa.ike_rekey_s = a_ike;
	pb.child_rekey_s = b_child;
	pb.ike_rekey_s = b_ike;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	return Pair(pa, pb);
}

} // namespace

TEST_CASE("CHILD_SA rekeys by either side replace the SA make-before-break") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? rekey_pair(10, 0, 0, 0) : rekey_pair(0, 0, 10, 0);
		p.a->start(p.now);
		p.pump();
		p.check_mbb = true;
		const uint32_t first_in = p.ha.installed.begin()->first;
		for (int round = 1; round <= 3; round++) {
			p.advance(std::chrono::seconds(11));
			check_keys_cross(p.ha, p.hb);
			CHECK(p.ha.installed.begin()->first != first_in);
			CHECK(p.a->status(p.now)[0].child_rekeys == uint32_t(round));
			CHECK(p.b->status(p.now)[0].child_rekeys == uint32_t(round));
		}
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}

TEST_CASE("IKE SA rekeys by either side keep the CHILD_SAs, and the new IKE SA works") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? rekey_pair(0, 10, 0, 0) : rekey_pair(0, 0, 0, 10);
		p.a->start(p.now);
		p.pump();
		const auto spis_before = p.a->status(p.now)[0];
		const uint32_t child_in = p.ha.installed.begin()->first;
		p.advance(std::chrono::seconds(11));
		auto sa = p.a->status(p.now);
		REQUIRE(sa.size() == 1);
		CHECK(sa[0].ike_rekeys == 1);
		CHECK(sa[0].spi_i != spis_before.spi_i);
		CHECK(sa[0].state == "established");
		REQUIRE(p.b->status(p.now).size() == 1);
		CHECK(p.b->status(p.now)[0].spi_r == sa[0].spi_r);
		CHECK(p.ha.installed.begin()->first == child_in);
		check_keys_cross(p.ha, p.hb);
		// The rekeyed IKE SA carries a second rekey, so its keys agree.
		p.advance(std::chrono::seconds(11));
		CHECK(p.a->status(p.now)[0].ike_rekeys == 2);
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("simultaneous CHILD_SA rekeys leave exactly one new SA on both sides") {
	for (int trial = 0; trial < 8; trial++) {
		CAPTURE(trial);
		Pair p = rekey_pair(10, 0, 10, 0);
		p.a->start(p.now);
		p.pump();
		p.check_mbb = true;
		// Both rekeys start before either side hears from the other.
		p.now += std::chrono::seconds(11);
		p.a->tick(p.now);
		p.b->tick(p.now);
		REQUIRE(p.ha.out.size() == 1);
		REQUIRE(p.hb.out.size() == 1);
		if (trial % 2) std::swap(p.ha.out, p.ha.out); // delivery order varies via pump's alternation
		p.pump();
		p.advance(std::chrono::seconds(2));
		check_keys_cross(p.ha, p.hb);
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}

TEST_CASE("simultaneous IKE SA rekeys end with one IKE SA on both sides") {
	Pair p = rekey_pair(0, 10, 0, 10);
	p.a->start(p.now);
	p.pump();
	p.now += std::chrono::seconds(11);
	p.a->tick(p.now);
	p.b->tick(p.now);
	p.pump();
	p.advance(std::chrono::seconds(15));
	auto sa = p.a->status(p.now);
	REQUIRE(sa.size() == 1);
	REQUIRE(p.b->status(p.now).size() == 1);
	CHECK(sa[0].spi_i == p.b->status(p.now)[0].spi_i);
	CHECK(sa[0].ike_rekeys >= 1);
	check_keys_cross(p.ha, p.hb);
}

TEST_CASE("a client asking for a virtual address gets its own, with DNS, and selectors narrowed to it") {
	PeerPolicy pa = policy("gw", "alice@example.com", "gw.example");
	pa.request_address = true;
	PeerPolicy pb = policy("alice", "gw.example", "alice@example.com");
	pb.assign = {*parse_ip("10.77.0.10")};
	pb.dns = {*parse_ip("10.77.0.53"), *parse_ip("fd77::53")};
	pb.allowed_ips = {*parse_prefix("10.77.0.10/32")};
	pa.allowed_ips = {*parse_prefix("10.77.0.0/24"), *parse_prefix("192.168.9.0/24")};
	Pair p(pa, pb);
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) == "established");
	REQUIRE(p.ha.got_addresses.size() == 1);
	CHECK(to_string(p.ha.got_addresses[0]) == "10.77.0.10");
	REQUIRE(p.ha.got_dns.size() == 2);
	CHECK(to_string(p.ha.got_dns[1]) == "fd77::53");
	check_keys_cross(p.ha, p.hb);
	auto st = p.b->status(p.now);
	REQUIRE(st.size() == 1);
	REQUIRE(st[0].virtual_ips.size() == 1);
	CHECK(st[0].virtual_ips[0] == "10.77.0.10");
	CHECK(p.a->status(p.now)[0].dns.size() == 2);
	// The client hears the gateway's side as agreed (here: all it asked for).
	CHECK(selector_strings(p.ha.remote_ts) == std::vector<std::string>{"10.77.0.0/24", "192.168.9.0/24"});
	CHECK(p.hb.remote_ts.empty()); // the responder is not told
}

TEST_CASE("a client that gets no virtual address gives up with a clear reason") {
	PeerPolicy pa = policy("gw", "alice@example.com", "gw.example");
	pa.request_address = true;
	Pair p(pa, policy("alice", "gw.example", "alice@example.com"));
	p.a->start(p.now);
	p.pump();
	CHECK(p.ha.installed.empty());
	CHECK(p.ha.reserved.empty());
	CHECK(p.ha.logged("the gateway assigned no virtual address (INTERNAL_ADDRESS_FAILURE"));
	CHECK(p.hb.logged("asks for a virtual address, but has no fixed one"));
	CHECK(p.hb.installed.empty());  // no CHILD_SA without an address (RFC 7296 section 3.10.1)
	CHECK(p.state(*p.b) == "none"); // told by a Delete
}

TEST_CASE("a client without a fixed address leases one from the pool for the life of its IKE SA") {
	PeerPolicy pa = policy("gw", "alice@example.com", "gw.example");
	pa.request_address = true;
	pa.ike_rekey_s = 10; // the client rekeys the IKE SA: the lease must survive it
	pa.dpd_interval_s = 0;
	PeerPolicy pb = policy("alice", "gw.example", "alice@example.com");
	pb.allowed_ips = {*parse_prefix("192.168.70.0/24")}; // a network behind the client
	pb.dns = {*parse_ip("10.77.0.53")};
	Pair p(pa, pb);
	p.hb.pool = {*parse_ip("10.77.0.5"), *parse_ip("10.77.0.6")};
	p.hb.leases[7] = *parse_ip("10.77.0.5"); // another peer holds the first one
	p.a->start(p.now);
	p.pump();
	CHECK(p.state(*p.a) == "established");
	REQUIRE(p.ha.got_addresses.size() == 1);
	CHECK(to_string(p.ha.got_addresses[0]) == "10.77.0.6");
	REQUIRE(p.ha.got_dns.size() == 1);
	check_keys_cross(p.ha, p.hb);
	// The client proposes 0.0.0.0/0 as its side; the gateway narrows it to
	// the leased address plus the client's allowed_ips.
	CHECK(p.hb.logged("selectors 192.168.70.0-192.168.70.255, 10.77.0.6-10.77.0.6,"));
	// The client's side of the CHILD_SA as the gateway narrowed it, in the status.
	REQUIRE(p.a->status(p.now).at(0).children.size() == 1);
	CHECK(p.a->status(p.now)[0].children[0].local_ts ==
	      std::vector<std::string>{"192.168.70.0/24", "10.77.0.6/32"});
	p.advance(std::chrono::seconds(11));
	REQUIRE(p.b->status(p.now).size() == 1);
	CHECK(p.b->status(p.now)[0].ike_rekeys == 1);
	CHECK(p.hb.releases == 0);
	CHECK(p.hb.leases.count(0) == 1);
	// The client goes away: its Delete ends the lease.
	p.a->shutdown();
	p.pump();
	CHECK(p.b->status(p.now).empty());
	CHECK(p.hb.releases == 1);
	CHECK(p.hb.leases.count(0) == 0);
	CHECK(p.hb.leases.count(7) == 1);
}

TEST_CASE("a full pool gives INTERNAL_ADDRESS_FAILURE and no CHILD_SA") {
	PeerPolicy pa = policy("gw", "alice@example.com", "gw.example");
	pa.request_address = true;
	Pair p(pa, policy("alice", "gw.example", "alice@example.com"));
	p.hb.pool = {*parse_ip("10.77.0.5")};
	p.hb.leases[7] = *parse_ip("10.77.0.5");
	p.a->start(p.now);
	p.pump();
	CHECK(p.ha.installed.empty());
	CHECK(p.hb.installed.empty());
	CHECK(p.ha.logged("INTERNAL_ADDRESS_FAILURE"));
	CHECK(p.hb.leases.count(0) == 0);
}

TEST_CASE("NAT detection: the side behind a NAT finds out and sends keepalives, the other does not") {
	for (int behind : {0, 1}) {
		CAPTURE(behind);
		Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
		// A's packets leave from 192.168.1.5 and arrive at B from 10.0.0.1.
		(behind ? p.hb : p.ha).nat_inside = ep("192.168.1.5:4500");
		p.a->start(p.now);
		p.pump();
		REQUIRE(p.state(*p.a) == "established");
		CHECK(p.a->status(p.now)[0].behind_nat == (behind == 0));
		CHECK(p.b->status(p.now)[0].behind_nat == (behind == 1));
		p.advance(std::chrono::seconds(61));
		FakeHost& nat = behind ? p.hb : p.ha;
		FakeHost& open = behind ? p.ha : p.hb;
		CHECK(nat.keepalives == 3);
		CHECK(open.keepalives == 0);
	}
}

TEST_CASE("an authenticated IKE message from a new address moves the peer; a forged one does not") {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	pa.dpd_interval_s = 5;
	Pair p(pa, policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.state(*p.b) == "established");
	p.now += std::chrono::seconds(6);
	p.a->tick(p.now); // a liveness check from A
	REQUIRE(p.ha.out.size() == 1);
	const std::vector<uint8_t> msg = p.ha.out.front().bytes;
	p.ha.out.clear();
	std::vector<uint8_t> forged = msg;
	forged.back() ^= 1;
	p.b->receive(Port::natt, ep("10.0.0.9:4500"), forged, p.now);
	CHECK(p.hb.moved.empty());
	p.b->receive(Port::natt, ep("10.0.0.9:4500"), msg, p.now);
	REQUIRE(p.hb.moved.size() == 1);
	CHECK(p.hb.moved[0] == ep("10.0.0.9:4500"));
	REQUIRE(p.hb.out.size() == 1);
	CHECK(p.hb.out.front().to == ep("10.0.0.9:4500")); // the answer follows too
}

namespace {

/// rekey_pair() with these esp_proposals on A and B.
Pair pfs_pair(std::vector<const char*> a_esp, std::vector<const char*> b_esp, uint32_t a_child,
              uint32_t b_child) {
	auto suites = [](const std::vector<const char*>& texts) {
		std::vector<EspSuite> out;
		std::string err;
		for (const char* t : texts) {
			auto s = parse_esp_proposal(t, err);
			REQUIRE_MESSAGE(s, err);
			out.push_back(*s);
		}
		return out;
	};
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.esp_proposals = suites(a_esp);
	pb.esp_proposals = suites(b_esp);
	pa.child_rekey_s = a_child;
	pb.child_rekey_s = b_child;
	pa.ike_rekey_s = pb.ike_rekey_s = 0;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	return Pair(pa, pb);
}

std::string child_pfs(const Engine& e, Clock::time_point now) {
	auto st = e.status(now);
	if (st.empty() || st[0].children.size() != 1) return "?";
	return st[0].children[0].pfs;
}

/// The largest message of one rekey round (10 s timers, 11 s on).
size_t rekey_round_max(Pair& p) {
	p.sizes.clear();
	p.advance(std::chrono::seconds(11));
	return p.sizes.empty() ? 0 : *std::max_element(p.sizes.begin(), p.sizes.end());
}

} // namespace

TEST_CASE("CHILD_SA rekeys with PFS by either side agree on keys and carry a key exchange") {
	for (const char* esp : {"aes128gcm16-x25519", "aes256-sha256-modp2048", "aes128gcm16-ecp256"}) {
		for (int who : {0, 1}) {
			CAPTURE(esp);
			CAPTURE(who);
			Pair p = who == 0 ? pfs_pair({esp}, {esp}, 10, 0) : pfs_pair({esp}, {esp}, 0, 10);
			p.a->start(p.now);
			p.pump();
			p.check_mbb = true;
			REQUIRE(p.a->status(p.now).size() == 1);
			// IKE_AUTH: the first CHILD_SA's keys come from the IKE SA, no PFS.
			CHECK(child_pfs(*p.a, p.now).empty());
			const std::string group = std::string(esp).substr(std::string(esp).rfind('-') + 1);
			std::vector<uint8_t> last_enc = p.ha.installed.begin()->second.enc_out;
			for (int round = 1; round <= 3; round++) {
				CAPTURE(round);
				const size_t biggest = rekey_round_max(p);
				check_keys_cross(p.ha, p.hb);
				CHECK(p.a->status(p.now)[0].child_rekeys == uint32_t(round));
				CHECK(child_pfs(*p.a, p.now) == group);
				CHECK(child_pfs(*p.b, p.now) == group);
				CHECK(p.ha.installed.begin()->second.enc_out != last_enc);
				last_enc = p.ha.installed.begin()->second.enc_out;
				// The KE payloads make the exchange bigger by at least the public value.
				CHECK(biggest >= (group == "modp2048" ? 256u
				                  : group == "ecp256" ? 64u
				                                      : 32u) +
				                     100u);
			}
			CHECK(p.mbb_violations == 0);
			CHECK(p.ha.reserved.empty());
			CHECK(p.hb.reserved.empty());
			CHECK((who == 0 ? p.ha : p.hb).logged("PFS " + group));
		}
	}
	// The same rekey without PFS is smaller by the two KE payloads.
	Pair plain = pfs_pair({"aes256-sha256"}, {"aes256-sha256"}, 10, 0);
	plain.a->start(plain.now);
	plain.pump();
	Pair pfs = pfs_pair({"aes256-sha256-modp2048"}, {"aes256-sha256-modp2048"}, 10, 0);
	pfs.a->start(pfs.now);
	pfs.pump();
	CHECK(rekey_round_max(pfs) >= rekey_round_max(plain) + 256);
	CHECK(child_pfs(*plain.a, plain.now).empty());
}

TEST_CASE("a KE of another group gets INVALID_KE_PAYLOAD with the wanted group, and the rekey is retried") {
	// A sends x25519 first; B only takes ecp256.
	Pair p = pfs_pair({"aes128gcm16-x25519", "aes128gcm16-ecp256"}, {"aes128gcm16-ecp256"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.a->status(p.now).size() == 1);
	check_keys_cross(p.ha, p.hb);
	p.advance(std::chrono::seconds(11));
	CHECK(p.hb.logged("answering INVALID_KE_PAYLOAD"));
	CHECK(p.ha.logged("wants group ecp256"));
	check_keys_cross(p.ha, p.hb);
	CHECK(child_pfs(*p.a, p.now) == "ecp256");
	CHECK(child_pfs(*p.b, p.now) == "ecp256");
	CHECK(p.a->status(p.now)[0].child_rekeys == 1);
	CHECK(p.ha.reserved.empty());
	// The next rekey starts with the group the CHILD_SA has: no second refusal.
	p.ha.logs.clear();
	p.hb.logs.clear();
	p.advance(std::chrono::seconds(11));
	CHECK(!p.hb.logged("INVALID_KE_PAYLOAD"));
	CHECK(p.a->status(p.now)[0].child_rekeys == 2);
	check_keys_cross(p.ha, p.hb);
}

TEST_CASE("a group the initiator did not offer is not retried") {
	Pair p = pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16-ecp256"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.a->status(p.now).size() == 1); // IKE_AUTH ignores the groups
	const uint32_t first_in = p.ha.installed.begin()->first;
	p.advance(std::chrono::seconds(11));
	// B finds no proposal with its group: NO_PROPOSAL_CHOSEN, the old SA stays.
	CHECK(p.hb.logged("no ESP proposal in common"));
	CHECK(p.ha.logged("CHILD_SA rekey refused: NO_PROPOSAL_CHOSEN"));
	CHECK(p.ha.installed.begin()->first == first_in);
	check_keys_cross(p.ha, p.hb);
	CHECK(p.ha.reserved.empty());
}

TEST_CASE("a PFS-only peer against a policy without PFS: NO_PROPOSAL_CHOSEN with a clear log") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16"}, 10, 0)
		                  : pfs_pair({"aes128gcm16"}, {"aes128gcm16-x25519"}, 0, 10);
		p.a->start(p.now);
		p.pump();
		REQUIRE(p.a->status(p.now).size() == 1);
		const uint32_t first_in = p.ha.installed.begin()->first;
		p.advance(std::chrono::seconds(11));
		FakeHost& responder = who == 0 ? p.hb : p.ha;
		FakeHost& initiator = who == 0 ? p.ha : p.hb;
		CHECK(responder.logged("CHILD_SA rekey from the peer refused: no ESP proposal in common; it "
		                       "offered aes128gcm16-x25519-esn/noesn with a key exchange"));
		CHECK(initiator.logged("CHILD_SA rekey refused: NO_PROPOSAL_CHOSEN"));
		CHECK(p.ha.installed.begin()->first == first_in);
		check_keys_cross(p.ha, p.hb);
	}
}

TEST_CASE("mixed proposals: a peer without PFS picks the plain one and the KE is ignored") {
	for (int who : {0, 1}) {
		CAPTURE(who);
		Pair p = who == 0 ? pfs_pair({"aes128gcm16-x25519", "aes128gcm16"}, {"aes128gcm16"}, 10, 0)
		                  : pfs_pair({"aes128gcm16"}, {"aes128gcm16-x25519", "aes128gcm16"}, 0, 10);
		p.a->start(p.now);
		p.pump();
		p.advance(std::chrono::seconds(11));
		check_keys_cross(p.ha, p.hb);
		CHECK(p.a->status(p.now)[0].child_rekeys == 1);
		CHECK(child_pfs(*p.a, p.now).empty());
		CHECK(child_pfs(*p.b, p.now).empty());
	}
	// Both with the mixed list: PFS wins (it comes first).
	Pair p =
	    pfs_pair({"aes128gcm16-x25519", "aes128gcm16"}, {"aes128gcm16-x25519", "aes128gcm16"}, 10, 0);
	p.a->start(p.now);
	p.pump();
	p.advance(std::chrono::seconds(11));
	check_keys_cross(p.ha, p.hb);
	CHECK(child_pfs(*p.b, p.now) == "x25519");
}

TEST_CASE("simultaneous CHILD_SA rekeys with PFS leave one new SA with matching keys") {
	for (int trial = 0; trial < 4; trial++) {
		CAPTURE(trial);
		Pair p = pfs_pair({"aes128gcm16-x25519"}, {"aes128gcm16-x25519"}, 10, 10);
		p.a->start(p.now);
		p.pump();
		p.check_mbb = true;
		p.now += std::chrono::seconds(11);
		p.a->tick(p.now);
		p.b->tick(p.now);
		REQUIRE(p.ha.out.size() == 1);
		REQUIRE(p.hb.out.size() == 1);
		p.pump();
		p.advance(std::chrono::seconds(2));
		check_keys_cross(p.ha, p.hb);
		CHECK(child_pfs(*p.a, p.now) == "x25519");
		CHECK(p.mbb_violations == 0);
		CHECK(p.ha.reserved.empty());
		CHECK(p.hb.reserved.empty());
	}
}
