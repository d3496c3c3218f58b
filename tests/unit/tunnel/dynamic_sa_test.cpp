// SAs installed, replaced and removed at run time (tunnel/sa.hpp): SPI
// allocation, make-before-break rekeying, the epoch-based reclamation of
// replaced SAs, and all of it while two workers forward packets.
#include "base/bytes.hpp"
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <doctest/doctest.h>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;
using test::kSiteC;
using test::Site;

constexpr crypto::Cipher kSuites[] = {crypto::Cipher::aes128_gcm, crypto::Cipher::aes256_cbc_sha256,
                                      crypto::Cipher::aes128_cbc_sha1, crypto::Cipher::aes256_gcm};

/// The entry a site keeps for @peer when IKE keys it: no SAs at start.
tunnel::PeerParams dynamic_peer(const Site& peer) {
	return test::run_time_peer(peer.name, peer.ep, {peer.v4, peer.v6});
}

/// Fresh random keys for one direction of a Child SA.
tunnel::ChildSaKeys child_keys(uint32_t spi, crypto::Cipher c, test::Rng& rng, uint32_t window = 1024) {
	const crypto::CipherSpec& spec = crypto::cipher_spec(c);
	tunnel::ChildSaKeys k;
	k.spi = spi;
	k.cipher = c;
	k.enc_key = secret_copy(rng.bytes(spec.enc_key_len));
	k.auth_key = secret_copy(rng.bytes(spec.auth_key_len));
	k.replay_window = window;
	return k;
}

/// Sites A and B, each keying the other at run time; @workers per table.
struct DynLink {
	tunnel::SaTable a, b;
	tunnel::Peer& b_at_a() { return *a.peers().at(0); }
	tunnel::Peer& a_at_b() { return *b.peers().at(0); }

	explicit DynLink(size_t workers = 1)
	    : a({dynamic_peer(kSiteB)}, workers), b({dynamic_peer(kSiteA)}, workers) {}

	/**
	 * rekey() - the A->B direction, make-before-break: B reserves an SPI
	 * and starts receiving on the new SA, then A sends with it.
	 * Return: the new SPI.
	 */
	uint32_t rekey(crypto::Cipher c, test::Rng& rng, uint32_t window = 1024) {
		const tunnel::ChildSaKeys k = child_keys(b.allocate_spi(), c, rng, window);
		b.install_inbound(a_at_b(), k);
		a.install_outbound(b_at_a(), k);
		return k.spi;
	}
};

/// encapsulate() @inner with worker @w's transform; the datagram is copied out.
std::optional<Bytes> seal(const tunnel::SaTable& t, const Bytes& inner, size_t w = 0) {
	test::PacketBuffer buf;
	buf.load(inner);
	const tunnel::OutboundResult r = tunnel::encapsulate(t, buf.mem, inner.size(), w);
	if (r.verdict != tunnel::Verdict::forward) return std::nullopt;
	return Bytes(r.datagram.begin(), r.datagram.end());
}

/// decapsulate() a copy of @dgram as if it came from site A.
tunnel::InboundResult open_copy(const tunnel::SaTable& t, Bytes dgram, size_t w = 0) {
	static thread_local Bytes keep;
	keep = std::move(dgram);
	return tunnel::decapsulate(t, keep, kSiteA.ep, 1, w);
}

