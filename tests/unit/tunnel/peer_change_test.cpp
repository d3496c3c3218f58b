// Peers added and removed at run time (SaTable::prepare_peers() and
// commit_peers(), what a config reload does): the peers that stay keep their
// SAs and counters and lose no packet, the removed ones vanish from both
// lookups, a change that does not check out changes nothing, and all of it
// while workers forward.
#include "base/bytes.hpp"
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <string>
#include <thread>
#include <vector>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;
using test::kSiteC;

const test::LinkOptions kOpts{};

/// Site A's table with static peers B (and C when @with_c).
tunnel::SaTable table_at_a(bool with_c, size_t workers = 1) {
	std::vector<tunnel::PeerParams> peers{test::peer_entry(kSiteA, kSiteB, kOpts)};
	if (with_c) peers.push_back(test::peer_entry(kSiteA, kSiteC, kOpts));
	return tunnel::SaTable(peers, workers);
}

/// encapsulate() @inner through @t; the datagram is copied out.
std::optional<Bytes> seal(const tunnel::SaTable& t, const Bytes& inner, Drop* why = nullptr, size_t w = 0) {
	test::PacketBuffer buf;
	buf.load(inner);
	const tunnel::OutboundResult r = tunnel::encapsulate(t, buf.mem, inner.size(), w);
	if (why) *why = r.drop;
	if (r.verdict != tunnel::Verdict::forward) return std::nullopt;
	return Bytes(r.datagram.begin(), r.datagram.end());
}

std::vector<std::string> names(const tunnel::SaTable& t) {
	std::vector<std::string> out;
	for (const auto& p : t.peers())
		out.push_back(p->name);
	return out;
}

TEST_CASE("adding a peer: it is routed and decrypts; the peer already there keeps its SA and counters") {
	tunnel::SaTable a = table_at_a(false);
	tunnel::SaTable c({test::peer_entry(kSiteC, kSiteA, kOpts)});
	test::Rng rng(1);
	const Bytes to_b = test::packet_v4(kSiteA, kSiteB, 100, rng);
	const Bytes to_c = test::packet_v4(kSiteA, kSiteC, 100, rng);
	tunnel::Peer* b_before = a.find_peer("b");
	REQUIRE(seal(a, to_b));
	Drop why{};
	CHECK_FALSE(seal(a, to_c, &why));
	CHECK(why == Drop::no_route);

	tunnel::PeerChange change = a.prepare_peers({}, {test::peer_entry(kSiteA, kSiteC, kOpts)});
	REQUIRE(change.added().size() == 1);
	// Prepared, not yet published: the data path still sees the old set.
	CHECK_FALSE(seal(a, to_c));
	CHECK(names(a) == std::vector<std::string>{"b"});
	a.commit_peers(std::move(change));

	CHECK(names(a) == std::vector<std::string>{"b", "c"});
	CHECK(a.find_peer("b") == b_before);
	const std::optional<Bytes> dgram = seal(a, to_c);
	REQUIRE(dgram);
	Bytes copy = *dgram;
	const tunnel::InboundResult in = tunnel::decapsulate(c, copy, kSiteA.ep, 1, 0);
	REQUIRE(in.verdict == tunnel::Verdict::forward);
	CHECK(Bytes(in.inner.begin(), in.inner.end()) == to_c);
	// B's outbound SA went on counting from where it was.
	REQUIRE(seal(a, to_b));
	CHECK(a.sa_info(*b_before).out->seq == 2);
	CHECK(a.sa_info(*b_before).totals.tx_packets == 2);
}

TEST_CASE("removing a peer: no route to it, its SPI is unknown, and it is freed once workers left") {
	tunnel::SaTable a = table_at_a(true, 2);
	tunnel::SaTable c({test::peer_entry(kSiteC, kSiteA, kOpts)});
	test::Rng rng(2);
	const Bytes to_c = test::packet_v4(kSiteA, kSiteC, 80, rng);
	const Bytes from_c = test::packet_v4(kSiteC, kSiteA, 80, rng);
	std::optional<Bytes> dgram_from_c = seal(c, from_c);
	REQUIRE(dgram_from_c);

	a.enter(1); // a worker in the middle of a pass holds what it found
	const std::vector<std::string> remove{"c"};
	a.commit_peers(a.prepare_peers(remove, {}));
	CHECK(names(a) == std::vector<std::string>{"b"});
	CHECK(a.find_peer("c") == nullptr);
	Drop why{};
	CHECK_FALSE(seal(a, to_c, &why));
	CHECK(why == Drop::no_route);
	const tunnel::InboundResult in = tunnel::decapsulate(a, *dgram_from_c, kSiteC.ep, 1, 0);
	CHECK(in.verdict == tunnel::Verdict::drop);
	CHECK(in.drop == Drop::unknown_spi);
	// The old set and peer C wait for worker 1, which may still hold them.
	CHECK(a.collect() == 0);
	CHECK(a.retired() == 2);
	a.leave(1);
	CHECK(a.collect() == 2);
	CHECK(a.retired() == 0);
}

