// decapsulate(): every way a received datagram is ignored or dropped, with
// the exact reason, plus TFC padding and endpoint learning (NAT rebinding).
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace esptun {
namespace {

using crypto::Cipher;
using test::Bytes;
using test::kSiteA;
using test::kSiteB;
using test::kSiteC;

void check_drop(const tunnel::InboundResult& r, Drop expected, const tunnel::Peer* peer) {
	CHECK(r.verdict == tunnel::Verdict::drop);
	CHECK(drop_name(r.drop) == drop_name(expected));
	CHECK(r.peer == peer);
	CHECK(r.inner.empty());
	CHECK_FALSE(r.endpoint_changed);
}

void check_ignore(const tunnel::InboundResult& r, Ignore expected) {
	CHECK(r.verdict == tunnel::Verdict::ignore);
	CHECK(ignore_name(r.ignore) == ignore_name(expected));
	CHECK(r.inner.empty());
}

/// A result that owns the datagram its inner packet points into (decapsulate works in place).
struct Received : tunnel::InboundResult {
	Bytes buffer;
};

/// decapsulate() on a copy of @dgram, so the caller can send the same bytes again.
Received decap(const tunnel::SaTable& t, Bytes dgram, const Endpoint& src = kSiteA.ep) {
	Received r;
	r.buffer = std::move(dgram); // a moved vector keeps its heap block: r.inner stays valid
	static_cast<tunnel::InboundResult&>(r) = tunnel::decapsulate(t, r.buffer, src, 1);
	return r;
}

TEST_CASE("a single 0xff byte is a NAT keepalive; other short datagrams are malformed") {
	test::Link link = test::make_link({});
	check_ignore(decap(link.b, {0xff}), Ignore::nat_keepalive);
	check_drop(decap(link.b, {}), Drop::malformed, nullptr);
	check_drop(decap(link.b, {0xfe}), Drop::malformed, nullptr);
	check_drop(decap(link.b, {0x00}), Drop::malformed, nullptr);
	check_drop(decap(link.b, {0xff, 0xff}), Drop::malformed, nullptr);
	test::Rng rng(1);
	for (size_t n = 2; n < 8; n++) {
		Bytes d = rng.bytes(n);
		d[0] = 0x0a; // a plausible SPI start, not a marker
		INFO("length ", n);
		check_drop(decap(link.b, d), Drop::malformed, nullptr);
	}
	CHECK(link.a_at_b().in->packets.get() == 0);
}

TEST_CASE("four zero bytes in front mark a non-ESP (IKE) packet, whatever follows") {
	test::Link link = test::make_link({});
	test::Rng rng(2);
	for (size_t n = 8; n <= 300; n += 7) {
		Bytes d = rng.bytes(n);
		d[0] = d[1] = d[2] = d[3] = 0;
		INFO("length ", n);
		check_ignore(decap(link.b, d), Ignore::non_esp_marker);
	}
	// Shorter than an ESP header still counts, as Linux hands such packets to IKE too.
	for (size_t n = 4; n < 8; n++) {
		INFO("length ", n);
		check_ignore(decap(link.b, Bytes(n, 0)), Ignore::non_esp_marker);
	}
	// An IKE_SA_INIT-sized header with the marker.
	Bytes ike(4 + 28, 0);
	ike[4 + 17] = 0x20; // version 2.0
	check_ignore(decap(link.b, ike), Ignore::non_esp_marker);
}

TEST_CASE("an SPI with no inbound SA is unknown_spi") {
	test::Link link = test::make_link({});
	test::Rng rng(3);
	auto d = test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 100, rng));
	REQUIRE(d);
	Bytes other = *d;
	other[3] ^= 0x40;
	check_drop(decap(link.b, other), Drop::unknown_spi, nullptr);
	// A's own receive SPI is not B's.
	Bytes to_a = *d;
	uint32_t a_spi = test::spi_of(kSiteA, kSiteB);
	to_a[0] = uint8_t(a_spi >> 24);
	to_a[1] = uint8_t(a_spi >> 16);
	to_a[2] = uint8_t(a_spi >> 8);
	to_a[3] = uint8_t(a_spi);
	check_drop(decap(link.b, to_a), Drop::unknown_spi, nullptr);
	// The intact datagram still opens: the failures recorded nothing.
	CHECK(decap(link.b, *d).verdict == tunnel::Verdict::forward);
}