TEST_CASE("a peer keyed at run time drops as no_sa until its outbound SA is installed") {
	DynLink link;
	test::Rng rng(1);
	const Bytes inner = test::packet_v4(kSiteA, kSiteB, 100, rng);
	test::PacketBuffer buf;
	buf.load(inner);
	const tunnel::OutboundResult r = tunnel::encapsulate(link.a, buf.mem, inner.size());
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(drop_name(r.drop) == "no_sa");
	CHECK(r.peer == &link.b_at_a());
	CHECK(link.b_at_a().outbound() == nullptr);
	CHECK(link.b_at_a().in == nullptr);
	const tunnel::PeerSaInfo none = link.a.sa_info(link.b_at_a());
	CHECK(!none.out);
	CHECK(none.in.empty());

	const uint32_t spi = link.rekey(crypto::Cipher::aes128_gcm, rng);
	CHECK(spi >= tunnel::SaTable::kMinSpi);
	auto d = seal(link.a, inner);
	REQUIRE(d);
	CHECK(load_be32(d->data()) == spi);
	CHECK(load_be32(d->data() + 4) == 1); // a new SA counts from 1
	const tunnel::InboundResult in = open_copy(link.b, *d);
	REQUIRE(in.verdict == tunnel::Verdict::forward);
	CHECK(Bytes(in.inner.begin(), in.inner.end()) == inner);
	CHECK(in.peer == &link.a_at_b());

	const tunnel::PeerSaInfo a_info = link.a.sa_info(link.b_at_a());
	REQUIRE(a_info.out);
	CHECK(a_info.out->spi == spi);
	CHECK(a_info.out->cipher == "aes128-gcm");
	CHECK(!a_info.out->keyed_statically);
	CHECK(a_info.totals.tx_packets == 1);
	const tunnel::PeerSaInfo b_info = link.b.sa_info(link.a_at_b());
	REQUIRE(b_info.in.size() == 1);
	CHECK(b_info.in[0].spi == spi);
	CHECK(b_info.totals.rx_packets == 1);
	CHECK(b_info.totals.rx_bytes == inner.size());
}

TEST_CASE("the drop reasons all have distinct names, no_sa among them") {
	std::set<std::string_view> names;
	for (size_t i = 0; i < kDropReasons; i++) {
		CHECK(!drop_name(Drop(i)).empty());
		names.insert(drop_name(Drop(i)));
	}
	CHECK(names.size() == kDropReasons);
	CHECK(names.count("no_sa") == 1);
}

constexpr size_t kSpiSlots = tunnel::SaTable::kMinSpiSlots;

TEST_CASE("allocate_spi: unique, >= 256, never static; release frees; a full table throws") {
	// A static peer (SPIs in the by-SPI map) next to one keyed at run time,
	// in a table that may not grow past its first array.
	test::LinkOptions o;
	tunnel::SaTable t({test::peer_entry(kSiteA, kSiteB, o), dynamic_peer(kSiteC)}, 1, kSpiSlots);
	const uint32_t static_spi = test::spi_of(kSiteA, kSiteB);
	std::set<uint32_t> spis;
	std::set<size_t> slots;
	for (size_t i = 0; i < kSpiSlots; i++) {
		const uint32_t spi = t.allocate_spi();
		CHECK(spi >= tunnel::SaTable::kMinSpi);
		CHECK(spi != static_spi);
		CHECK(t.find_inbound(spi) == nullptr); // reserved, not receiving yet
		spis.insert(spi);
		slots.insert(spi & (kSpiSlots - 1));
	}
	CHECK(spis.size() == kSpiSlots);
	CHECK(slots.size() == kSpiSlots);
	CHECK_THROWS_AS(t.allocate_spi(), std::runtime_error);
	CHECK(!t.try_allocate_spi()); // the IKE service's path: a refusal, not an exception
	CHECK(t.find_inbound(static_spi) == t.peers()[0]->in.get()); // static SPIs are unaffected

	const uint32_t some = *spis.begin();
	CHECK(t.release_spi(some));
	CHECK(!t.release_spi(some)); // not reserved any more
	CHECK(!t.release_spi(static_spi));
	const uint32_t again = t.allocate_spi(); // the only free slot
	CHECK((again & (kSpiSlots - 1)) == (some & (kSpiSlots - 1)));
	CHECK(again >= tunnel::SaTable::kMinSpi);
	CHECK_THROWS_AS(t.allocate_spi(), std::runtime_error);
	CHECK(!t.try_allocate_spi());

	// An installed SPI is not a reservation; removing it frees its slot.
	test::Rng rng(3);
	tunnel::Peer& c = *t.peers()[1];
	tunnel::InboundSa* sa = t.install_inbound(c, child_keys(again, crypto::Cipher::aes128_gcm, rng));
	CHECK(t.find_inbound(again) == sa);
	CHECK(!t.release_spi(again));
	CHECK(t.remove_inbound(again));
	CHECK(!t.remove_inbound(again));
	CHECK(t.find_inbound(again) == nullptr);
	const uint32_t third = t.allocate_spi();
	CHECK((third & (kSpiSlots - 1)) == (again & (kSpiSlots - 1)));
}

