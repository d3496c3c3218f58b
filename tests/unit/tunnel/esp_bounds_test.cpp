// decapsulate() on every truncation and extension of valid datagrams, each in
// a heap buffer of exactly that size, so ASan (the sanitizer CI job) catches
// any read or write past the end; the drop reason is checked exactly.
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string_view>

namespace esptun {
namespace {

using test::Bytes;
using test::kSiteA;
using test::kSiteB;

std::string_view outcome(const tunnel::InboundResult& r) {
	if (r.verdict == tunnel::Verdict::forward) return "forward";
	if (r.verdict == tunnel::Verdict::ignore) return ignore_name(r.ignore);
	return drop_name(r.drop);
}

struct Received {
	std::string_view outcome;
	Bytes inner; ///< copied out: the exact-size buffer is gone when this is returned
};

/// Runs decapsulate on the first @n bytes of @d (zero-extended past its end),
/// copied into a heap buffer of exactly @n bytes.
Received decap_prefix(const tunnel::SaTable& t, const Bytes& d, size_t n) {
	std::unique_ptr<uint8_t[]> exact(new uint8_t[n ? n : 1]);
	std::copy(d.begin(), d.begin() + long(std::min(n, d.size())), exact.get());
	for (size_t i = d.size(); i < n; i++)
		exact[i] = uint8_t(i * 31);
	tunnel::InboundResult r = tunnel::decapsulate(t, std::span<uint8_t>(exact.get(), n), kSiteA.ep, 1);
	return {outcome(r), Bytes(r.inner.begin(), r.inner.end())};
}

/// What a datagram of @n bytes (a prefix of, or extension of, a valid one of @full bytes) must give.
const char* expected(const crypto::CipherSpec& spec, size_t n, size_t full) {
	// Worked out by hand: header 8, IV, ICV, and whole alignment units between.
	size_t min = 8 + spec.iv_len + spec.align + spec.icv_len;
	if (n < 8) return "malformed"; // the SPI's first byte is not 0xff (see kSiteB)
	if (n < min) return "malformed";
	if ((n - 8 - spec.iv_len - spec.icv_len) % spec.align != 0) return "malformed";
	if (n == full) return "forward";
	return "auth_failed";
}

TEST_CASE("decapsulate on every truncation and extension of a valid datagram stays in bounds") {
	test::Rng rng(1);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		for (bool esn : {true, false}) {
			for (size_t inner_len : {20, 61, 300}) {
				INFO(spec.name, esn ? " esn" : "", " inner ", inner_len);
				test::LinkOptions opt;
				opt.cipher = spec.id;
				opt.esn = esn;
				test::Link link = test::make_link(opt);
				Bytes inner = test::packet_v4(kSiteA, kSiteB, inner_len, rng);
				auto d = test::seal_inner(link.a, inner);
				REQUIRE(d);
				// Every shorter length and up to two alignment units longer; the
				// full length last, since it commits its sequence number.
				for (size_t n = 0; n <= d->size() + 2 * spec.align; n++) {
					if (n == d->size()) continue;
					INFO("length ", n);
					CHECK(decap_prefix(link.b, *d, n).outcome ==
					      expected(spec, n, d->size()));
				}
				Received r = decap_prefix(link.b, *d, d->size());
				REQUIRE(r.outcome == "forward");
				CHECK(r.inner == inner);
			}
		}
	}
}

TEST_CASE("decapsulate on hand-sealed plaintexts of every small size and trailer stays in bounds") {
	// Each body is sealed correctly, so every pad length and next header value
	// reaches the trailer and inner-packet checks; the buffer is exact-sized.
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		INFO(spec.name);
		test::Link link =
		    test::make_link(test::LinkOptions{spec.id, true, 0, true}); // window 0: reuse seq 1
		auto tx = test::transform_to(kSiteB, spec.id, true);
		test::Rng rng(2);
		for (size_t units = 1; units <= 4; units++) {
			for (int pad_len : {0, 1, 2, 3, 14, 15, 16, 30, 62, 63, 64, 255}) {
				for (uint8_t next : {uint8_t(4), uint8_t(41), uint8_t(59), uint8_t(0)}) {
					Bytes pt = rng.bytes(units * spec.align);
					pt[0] = next == 41 ? 0x60 : 0x45;
					pt[pt.size() - 2] = uint8_t(pad_len);
					pt[pt.size() - 1] = next;
					Bytes d = test::seal_esp(*tx, test::spi_of(kSiteB, kSiteA), 1, pt);
					Received r = decap_prefix(link.b, d, d.size());
					INFO("units ", units, " pad ", pad_len, " next ", int(next));
					// Random payloads are not inner packets from A's networks.
					CHECK(r.outcome != "forward");
					if (size_t(pad_len) + 2 > pt.size()) CHECK(r.outcome == "padding");
				}
			}
		}
	}
}

} // namespace
} // namespace esptun
