// add_unreachable_route / del_unreachable_route, each test in its own network
// namespace: a route through a tun with a lower metric wins over the
// unreachable one; the unreachable one outlives the tun and makes a sender
// fail at once; EEXIST for a second one; delete by prefix and metric.
#include <cerrno>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.hpp"
#include "platform/netlink.hpp"
#include "platform/sockaddr.hpp"
#include "platform/tun.hpp"
#include "tests/unit/platform/platform_test_util.hpp"

using namespace esptun;
using namespace esptun::platform;
using namespace esptun::platform::test;

namespace {

constexpr uint32_t kMetric = 2000000;

/// The errno of one UDP sendto() to @dst port 9, or 0 when it was sent.
int send_errno(const char* dst) {
	const Endpoint to{ip(dst), 9};
	const int family = to.addr.family == Family::v6 ? AF_INET6 : AF_INET;
	const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0);
	sockaddr_storage ss{};
	const socklen_t len = to_sockaddr(to, family, ss);
	const char byte = 'x';
	const ssize_t n = ::sendto(fd, &byte, 1, 0, reinterpret_cast<const sockaddr*>(&ss), len);
	const int err = n < 0 ? errno : 0;
	::close(fd);
	return err;
}

} // namespace

TEST_CASE("an unreachable route under a tun route takes over when the tun goes") {
	enter_fresh_netns();
	for (const char* half : {"0.0.0.0/1", "::/1"})
		add_unreachable_route(prefix(half), kMetric);
	{
		TunDevice tun = open_tun("esp0");
		set_link_up(tun.ifindex);
		add_address(tun.ifindex, prefix("10.99.0.1/24"));
		add_address(tun.ifindex, prefix("fd00:99::1/64"));
		add_route(prefix("0.0.0.0/1"), tun.ifindex);
		add_route(prefix("::/1"), tun.ifindex);
		// The tun's routes have the kernel's default metric (0, 1024): they win.
		auto r4 = get_route(ip("10.1.2.3"));
		REQUIRE(r4);
		CHECK(r4->ifindex == tun.ifindex);
		auto r6 = get_route(ip("2001:db8::1"));
		REQUIRE(r6);
		CHECK(r6->ifindex == tun.ifindex);
		CHECK(send_errno("10.1.2.3") == 0);
	} // the tun and its routes go
	CHECK_FALSE(get_route(ip("10.1.2.3")));
	CHECK_FALSE(get_route(ip("2001:db8::1")));
	CHECK(send_errno("10.1.2.3") == EHOSTUNREACH);
	const int err6 = send_errno("2001:db8::1");
	CHECK((err6 == EHOSTUNREACH || err6 == ENETUNREACH));
}

TEST_CASE("add_unreachable_route refuses a second one; del_unreachable_route removes it once") {
	enter_fresh_netns();
	for (const char* half : {"128.0.0.0/1", "8000::/1"}) {
		add_unreachable_route(prefix(half), kMetric);
		try {
			add_unreachable_route(prefix(half), kMetric);
			FAIL("a second unreachable route was added");
		} catch (const SystemError& e) {
			CHECK(e.err() == EEXIST);
		}
		del_unreachable_route(prefix(half), kMetric);
		CHECK_THROWS_AS(del_unreachable_route(prefix(half), kMetric), SystemError);
	}
	CHECK(send_errno("200.1.2.3") == ENETUNREACH); // no route at all now
}
