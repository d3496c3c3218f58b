// NetnsGuard and enter_netns(): named namespaces as "ip netns" makes them.
#include <doctest/doctest.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "platform/netns.hpp"
#include "platform/tun.hpp"
#include "platform_test_util.hpp"

using namespace esptun;
using namespace esptun::platform;
using esptun::SystemError;
using namespace esptun::platform::test;

namespace {

bool exists(const std::string& path) {
	struct stat st;
	return ::stat(path.c_str(), &st) == 0;
}

} // namespace

TEST_CASE("NetnsGuard creates a separate named namespace and removes its name") {
	enter_fresh_netns();
	const std::string name = "esptun-unit-" + std::to_string(::getpid());
	std::string path;
	{
		NetnsGuard ns(name);
		path = ns.path();
		CHECK(path == "/run/netns/" + name);
		CHECK(exists(path));
		CHECK_THROWS_AS(NetnsGuard{name}, SystemError); // name taken

		TunDevice here = open_tun("esp0");
		bool entered = false;
		bool tun_visible = true;
		int other_tun_ifindex = 0;
		std::thread([&] {
			enter_netns(name);
			entered = true;
			tun_visible = ::if_nametoindex("esp0") != 0;
			// The same name is free inside the other namespace.
			other_tun_ifindex = open_tun("esp0").ifindex;
		}).join();
		CHECK(entered);
		CHECK_FALSE(tun_visible);
		CHECK(other_tun_ifindex > 0);
		// This thread did not move.
		CHECK(::if_nametoindex("esp0") == static_cast<unsigned>(here.ifindex));
	}
	CHECK_FALSE(exists(path));
}

TEST_CASE("enter_netns on a missing namespace is a SystemError naming it") {
	CHECK_THROWS_WITH_AS(
	    enter_netns("esptun-no-such-netns"),
	    doctest::Contains("open /run/netns/esptun-no-such-netns: No such file or directory"),
	    SystemError);
}

TEST_CASE("NetnsGuard refuses names with a slash") {
	CHECK_THROWS_AS(NetnsGuard{"../etc"}, SystemError);
	CHECK_THROWS_AS(NetnsGuard{""}, SystemError);
}