TEST_CASE("a run-time SPI sharing its slot with a static SPI: each finds its own SA") {
	test::LinkOptions o;
	tunnel::SaTable t({test::peer_entry(kSiteA, kSiteB, o), dynamic_peer(kSiteC)}, 1, kSpiSlots);
	const uint32_t static_spi = test::spi_of(kSiteA, kSiteB);
	std::vector<uint32_t> all;
	for (size_t i = 0; i < kSpiSlots; i++)
		all.push_back(t.allocate_spi());
	const auto twin = std::find_if(all.begin(), all.end(), [&](uint32_t s) {
		return (s & (kSpiSlots - 1)) == (static_spi & (kSpiSlots - 1));
	});
	REQUIRE(twin != all.end());
	test::Rng rng(4);
	tunnel::InboundSa* sa =
	    t.install_inbound(*t.peers()[1], child_keys(*twin, crypto::Cipher::aes128_gcm, rng));
	CHECK(t.find_inbound(*twin) == sa);
	CHECK(t.find_inbound(static_spi) == t.peers()[0]->in.get());
	CHECK(t.find_inbound(*twin ^ 0x10000) == nullptr); // same slot, another SPI
}

TEST_CASE("install refuses static peers, unreserved SPIs, reserved SPI values and bad keys") {
	test::LinkOptions o;
	tunnel::SaTable t({test::peer_entry(kSiteA, kSiteB, o), dynamic_peer(kSiteC)});
	tunnel::Peer& fixed = *t.peers()[0];
	tunnel::Peer& ike = *t.peers()[1];
	test::Rng rng(5);
	const uint32_t spi = t.allocate_spi();
	CHECK_THROWS_AS(t.install_inbound(fixed, child_keys(spi, crypto::Cipher::aes128_gcm, rng)),
	                std::invalid_argument);
	CHECK_THROWS_AS(t.install_outbound(fixed, child_keys(0x5000, crypto::Cipher::aes128_gcm, rng)),
	                std::invalid_argument);
	CHECK(!t.remove_outbound(fixed));
	CHECK(fixed.outbound() == &fixed.out); // untouched
	CHECK_THROWS_AS(t.install_inbound(ike, child_keys(spi ^ 0x1000, crypto::Cipher::aes128_gcm, rng)),
	                std::invalid_argument); // not reserved
	CHECK_THROWS_AS(t.install_outbound(ike, child_keys(255, crypto::Cipher::aes128_gcm, rng)),
	                std::invalid_argument); // RFC 4303 2.1
	tunnel::ChildSaKeys bad = child_keys(spi, crypto::Cipher::aes128_gcm, rng);
	bad.enc_key.pop_back();
	CHECK_THROWS_AS(t.install_inbound(ike, bad), std::invalid_argument);
	CHECK(t.find_inbound(spi) == nullptr);
	CHECK(t.release_spi(spi)); // still reserved after the failed install
	tunnel::SaTable other({dynamic_peer(kSiteC)});
	CHECK_THROWS_AS(
	    t.install_outbound(*other.peers()[0], child_keys(0x5000, crypto::Cipher::aes128_gcm, rng)),
	    std::invalid_argument); // not this table's peer
}

