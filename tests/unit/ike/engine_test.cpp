// The IKEv2 engine between two instances wired back to back through fake
// hosts: the exchanges, their failure paths (wrong PSK, unknown identity, no
// common proposal, lost and malformed messages), cookies under load, rekeys
// the peer starts, and liveness checks; rekeys and PFS are in
// engine_rekey_test.cpp. Interoperability with another
// implementation is tested against strongSwan in tests/netns/test_ike_strongswan.py.
#include "tests/unit/ike/engine_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

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
	// The refusal is unauthenticated: A waits out its retransmissions
	// (section 2.21.1) and then names it.
	p.advance(std::chrono::seconds(64));
	CHECK(p.ha.logged("NO_PROPOSAL_CHOSEN (we offered aes128-sha256-prfsha256-modp2048)"));
	CHECK(p.b->counters().no_proposal >= 1);
	CHECK(p.a->counters().no_proposal == 1);
	CHECK(p.ha.installed.empty());
}

TEST_CASE("a refused offer with a weak suite names allow_weak; a strong one, ike_proposals") {
	std::string err;
	PeerPolicy pa = policy("b", "192.0.2.7", "b.example");
	PeerPolicy pb = policy("a", "b.example", "192.0.2.7");
	// Windows' built-in client as it comes: aes256-sha1-modp1024 (and 3DES).
	pa.ike_proposals = {*parse_ike_proposal("aes256-sha1-modp1024", err, true)};
	Pair p(pa, pb);
	p.a->start(p.now);
	p.pump();
	CHECK(p.hb.logged("it offered aes256-sha1-prfsha1-modp1024; we accept "));
	CHECK(p.hb.logged("; aes256-sha1-prfsha1-modp1024 would be accepted from a peer with "
	                  "allow_weak = true and aes256-sha1-prfsha1-modp1024 in its ike_proposals"));
	CHECK(p.hb.logged("Set-VpnConnectionIPsecConfiguration"));
	CHECK(p.hb.installed.empty());

	pa.ike_proposals = {*parse_ike_proposal("aes256-sha512-modp4096", err)};
	Pair q(pa, pb);
	q.a->start(q.now);
	q.pump();
	CHECK(q.hb.logged("; to accept it, add aes256-sha512-prfsha512-modp4096 to the peer's "
	                  "ike_proposals"));
	CHECK_FALSE(q.hb.logged("allow_weak"));
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
	// Fill the half-open table from many initiators that never continue
	// (each from its own address: one source alone stops at its bound).
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
		from.addr.bytes[3] = uint8_t(1 + i);
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
