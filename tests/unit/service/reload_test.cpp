// Reloader: it holds the running config itself, moved in from start-up (the
// service keeps no other copy), and a reload compares the new config with
// that one. Reloads that add or remove peers change routes, so they are
// tested in tests/netns/test_reload.py; these stop before any route.
#include "service/reload.hpp"

#include "service/seq_state.hpp"
#include "service/service.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

#include <doctest/doctest.h>
#include <functional>
#include <type_traits>

namespace esptun::service {
namespace {

using conf::Config;
using conf::Role;

// A copy of the config can only come in by a move: Reloader(config, ...)
// with an lvalue does not compile, so the service cannot hold it twice unawares.
static_assert(!std::is_constructible_v<Reloader, const Config&, Reloader::Parts, std::function<Config()>>);
static_assert(!std::is_constructible_v<Reloader, Config&, Reloader::Parts, std::function<Config()>>);

Config gateway(const conf::test::Lines& lines) {
	return conf::parse_config(lines.text(), "test.toml", Role::gateway);
}

/// What a Reloader needs of a running service, built from @config's static peers.
struct Service {
	explicit Service(const Config& config)
	    : table(peer_params(config)), seq_state((dir.path() / "esptun.seq").string(), table,
	                                            key_fingerprints(peer_params(config)), "") {}
	Reloader::Parts parts() { return {table, seq_state, nullptr, routes, 0}; }

	conf::test::TempDir dir;
	tunnel::SaTable table;
	SeqState seq_state;
	platform::NetConfigGuard routes;
};

} // namespace

TEST_CASE("the reloader holds the config it was started with, moved in, not copied") {
	Config config = gateway(conf::test::gateway_lines());
	Service service(config);
	const conf::PeerConfig* peers = config.peers.data();
	Reloader reloader(std::move(config), service.parts(), [] { return Config{}; });
	// The same peers in memory: the vector was handed over, not copied.
	CHECK(reloader.config().peers.data() == peers);
	CHECK(reloader.config().peers.size() == 2);
	CHECK(config.peers.empty());
}

TEST_CASE("a reload compares the new config with the one the reloader holds") {
	const conf::test::Lines lines = conf::test::gateway_lines();
	Config config = gateway(lines);
	Service service(config);
	conf::test::Lines next = lines;
	Reloader reloader(std::move(config), service.parts(), [&next] { return gateway(next); });

	CHECK(reloader.reload() == "nothing to change: 2 peer(s) as before");
	CHECK(reloader.config().tunnel.mtu == 1400);

	next.set(5, "mtu = 1300"); // only a restart applies it
	CHECK_THROWS_WITH_AS(reloader.reload(), doctest::Contains("only a restart can apply"), ReloadRefused);
	CHECK(reloader.config().tunnel.mtu == 1400);
	CHECK(reloader.config().peers.size() == 2);
}

} // namespace esptun::service
