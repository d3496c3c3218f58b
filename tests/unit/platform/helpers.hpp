// Shared helpers for the platform tests: a fresh network namespace per
// privileged test, and parsing shorthands.
#pragma once

#include <cerrno>
#include <cstring>
#include <doctest/doctest.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <string>

#include "platform/netlink.hpp"
#include "tunnel/inet.hpp"

namespace esptun::platform::test {

/**
 * enter_fresh_netns() - move the test thread into a new, empty network namespace
 *
 * Nothing a test creates (tun devices, addresses, routes) can touch the
 * host's interfaces, and the namespace disappears with everything in it when
 * the next test replaces it. Only loopback exists; it is brought up here.
 * Fails (does not skip) without root: these tests must run in CI.
 */
inline void enter_fresh_netns() {
	const int rc = ::unshare(CLONE_NEWNET);
	const std::string why = rc == 0 ? "" : std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
	REQUIRE_MESSAGE(rc == 0, (why + " (the platform tests need root)"));
	set_link_up(static_cast<int>(::if_nametoindex("lo")));
}

/// ip() - parse an address or fail the test
inline IpAddress ip(const char* text) {
	auto a = parse_ip(text);
	REQUIRE_MESSAGE(a.has_value(), std::string(text));
	return *a;
}

/// prefix() - parse a prefix or fail the test
inline IpPrefix prefix(const char* text) {
	auto p = parse_prefix(text);
	REQUIRE_MESSAGE(p.has_value(), std::string(text));
	return *p;
}

/// endpoint() - parse an endpoint or fail the test
inline Endpoint endpoint(const char* text) {
	auto e = parse_endpoint(text);
	REQUIRE_MESSAGE(e.has_value(), std::string(text));
	return *e;
}

/// any_port() - @addr with port 0, for bind() to let the kernel pick a port
/// (parse_endpoint() rejects port 0 on purpose)
inline Endpoint any_port(const char* addr) { return Endpoint{ip(addr), 0}; }

/// wait_readable() - poll @fd for input for at most @ms milliseconds
inline bool wait_readable(int fd, int ms = 2000) {
	pollfd p{fd, POLLIN, 0};
	return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

} // namespace esptun::platform::test
