// The IKEv2 engine tests' bench: two engines wired back to back through fake
// hosts that record what each engine asks of its host (datagrams, SAs,
// addresses, logs), a policy maker, and the checks the tests share.
#pragma once

#include "base/bytes.hpp"
#include "ike/engine.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <doctest/doctest.h>
#include <map>
#include <set>

namespace esptun::ike::test {

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

	std::optional<Endpoint> fail_send_to; ///< send() to it throws, as a failing host might
	void send(Port via, const Endpoint& to, std::span<const uint8_t> msg) override {
		if (fail_send_to && to == *fail_send_to) throw std::runtime_error("the host cannot send now");
		out.push_back({via, to, {msg.begin(), msg.end()}});
	}
	std::optional<Endpoint> nat_inside; ///< set: we sit behind a NAT, this is our own address
	int keepalives = 0;
	std::vector<Endpoint> moved;
	void peer_moved(size_t, const Endpoint& to) override { moved.push_back(to); }
	std::optional<Endpoint> local_endpoint(Port, const Endpoint&) override {
		return nat_inside ? nat_inside : self;
	}
	// [[maybe_unused]]: the fuzz targets build this header with doctest's
	// checks compiled out (DOCTEST_CONFIG_DISABLE).
	void send_keepalive([[maybe_unused]] const Endpoint& to) override {
		CHECK(to.port == 4500);
		keepalives++;
	}
	/// Models a full SA table: at most this many SPIs reserved or installed.
	size_t spi_limit = SIZE_MAX;
	bool throw_on_install = false; ///< install_child() throws, as a failing host might
	std::optional<uint32_t> allocate_spi() override {
		if (reserved.size() + installed.size() >= spi_limit) return std::nullopt;
		reserved.insert(next_spi);
		return next_spi++;
	}
	void release_spi(uint32_t spi) override { reserved.erase(spi); }
	bool install_child(size_t, const ChildKeys& k, bool replace_out) override {
		if (throw_on_install) throw std::runtime_error("the host cannot install SAs now");
		REQUIRE(reserved.count(k.spi_in) == 1);
		reserved.erase(k.spi_in);
		installed[k.spi_in] = k;
		if (replace_out)
			current_out = k.spi_out;
		else
			parked[k.spi_in] = k;
		return true;
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
	/// What child_usage() reports, by inbound SPI (nothing carried for others).
	std::map<uint32_t, ChildUsage> usage;
	int usage_queries = 0;
	std::optional<ChildUsage> child_usage(size_t, uint32_t spi_in, uint32_t) override {
		usage_queries++;
		auto it = usage.find(spi_in);
		return it == usage.end() ? ChildUsage{} : it->second;
	}
	void log(const std::string& line) override { logs.push_back(line); }
	bool debug = false;                  ///< debug_enabled(): the engine writes debug lines
	std::vector<std::string> debug_logs; ///< its debug lines (other levels go to logs)
	void log_at(LogLevel level, const std::string& line) override {
		if (level == LogLevel::debug)
			debug_logs.push_back(line);
		else
			log(line);
	}
	bool debug_enabled() const override { return debug; }
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
	/// Template users: instances made and ended, in order; refused while set.
	std::vector<size_t> instances_added, instances_removed;
	bool refuse_instances = false;
	bool instance_added(size_t instance) override {
		if (refuse_instances) return false;
		REQUIRE(leases.count(instance) == 0); // a reused slot starts clean
		instances_added.push_back(instance);
		return true;
	}
	void instance_removed(size_t instance) override {
		REQUIRE(leases.count(instance) == 0); // addresses go back first
		instances_removed.push_back(instance);
	}

	bool logged(std::string_view needle) const {
		for (const std::string& l : logs)
			if (l.find(needle) != std::string::npos) return true;
		return false;
	}
};

inline Endpoint ep(const char* text) { return *parse_endpoint(text); }

inline constexpr const char* kPsk = "a-long-enough-pre-shared-key-123";

inline PeerPolicy policy(const char* name, const char* local, const char* remote, const char* psk = kPsk) {
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

inline void check_keys_cross(const FakeHost& x, const FakeHost& y) {
	REQUIRE(x.installed.size() == 1);
	REQUIRE(y.installed.size() == 1);
	// [[maybe_unused]]: unused where doctest is compiled out (the fuzz targets).
	[[maybe_unused]] const ChildKeys& kx = x.installed.begin()->second;
	[[maybe_unused]] const ChildKeys& ky = y.installed.begin()->second;
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

/// A pair with short rekey timers on the sides named, already established.
inline Pair rekey_pair(uint32_t a_child, uint32_t a_ike, uint32_t b_child, uint32_t b_ike) {
	PeerPolicy pa = policy("b", "a.example", "b.example");
	PeerPolicy pb = policy("a", "b.example", "a.example");
	pa.child_rekey_s = a_child;
	pa.ike_rekey_s = a_ike;
	pb.child_rekey_s = b_child;
	pb.ike_rekey_s = b_ike;
	pa.dpd_interval_s = pb.dpd_interval_s = 0;
	return Pair(pa, pb);
}

} // namespace esptun::ike::test
