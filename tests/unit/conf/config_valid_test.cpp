// Valid configs parse into the expected values, with the documented defaults.
#include "tests/unit/conf/conf_test_util.hpp"

#include <cctype>

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

std::vector<uint8_t> bytes_of(const std::string& hex) {
	std::vector<uint8_t> out;
	for (size_t i = 2; i < hex.size(); i += 2)
		out.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
	return out;
}

} // namespace

TEST_CASE("a full gateway config parses into the expected values") {
	Config c = parse_config(gateway_lines().text(), "gw.toml", Role::gateway);
	CHECK(c.source == "gw.toml");
	CHECK(c.role == Role::gateway);
	CHECK(c.tunnel.interface == "esp0");
	REQUIRE(c.tunnel.addresses.size() == 2);
	CHECK(c.tunnel.addresses[0] == *parse_prefix("10.99.0.1/24"));
	CHECK(c.tunnel.addresses[1] == *parse_prefix("fd99::1/64"));
	CHECK(c.tunnel.listen == *parse_endpoint("0.0.0.0:4500"));
	CHECK(c.tunnel.mtu == 1400);
	CHECK(c.tunnel.tun_io == TunIo::vhost);
	CHECK(c.tunnel.control_socket == "/run/esptun/test.sock");
	CHECK(!c.tunnel.route_all);

	REQUIRE(c.peers.size() == 2);
	const PeerConfig& b = c.peers[0];
	const auto& cbc = crypto::cipher_spec(crypto::Cipher::aes128_cbc_sha1);
	CHECK(b.name == "site-b");
	CHECK(b.line == 9);
	CHECK(b.endpoint == parse_endpoint("10.201.0.2:4500"));
	REQUIRE(b.allowed_ips.size() == 2);
	CHECK(b.allowed_ips[0] == *parse_prefix("10.99.0.2/32"));
	CHECK(b.allowed_ips[1] == *parse_prefix("192.168.50.0/24"));
	CHECK(b.cipher == crypto::Cipher::aes128_cbc_sha1);
	CHECK(!b.esn);
	CHECK(b.replay_window == 2048);
	CHECK(b.out.spi == 0x1001);
	CHECK(b.out.enc_key == bytes_of(hex_key(cbc.enc_key_len, 1)));
	CHECK(b.out.auth_key == bytes_of(hex_key(cbc.auth_key_len, 2)));
	CHECK(b.in.spi == 0x2001);
	CHECK(b.in.enc_key == bytes_of(hex_key(cbc.enc_key_len, 3)));
	CHECK(b.in.auth_key == bytes_of(hex_key(cbc.auth_key_len, 4)));

	const PeerConfig& r = c.peers[1];
	const auto& gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm);
	CHECK(r.name == "road-1");
	CHECK(r.line == 25);
	CHECK(!r.endpoint);
	CHECK(r.cipher == crypto::Cipher::aes128_gcm);
	CHECK(r.out.spi == 0x1002);
	CHECK(r.out.enc_key == bytes_of(hex_key(gcm.enc_key_len, 5)));
	CHECK(r.out.auth_key.empty());
	CHECK(r.in.enc_key == bytes_of(hex_key(gcm.enc_key_len, 6)));
}

TEST_CASE("omitted settings take the documented defaults") {
	auto lines = gateway_lines();
	lines.erase(14, 15).erase(2, 7); // esn, replay_window, then every [tunnel] key
	Config c = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK(c.tunnel.interface == "esp0");
	CHECK(c.tunnel.addresses.empty());
	CHECK(c.tunnel.listen == Endpoint{IpAddress::v4(0), kDefaultPort});
	CHECK(c.tunnel.mtu == 0);
	CHECK(c.tunnel.tun_io == TunIo::automatic);
	CHECK(c.tunnel.control_socket == "/run/esptun/esp0.sock");
	CHECK(c.peers[0].esn);
	CHECK(c.peers[0].replay_window == kDefaultReplayWindow);
}