TEST_CASE("make-before-break: old and new inbound SAs both decrypt until the old one is removed") {
	DynLink link;
	test::Rng rng(6);
	const Bytes inner = test::packet_v4(kSiteA, kSiteB, 300, rng);
	const uint32_t old_spi = link.rekey(crypto::Cipher::aes128_gcm, rng);
	auto first = seal(link.a, inner);
	auto late = seal(link.a, inner); // sealed on the old SA, delivered after the rekey
	REQUIRE(first);
	REQUIRE(late);
	CHECK(open_copy(link.b, *first).verdict == tunnel::Verdict::forward);

	// New suite too: the cipher belongs to the SA, not to the peer.
	const uint32_t new_spi = link.rekey(crypto::Cipher::aes256_cbc_sha256, rng);
	CHECK(new_spi != old_spi);
	CHECK(link.a.retired() == 0); // the old outbound SA: no worker entered, freed at once
	auto fresh = seal(link.a, inner);
	REQUIRE(fresh);
	CHECK(load_be32(fresh->data()) == new_spi);
	CHECK(load_be32(fresh->data() + 4) == 1);
	CHECK(fresh->size() ==
	      inner.size() + tunnel::esp::esp_overhead(crypto::cipher_spec(crypto::Cipher::aes256_cbc_sha256),
	                                               inner.size()));
	const tunnel::PeerSaInfo during = link.b.sa_info(link.a_at_b());
	REQUIRE(during.in.size() == 2);
	CHECK(during.in[0].spi == old_spi);
	CHECK(during.in[1].spi == new_spi);
	CHECK(during.in[1].cipher == "aes256-cbc-hmac-sha256");

	// Both decrypt, in either order.
	tunnel::InboundResult r = open_copy(link.b, *fresh);
	REQUIRE(r.verdict == tunnel::Verdict::forward);
	CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
	r = open_copy(link.b, *late);
	REQUIRE(r.verdict == tunnel::Verdict::forward);
	CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);

	// The peer deletes the old SA (RFC 7296 section 2.8): its SPI is unknown from then on.
	CHECK(link.b.remove_inbound(old_spi));
	CHECK(drop_name(open_copy(link.b, *late).drop) == "unknown_spi");
	CHECK(open_copy(link.b, *seal(link.a, inner)).verdict == tunnel::Verdict::forward);
	const tunnel::PeerSaInfo after = link.b.sa_info(link.a_at_b());
	REQUIRE(after.in.size() == 1);
	CHECK(after.in[0].spi == new_spi);
	CHECK(after.totals.rx_packets == 4); // the freed SA's two packets still count
	CHECK(link.a.sa_info(link.b_at_a()).totals.tx_packets == 4);

	// Taking the outbound SA away (the IKE SA died): no_sa again.
	CHECK(link.a.remove_outbound(link.b_at_a()));
	CHECK(!link.a.remove_outbound(link.b_at_a()));
	CHECK(!seal(link.a, inner));
	CHECK(link.a.sa_info(link.b_at_a()).totals.tx_packets == 4);
}

TEST_CASE("a replaced SA is not freed while a worker that may hold it stays entered") {
	DynLink link(2);
	test::Rng rng(7);
	link.rekey(crypto::Cipher::aes128_cbc_sha1, rng);

	std::atomic<int> step{0};
	std::atomic<uint64_t> held_spi{0};
	std::thread worker([&] {
		link.a.enter(1);
		tunnel::OutboundSa* held = link.b_at_a().outbound();
		step = 1;
		while (step.load() != 2)
			std::this_thread::yield();
		// Still usable after the control plane replaced it (ASan would
		// report a use after free here if collect() had freed it).
		const crypto::CipherSpec& spec = *held->spec;
		Bytes esp(tunnel::esp::kHeaderLen + spec.iv_len + 2 * spec.align + spec.icv_len);
		held->transforms[1]->seal(esp, 99);
		held->packets.add();
		held_spi = held->spi;
		link.a.leave(1);
		step = 3;
	});
	while (step.load() != 1)
		std::this_thread::yield();
	const uint64_t old_spi = link.b_at_a().outbound()->spi;
	link.rekey(crypto::Cipher::aes128_gcm, rng);
	CHECK(link.a.retired() == 1);
	CHECK(link.a.collect() == 0);
	// Worker 0 entering after the replacement cannot hold the old SA: no obstacle.
	link.a.enter(0);
	CHECK(link.a.collect() == 0);
	link.a.leave(0);
	CHECK(link.a.retired() == 1);
	CHECK(link.a.sa_info(link.b_at_a()).retiring == 1);
	step = 2;
	while (step.load() != 3)
		std::this_thread::yield();
	worker.join();
	CHECK(held_spi.load() == old_spi);
	CHECK(link.a.collect() == 1);
	CHECK(link.a.retired() == 0);
	const tunnel::PeerSaInfo info = link.a.sa_info(link.b_at_a());
	CHECK(info.retiring == 0);
	CHECK(info.totals.tx_packets == 1); // counted on the old SA while it was retired
}

