// esp_wire.hpp: the inner MTU a cipher leaves on an underlay path and the
// bytes ESP adds, checked against numbers worked out by hand and against
// what encapsulate() really produces.
#include "tests/unit/tunnel/tunnel_test_util.hpp"
#include "tunnel/esp_wire.hpp"

#include <doctest/doctest.h>

namespace esptun {
namespace {

using crypto::Cipher;

struct MtuRow {
	Cipher cipher;
	size_t underlay;
	bool outer_v6;
	size_t expected;
};

// fixed = outer IP (20 v4 / 40 v6) + UDP 8 + ESP header 8 + IV + ICV; the
// rest is floored to the alignment (16 CBC, 4 GCM), then the 2-byte trailer
// comes off (RFC 4303 2.4-2.5, RFC 3948).
const MtuRow kMtuTable[] = {
    // GCM: IV 8, ICV 16, align 4. v4 fixed 60, v6 fixed 80.
    {Cipher::aes128_gcm, 1500, false, 1438}, // 1500-60=1440, /4 ok -> 1440-2
    {Cipher::aes128_gcm, 1500, true, 1418},  // 1500-80=1420 -> 1418
    {Cipher::aes128_gcm, 1280, false, 1218}, // 1280-60=1220 -> 1218
    {Cipher::aes128_gcm, 1280, true, 1198},  // 1280-80=1200 -> 1198
    {Cipher::aes256_gcm, 1500, false, 1438}, // the key size changes nothing on the wire
    {Cipher::aes256_gcm, 1500, true, 1418},
    {Cipher::aes256_gcm, 1280, false, 1218},
    {Cipher::aes256_gcm, 1280, true, 1198},
    {Cipher::aes128_gcm, 1499, false, 1434}, // 1439 -> 1436 -> 1434
    // CBC-HMAC-SHA1-96: IV 16, ICV 12, align 16. v4 fixed 64, v6 fixed 84.
    {Cipher::aes128_cbc_sha1, 1500, false, 1422}, // 1436 -> 1424 -> 1422
    {Cipher::aes128_cbc_sha1, 1500, true, 1406},  // 1416 -> 1408 -> 1406
    {Cipher::aes128_cbc_sha1, 1280, false, 1214}, // 1216 -> 1216 -> 1214
    {Cipher::aes128_cbc_sha1, 1280, true, 1182},  // 1196 -> 1184 -> 1182
    {Cipher::aes256_cbc_sha1, 1500, false, 1422},
    {Cipher::aes256_cbc_sha1, 1500, true, 1406},
    {Cipher::aes256_cbc_sha1, 1280, false, 1214},
    {Cipher::aes256_cbc_sha1, 1280, true, 1182},
    // CBC-HMAC-SHA256-128: IV 16, ICV 16, align 16. v4 fixed 68, v6 fixed 88.
    {Cipher::aes128_cbc_sha256, 1500, false, 1422}, // 1432 -> 1424 -> 1422
    {Cipher::aes128_cbc_sha256, 1500, true, 1406},  // 1412 -> 1408 -> 1406
    {Cipher::aes128_cbc_sha256, 1280, false, 1198}, // 1212 -> 1200 -> 1198
    {Cipher::aes128_cbc_sha256, 1280, true, 1182},  // 1192 -> 1184 -> 1182
    {Cipher::aes256_cbc_sha256, 1500, false, 1422},
    {Cipher::aes256_cbc_sha256, 1500, true, 1406},
    {Cipher::aes256_cbc_sha256, 1280, false, 1198},
    {Cipher::aes256_cbc_sha256, 1280, true, 1182},
};

TEST_CASE("max_inner_mtu matches hand-computed values for every cipher at 1500 and 1280, v4 and v6") {
	for (const MtuRow& row : kMtuTable) {
		const crypto::CipherSpec& spec = crypto::cipher_spec(row.cipher);
		INFO(spec.name, " underlay ", row.underlay, row.outer_v6 ? " v6" : " v4");
		CHECK(tunnel::esp::max_inner_mtu(spec, row.underlay, row.outer_v6) == row.expected);
	}
}

TEST_CASE("max_inner_mtu for a jumbo underlay and for paths too small to carry anything") {
	const auto& sha256 = crypto::cipher_spec(Cipher::aes128_cbc_sha256);
	// 9000 - 68 = 8932 -> floor to 16 = 8928 -> 8926.
	CHECK(tunnel::esp::max_inner_mtu(sha256, 9000, false) == 8926);
	const auto& gcm = crypto::cipher_spec(Cipher::aes128_gcm);
	// 100 - 60 = 40 -> 40 -> 38.
	CHECK(tunnel::esp::max_inner_mtu(gcm, 100, false) == 38);
	// No room at all must give 0, not a wrapped-around size_t.
	for (size_t mtu : {0, 1, 20, 48, 59, 60, 63, 64})
		CHECK(tunnel::esp::max_inner_mtu(gcm, mtu, false) == 0);
	for (size_t mtu : {0, 40, 79, 80, 84})
		CHECK(tunnel::esp::max_inner_mtu(gcm, mtu, true) == 0);
	for (size_t mtu : {0, 63, 64, 80})
		CHECK(tunnel::esp::max_inner_mtu(crypto::cipher_spec(Cipher::aes128_cbc_sha1), mtu, false) ==
		      0);
}

TEST_CASE("esp_overhead matches hand-computed values") {
	const auto& gcm = crypto::cipher_spec(Cipher::aes128_gcm);
	const auto& sha1 = crypto::cipher_spec(Cipher::aes128_cbc_sha1);
	const auto& sha256 = crypto::cipher_spec(Cipher::aes256_cbc_sha256);
	// GCM: header 8 + IV 8 + (pad + trailer to a multiple of 4) + ICV 16.
	CHECK(tunnel::esp::esp_overhead(gcm, 100) == 8 + 8 + 4 + 16); // 102 -> 104
	CHECK(tunnel::esp::esp_overhead(gcm, 101) == 8 + 8 + 3 + 16); // 103 -> 104
	CHECK(tunnel::esp::esp_overhead(gcm, 102) == 8 + 8 + 2 + 16); // 104 -> 104
	CHECK(tunnel::esp::esp_overhead(gcm, 103) == 8 + 8 + 5 + 16); // 105 -> 108
	// CBC-SHA1: header 8 + IV 16 + (pad + trailer to a multiple of 16) + ICV 12.
	CHECK(tunnel::esp::esp_overhead(sha1, 100) == 8 + 16 + 12 + 12); // 102 -> 112
	CHECK(tunnel::esp::esp_overhead(sha1, 110) == 8 + 16 + 2 + 12);  // 112 -> 112
	CHECK(tunnel::esp::esp_overhead(sha1, 111) == 8 + 16 + 17 + 12); // 113 -> 128
	// CBC-SHA256: ICV 16.
	CHECK(tunnel::esp::esp_overhead(sha256, 1422) == 8 + 16 + 2 + 16);  // 1424 -> 1424
	CHECK(tunnel::esp::esp_overhead(sha256, 1423) == 8 + 16 + 17 + 16); // 1425 -> 1440
}

TEST_CASE("an inner packet of max_inner_mtu bytes fits the underlay after encapsulate(); one more does not") {
	test::Rng rng(11);
	for (const crypto::CipherSpec& spec : crypto::all_ciphers()) {
		test::LinkOptions opt;
		opt.cipher = spec.id;
		test::Link link = test::make_link(opt);
		for (size_t underlay : {1500, 1280, 1400, 9000}) {
			for (bool outer_v6 : {false, true}) {
				INFO(spec.name, " underlay ", underlay, outer_v6 ? " v6" : " v4");
				size_t outer = (outer_v6 ? 40 : 20) + 8; // IP + UDP
				size_t max = tunnel::esp::max_inner_mtu(spec, underlay, outer_v6);
				REQUIRE(max > 100);
				// Every length around the maximum: fits exactly when <= max.
				for (size_t len = max - 40; len <= max + 40; len++) {
					test::Bytes inner =
					    test::packet_v4(test::kSiteA, test::kSiteB, len, rng);
					auto dgram = test::seal_inner(link.a, inner);
					REQUIRE(dgram);
					CHECK(dgram->size() == len + tunnel::esp::esp_overhead(spec, len));
					bool fits = dgram->size() + outer <= underlay;
					INFO("inner ", len, " datagram ", dgram->size());
					CHECK(fits == (len <= max));
				}
			}
		}
	}
}

} // namespace
} // namespace esptun