TEST_CASE("lengths shorter than the cipher minimum or not aligned are malformed") {
	test::Rng rng(4);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		const tunnel::Peer* a = &link.a_at_b();
		auto d = test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 100, rng));
		REQUIRE(d);
		// Header 8 + IV + one alignment unit + ICV: GCM 8+8+4+16 = 36,
		// CBC-SHA1 8+16+16+12 = 52, CBC-SHA256 8+16+16+16 = 56.
		size_t min = spec.aead ? 36 : (spec.icv_len == 12 ? 52 : 56);
		for (size_t n = 8; n < min; n++) {
			INFO("length ", n);
			check_drop(decap(link.b, Bytes(d->begin(), d->begin() + long(n))), Drop::malformed,
			           a);
		}
		// Longer than the minimum but the encrypted part is not whole units.
		for (size_t extra = 1; extra < spec.align; extra++) {
			Bytes longer = *d;
			longer.resize(d->size() + extra, 0);
			INFO("extra ", extra);
			check_drop(decap(link.b, longer), Drop::malformed, a);
		}
		CHECK(decap(link.b, *d).verdict == tunnel::Verdict::forward);
	}
}

/**
 * flip_expectation() - what decapsulate must say after bit @bit of byte @i is
 * flipped in the first packet (seq 1) sent on a fresh SA.
 */
Drop flip_expectation(size_t i, size_t bit) {
	if (i < 4) return Drop::unknown_spi;         // test SPIs are not one flip apart (see kSiteA)
	if (i == 7 && bit == 0) return Drop::replay; // seq 1 becomes 0, never valid
	return Drop::auth_failed;                    // seq, IV, ciphertext and ICV are all covered
}

TEST_CASE("a flipped bit anywhere in the datagram: unknown_spi, replay for seq 0, auth_failed elsewhere") {
	test::Rng rng(5);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		for (bool esn : {true, false}) {
			INFO(spec.name, esn ? " esn" : " no-esn");
			test::LinkOptions opt;
			opt.cipher = spec.id;
			opt.esn = esn;
			test::Link link = test::make_link(opt);
			const tunnel::Peer* a = &link.a_at_b();
			Bytes inner = test::packet_v6(kSiteA, kSiteB, 77, rng);
			auto d = test::seal_inner(link.a, inner);
			REQUIRE(d);
			for (size_t i = 0; i < d->size(); i++) {
				for (size_t bit = 0; bit < 8; bit++) {
					Bytes bad = *d;
					bad[i] ^= uint8_t(1u << bit);
					Drop want = flip_expectation(i, bit);
					INFO("byte ", i, " bit ", bit);
					check_drop(decap(link.b, bad), want,
					           want == Drop::unknown_spi ? nullptr : a);
				}
			}
			// No forgery moved the window, the endpoint or the counters.
			CHECK(link.a_at_b().in->highest_seq.load() == 0);
			CHECK(link.a_at_b().in->packets.get() == 0);
			Received ok = decap(link.b, *d);
			REQUIRE(ok.verdict == tunnel::Verdict::forward);
			CHECK(Bytes(ok.inner.begin(), ok.inner.end()) == inner);
		}
	}
}

TEST_CASE("the same datagram twice is a replay; so is an old one left of the window") {
	test::Rng rng(6);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		opt.esn = false; // with ESN, left of the window reads as the next subspace: see below
		opt.window = 64;
		test::Link link = test::make_link(opt);
		const tunnel::Peer* a = &link.a_at_b();
		std::vector<Bytes> sent;
		for (int i = 0; i < 70; i++) {
			auto d = test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng));
			REQUIRE(d);
			sent.push_back(*d);
		}
		// decapsulate works in place: keep the copy to send again.
		CHECK(decap(link.b, sent[0]).verdict == tunnel::Verdict::forward);
		check_drop(decap(link.b, sent[0]), Drop::replay, a);
		check_drop(decap(link.b, sent[0]), Drop::replay, a);
		CHECK(decap(link.b, sent[69]).verdict == tunnel::Verdict::forward); // seq 70: window 7..70
		CHECK(decap(link.b, sent[6]).verdict == tunnel::Verdict::forward);  // seq 7: 63 below
		check_drop(decap(link.b, sent[5]), Drop::replay, a);                // seq 6: 64 below
		check_drop(decap(link.b, sent[69]), Drop::replay, a);
		CHECK(link.a_at_b().in->packets.get() == 3);
	}
}