TEST_CASE("a worker entered before a retirement blocks it; one that left does not") {
	DynLink link(2);
	test::Rng rng(8);
	link.rekey(crypto::Cipher::aes128_gcm, rng);
	link.a.enter(0);
	link.a.enter(1);
	link.a.leave(1);
	link.rekey(crypto::Cipher::aes128_gcm, rng);
	link.rekey(crypto::Cipher::aes128_gcm, rng);
	CHECK(link.a.retired() == 2);
	link.a.leave(0);
	link.a.enter(0); // a new batch: sees the new epoch
	CHECK(link.a.collect() == 2);
	link.a.leave(0);
	// The table frees whatever is left when it goes (the workers have stopped).
	link.a.enter(1);
	link.rekey(crypto::Cipher::aes128_gcm, rng);
	CHECK(link.a.retired() == 1);
}

/**
 * The concurrency test: two workers per site run encapsulate on A and
 * decapsulate on B in a loop, each packet inside A's and B's enter()/leave(),
 * while the control thread rekeys A->B again and again, changing suites.
 *
 * Make-before-break as IKE does it: B installs the new inbound SA, A swaps
 * its outbound SA, and B removes the old inbound SA only once A freed the
 * old outbound one. Since a worker leaves A only after B decapsulated its
 * packet, that is the moment no packet sealed on the old SA is in flight.
 * So no packet may be lost: every one sealed is delivered intact, and each
 * worker sees the SPIs in the order they were installed.
 */
