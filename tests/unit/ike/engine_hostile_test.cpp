// The IKEv2 engine against an authenticated but hostile peer (RawPeer in
// raw_peer_test_util.hpp) on a gateway that also serves a well-behaved one:
// selector floods, CHILD_SA and IKE SA floods, a full SA table and a failing
// host. Each proves the gateway answers, stays bounded and keeps serving.
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

TrafficSelector ts(const char* prefix) { return selector_of(*parse_prefix(prefix)); }

/// A gateway with two peers: "mallory" (a RawPeer, two allowed_ips
/// prefixes) and "alice" (an engine of her own that initiates).
struct Bench {
	FakeHost hg, ha;
	std::unique_ptr<Engine> gw, alice;
	Clock::time_point now = Clock::now();
	RawPeer m;

	/// @mallory_dpd: the gateway's liveness interval for mallory (0 = none).
	explicit Bench(uint32_t mallory_dpd = 0) {
		hg.self = ep("10.0.0.2:4500");
		ha.self = ep("10.0.0.1:4500");
		PeerPolicy pm = policy("mallory", "gw.example", "mallory.example");
		pm.allowed_ips = {*parse_prefix("10.9.1.0/24"), *parse_prefix("10.9.2.0/24")};
		PeerPolicy pa = policy("alice", "gw.example", "alice.example");
		pa.allowed_ips = {*parse_prefix("10.9.3.0/24")};
		pm.dpd_interval_s = mallory_dpd;
		pa.dpd_interval_s = 0;
		pm.child_rekey_s = pa.child_rekey_s = pm.ike_rekey_s = pa.ike_rekey_s = 0;
		gw = std::make_unique<Engine>(std::vector<PeerPolicy>{pm, pa}, hg);
		PeerPolicy to_gw = policy("gw", "alice.example", "gw.example");
		to_gw.endpoint = hg.self;
		to_gw.initiate = true;
		to_gw.allowed_ips = {*parse_prefix("0.0.0.0/0")};
		to_gw.dpd_interval_s = 0;
		to_gw.child_rekey_s = to_gw.ike_rekey_s = 0;
		alice = std::make_unique<Engine>(std::vector<PeerPolicy>{to_gw}, ha);
		m.t = {gw.get(), &hg, &now};
		m.id = *parse_identity("mallory.example");
	}

	/// Delivers what alice and the gateway send each other until both are quiet.
	void pump() {
		for (int guard = 0; guard < 100 && (!ha.out.empty() || !hg.out.empty()); guard++) {
			if (!ha.out.empty()) {
				Sent s = std::move(ha.out.front());
				ha.out.pop_front();
				gw->receive(s.via, ha.self, s.bytes, now);
			}
			for (auto it = hg.out.begin(); it != hg.out.end(); ++it)
				if (it->to == ha.self) {
					Sent s = std::move(*it);
					hg.out.erase(it);
					alice->receive(s.via, hg.self, s.bytes, now);
					break;
				}
			if (ha.out.empty() && std::none_of(hg.out.begin(), hg.out.end(),
			                                   [&](const Sent& s) { return s.to == ha.self; }))
				break;
		}
	}

	/// Mallory authenticates with one plain CHILD_SA; returns its reply.
	std::vector<Payload> mallory_up() {
		REQUIRE(m.init());
		bool got = false;
		std::vector<Payload> r = m.auth({ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, 0xa0000001, &got);
		REQUIRE(got);
		return r;
	}

	size_t ike_sas(const char* peer) const {
		size_t n = 0;
		for (const IkeSaStatus& s : gw->status(now))
			n += s.peer == peer && s.state == "established";
		return n;
	}
	size_t children(const char* peer) const {
		size_t n = 0;
		for (const IkeSaStatus& s : gw->status(now))
			if (s.peer == peer) n += s.children.size();
		return n;
	}

	/// Alice connects and gets her CHILD_SA: the gateway still serves others.
	void check_alice_served() {
		alice->start(now);
		pump();
		CHECK(ike_sas("alice") == 1);
		CHECK(children("alice") == 1);
		CHECK(ha.installed.size() == 1);
	}

	/// Mallory's IKE SA still answers a liveness check.
	void check_mallory_answered() {
		bool got = false;
		m.request(Exchange::informational, {}, &got);
		CHECK(got);
	}
};

/// 255 selectors that each overlap both of mallory's prefixes (distinct ports).
std::vector<TrafficSelector> selector_flood() {
	std::vector<TrafficSelector> out;
	for (uint16_t i = 0; i < 255; i++) {
		TrafficSelector t = ts("0.0.0.0/0");
		t.ip_protocol = 17;
		t.start_port = t.end_port = uint16_t(1000 + i);
		out.push_back(t);
	}
	return out;
}

} // namespace

