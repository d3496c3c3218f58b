// UniqueFd ownership, eventfd helpers and Endpoint <-> sockaddr conversion:
// no privileges needed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>

#include "platform/sockaddr.hpp"
#include "platform/unique_fd.hpp"
#include "tests/unit/platform/platform_test_util.hpp"

using namespace esptun;
using namespace esptun::platform;
using esptun::SystemError;
using esptun::platform::test::endpoint;

TEST_CASE("UniqueFd closes on destruction and moves ownership") {
	int raw = -1;
	{
		UniqueFd a = make_eventfd();
		raw = a.get();
		REQUIRE(raw >= 0);
		UniqueFd b(std::move(a));
		CHECK_FALSE(a);
		CHECK(b.get() == raw);
		CHECK(::fcntl(raw, F_GETFD) >= 0);
		UniqueFd c;
		c = std::move(b);
		CHECK(c.get() == raw);
	}
	CHECK(::fcntl(raw, F_GETFD) == -1);
	CHECK(errno == EBADF);
}

TEST_CASE("UniqueFd::release hands the descriptor over without closing it") {
	UniqueFd a = make_eventfd();
	const int raw = a.release();
	CHECK_FALSE(a);
	CHECK(::fcntl(raw, F_GETFD) >= 0);
	UniqueFd again(raw); // closes it at the end
}

TEST_CASE("eventfd counts signals and reports EAGAIN when drained") {
	UniqueFd efd = make_eventfd();
	CHECK(eventfd_drain(efd.get()).would_block());
	CHECK(eventfd_signal(efd.get()) == 0);
	CHECK(eventfd_signal(efd.get()) == 0);
	const IoResult r = eventfd_drain(efd.get());
	CHECK(r.ok());
	CHECK(r.n == 2);
	CHECK(eventfd_drain(efd.get()).err == EAGAIN);
}

TEST_CASE("an IPv4 endpoint is IPv4-mapped on an IPv6 socket and unmapped on the way back") {
	const Endpoint v4 = endpoint("192.0.2.7:4500");
	sockaddr_storage sa;
	REQUIRE(to_sockaddr(v4, AF_INET6, sa) == sizeof(sockaddr_in6));
	const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&sa);
	CHECK(IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr));
	CHECK(ntohs(sin6->sin6_port) == 4500);
	const auto back = from_sockaddr(sa, sizeof(sockaddr_in6));
	REQUIRE(back);
	CHECK(*back == v4);
	CHECK(back->addr.family == Family::v4);
}

TEST_CASE("IPv4 and IPv6 endpoints round-trip through sockaddr") {
	for (const char* text : {"203.0.113.1:1", "[2001:db8::1]:4500", "[::1]:65535"}) {
		CAPTURE(text);
		const Endpoint ep = endpoint(text);
		sockaddr_storage sa;
		const socklen_t len = to_sockaddr(ep, ep.addr.family == Family::v4 ? AF_INET : AF_INET6, sa);
		REQUIRE(len > 0);
		CHECK(from_sockaddr(sa, len) == ep);
	}
}

TEST_CASE("an IPv6 endpoint cannot be expressed for an IPv4 socket") {
	sockaddr_storage sa;
	CHECK(to_sockaddr(endpoint("[2001:db8::1]:4500"), AF_INET, sa) == 0);
}

TEST_CASE("from_sockaddr rejects short lengths and unknown families") {
	sockaddr_storage sa{};
	REQUIRE(to_sockaddr(endpoint("192.0.2.1:9"), AF_INET, sa) > 0);
	CHECK_FALSE(from_sockaddr(sa, 4));
	sa.ss_family = AF_UNIX;
	CHECK_FALSE(from_sockaddr(sa, sizeof sa));
}