TEST_CASE("the default control socket follows the interface name") {
	auto lines = gateway_lines();
	lines.set(7, "").set(2, "interface = \"esp-site\"");
	CHECK(parse_config(lines.text(), "test.toml", Role::gateway).tunnel.control_socket ==
	      "/run/esptun/esp-site.sock");
}

TEST_CASE("ports default to 4500 and IPv6 endpoints take brackets") {
	auto lines = gateway_lines();
	lines.set(4, "listen = \"[::]\"").set(11, "endpoint = \"[2001:db8::2]\"");
	Config c = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK(c.tunnel.listen == *parse_endpoint("[::]:4500"));
	CHECK(c.peers[0].endpoint == parse_endpoint("[2001:db8::2]:4500"));
	lines.set(4, "listen = \"192.0.2.1:4501\"").set(11, "endpoint = \"10.201.0.2\"");
	c = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK(c.tunnel.listen == *parse_endpoint("192.0.2.1:4501"));
	CHECK(c.peers[0].endpoint == parse_endpoint("10.201.0.2:4500"));
}

TEST_CASE("tun_io accepts auto, vhost and direct") {
	auto lines = gateway_lines();
	for (auto [text, io] : {std::pair{"auto", TunIo::automatic}, std::pair{"vhost", TunIo::vhost},
	                        std::pair{"direct", TunIo::direct}}) {
		lines.set(6, std::string("tun_io = \"") + text + "\"");
		CHECK(parse_config(lines.text(), "test.toml", Role::gateway).tunnel.tun_io == io);
		CHECK(tun_io_name(io) == text);
	}
}

TEST_CASE("mtu 0 and replay_window 0 are accepted and mean derive / disabled") {
	auto lines = gateway_lines();
	lines.set(5, "mtu = 0").set(15, "replay_window = 0");
	Config c = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK(c.tunnel.mtu == 0);
	CHECK(c.peers[0].replay_window == 0);
	lines.set(15, "replay_window = " + std::to_string(kMaxReplayWindow));
	CHECK(parse_config(lines.text(), "test.toml", Role::gateway).peers[0].replay_window ==
	      kMaxReplayWindow);
}

TEST_CASE("a client config with route_all parses") {
	Config c = parse_config(client_lines().text(), "client.toml", Role::client);
	CHECK(c.role == Role::client);
	CHECK(c.tunnel.route_all);
	REQUIRE(c.peers.size() == 1);
	CHECK(c.peers[0].endpoint == parse_endpoint("198.51.100.7:4500"));
	CHECK(c.peers[0].allowed_ips == std::vector<IpPrefix>{*parse_prefix("0.0.0.0/0")});
	CHECK(c.peers[0].cipher == crypto::Cipher::aes256_cbc_sha256);
}

TEST_CASE("hex keys accept upper case digits and a 0X prefix") {
	auto lines = gateway_lines();
	std::string key = hex_key(crypto::cipher_spec(crypto::Cipher::aes128_gcm).enc_key_len, 5);
	for (auto& ch : key)
		ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
	lines.set(31, "key = \"" + key + "\"");
	Config c = parse_config(lines.text(), "test.toml", Role::gateway);
	CHECK(c.peers[1].out.enc_key ==
	      parse_config(gateway_lines().text(), "t", Role::gateway).peers[1].out.enc_key);
}

TEST_CASE("every cipher name from crypto::all_ciphers is accepted with keys of its lengths") {
	for (const auto& spec : crypto::all_ciphers()) {
		auto lines = gateway_lines();
		lines.set(13, "cipher = \"" + std::string(spec.name) + "\"");
		for (size_t n : {18, 22}) {
			const unsigned seed = unsigned(n); // each direction its own key
			if (spec.aead)
				lines.set(n, "key = \"" + hex_key(spec.enc_key_len, seed) + "\"")
				    .set(n + 1, "");
			else
				lines.set(n, "enc_key = \"" + hex_key(spec.enc_key_len, seed) + "\"")
				    .set(n + 1,
				         "auth_key = \"" + hex_key(spec.auth_key_len, seed + 1) + "\"");
		}
		INFO(spec.name);
		CHECK(parse_config(lines.text(), "test.toml", Role::gateway).peers[0].cipher == spec.id);
	}
}