TEST_CASE("with ESN a datagram left of the window is taken for the next 2^32 subspace and fails its ICV") {
	// RFC 4303 appendix A2.2: below the window bottom means Seqh = Th + 1, so
	// the ICV is computed with the wrong high half. Still dropped, as auth_failed.
	test::Rng rng(6);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		opt.window = 64;
		test::Link link = test::make_link(opt);
		std::vector<Bytes> sent;
		for (int i = 0; i < 70; i++)
			sent.push_back(*test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)));
		CHECK(decap(link.b, sent[69]).verdict == tunnel::Verdict::forward); // seq 70: window 7..70
		CHECK(decap(link.b, sent[6]).verdict == tunnel::Verdict::forward);  // seq 7
		check_drop(decap(link.b, sent[6]), Drop::replay, &link.a_at_b());
		check_drop(decap(link.b, sent[5]), Drop::auth_failed,
		           &link.a_at_b()); // seq 6 read as 2^32 + 6
		CHECK(link.a_at_b().in->highest_seq.load() == 70);
	}
}

TEST_CASE("window 0 accepts a replayed datagram (the check is off)") {
	test::LinkOptions opt;
	opt.window = 0;
	test::Link link = test::make_link(opt);
	test::Rng rng(7);
	Bytes inner = test::packet_v4(kSiteA, kSiteB, 80, rng);
	auto d = test::seal_inner(link.a, inner);
	REQUIRE(d);
	for (int i = 0; i < 3; i++) {
		Received r = decap(link.b, *d);
		REQUIRE(r.verdict == tunnel::Verdict::forward);
		CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
	}
}

TEST_CASE("an inner source outside the sending peer's allowed_ips is a policy drop") {
	test::Rng rng(8);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions opt;
		opt.cipher = spec.id;
		// B knows A and C; A may only use 10.1/16 and fd00:1::/48.
		tunnel::SaTable b(
		    {test::peer_entry(kSiteB, kSiteA, opt), test::peer_entry(kSiteB, kSiteC, opt)});
		tunnel::SaTable a({test::peer_entry(kSiteA, kSiteB, opt)});
		const tunnel::Peer* a_at_b = b.peers().at(0).get();

		struct Case {
			const char* what;
			Bytes inner;
			bool allowed;
		};
		std::vector<Case> cases;
		cases.push_back({"A's own v4 source",
		                 test::ipv4_packet(kSiteA.host4(9), kSiteB.host4(1), 60, rng), true});
		cases.push_back({"A's own v6 source",
		                 test::ipv6_packet(kSiteA.host6(9), kSiteB.host6(1), 60, rng), true});
		cases.push_back({"unlisted v4 source",
		                 test::ipv4_packet(test::ip4(10, 9, 9, 9), kSiteB.host4(1), 60, rng), false});
		cases.push_back({"C's v4 source through A's SA",
		                 test::ipv4_packet(kSiteC.host4(9), kSiteB.host4(1), 60, rng), false});
		cases.push_back({"C's v6 source through A's SA",
		                 test::ipv6_packet(kSiteC.host6(9), kSiteB.host6(1), 60, rng), false});
		cases.push_back({"B's own v4 source reflected",
		                 test::ipv4_packet(kSiteB.host4(9), kSiteB.host4(1), 60, rng), false});
		cases.push_back({"unlisted v6 source",
		                 test::ipv6_packet(test::ip6(0x2001, 0xdb8, 0, 1), kSiteB.host6(1), 60, rng),
		                 false});
		for (const Case& c : cases) {
			INFO(c.what);
			// A routes by destination only, so it seals whatever source it is given.
			auto d = test::seal_inner(a, c.inner);
			REQUIRE(d);
			Received r = decap(b, *d);
			if (c.allowed) {
				CHECK(r.verdict == tunnel::Verdict::forward);
			} else {
				check_drop(r, Drop::policy, a_at_b);
			}
		}
	}
}

