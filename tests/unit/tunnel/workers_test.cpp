// Several data-path workers on one SA table: two threads seal on the same
// outbound SA at once, each with its own transform. Every packet must get a
// unique sequence number and authenticate at the peer; a transform shared
// between the threads (OpenSSL contexts, IV state) would corrupt packets.
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <set>
#include <thread>
#include <vector>

using namespace esptun;
using namespace esptun::test;

namespace {

constexpr size_t kPerThread = 4000;

/// A's table with @workers transforms per SA, B's with one.
struct WorkerLink {
	tunnel::SaTable a, b;
};

WorkerLink make_worker_link(crypto::Cipher c, size_t workers) {
	LinkOptions o;
	o.cipher = c;
	o.window = 65536; // the two threads interleave: a wide window accepts any order
	return WorkerLink{tunnel::SaTable({peer_entry(kSiteA, kSiteB, o)}, workers),
	                  tunnel::SaTable({peer_entry(kSiteB, kSiteA, o)}, 1)};
}

} // namespace

TEST_CASE("two workers sealing on one SA at once: unique sequence numbers, every packet authentic") {
	for (crypto::Cipher c : {crypto::Cipher::aes128_gcm, crypto::Cipher::aes128_cbc_sha1,
	                         crypto::Cipher::aes256_cbc_sha256}) {
		CAPTURE(crypto::cipher_spec(c).name);
		WorkerLink link = make_worker_link(c, 2);
		REQUIRE(link.a.peers().at(0)->out.transforms.size() == 2);
		std::vector<std::vector<Bytes>> sealed(2);
		std::vector<std::thread> threads;
		for (size_t w = 0; w < 2; w++)
			threads.emplace_back([&, w] {
				Rng rng(uint32_t(100 + w));
				PacketBuffer buf;
				for (size_t i = 0; i < kPerThread; i++) {
					const Bytes inner =
					    packet_v4(kSiteA, kSiteB, 60 + (i * 37) % 1300, rng);
					buf.load(inner);
					const tunnel::OutboundResult r =
					    tunnel::encapsulate(link.a, buf.mem, inner.size(), w);
					if (r.verdict != tunnel::Verdict::forward)
						continue; // counted below as missing
					sealed[w].emplace_back(r.datagram.begin(), r.datagram.end());
				}
			});
		for (auto& t : threads)
			t.join();
		REQUIRE(sealed[0].size() == kPerThread);
		REQUIRE(sealed[1].size() == kPerThread);

		std::set<uint32_t> seqs;
		size_t authentic = 0;
		for (auto& list : sealed)
			for (Bytes& d : list) {
				seqs.insert(uint32_t(d[4]) << 24 | uint32_t(d[5]) << 16 |
				            uint32_t(d[6]) << 8 | d[7]);
				const tunnel::InboundResult r = tunnel::decapsulate(link.b, d, kSiteA.ep, 0);
				if (r.verdict == tunnel::Verdict::forward) authentic++;
			}
		CHECK(seqs.size() == 2 * kPerThread); // no number used twice
		CHECK(*seqs.begin() == 1);
		CHECK(*seqs.rbegin() == 2 * kPerThread);
		CHECK(authentic == 2 * kPerThread);
		CHECK(link.a.peers().at(0)->out.last_seq.load() == 2 * kPerThread);
		CHECK(link.a.peers().at(0)->out.packets.get() == 2 * kPerThread);
	}
}

TEST_CASE("an SA table needs a worker") {
	LinkOptions o;
	CHECK_THROWS_AS(tunnel::SaTable({peer_entry(kSiteA, kSiteB, o)}, 0), std::invalid_argument);
}
