// The example configs shipped in docs/examples/ pass validation.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;

namespace {
const std::filesystem::path kExamples =
    std::filesystem::path(ESPTUN_TEST_DATA_DIR).parent_path().parent_path() / "docs" / "examples";

/// load_example() - load docs/examples/@name as an installed copy: the
/// examples hold keys inline, and git checks them out 0644, which
/// load_config() refuses for such a config (README: install -m 0600).
Config load_example(const std::string& name, Role role) {
	conf::test::TempDir dir;
	std::ifstream in(kExamples / name);
	const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	return load_config(dir.write(name, text, 0600), role);
}
} // namespace

TEST_CASE("docs/examples/gateway.toml loads as a gateway config") {
	Config c = load_example("gateway.toml", Role::gateway);
	CHECK(c.role == Role::gateway);
	CHECK(c.peers.size() >= 2);
	for (const auto& p : c.peers)
		CHECK_MESSAGE(!p.allowed_ips.empty(), p.name);
}

TEST_CASE("docs/examples/client.toml loads as a client config") {
	Config c = load_example("client.toml", Role::client);
	REQUIRE(c.peers.size() == 1);
	CHECK(c.peers[0].endpoint);
}

TEST_CASE("the example client and gateway agree on SPIs and keys") {
	// The client's outbound SA is the gateway's inbound SA for that peer, and
	// the other way round; a mismatch would be a broken example.
	Config gw = load_example("gateway.toml", Role::gateway);
	Config cl = load_example("client.toml", Role::client);
	const PeerConfig& to_gw = cl.peers[0];
	const PeerConfig* to_client = nullptr;
	for (const auto& p : gw.peers)
		if (p.in.spi == to_gw.out.spi) to_client = &p;
	REQUIRE(to_client);
	CHECK(to_client->cipher == to_gw.cipher);
	CHECK(to_client->in.enc_key == to_gw.out.enc_key);
	CHECK(to_client->in.auth_key == to_gw.out.auth_key);
	CHECK(to_client->out.spi == to_gw.in.spi);
	CHECK(to_client->out.enc_key == to_gw.in.enc_key);
	CHECK(to_client->out.auth_key == to_gw.in.auth_key);
}

TEST_CASE("the IKE examples load, and the client is one of the gateway's identities with its key") {
	Config gw = load_example("ike-gateway.toml", Role::gateway);
	Config cl = load_example("ike-client.toml", Role::client);
	REQUIRE(cl.peers.size() == 1);
	REQUIRE(cl.peers[0].ike);
	CHECK(cl.tunnel.addresses.empty()); // it asks for its address
	const PeerConfig* alice = nullptr;
	for (const auto& p : gw.peers) {
		REQUIRE(p.ike);
		if (p.ike->remote_id == cl.tunnel.local_id) alice = &p;
	}
	REQUIRE(alice);
	CHECK(alice->ike->psk == cl.peers[0].ike->psk);
	CHECK(cl.peers[0].ike->remote_id == gw.tunnel.local_id);
	REQUIRE(!gw.tunnel.address_pool.empty());
	CHECK(gw.tunnel.address_pool[0].contains(alice->allowed_ips.at(0).addr));
	// carol leases her address from the pool: no allowed_ips of her own.
	CHECK(gw.peers.back().name == "carol");
	CHECK(gw.peers.back().allowed_ips.empty());
}

TEST_CASE("the commented [redirect] of the IKE gateway example loads once uncommented") {
	std::ifstream in(kExamples / "ike-gateway.toml");
	std::string text, line;
	bool in_block = false;
	while (std::getline(in, line)) {
		// The block runs from "#[redirect]" to the first line that is no comment.
		in_block = line == "#[redirect]" || (in_block && line.starts_with("#"));
		text += (in_block ? line.substr(1) : line) + "\n";
	}
	CHECK(load_example("ike-gateway.toml", Role::gateway).redirect == RedirectConfig{});
	const Config c = parse_config(text, "ike-gateway.toml", Role::gateway, kExamples);
	CHECK(c.redirect.when == RedirectWhen::capacity);
	CHECK(c.redirect.to == std::vector<std::string>{"198.51.100.30", "gw2.example.com"});
	CHECK(c.redirect.capacity == 5000);
}
