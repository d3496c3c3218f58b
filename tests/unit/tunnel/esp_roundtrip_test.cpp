// encapsulate() on site A, decapsulate() on site B: every cipher, ESN on and
// off, IPv4 and IPv6 inner packets of every size, and the wire layout of
// what encapsulate() writes (checked by opening it with a separate transform).
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;

uint32_t be32_at(const uint8_t* p) {
	return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

/// Sizes to try: every one from the smallest header to 2048, then a sample to 9000.
std::vector<size_t> sizes_from(size_t min) {
	std::vector<size_t> s;
	for (size_t n = min; n <= 2048; n++)
		s.push_back(n);
	for (size_t n = 2049; n <= 9000; n += 97)
		s.push_back(n);
	for (size_t n : {4095, 4096, 4097, 8191, 8192, 8999, 9000})
		s.push_back(n);
	return s;
}

TEST_CASE(
    "decapsulate(encapsulate(p)) == p for all ciphers, ESN on and off, IPv4 and IPv6, sizes up to 9000") {
	constexpr int64_t kNow = 1'700'000'000'123;
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		for (bool esn : {true, false}) {
			for (int family : {4, 6}) {
				std::string what = std::string(spec.name) + (esn ? " esn" : " no-esn") +
				                   (family == 4 ? " inner v4" : " inner v6");
				INFO(what);
				test::LinkOptions opt;
				opt.cipher = spec.id;
				opt.esn = esn;
				test::Link link = test::make_link(opt);
				tunnel::Peer& b_at_a = link.b_at_a();
				tunnel::Peer& a_at_b = link.a_at_b();
				test::Rng rng(uint64_t(spec.id) * 10 + uint64_t(esn) * 2 + uint64_t(family));

				uint64_t n = 0, bytes = 0;
				test::PacketBuffer buf;
				for (size_t len : sizes_from(family == 4 ? 20 : 40)) {
					INFO("inner length ", len);
					Bytes inner = family == 4 ? test::packet_v4(kSiteA, kSiteB, len, rng)
					                          : test::packet_v6(kSiteA, kSiteB, len, rng);
					buf.load(inner);
					tunnel::OutboundResult out =
					    tunnel::encapsulate(link.a, buf.mem, len);
					REQUIRE(out.verdict == tunnel::Verdict::forward);
					REQUIRE(out.peer == &b_at_a);
					n++;
					bytes += len;
					REQUIRE(out.datagram.size() ==
					        len + tunnel::esp::esp_overhead(spec, len));
					// The cleartext header: B's SPI and the low half of the counter.
					REQUIRE(be32_at(out.datagram.data()) == test::spi_of(kSiteB, kSiteA));
					REQUIRE(be32_at(out.datagram.data() + 4) == uint32_t(n));

					tunnel::InboundResult in = tunnel::decapsulate(
					    link.b, out.datagram, kSiteA.ep, kNow + int64_t(n));
					REQUIRE(in.verdict == tunnel::Verdict::forward);
					REQUIRE(in.peer == &a_at_b);
					REQUIRE_FALSE(in.endpoint_changed);
					REQUIRE(Bytes(in.inner.begin(), in.inner.end()) == inner);
				}
				CHECK(b_at_a.out.packets.get() == n);
				CHECK(b_at_a.out.bytes.get() == bytes);
				CHECK(b_at_a.out.next_seq == n + 1);
				CHECK(b_at_a.out.last_seq.load() == n);
				CHECK(a_at_b.in->packets.get() == n);
				CHECK(a_at_b.in->bytes.get() == bytes);
				CHECK(a_at_b.in->highest_seq.load() == n);
				CHECK(a_at_b.last_rx_unix_ms.load() == kNow + int64_t(n));
				CHECK(a_at_b.endpoint() == std::optional<Endpoint>(kSiteA.ep));
				CHECK(a_at_b.endpoint_changes.get() == 0);
				// Nothing moved in the other direction.
				CHECK(a_at_b.out.packets.get() == 0);
				CHECK(b_at_a.in->packets.get() == 0);
			}
		}
	}
}

TEST_CASE("round trip in both directions over one link, interleaved") {
	test::Rng rng(5);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		for (size_t i = 0; i < 50; i++) {
			Bytes ab = test::packet_v6(kSiteA, kSiteB, 40 + rng.below(1400), rng);
			Bytes ba = test::packet_v4(kSiteB, kSiteA, 20 + rng.below(1400), rng);
			auto d_ab = test::seal_inner(link.a, ab);
			auto d_ba = test::seal_inner(link.b, ba);
			REQUIRE(d_ab);
			REQUIRE(d_ba);
			CHECK(be32_at(d_ba->data()) == test::spi_of(kSiteA, kSiteB));
			tunnel::InboundResult rb = tunnel::decapsulate(link.b, *d_ab, kSiteA.ep, 1);
			tunnel::InboundResult ra = tunnel::decapsulate(link.a, *d_ba, kSiteB.ep, 1);
			REQUIRE(rb.verdict == tunnel::Verdict::forward);
			REQUIRE(ra.verdict == tunnel::Verdict::forward);
			CHECK(Bytes(rb.inner.begin(), rb.inner.end()) == ab);
			CHECK(Bytes(ra.inner.begin(), ra.inner.end()) == ba);
		}
	}
}