/// A link whose B side receives packets sealed by hand with @spec.
struct Crafter {
	test::LinkOptions opt;
	test::Link link;
	std::unique_ptr<crypto::EspTransform> tx;
	uint64_t seq = 0;

	explicit Crafter(const crypto::CipherSpec& spec, bool esn = true)
	    : opt{spec.id, esn, 1024, true}, link(test::make_link(opt)),
	      tx(test::transform_to(kSiteB, spec.id, esn)) {}

	/// Seals @plaintext (payload, padding, trailer) with the next sequence number.
	Bytes seal(std::span<const uint8_t> plaintext) {
		return test::seal_esp(*tx, test::spi_of(kSiteB, kSiteA), ++seq, plaintext);
	}
	Bytes seal(std::span<const uint8_t> payload, std::span<const uint8_t> pad, uint8_t pad_len,
	           uint8_t next) {
		return seal(test::esp_plaintext(payload, pad, pad_len, next));
	}
	Received receive(Bytes d, const Endpoint& src = kSiteA.ep) {
		return decap(link.b, std::move(d), src);
	}
	const tunnel::Peer* a() const { return &link.a_at_b(); }
};

TEST_CASE("hand-sealed packets with correct padding are forwarded (the crafting itself is right)") {
	test::Rng rng(9);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		for (size_t len = 40; len < 40 + spec.align; len++) {
			Bytes inner = test::packet_v6(kSiteA, kSiteB, len, rng);
			Bytes pad = test::default_padding(len, spec.align);
			Received r = c.receive(c.seal(inner, pad, uint8_t(pad.size()), 41));
			REQUIRE(r.verdict == tunnel::Verdict::forward);
			CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
		}
		// A longer pad than needed (RFC 4303 2.4 allows up to 255 bytes).
		Bytes inner = test::packet_v4(kSiteA, kSiteB, 60, rng);
		Bytes pad = test::default_padding(60, spec.align);
		for (size_t i = 0; i < 2 * spec.align; i++)
			pad.push_back(uint8_t(pad.size() + 1));
		Received r = c.receive(c.seal(inner, pad, uint8_t(pad.size()), 4));
		REQUIRE(r.verdict == tunnel::Verdict::forward);
		CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
	}
}

TEST_CASE("wrong padding bytes or a pad length past the payload are padding drops") {
	test::Rng rng(10);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		// An inner length that needs align - 1 bytes of padding: inner + pad + 2 = k * align.
		size_t len = 8 * spec.align - 1; // (len + 2) % align == 1 -> pad = align - 1
		Bytes inner = test::packet_v4(kSiteA, kSiteB, len, rng);
		Bytes good = test::default_padding(len, spec.align);
		REQUIRE(good.size() == spec.align - 1);
		for (size_t j = 0; j < good.size(); j++) {
			for (uint8_t wrong : {uint8_t(0), uint8_t(good[j] + 1), uint8_t(0xff)}) {
				Bytes pad = good;
				pad[j] = wrong;
				INFO("pad byte ", j, " = ", int(wrong));
				check_drop(c.receive(c.seal(inner, pad, uint8_t(pad.size()), 4)),
				           Drop::padding, c.a());
			}
		}
		// All-zero padding, a common sender bug.
		Bytes zeros(good.size(), 0);
		check_drop(c.receive(c.seal(inner, zeros, uint8_t(zeros.size()), 4)), Drop::padding, c.a());

		// Pad length reaching past the start of the payload: body - 1 and 255.
		Bytes pt = test::esp_plaintext(inner, good, uint8_t(good.size()), 4);
		Bytes too_long = pt;
		too_long[pt.size() - 2] = uint8_t(pt.size() - 1);
		check_drop(c.receive(c.seal(too_long)), Drop::padding, c.a());
		Bytes pad255(2 * spec.align - 2, 0); // a body of two units, pad length 255
		check_drop(c.receive(c.seal(pad255, {}, 255, 4)), Drop::padding, c.a());
	}
}