TEST_CASE("rekeying 60 times while two workers forward: no packet lost, SPIs in install order") {
	constexpr size_t kWorkers = 2;
	constexpr int kRekeys = 60;
	DynLink link(kWorkers);
	test::Rng rng(9);
	// Window 0: no replay check, so the two workers' interleaving cannot drop anything.
	std::vector<uint32_t> spis{link.rekey(kSuites[0], rng, 0)};

	struct WorkerResult {
		uint64_t sealed = 0, delivered = 0, no_sa = 0, intact = 0;
		std::array<uint64_t, kDropReasons> in_drops{};
		std::vector<uint32_t> spis_seen; ///< each change of SPI, in order
	};
	std::array<WorkerResult, kWorkers> results;
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> progress{0};
	std::vector<std::thread> workers;
	for (size_t w = 0; w < kWorkers; w++)
		workers.emplace_back([&, w] {
			test::Rng wrng(100 + w);
			const Bytes inner = test::packet_v4(kSiteA, kSiteB, 64 + 400 * w, wrng);
			test::PacketBuffer buf;
			WorkerResult& res = results[w];
			while (!stop.load(std::memory_order_relaxed)) {
				link.a.enter(w);
				buf.load(inner);
				const tunnel::OutboundResult out =
				    tunnel::encapsulate(link.a, buf.mem, inner.size(), w);
				if (out.verdict == tunnel::Verdict::forward) {
					res.sealed++;
					const uint32_t spi = load_be32(out.datagram.data());
					if (res.spis_seen.empty() || res.spis_seen.back() != spi)
						res.spis_seen.push_back(spi);
					link.b.enter(w);
					const tunnel::InboundResult in =
					    tunnel::decapsulate(link.b, out.datagram, kSiteA.ep, 1, w);
					if (in.verdict == tunnel::Verdict::forward) {
						res.delivered++;
						res.intact += std::equal(in.inner.begin(), in.inner.end(),
						                         inner.begin(), inner.end());
					} else {
						res.in_drops[size_t(in.drop)]++;
					}
					link.b.leave(w);
				} else if (out.drop == Drop::no_sa) {
					res.no_sa++;
				}
				link.a.leave(w);
				progress.fetch_add(1, std::memory_order_relaxed);
			}
		});

	auto wait_packets = [&](uint64_t n) {
		const uint64_t target = progress.load() + n;
		while (progress.load() < target)
			std::this_thread::yield();
	};
	for (int i = 1; i <= kRekeys; i++) {
		wait_packets(20);
		const uint32_t old_spi = spis.back();
		spis.push_back(link.rekey(kSuites[size_t(i) % std::size(kSuites)], rng, 0));
		// Both inbound SAs live now; wait for A's old outbound SA to be freed
		// (every packet sealed on it has been through B), then remove the old one.
		while (link.a.retired() != 0) {
			link.a.collect();
			std::this_thread::yield();
		}
		wait_packets(5);
		CHECK(link.b.sa_info(link.a_at_b()).in.size() == 2);
		REQUIRE(link.b.remove_inbound(old_spi));
		link.b.collect();
	}
	wait_packets(20);
	// The peer went away: no outbound SA, packets drop as no_sa, nothing breaks.
	CHECK(link.a.remove_outbound(link.b_at_a()));
	wait_packets(20);
	stop = true;
	for (auto& t : workers)
		t.join();

	uint64_t sealed = 0, delivered = 0, no_sa = 0;
	std::map<uint32_t, size_t> order;
	for (size_t i = 0; i < spis.size(); i++)
		order[spis[i]] = i;
	for (size_t w = 0; w < kWorkers; w++) {
		const WorkerResult& r = results[w];
		CAPTURE(w);
		sealed += r.sealed;
		delivered += r.delivered;
		no_sa += r.no_sa;
		CHECK(r.intact == r.delivered);
		for (size_t d = 0; d < kDropReasons; d++) {
			CAPTURE(drop_name(Drop(d)));
			CHECK(r.in_drops[d] == 0);
		}
		// Once a worker sent on a newer SA, it never goes back to an older one.
		for (size_t i = 1; i < r.spis_seen.size(); i++)
			CHECK(order.at(r.spis_seen[i - 1]) < order.at(r.spis_seen[i]));
	}
	CHECK(sealed > 0);
	CHECK(delivered == sealed);
	CHECK(no_sa > 0); // after remove_outbound
	link.a.collect();
	link.b.collect();
	CHECK(link.a.retired() == 0);
	CHECK(link.b.retired() == 0);
	CHECK(link.a.sa_info(link.b_at_a()).totals.tx_packets == sealed);
	CHECK(link.b.sa_info(link.a_at_b()).totals.rx_packets == delivered);
	// Exactly the last SA is left at B; the first spi and the middle ones are gone.
	const tunnel::PeerSaInfo b_info = link.b.sa_info(link.a_at_b());
	REQUIRE(b_info.in.size() == 1);
	CHECK(b_info.in[0].spi == spis.back());
	CHECK(link.b.find_inbound(spis.front()) == nullptr);
}

TEST_CASE("the SPI array doubles when half of it is taken, up to its maximum; SPIs stay unique") {
	constexpr size_t kMax = 4 * kSpiSlots;
	tunnel::SaTable t({dynamic_peer(kSiteC)}, 1, kMax);
	CHECK(t.spi_slots() == kSpiSlots);
	std::set<uint32_t> spis;
	size_t n = 0;
	while (std::optional<uint32_t> spi = t.try_allocate_spi()) {
		spis.insert(*spi);
		n++;
		// Half full at most while it may still grow, then it fills up.
		if (n <= kMax / 2) CHECK(t.spi_slots() >= 2 * n);
		if (n == kSpiSlots / 2) CHECK(t.spi_slots() == kSpiSlots);
		if (n == kSpiSlots / 2 + 1) CHECK(t.spi_slots() == 2 * kSpiSlots);
		REQUIRE(n <= kMax);
	}
	CHECK(n == kMax); // every slot of the largest array
	CHECK(spis.size() == kMax);
	std::set<uint32_t> low;
	for (uint32_t spi : spis)
		low.insert(spi & uint32_t(kMax - 1));
	CHECK(low.size() == kMax); // one slot each in the last array
	CHECK(t.spis_in_use() == kMax);
	CHECK_THROWS_AS(t.allocate_spi(), std::runtime_error);
	// Three arrays were replaced; nothing holds them.
	CHECK(t.collect() == 0); // freed as they were retired (no worker entered)
	CHECK(t.retired() == 0);
	CHECK_THROWS_AS(tunnel::SaTable({dynamic_peer(kSiteC)}, 1, 3 * kSpiSlots), std::invalid_argument);
	CHECK_THROWS_AS(tunnel::SaTable({dynamic_peer(kSiteC)}, 1, kSpiSlots / 2), std::invalid_argument);
}