TEST_CASE("a peer changed in one commit: its old and new self are never both missing") {
	tunnel::SaTable a = table_at_a(true);
	test::Rng rng(3);
	const Bytes to_c = test::packet_v4(kSiteA, kSiteC, 60, rng);
	tunnel::PeerParams changed = test::peer_entry(kSiteA, kSiteC, kOpts);
	changed.out.spi ^= 0x10000;  // a new SA towards C ...
	changed.out.enc_key[0] ^= 1; // ... with a new key
	const std::vector<std::string> remove{"c"};
	tunnel::Peer* old_c = a.find_peer("c");
	tunnel::PeerChange change = a.prepare_peers(remove, {changed});
	const std::optional<Bytes> before = seal(a, to_c);
	REQUIRE(before);
	a.commit_peers(std::move(change));
	const std::optional<Bytes> after = seal(a, to_c);
	REQUIRE(after);
	CHECK(load_be32(before->data()) == test::spi_of(kSiteC, kSiteA));
	CHECK(load_be32(after->data()) == (test::spi_of(kSiteC, kSiteA) ^ 0x10000));
	CHECK(a.find_peer("c") != old_c);
	CHECK(a.peers().size() == 2);
}

TEST_CASE("a change that does not check out throws and changes nothing") {
	tunnel::SaTable a = table_at_a(false);
	test::Rng rng(4);
	const Bytes to_b = test::packet_v4(kSiteA, kSiteB, 60, rng);

	SUBCASE("allowed_ips overlapping a peer that stays") {
		tunnel::PeerParams p = test::peer_entry(kSiteA, kSiteC, kOpts);
		p.allowed_ips.push_back(test::prefix(kSiteB.host4(7), 32));
		CHECK_THROWS_WITH_AS(a.prepare_peers({}, {p}), doctest::Contains("overlaps peer b"),
		                     std::invalid_argument);
	}
	SUBCASE("an inbound SPI a peer that stays receives on") {
		tunnel::PeerParams p = test::peer_entry(kSiteA, kSiteC, kOpts);
		p.in.spi = test::spi_of(kSiteA, kSiteB);
		CHECK_THROWS_WITH_AS(a.prepare_peers({}, {p}), doctest::Contains("already used"),
		                     std::invalid_argument);
	}
	SUBCASE("an SPI reserved for a run-time SA") {
		tunnel::SaTable d({test::run_time_peer("x", kSiteB.ep, {kSiteB.v4})});
		const uint32_t spi = d.allocate_spi();
		tunnel::PeerParams p = test::peer_entry(kSiteA, kSiteC, kOpts);
		p.in.spi = spi;
		CHECK_THROWS_AS(d.prepare_peers({}, {p}), std::invalid_argument);
		CHECK(d.peers().size() == 1);
	}
	SUBCASE("a key that does not fit the cipher") {
		tunnel::PeerParams p = test::peer_entry(kSiteA, kSiteC, kOpts);
		p.out.enc_key.pop_back();
		CHECK_THROWS(a.prepare_peers({}, {p}));
	}
	SUBCASE("a name already in the table") {
		const tunnel::PeerParams p = test::peer_entry(kSiteA, kSiteB, kOpts); // b again
		CHECK_THROWS_WITH_AS(a.prepare_peers({}, {p}), doctest::Contains("listed twice"),
		                     std::invalid_argument);
	}
	SUBCASE("removing a peer that is not there") {
		const std::vector<std::string> remove{"nobody"};
		CHECK_THROWS_WITH_AS(a.prepare_peers(remove, {}), doctest::Contains("not in the SA table"),
		                     std::invalid_argument);
	}
	CHECK(names(a) == std::vector<std::string>{"b"});
	CHECK(seal(a, to_b));
}

TEST_CASE("removing a peer keyed at run time retires its SAs and frees their slots") {
	tunnel::SaTable a({test::run_time_peer("x", kSiteB.ep, {kSiteB.v4}),
	                   test::run_time_peer("y", kSiteC.ep, {kSiteC.v4})});
	test::Rng rng(5);
	tunnel::Peer& x = *a.find_peer("x");
	tunnel::ChildSaKeys k;
	k.cipher = crypto::Cipher::aes128_gcm;
	k.enc_key = secret_copy(rng.bytes(20));
	k.spi = a.allocate_spi();
	a.install_inbound(x, k);
	k.spi = 0x12345678;
	a.install_outbound(x, k);
	const uint32_t in_spi = a.sa_info(x).in.at(0).spi;
	REQUIRE(a.find_inbound(in_spi) != nullptr);

	const std::vector<std::string> remove{"x"};
	a.commit_peers(a.prepare_peers(remove, {}));
	CHECK(a.find_inbound(in_spi) == nullptr);
	CHECK(a.retired() == 0); // no worker was entered: all freed at once
	CHECK(names(a) == std::vector<std::string>{"y"});
	// The slot is free again: the SPI is not reported as installed.
	CHECK_FALSE(a.remove_inbound(in_spi));
}

