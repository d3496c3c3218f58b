// tun_io selection (run_service step 2) and the status JSON's "tun_io" object.
#include "datapath/tun_port.hpp"
#include "service/service.hpp"
#include "service/tun_port_choice.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

using namespace esptun;

TEST_CASE("tun_io = direct never touches vhost-net") {
	service::TunIoChoice c = service::choose_tun_io(conf::TunIo::direct, "/nonexistent/vhost-net");
	CHECK(c.mode == "direct");
	CHECK(!c.vhost);
	CHECK(c.reason == "tun_io = \"direct\" in the config");
}

TEST_CASE("tun_io = auto falls back to direct I/O with a one-line reason naming the device") {
	service::TunIoChoice c = service::choose_tun_io(conf::TunIo::automatic, "/nonexistent/vhost-net");
	CHECK(c.mode == "direct");
	CHECK(!c.vhost);
	CHECK(
	    c.reason ==
	    "vhost-net unavailable: /nonexistent/vhost-net: No such file or directory; using direct tun I/O");
	CHECK(c.reason.find('\n') == std::string::npos);
}

TEST_CASE("on this host, auto uses vhost-net if /dev/vhost-net exists and otherwise says why not") {
	service::TunIoChoice c = service::choose_tun_io(conf::TunIo::automatic);
	if (::access("/dev/vhost-net", F_OK) != 0) {
		CHECK(c.mode == "direct");
		CHECK(
		    c.reason ==
		    "vhost-net unavailable: /dev/vhost-net: No such file or directory; using direct tun I/O");
	} else {
		CHECK(c.mode == "vhost");
		CHECK(c.vhost);
	}
}

TEST_CASE("tun_io = vhost without the device is a start-up error that says what to do") {
	try {
		(void)service::choose_tun_io(conf::TunIo::vhost, "/nonexistent/vhost-net");
		FAIL("no error");
	} catch (const std::runtime_error& e) {
		const std::string m = e.what();
		CHECK(m.find("tun_io = \"vhost\": /nonexistent/vhost-net: No such file or directory") == 0);
		CHECK(m.find("tun_io = \"auto\"") != std::string::npos);
	}
}

TEST_CASE("the status JSON reports the tun_io mode, reason, threshold and counters") {
	service::ServiceInfo info;
	info.tun_io_mode = "vhost";
	info.tun_io_reason = "r";
	info.direct_write_max = 4;
	info.busy_poll_us = 50;
	info.wake_poll_us = 40;
	DataPathStats stats;
	tunnel::SaTable table({});
	// Before the port exists (and in direct mode) every counter is present and zero.
	std::string s = service::render_status(info, stats, table);
	CHECK(s.find(R"("tun_io":{"mode":"vhost","reason":"r","direct_write_max":4,"offloads":"",)"
	             R"("gso_reads":0,"gso_segments":0,"gro_writes":0,"gro_segments":0,"offload_errors":0,)"
	             R"("rx_ring_packets":0,)"
	             R"("tx_ring_packets":0,"direct_writes":0,"kicks":0,"rx_kicks":0,"tx_kicks":0,)"
	             R"("rx_kicks_suppressed":0,"tx_kicks_suppressed":0,"needless_kicks":0,)"
	             R"("call_wakeups":0,"ring_full":0,"device_errors":0,)"
	             R"("tun_syscalls":{"read":0,"write":0,"kick":0},"polls":0,"poll_waits":0,)"
	             R"("busy_poll_us":50,"busy_polls":0,"busy_poll_hits":0,)"
	             R"("wake_poll_us":40,"wake_polls":0,"wake_poll_hits":0})") != std::string::npos);
	datapath::TunIoStats t;
	t.rx_ring_packets.add(10);
	t.tx_ring_packets.add(20);
	t.direct_writes.add(3);
	t.rx_kicks.add(1);
	t.tx_kicks.add(2);
	t.rx_kicks_suppressed.add(21);
	t.tx_kicks_suppressed.add(22);
	t.needless_kicks.add(23);
	t.call_wakeups.add(5);
	t.ring_full.add(6);
	t.device_errors.add(7);
	t.tun_reads.add(8);
	t.tun_writes.add(9);
	t.polls.add(11);
	t.poll_waits.add(10);
	t.busy_polls.add(17);
	t.busy_poll_hits.add(18);
	t.wake_polls.add(19);
	t.wake_poll_hits.add(20);
	t.gso_reads.add(12);
	t.gso_segments.add(13);
	t.gro_writes.add(14);
	t.gro_segments.add(15);
	t.offload_errors.add(16);
	info.tun_offloads = "csum tso4 tso6";
	info.tun_io_stats = &t;
	s = service::render_status(info, stats, table);
	CHECK(s.find(R"("offloads":"csum tso4 tso6","gso_reads":12,"gso_segments":13,"gro_writes":14,)"
	             R"("gro_segments":15,"offload_errors":16,)") != std::string::npos);
	CHECK(s.find(R"("rx_ring_packets":10,"tx_ring_packets":20,"direct_writes":3,"kicks":3,"rx_kicks":1,)"
	             R"("tx_kicks":2,"rx_kicks_suppressed":21,"tx_kicks_suppressed":22,"needless_kicks":23,)"
	             R"("call_wakeups":5,"ring_full":6,"device_errors":7,)"
	             R"("tun_syscalls":{"read":8,"write":9,"kick":3},"polls":11,"poll_waits":10,)"
	             R"("busy_poll_us":50,"busy_polls":17,"busy_poll_hits":18,)"
	             R"("wake_poll_us":40,"wake_polls":19,"wake_poll_hits":20})") != std::string::npos);
}