TEST_CASE("a datagram sealed for one site does not open at a site with other keys") {
	// Same SPI, same cipher, different keys: the ICV must fail.
	test::Rng rng(6);
	test::LinkOptions opt;
	opt.cipher = crypto::Cipher::aes128_cbc_sha1;
	test::Link link = test::make_link(opt);
	test::Site other_b = kSiteB; // same SPIs, other receive keys
	other_b.key_tag = 0x5a;
	REQUIRE(test::spi_of(other_b, kSiteA) == test::spi_of(kSiteB, kSiteA));
	tunnel::SaTable wrong({test::peer_entry(other_b, kSiteA, opt)});
	auto d = test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 200, rng));
	REQUIRE(d);
	tunnel::InboundResult r = tunnel::decapsulate(wrong, *d, kSiteA.ep, 1);
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(r.drop == Drop::auth_failed);
}

TEST_CASE("encapsulate writes RFC 4303 padding 1, 2, 3, ..., the pad length and next header 4 or 41") {
	// Opened with a separate transform of B's keys, not with decapsulate().
	test::Rng rng(7);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		for (bool esn : {true, false}) {
			test::LinkOptions opt;
			opt.cipher = spec.id;
			opt.esn = esn;
			test::Link link = test::make_link(opt);
			auto rx = test::transform_to(kSiteB, spec.id, esn);
			for (size_t len = 40; len < 40 + 2 * spec.align + 3; len++) {
				for (int family : {4, 6}) {
					INFO(spec.name, esn ? " esn" : "", " inner v", family, " length ",
					     len);
					Bytes inner = family == 4 ? test::packet_v4(kSiteA, kSiteB, len, rng)
					                          : test::packet_v6(kSiteA, kSiteB, len, rng);
					auto d = test::seal_inner(link.a, inner);
					REQUIRE(d);
					uint64_t seq = link.b_at_a().out.next_seq - 1;
					REQUIRE(rx->open(*d, uint32_t(seq >> 32)));
					size_t pt_len = d->size() - 8 - spec.iv_len - spec.icv_len;
					const uint8_t* pt = d->data() + 8 + spec.iv_len;
					// Smallest padding that aligns inner + 2 trailer bytes.
					size_t pad = 0;
					while ((len + pad + 2) % spec.align != 0)
						pad++;
					REQUIRE(pt_len == len + pad + 2);
					CHECK(Bytes(pt, pt + len) == inner);
					for (size_t i = 0; i < pad; i++)
						CHECK(pt[len + i] == i + 1);
					CHECK(pt[len + pad] == pad);
					CHECK(pt[len + pad + 1] == (family == 4 ? 4 : 41));
				}
			}
		}
	}
}

TEST_CASE("encapsulate with ESN counts across 2^32 and the receiver infers the high half for the ICV") {
	test::Rng rng(8);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		link.b_at_a().out.next_seq = 0xfffffffe;
		std::vector<Bytes> inner, dgram;
		for (int i = 0; i < 4; i++) { // 2^32-2, 2^32-1, 2^32, 2^32+1
			inner.push_back(test::packet_v4(kSiteA, kSiteB, 100 + size_t(i), rng));
			auto d = test::seal_inner(link.a, inner.back());
			REQUIRE(d);
			dgram.push_back(*d);
		}
		const uint32_t lows[] = {0xfffffffe, 0xffffffff, 0, 1};
		for (int i = 0; i < 4; i++)
			CHECK(be32_at(dgram[i].data() + 4) == lows[i]);
		// Delivered out of order: after the wrap, then a late one from before it.
		for (int i : {0, 2, 1, 3}) {
			INFO("packet ", i);
			tunnel::InboundResult r = tunnel::decapsulate(link.b, dgram[i], kSiteA.ep, 1);
			REQUIRE(r.verdict == tunnel::Verdict::forward);
			CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner[i]);
		}
		CHECK(link.a_at_b().in->highest_seq.load() == 0x100000001);
	}
}

TEST_CASE("with ESN the high half enters the ICV: a receiver that infers another one rejects the packet") {
	test::Rng rng(9);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		link.b_at_a().out.next_seq = (uint64_t(1) << 32) + 5; // the fresh receiver infers 5
		auto d = test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 64, rng));
		REQUIRE(d);
		tunnel::InboundResult r = tunnel::decapsulate(link.b, *d, kSiteA.ep, 1);
		CHECK(r.verdict == tunnel::Verdict::drop);
		CHECK(r.drop == Drop::auth_failed);
	}
}

TEST_CASE("an inner packet of the largest IP size (65535) round trips") {
	test::Rng rng(10);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		Bytes inner = test::packet_v4(kSiteA, kSiteB, tunnel::esp::kMaxInner, rng);
		auto d = test::seal_inner(link.a, inner);
		REQUIRE(d);
		CHECK(d->size() ==
		      tunnel::esp::kMaxInner + tunnel::esp::esp_overhead(spec, tunnel::esp::kMaxInner));
		tunnel::InboundResult r = tunnel::decapsulate(link.b, *d, kSiteA.ep, 1);
		REQUIRE(r.verdict == tunnel::Verdict::forward);
		CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
	}
}

} // namespace
} // namespace esptun
