// One static key serves one SA: a key used in both directions or by two SAs
// is refused, naming the peers and directions but never the key.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

constexpr Role gw = Role::gateway;

/// gateway_lines() with a third peer, road-2 (GCM), whose keys have seeds
/// @out_seed and @in_seed; its [[peer]] header is line 36.
Lines with_road2(unsigned out_seed, unsigned in_seed) {
	const size_t gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm).enc_key_len;
	Lines l = gateway_lines();
	for (std::string line : {std::string(""), std::string("[[peer]]"), std::string("name = \"road-2\""),
	                         std::string("allowed_ips = [\"10.99.0.4/32\"]"),
	                         "cipher = \"" + cipher_name(crypto::Cipher::aes128_gcm) + "\"",
	                         std::string("[peer.out]"), std::string("spi = 0x1003"),
	                         "key = \"" + hex_key(gcm, out_seed) + "\"", std::string("[peer.in]"),
	                         std::string("spi = 0x2003"), "key = \"" + hex_key(gcm, in_seed) + "\""})
		l.lines.push_back(line);
	return l;
}

} // namespace

TEST_CASE("distinct keys everywhere: accepted") { CHECK(error_of(with_road2(7, 8).text()) == "(no error)"); }

TEST_CASE("one key in both directions of a peer is refused, naming both, not the key") {
	const size_t gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm).enc_key_len;
	Lines l = gateway_lines();
	l.set(34, l.lines.at(30)); // road-1 receives with the key it sends with
	CHECK_CONFIG_ERROR(l, gw, 25,
	                   "peer 'road-1' [peer.in] uses the same key as peer 'road-1' [peer.out]");
	const std::string msg = error_of(l.text());
	CHECK(msg.find(hex_key(gcm, 5).substr(2)) == std::string::npos);
}

TEST_CASE("one key for two peers' SAs is refused, naming both, not the key") {
	const size_t gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm).enc_key_len;
	CHECK_CONFIG_ERROR(with_road2(5, 8), gw, 36,
	                   "peer 'road-2' [peer.out] uses the same key as peer 'road-1' [peer.out]");
	CHECK_CONFIG_ERROR(with_road2(7, 5), gw, 36,
	                   "peer 'road-2' [peer.in] uses the same key as peer 'road-1' [peer.out]");
	CHECK(error_of(with_road2(5, 8).text()).find(hex_key(gcm, 5).substr(2)) == std::string::npos);
}