TEST_CASE(
    "a pad length one past the payload is a padding drop even when the byte before it looks like padding") {
	// GCM's explicit IV is the sequence number (RFC 4106 3.1), so with seq 1
	// the byte just before the payload is 1: with pad length body - 1, an
	// off-by-one bound would accept [IV's 1][2, 3, ...] as padding and take
	// body - 2 - pad = -1 as the inner length.
	for (Cipher c : {Cipher::aes128_gcm, Cipher::aes256_gcm}) {
		const crypto::CipherSpec& spec = crypto::cipher_spec(c);
		INFO(spec.name);
		Crafter crafter(spec);
		Bytes body;
		for (uint8_t i = 2; body.size() < 6; i++)
			body.push_back(i);
		body.push_back(7); // pad length = body size 8 - 1
		body.push_back(4);
		Bytes d = crafter.seal(body); // sequence number 1
		REQUIRE(d[8 + 7] == 1);       // the last IV byte, right before the payload
		check_drop(crafter.receive(d), Drop::padding, crafter.a());
	}
}

TEST_CASE("a pad length that leaves exactly nothing is not a padding error: the empty inner is malformed") {
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		// Body of one unit: pad align - 2 bytes 1, 2, ..., pad length align - 2.
		Bytes pad(spec.align - 2);
		for (size_t i = 0; i < pad.size(); i++)
			pad[i] = uint8_t(i + 1);
		check_drop(c.receive(c.seal({}, pad, uint8_t(pad.size()), 4)), Drop::malformed, c.a());
		// The same with next header 59 is a well-formed dummy packet.
		check_ignore(c.receive(c.seal({}, pad, uint8_t(pad.size()), 59)), Ignore::dummy_packet);
	}
}

TEST_CASE("next header 59 is a dummy packet: ignored, but its sequence number is used up") {
	test::Rng rng(11);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		Bytes junk = rng.bytes(50);
		Bytes pad = test::default_padding(junk.size(), spec.align);
		Bytes d = c.seal(junk, pad, uint8_t(pad.size()), 59);
		Bytes again = d;
		Endpoint moved = kSiteA.ep;
		moved.port = 4501;
		Received r = c.receive(d, moved);
		check_ignore(r, Ignore::dummy_packet);
		// Authenticated, so it counts as a sign of life and may move the peer.
		CHECK(r.peer == c.a());
		CHECK(r.endpoint_changed);
		CHECK(c.a()->endpoint() == std::optional<Endpoint>(moved));
		CHECK(c.a()->last_rx_unix_ms.load() == 1);
		check_drop(c.receive(again), Drop::replay, c.a());
		CHECK(c.link.a_at_b().in->packets.get() == 0);
	}
}

TEST_CASE(
    "next header and inner version must agree; other next headers and bad inner lengths are malformed") {
	test::Rng rng(12);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		Bytes v4 = test::packet_v4(kSiteA, kSiteB, 64, rng);
		Bytes v6 = test::packet_v6(kSiteA, kSiteB, 64, rng);
		auto sealed = [&](const Bytes& payload, uint8_t next) {
			Bytes pad = test::default_padding(payload.size(), spec.align);
			return c.seal(payload, pad, uint8_t(pad.size()), next);
		};
		check_drop(c.receive(sealed(v6, 4)), Drop::malformed, c.a());  // IPv6 behind "IPv4"
		check_drop(c.receive(sealed(v4, 41)), Drop::malformed, c.a()); // IPv4 behind "IPv6"
		check_drop(c.receive(sealed(v4, 17)), Drop::malformed, c.a()); // transport mode UDP
		check_drop(c.receive(sealed(v4, 0)), Drop::malformed, c.a());
		check_drop(c.receive(sealed(v6, 94)), Drop::malformed, c.a());

		// Inner headers whose own length disagrees with what arrived.
		Bytes v4_long = v4;
		v4_long[3] = uint8_t(v4.size() + 1); // total length one past the data
		check_drop(c.receive(sealed(v4_long, 4)), Drop::malformed, c.a());
		Bytes v4_short_total = v4;
		v4_short_total[2] = 0;
		v4_short_total[3] = 19; // total length below the header
		check_drop(c.receive(sealed(v4_short_total, 4)), Drop::malformed, c.a());
		Bytes v4_ihl = v4;
		v4_ihl[0] = 0x44; // IHL 4 words: below the minimum
		check_drop(c.receive(sealed(v4_ihl, 4)), Drop::malformed, c.a());
		Bytes v4_stub(v4.begin(), v4.begin() + 19); // shorter than an IPv4 header
		check_drop(c.receive(sealed(v4_stub, 4)), Drop::malformed, c.a());
		Bytes v6_long = v6;
		v6_long[5] = uint8_t(v6.size() - 40 + 1); // payload length one past the data
		check_drop(c.receive(sealed(v6_long, 41)), Drop::malformed, c.a());
		Bytes v6_stub(v6.begin(), v6.begin() + 39);
		check_drop(c.receive(sealed(v6_stub, 41)), Drop::malformed, c.a());

		// Still in sync afterwards.
		Received ok = c.receive(sealed(v4, 4));
		REQUIRE(ok.verdict == tunnel::Verdict::forward);
		CHECK(Bytes(ok.inner.begin(), ok.inner.end()) == v4);
	}
}