TEST_CASE("narrowing never returns more than kMaxNarrowedSelectors selectors") {
	const std::vector<TrafficSelector> offered = selector_flood();
	const std::vector<IpPrefix> two{*parse_prefix("10.9.1.0/24"), *parse_prefix("10.9.2.0/24")};
	CHECK(narrow(offered, two).empty());
	const std::span<const TrafficSelector> few(offered.data(), Engine::kMaxNarrowedSelectors / 2);
	CHECK(narrow(few, two).size() == Engine::kMaxNarrowedSelectors);
}

TEST_CASE("255 selectors against two prefixes in CREATE_CHILD_SA get TS_UNACCEPTABLE, not an exit") {
	Bench b;
	b.mallory_up();
	const size_t installed = b.hg.installed.size();
	std::vector<Payload> r;
	CHECK_NOTHROW(r = b.m.new_child(0xa0000002, selector_flood(), {ts("0.0.0.0/0")}));
	CHECK(notify_of(r, notify::ts_unacceptable) != nullptr);
	CHECK(ts_of(r, true) == nullptr);
	CHECK(b.hg.installed.size() == installed);
	CHECK(b.hg.reserved.empty());
	CHECK(b.ike_sas("mallory") == 1);
	b.check_mallory_answered();
	b.check_alice_served();
}

TEST_CASE("255 selectors against two prefixes in IKE_AUTH get TS_UNACCEPTABLE and no CHILD_SA") {
	Bench b;
	REQUIRE(b.m.init());
	std::vector<Payload> r;
	bool got = false;
	CHECK_NOTHROW(r = b.m.auth(selector_flood(), {ts("0.0.0.0/0")}, 0xa0000001, &got));
	CHECK(got);
	CHECK(notify_of(r, notify::ts_unacceptable) != nullptr);
	CHECK(b.hg.installed.empty());
	CHECK(b.ike_sas("mallory") == 1);
	b.check_mallory_answered();
	b.check_alice_served();
}