TEST_CASE("adding and removing a peer 200 times while two workers forward to another: none lost") {
	constexpr size_t kWorkers = 2;
	tunnel::SaTable a = table_at_a(false, kWorkers);
	// No replay check at B: a worker preempted between sealing and opening
	// must not make the other's packets look replayed.
	test::LinkOptions no_window;
	no_window.window = 0;
	tunnel::SaTable b({test::peer_entry(kSiteB, kSiteA, no_window)}, kWorkers);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> progress{0};
	struct Result {
		uint64_t sealed = 0, delivered = 0, to_c = 0;
	};
	std::array<Result, kWorkers> results;
	std::vector<std::thread> workers;
	for (size_t w = 0; w < kWorkers; w++)
		workers.emplace_back([&, w] {
			test::Rng wrng(50 + w);
			const Bytes to_b = test::packet_v4(kSiteA, kSiteB, 64 + 300 * w, wrng);
			const Bytes to_c = test::packet_v4(kSiteA, kSiteC, 64, wrng);
			test::PacketBuffer buf;
			Result& r = results[w];
			while (!stop.load(std::memory_order_relaxed)) {
				a.enter(w);
				buf.load(to_c);
				r.to_c += tunnel::encapsulate(a, buf.mem, to_c.size(), w).verdict ==
				          tunnel::Verdict::forward;
				buf.load(to_b);
				const tunnel::OutboundResult out =
				    tunnel::encapsulate(a, buf.mem, to_b.size(), w);
				if (out.verdict == tunnel::Verdict::forward) {
					r.sealed++;
					b.enter(w);
					r.delivered +=
					    tunnel::decapsulate(b, out.datagram, kSiteA.ep, 1, w).verdict ==
					    tunnel::Verdict::forward;
					b.leave(w);
				}
				a.leave(w);
				progress.fetch_add(1, std::memory_order_relaxed);
			}
		});
	auto wait_packets = [&](uint64_t n) {
		const uint64_t target = progress.load() + n;
		while (progress.load() < target)
			std::this_thread::yield();
	};
	const std::vector<std::string> remove_c{"c"};
	for (int i = 0; i < 200; i++) {
		wait_packets(5);
		a.commit_peers(a.prepare_peers({}, {test::peer_entry(kSiteA, kSiteC, kOpts)}));
		wait_packets(5);
		a.commit_peers(a.prepare_peers(remove_c, {}));
		a.collect();
	}
	stop = true;
	for (auto& t : workers)
		t.join();
	uint64_t sealed = 0, delivered = 0, to_c = 0;
	for (const Result& r : results) {
		sealed += r.sealed;
		delivered += r.delivered;
		to_c += r.to_c;
	}
	CHECK(sealed > 0);
	CHECK(delivered == sealed);
	CHECK(to_c > 0); // C was there some of the time
	a.collect();
	CHECK(a.retired() == 0);
	CHECK(a.sa_info(*a.find_peer("b")).out->seq == sealed);
}

} // namespace