TEST_CASE("TFC padding after the inner packet is cut off (RFC 4303 section 2.7)") {
	test::Rng rng(13);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		Crafter c(spec);
		uint64_t bytes = 0;
		for (size_t tfc : {1, 3, 16, 37, 500}) {
			INFO("tfc ", tfc);
			for (int family : {4, 6}) {
				Bytes inner = family == 4 ? test::packet_v4(kSiteA, kSiteB, 100, rng)
				                          : test::packet_v6(kSiteA, kSiteB, 100, rng);
				Bytes payload = inner;
				Bytes filler = rng.bytes(tfc);
				payload.insert(payload.end(), filler.begin(), filler.end());
				Bytes pad = test::default_padding(payload.size(), spec.align);
				Received r = c.receive(
				    c.seal(payload, pad, uint8_t(pad.size()), family == 4 ? 4 : 41));
				REQUIRE(r.verdict == tunnel::Verdict::forward);
				CHECK(Bytes(r.inner.begin(), r.inner.end()) == inner);
				bytes += inner.size();
				CHECK(c.link.a_at_b().in->bytes.get() ==
				      bytes); // the inner packet, not the filler
			}
		}
	}
}

TEST_CASE("endpoint learning: the first authenticated packet sets it, a newer one moves it, an older one "
          "does not") {
	test::Rng rng(14);
	const Endpoint nat1 = test::endpoint(test::ip4(100, 64, 0, 1), 40001);
	const Endpoint nat2 = test::endpoint(test::ip4(100, 64, 0, 2), 40002);
	const Endpoint nat3 = test::endpoint(test::ip6(0x2001, 0xdb8, 0, 3), 4500);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::LinkOptions at_a;
		at_a.cipher = spec.id;
		test::LinkOptions at_b = at_a;
		at_b.endpoint_known = false; // B waits to hear from A (A is behind NAT)
		test::Link link = test::make_link(at_a, at_b);
		tunnel::Peer& a = link.a_at_b();
		REQUIRE_FALSE(a.endpoint());
		REQUIRE_FALSE(a.endpoint_configured);

		// Before A is heard from, B cannot send to it.
		test::PacketBuffer buf;
		Bytes reply = test::packet_v4(kSiteB, kSiteA, 60, rng);
		buf.load(reply);
		tunnel::OutboundResult early = tunnel::encapsulate(link.b, buf.mem, reply.size());
		CHECK(early.verdict == tunnel::Verdict::drop);
		CHECK(early.drop == Drop::no_endpoint);

		std::vector<Bytes> d;
		for (int i = 0; i < 4; i++)
			d.push_back(*test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng)));

		// A forgery from elsewhere teaches nothing.
		Bytes forged = d[0];
		forged.back() ^= 1;
		check_drop(tunnel::decapsulate(link.b, forged, nat3, 1), Drop::auth_failed, &a);
		CHECK_FALSE(a.endpoint());

		tunnel::InboundResult r1 = tunnel::decapsulate(link.b, d[0], nat1, 10); // seq 1
		REQUIRE(r1.verdict == tunnel::Verdict::forward);
		CHECK(r1.endpoint_changed);
		CHECK(a.endpoint() == std::optional<Endpoint>(nat1));
		CHECK(a.endpoint_snapshot() == std::optional<Endpoint>(nat1));
		CHECK(a.endpoint_changes.get() == 1);
		CHECK(a.last_rx_unix_ms.load() == 10);

		tunnel::InboundResult r3 =
		    tunnel::decapsulate(link.b, d[2], nat2, 20); // seq 3: newest, new address
		REQUIRE(r3.verdict == tunnel::Verdict::forward);
		CHECK(r3.endpoint_changed);
		CHECK(a.endpoint() == std::optional<Endpoint>(nat2));
		CHECK(a.endpoint_changes.get() == 2);

		tunnel::InboundResult r2 =
		    tunnel::decapsulate(link.b, d[1], nat1, 30); // seq 2: late, old address
		REQUIRE(r2.verdict == tunnel::Verdict::forward);
		CHECK_FALSE(r2.endpoint_changed);
		CHECK(a.endpoint() == std::optional<Endpoint>(nat2));
		CHECK(a.endpoint_changes.get() == 2);
		CHECK(a.last_rx_unix_ms.load() == 30);

		Bytes d4_copy = d[3];
		tunnel::InboundResult r4 =
		    tunnel::decapsulate(link.b, d[3], nat2, 40); // seq 4: newest, same address
		REQUIRE(r4.verdict == tunnel::Verdict::forward);
		CHECK_FALSE(r4.endpoint_changed);
		CHECK(a.endpoint_changes.get() == 2);

		// Same address, another port: that is a move too.
		Endpoint nat2_port = nat2;
		nat2_port.port = 40003;
		Bytes d5 = *test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng));
		tunnel::InboundResult r5 = tunnel::decapsulate(link.b, d5, nat2_port, 50);
		REQUIRE(r5.verdict == tunnel::Verdict::forward);
		CHECK(r5.endpoint_changed);
		CHECK(a.endpoint() == std::optional<Endpoint>(nat2_port));

		// A replay of an authenticated packet from yet another address: dropped, nothing moves.
		check_drop(tunnel::decapsulate(link.b, d4_copy, nat3, 60), Drop::replay, &a);
		CHECK(a.endpoint() == std::optional<Endpoint>(nat2_port));

		// Now B can reply, to the learned address.
		buf.load(reply);
		tunnel::OutboundResult late = tunnel::encapsulate(link.b, buf.mem, reply.size());
		CHECK(late.verdict == tunnel::Verdict::forward);
		CHECK(late.peer == &a);
	}
}