TEST_CASE("100,000 inbound SAs installed and removed while two workers look them up") {
	// The workers look up SPIs as they are published, across every doubling
	// of the array (4096 -> 262144 slots), then while they are removed: each
	// SA found must be the one asked for (a freed one would be caught by
	// ASan in the sanitizer build), and none may be missed while installed.
	constexpr size_t kSas = 100000;
	tunnel::SaTable t({dynamic_peer(kSiteC)}, 2);
	tunnel::Peer& c = *t.peers()[0];
	std::vector<std::atomic<uint32_t>> published(kSas);
	std::atomic<size_t> count{0};
	std::atomic<bool> stop{false}, removing{false};
	struct Seen {
		uint64_t lookups = 0, found = 0, wrong = 0, missed = 0;
	};
	std::array<Seen, 2> seen{};
	auto worker = [&](size_t w) {
		uint64_t x = 0x9e3779b97f4a7c15ull * (w + 1);
		while (!stop.load(std::memory_order_acquire)) {
			t.enter(w);
			const size_t n = count.load(std::memory_order_acquire);
			for (int k = 0; k < 64 && n > 0; k++) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				const uint32_t spi = published[x % n].load(std::memory_order_relaxed);
				const tunnel::InboundSa* sa = t.find_inbound(spi);
				seen[w].lookups++;
				if (!sa) {
					// Missed, unless removal had begun: removing is set
					// before the first removal, and all three (the flag,
					// the slot's store, this load) are seq_cst.
					if (!removing.load(std::memory_order_seq_cst)) seen[w].missed++;
					continue;
				}
				seen[w].found++;
				if (sa->spi != spi || sa->peer != &c) seen[w].wrong++;
			}
			t.leave(w);
			// Like a worker between batches: the control thread gets the CPU too.
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	};
	std::thread w0(worker, 0), w1(worker, 1);
	test::Rng rng(100000);
	for (size_t i = 0; i < kSas; i++) {
		const uint32_t spi = t.allocate_spi();
		t.install_inbound(c, child_keys(spi, crypto::Cipher::aes128_gcm, rng, 64));
		published[i].store(spi, std::memory_order_relaxed);
		count.store(i + 1, std::memory_order_release);
	}
	const size_t slots = t.spi_slots();
	size_t found = 0;
	for (size_t i = 0; i < kSas; i++) {
		const uint32_t spi = published[i].load(std::memory_order_relaxed);
		const tunnel::InboundSa* sa = t.find_inbound(spi);
		found += sa && sa->spi == spi;
	}
	removing.store(true, std::memory_order_seq_cst);
	size_t removed = 0;
	for (size_t i = 0; i < kSas; i++)
		removed += t.remove_inbound(published[i].load(std::memory_order_relaxed));
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	stop.store(true, std::memory_order_release);
	w0.join();
	w1.join();
	t.collect();

	CHECK(found == kSas);
	CHECK(removed == kSas);
	CHECK(slots == 262144); // doubled while more than half would be taken
	CHECK(t.spis_in_use() == 0);
	CHECK(t.retired() == 0);
	for (size_t w = 0; w < 2; w++) {
		CAPTURE(w);
		CHECK(seen[w].lookups > 0);
		CHECK(seen[w].found > 0);
		CHECK(seen[w].wrong == 0);
		CHECK(seen[w].missed == 0);
	}
	MESSAGE("lookups by the two workers: " << seen[0].lookups + seen[1].lookups);
}

} // namespace
} // namespace esptun
