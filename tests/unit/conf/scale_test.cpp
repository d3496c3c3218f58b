// A gateway config with 10,000 statically keyed peers (issue 19: "start-up
// with 10,000 static peers and allowed_ips prefixes stays well under a
// second"): it loads, and the whole-config checks that used to compare each
// peer with every other one (key reuse, overlapping allowed_ips) still find
// the one offender among them, named as before.
#include "tests/unit/conf/conf_test_util.hpp"

#include <chrono>
#include <cstdio>
#include <functional>

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

constexpr size_t kPeers = 10000;

/// A 36-byte AES-256-GCM key (key and salt) unique to @n: its first four
/// bytes are @n (hex_key() repeats after 256 seeds).
std::string key_for(size_t n) {
	std::string k = "0x";
	char b[3];
	for (size_t j = 0; j < 36; j++) {
		const unsigned v =
		    j < 4 ? unsigned(n >> (8 * (3 - j))) & 255 : unsigned(n * 31 + j * 7) & 255;
		std::snprintf(b, sizeof b, "%02x", v);
		k += b;
	}
	return k;
}

/// The config; @change may rewrite peer i's allowed_ips entry or keys.
struct Peer {
	std::string allowed, out_key, in_key;
};
std::string big_config(const std::function<void(size_t, Peer&)>& change = {}) {
	std::string text = "[tunnel]\ninterface = \"esp0\"\naddresses = [\"10.250.0.1/16\"]\n"
	                   "listen = \"0.0.0.0:4500\"\n";
	text.reserve(kPeers * 330);
	for (size_t i = 0; i < kPeers; i++) {
		Peer p{"10." + std::to_string(i >> 16) + "." + std::to_string((i >> 8) & 255) + "." +
		           std::to_string(i & 255) + "/32",
		       key_for(2 * i), key_for(2 * i + 1)};
		if (change) change(i, p);
		char out_spi[24], in_spi[24];
		std::snprintf(out_spi, sizeof out_spi, "0x%zx", 0x10000 + i);
		std::snprintf(in_spi, sizeof in_spi, "0x%zx", 0x50000 + i);
		text += "\n[[peer]]\nname = \"p" + std::to_string(i) +
		        "\"\nendpoint = \"192.0.2.1:" + std::to_string(1000 + i) + "\"\nallowed_ips = [\"" +
		        p.allowed + "\"]\ncipher = \"aes256-gcm\"\n  [peer.out]\n  spi = " + out_spi +
		        "\n  key = \"" + p.out_key + "\"\n  [peer.in]\n  spi = " + in_spi + "\n  key = \"" +
		        p.in_key + "\"\n";
	}
	return text;
}

std::string error_of_big(const std::function<void(size_t, Peer&)>& change) {
	try {
		parse_config(big_config(change), "test.toml", Role::gateway);
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(no error)";
}

} // namespace

TEST_CASE("10,000 static peers load, and key reuse and overlaps among them are still found") {
	const std::string text = big_config();
	const auto t0 = std::chrono::steady_clock::now();
	const Config c = parse_config(text, "test.toml", Role::gateway);
	const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	MESSAGE("10,000 static peers: config parsed and checked in " << secs << " s");
	REQUIRE(c.peers.size() == kPeers);
	CHECK(c.peers.back().allowed_ips == std::vector<IpPrefix>{*parse_prefix("10.0.39.15/32")});
	// Quadratic checks took about 4 s here in an optimised build; the
	// sanitizer build runs several times slower. A bound far above both the
	// linear figure and noise, far below a quadratic one under ASan.
	CHECK(secs < 10.0);

	// The last peer sends with peer 17's inbound key.
	std::string msg = error_of_big([](size_t i, Peer& p) {
		if (i == kPeers - 1) p.out_key = key_for(2 * 17 + 1);
	});
	CHECK_MESSAGE(msg.find("peer 'p9999' [peer.out] uses the same key as peer 'p17' [peer.in]") !=
	                  std::string::npos,
	              msg);
	// Two reuses: the one whose second use comes first in the file is named.
	msg = error_of_big([](size_t i, Peer& p) {
		if (i == 9000) p.in_key = key_for(2 * 5);
		if (i == 8000) p.out_key = key_for(2 * 6 + 1);
	});
	CHECK_MESSAGE(msg.find("peer 'p8000' [peer.out] uses the same key as peer 'p6' [peer.in]") !=
	                  std::string::npos,
	              msg);
	// The last peer's allowed_ips holds peer 17's, and a peer in the middle
	// lies inside an earlier one's (the index must find both directions).
	msg = error_of_big([](size_t i, Peer& p) {
		if (i == kPeers - 1) p.allowed = "10.0.0.0/27";
	});
	CHECK_MESSAGE(msg.find("allowed_ips entry '10.0.0.0/27' overlaps '10.0.0.") != std::string::npos,
	              msg);
	msg = error_of_big([](size_t i, Peer& p) {
		if (i == 5) p.allowed = "10.9.0.0/16";
		if (i == 300) p.allowed = "10.9.3.0/24";
	});
	CHECK_MESSAGE(msg.find("allowed_ips entry '10.9.3.0/24' overlaps '10.9.0.0/16' of peer 'p5'") !=
	                  std::string::npos,
	              msg);
}