TEST_CASE("a configured endpoint also follows an authenticated newer packet from a new address") {
	test::Rng rng(15);
	test::Link link = test::make_link({});
	tunnel::Peer& a = link.a_at_b();
	REQUIRE(a.endpoint_configured);
	const Endpoint moved = test::endpoint(test::ip4(100, 64, 9, 9), 1024);
	Bytes d = *test::seal_inner(link.a, test::packet_v4(kSiteA, kSiteB, 60, rng));
	tunnel::InboundResult r = tunnel::decapsulate(link.b, d, moved, 1);
	REQUIRE(r.verdict == tunnel::Verdict::forward);
	CHECK(r.endpoint_changed);
	CHECK(a.endpoint() == std::optional<Endpoint>(moved));
}

TEST_CASE("a policy drop from a new address does not move the endpoint") {
	test::Rng rng(16);
	test::Link link = test::make_link({});
	tunnel::Peer& a = link.a_at_b();
	const Endpoint elsewhere = test::endpoint(test::ip4(100, 64, 7, 7), 999);
	Bytes spoofed =
	    *test::seal_inner(link.a, test::ipv4_packet(kSiteC.host4(1), kSiteB.host4(2), 60, rng));
	check_drop(tunnel::decapsulate(link.b, spoofed, elsewhere, 1), Drop::policy, &a);
	CHECK(a.endpoint() == std::optional<Endpoint>(kSiteA.ep));
	CHECK(a.endpoint_changes.get() == 0);
}

} // namespace
} // namespace esptun