TEST_CASE("a CHILD_SA flood stops at kMaxChildSasPerPeer with NO_ADDITIONAL_SAS, and a freed slot works") {
	Bench b;
	b.mallory_up();
	const int flood = 100;
	int refused = 0, other = 0;
	for (int i = 0; i < flood; i++) {
		bool got = false;
		std::vector<Payload> r =
		    b.m.new_child(0xb0000000 + uint32_t(i), {ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, &got);
		REQUIRE(got);
		if (notify_of(r, notify::no_additional_sas))
			refused++;
		else if (!ts_of(r, true))
			other++;
	}
	const size_t cap = Engine::kMaxChildSasPerPeer;
	CHECK(b.children("mallory") == cap);
	CHECK(b.hg.installed.size() == cap);
	CHECK(refused == flood - int(cap - 1)); // one came with IKE_AUTH
	CHECK(other == 0);
	CHECK(b.gw->counters().sa_refused == uint64_t(refused));
	// The next legitimate request: delete one CHILD_SA, then a new one fits.
	const uint32_t gone = b.gw->status(b.now)[0].children.front().spi_out;
	bool got = false;
	const Payload del[] = {DeletePayload{Protocol::esp, {gone}}};
	b.m.request(Exchange::informational, del, &got);
	CHECK(got);
	CHECK(b.children("mallory") == cap - 1);
	std::vector<Payload> r = b.m.new_child(0xc0000000, {ts("10.9.2.0/24")}, {ts("0.0.0.0/0")}, &got);
	CHECK(got);
	CHECK(notify_of(r, notify::no_additional_sas) == nullptr);
	CHECK(ts_of(r, true) != nullptr);
	CHECK(b.children("mallory") == cap);
	b.check_alice_served();
}

TEST_CASE("a full SA table refuses CHILD_SAs with NO_ADDITIONAL_SAS and recovers when slots free up") {
	Bench b;
	b.mallory_up();
	b.hg.spi_limit = b.hg.installed.size(); // every slot is taken
	bool got = false;
	std::vector<Payload> r;
	CHECK_NOTHROW(r = b.m.new_child(0xa0000002, {ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, &got));
	CHECK(got);
	CHECK(notify_of(r, notify::no_additional_sas) != nullptr);
	CHECK(b.gw->counters().sa_refused == 1);
	CHECK(b.children("mallory") == 1);
	// A new peer's IKE_AUTH on a full table: the IKE SA, but no CHILD_SA.
	CHECK_NOTHROW(b.alice->start(b.now));
	CHECK_NOTHROW(b.pump());
	CHECK(b.children("alice") == 0);
	CHECK(b.ha.installed.empty());
	CHECK(b.ha.logged("NO_ADDITIONAL_SAS"));
	b.hg.spi_limit = SIZE_MAX;
	r = b.m.new_child(0xa0000003, {ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, &got);
	CHECK(ts_of(r, true) != nullptr);
	CHECK(b.children("mallory") == 2);
}

TEST_CASE("an IKE SA rekey flood is capped at kMaxIkeSasPerPeer and rekeyed IKE SAs retire after the grace") {
	Bench b;
	b.mallory_up();
	int accepted = 0, refused = 0;
	for (int i = 0; i < 10; i++) {
		std::vector<Payload> r = b.m.rekey_ike();
		if (notify_of(r, notify::no_additional_sas))
			refused++;
		else if (std::any_of(r.begin(), r.end(),
		                     [](const Payload& p) { return std::holds_alternative<SaPayload>(p); }))
			accepted++;
	}
	CHECK(accepted == int(Engine::kMaxIkeSasPerPeer) - 1);
	CHECK(refused == 10 - accepted);
	CHECK(b.ike_sas("mallory") == Engine::kMaxIkeSasPerPeer);
	CHECK(b.children("mallory") == 1); // inherited by the newest, never copied
	b.now += Engine::kRekeyedIkeGrace + std::chrono::seconds(1);
	b.gw->tick(b.now);
	CHECK(b.ike_sas("mallory") == 1);
	CHECK(b.hg.installed.size() == 1); // the CHILD_SA lives on under the newest
	b.check_mallory_answered();
	std::vector<Payload> r = b.m.rekey_ike(); // room again
	CHECK(notify_of(r, notify::no_additional_sas) == nullptr);
	CHECK(b.ike_sas("mallory") == 2);
	b.check_alice_served();
}

TEST_CASE("a host callback that throws ends only that exchange, with INVALID_SYNTAX") {
	Bench b;
	b.mallory_up();
	b.hg.throw_on_install = true;
	bool got = false;
	std::vector<Payload> r;
	CHECK_NOTHROW(r = b.m.new_child(0xa0000002, {ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, &got));
	CHECK(got);
	CHECK(notify_of(r, notify::invalid_syntax) != nullptr);
	CHECK(b.gw->counters().internal_errors == 1);
	CHECK(b.hg.logged("the host cannot install SAs now"));
	CHECK(b.ike_sas("mallory") == 1);
	b.hg.throw_on_install = false;
	b.check_mallory_answered();
	b.check_alice_served();
}

TEST_CASE("a host callback that throws in a timer closes only that IKE SA") {
	Bench b(10);
	b.alice->start(b.now);
	b.pump();
	b.mallory_up();
	REQUIRE(b.ike_sas("alice") == 1);
	REQUIRE(b.ike_sas("mallory") == 1);
	// The gateway's liveness check to mallory cannot be sent: only that SA goes.
	b.hg.fail_send_to = b.m.self;
	b.now += std::chrono::seconds(11);
	CHECK_NOTHROW(b.gw->tick(b.now));
	CHECK(b.gw->counters().internal_errors == 1);
	CHECK(b.ike_sas("mallory") == 0);
	CHECK(b.ike_sas("alice") == 1);
	CHECK(b.children("alice") == 1);
	CHECK(b.hg.installed.size() == 1); // mallory's CHILD_SA went with its IKE SA
}
