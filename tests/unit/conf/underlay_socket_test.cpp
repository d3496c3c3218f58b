// [tunnel] udp_gso, socket_buffer, workers, busy_poll_us, wake_poll_us, the queue limit and worker_priority:
// the underlay and worker knobs.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

namespace {

TunnelConfig tunnel_with(const std::string& line) {
	return parse_config(gateway_lines().insert_after(6, line).text(), "test.toml", Role::gateway).tunnel;
}

} // namespace

TEST_CASE("udp_gso defaults to on and can be switched off") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.udp_gso);
	CHECK_FALSE(tunnel_with("udp_gso = false").udp_gso);
	CHECK(tunnel_with("udp_gso = true").udp_gso);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "udp_gso = 1"), Role::gateway, 7, "must be");
}

TEST_CASE("socket_buffer defaults to 4 MiB and takes 64 KiB up to 1 GiB") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.socket_buffer ==
	      4u << 20);
	CHECK(tunnel_with("socket_buffer = 65536").socket_buffer == 65536);
	CHECK(tunnel_with("socket_buffer = 33554432").socket_buffer == 32u << 20);
	CHECK(tunnel_with("socket_buffer = 1073741824").socket_buffer == 1u << 30);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = 65535"), Role::gateway, 7,
	                   "use 65536 (64 KiB) up to 1073741824 (1 GiB) bytes");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = 1073741825"), Role::gateway, 7,
	                   "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "socket_buffer = \"4M\""), Role::gateway, 7,
	                   "must be an integer");
}

TEST_CASE("workers: 0 (one per CPU) by default, 0..64 accepted") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.workers == 0);
	CHECK(tunnel_with("workers = 2").workers == 2);
	CHECK(tunnel_with("workers = 64").workers == 64);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "workers = 65"), Role::gateway, 7,
	                   "use 0 (one per CPU) up to 64");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "workers = -1"), Role::gateway, 7, "out of range");
}

TEST_CASE("io_engine: auto by default, uring or mmsg by name") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.io_engine ==
	      IoEngine::automatic);
	CHECK(tunnel_with("io_engine = \"uring\"").io_engine == IoEngine::uring);
	CHECK(tunnel_with("io_engine = \"mmsg\"").io_engine == IoEngine::mmsg);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "io_engine = \"epoll\""), Role::gateway, 7,
	                   "use \"auto\", \"uring\" or \"mmsg\"");
}

TEST_CASE("udp_gro: on by default, can be switched off") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.udp_gro);
	CHECK_FALSE(tunnel_with("udp_gro = false").udp_gro);
}

TEST_CASE("tun_offload: on by default, can be switched off") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.tun_offload);
	CHECK_FALSE(tunnel_with("tun_offload = false").tun_offload);
}

TEST_CASE("wake_poll_us: 50 by default, 0 (off) up to 1000") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.wake_poll_us == 50);
	CHECK(tunnel_with("wake_poll_us = 0").wake_poll_us == 0);
	CHECK(tunnel_with("wake_poll_us = 1000").wake_poll_us == 1000);
	CHECK_CONFIG_ERROR(
	    gateway_lines().insert_after(6, "wake_poll_us = 1001"), Role::gateway, 7,
	    "wake_poll_us 1001 is out of range; use 0 (off) up to 1000 microseconds (default 50)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "wake_poll_us = true"), Role::gateway, 7,
	                   "must be an integer");
}

TEST_CASE("busy_poll_us: off (0) by default, up to 1000") {
	CHECK(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.busy_poll_us == 0);
	CHECK(tunnel_with("busy_poll_us = 50").busy_poll_us == 50);
	CHECK(tunnel_with("busy_poll_us = 1000").busy_poll_us == 1000);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "busy_poll_us = 1001"), Role::gateway, 7,
	                   "use 0 (off) up to 1000 microseconds (default 0)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "busy_poll_us = -5"), Role::gateway, 7,
	                   "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "busy_poll_us = 0.5"), Role::gateway, 7,
	                   "must be an integer");
}

TEST_CASE("queue_target_us / queue_interval_ms: 1 ms in 20 ms by default, target 0 switches it off") {
	const TunnelConfig def = parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel;
	CHECK(def.queue_target_us == 1000);
	CHECK(def.queue_interval_ms == 20);
	CHECK(tunnel_with("queue_target_us = 0").queue_target_us == 0);
	CHECK(tunnel_with("queue_target_us = 5000").queue_target_us == 5000);
	CHECK(tunnel_with("queue_interval_ms = 100").queue_interval_ms == 100);
	// Off: no interval to be longer than.
	CHECK(
	    parse_config(gateway_lines().insert_after(6, "queue_target_us = 0\nqueue_interval_ms = 1").text(),
	                 "test.toml", Role::gateway)
	        .tunnel.queue_interval_ms == 1);
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "queue_target_us = 100001"), Role::gateway, 7,
	                   "queue_target_us 100001 is out of range; use 0 (no limit) up to 100000 "
	                   "microseconds (default 1000)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "queue_interval_ms = 0"), Role::gateway, 7,
	                   "queue_interval_ms 0 is out of range; use 1 up to 1000 milliseconds (default 20)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "queue_target_us = 20000"), Role::gateway, 7,
	                   "queue_target_us (20000) must be shorter than queue_interval_ms (20 ms)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "queue_target_us = \"1ms\""), Role::gateway, 7,
	                   "must be an integer");
}

TEST_CASE("worker_priority: realtime by default for a client, normal for a gateway; either on request") {
	CHECK_FALSE(parse_config(gateway_lines().text(), "test.toml", Role::gateway).tunnel.realtime_workers);
	CHECK(tunnel_with("worker_priority = \"realtime\"").realtime_workers);
	CHECK_FALSE(tunnel_with("worker_priority = \"normal\"").realtime_workers);
	CHECK(parse_config(client_lines().text(), "test.toml", Role::client).tunnel.realtime_workers);
	CHECK_FALSE(parse_config(client_lines().insert_after(1, "worker_priority = \"normal\"").text(),
	                         "test.toml", Role::client)
	                .tunnel.realtime_workers);
	CHECK_CONFIG_ERROR(
	    gateway_lines().insert_after(6, "worker_priority = \"high\""), Role::gateway, 7,
	    "worker_priority 'high' is unknown; use \"realtime\" or \"normal\" (the default for a "
	    "client is realtime, for a gateway normal)");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(6, "worker_priority = true"), Role::gateway, 7,
	                   "must be a string");
}