TEST_CASE("10,000 peers: names and allowed_ips are checked through indexes, with the same verdicts") {
	constexpr size_t kPeers = 10000;
	auto many = [](size_t n) {
		std::vector<tunnel::PeerParams> v;
		for (size_t i = 0; i < n; i++) {
			const std::string net =
			    "10." + std::to_string(i >> 8) + "." + std::to_string(i & 255) + ".0/24";
			v.push_back(test::run_time_peer("p" + std::to_string(i), std::nullopt,
			                                {*parse_prefix(net.c_str())}));
		}
		return v;
	};
	std::vector<tunnel::PeerParams> peers = many(kPeers);
	// A peer's own prefixes may nest, in either order.
	peers[10].allowed_ips.push_back(*parse_prefix("10.0.10.128/25"));
	peers[11].allowed_ips.insert(peers[11].allowed_ips.begin(), *parse_prefix("10.0.11.64/26"));
	tunnel::SaTable t(peers);
	CHECK(t.peers().size() == kPeers);
	CHECK(t.find_peer("p9999") != nullptr);

	// One more whose prefix holds p17's, or lies inside p9998's.
	tunnel::PeerParams wide = test::run_time_peer("wide", std::nullopt, {*parse_prefix("10.0.16.0/20")});
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {wide}),
	                     doctest::Contains("peer wide: allowed_ips 10.0.16.0/20 overlaps peer p"),
	                     std::invalid_argument);
	tunnel::PeerParams inside =
	    test::run_time_peer("inside", std::nullopt, {*parse_prefix("10.39.14.7/32")});
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {inside}),
	                     doctest::Contains("overlaps peer p9998's 10.39.14.0/24"), std::invalid_argument);
	// A name that is taken, and the same prefix twice in one peer.
	tunnel::PeerParams again =
	    test::run_time_peer("p5000", std::nullopt, {*parse_prefix("10.200.0.0/24")});
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {again}), doctest::Contains("peer p5000 is listed twice"),
	                     std::invalid_argument);
	tunnel::PeerParams twice =
	    test::run_time_peer("twice", std::nullopt, {*parse_prefix("10.201.0.0/24")});
	twice.allowed_ips.push_back(*parse_prefix("10.201.0.0/24"));
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {twice}), doctest::Contains("is listed twice"),
	                     std::invalid_argument);
	// Removing p17 frees its prefix for a newcomer.
	tunnel::PeerParams heir = test::run_time_peer("heir", std::nullopt, {*parse_prefix("10.0.17.0/24")});
	const std::vector<std::string> going = {"p17"};
	CHECK_NOTHROW(t.commit_peers(t.prepare_peers(going, {heir})));
	CHECK(t.find_peer("heir") != nullptr);
	CHECK(t.find_peer("p17") == nullptr);
}

// A template's users come and go one at a time (IkeService::instance_added()
// and instance_removed()), each with a change of its own. Such a peer has no
// static SA and, with a pool address, no allowed_ips: nothing of it is in the
// set the data path routes by, so the change must not rebuild that set (the
// rebuild walks every peer: with 10,000 users connected, each login cost
// the gateway milliseconds and a shutdown more than 5 s).
TEST_CASE("a peer with nothing to route adds and goes without a new peer set; the lookups stay right") {
	namespace tt = tunnel;
	std::vector<tt::PeerParams> peers{test::peer_entry(kSiteA, kSiteB, kOpts)};
	for (int i = 0; i < 3; i++)
		peers.push_back(
		    test::run_time_peer("routed" + std::to_string(i), std::nullopt,
		                        {*parse_prefix(("10.90." + std::to_string(i) + ".0/24").c_str())}));
	tt::SaTable t(peers, 1);
	test::Rng rng(7);
	const Bytes to_b = test::packet_v4(kSiteA, kSiteB, 100, rng);
	REQUIRE(seal(t, to_b));
	// A worker inside a batch keeps whatever is retired: a new set shows.
	t.enter(0);
	const size_t retired0 = t.retired();
	for (int i = 0; i < 100; i++)
		t.commit_peers(
		    t.prepare_peers({}, {test::run_time_peer("user" + std::to_string(i), std::nullopt, {})}));
	CHECK(t.retired() == retired0);
	CHECK(t.peers().size() == 104);
	CHECK(t.find_peer("user42") != nullptr);
	CHECK(t.route(*parse_ip("10.90.1.9")) == t.find_peer("routed1"));
	// A name already taken is still refused, by a user or a routed peer.
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {test::run_time_peer("user7", std::nullopt, {})}),
	                     doctest::Contains("peer user7 is listed twice"), std::invalid_argument);
	CHECK_THROWS_WITH_AS(t.prepare_peers({}, {test::run_time_peer("routed2", std::nullopt, {})}),
	                     doctest::Contains("peer routed2 is listed twice"), std::invalid_argument);
	for (int i = 0; i < 100; i += 2) {
		const std::string going[1] = {"user" + std::to_string(i)};
		t.commit_peers(t.prepare_peers(going, {}));
	}
	// The removed peers themselves are retired (freed once the worker
	// leaves); no set is.
	CHECK(t.retired() == retired0 + 50);
	CHECK(t.find_peer("user42") == nullptr);
	CHECK(t.find_peer("user43") != nullptr);
	CHECK(t.peers().size() == 54);
	// A peer that routes still makes a new set, and so does its removal.
	t.commit_peers(t.prepare_peers(
	    {}, {test::run_time_peer("routed9", std::nullopt, {*parse_prefix("10.90.9.0/24")})}));
	CHECK(t.retired() == retired0 + 51);
	CHECK(t.route(*parse_ip("10.90.9.1")) == t.find_peer("routed9"));
	const std::string going[1] = {"routed0"};
	t.commit_peers(t.prepare_peers(going, {}));
	CHECK(t.retired() == retired0 + 53); // the set and the peer
	CHECK(t.route(*parse_ip("10.90.0.1")) == nullptr);
	t.leave(0);
	t.collect();
	CHECK(t.retired() == 0);
	REQUIRE(seal(t, to_b));
}

} // namespace esptun
