// Helpers for the platform tests: a fresh network namespace per privileged
// test, parsing shorthands, and datagram batches to send and receive.
#pragma once

#include <cerrno>
#include <cstring>
#include <doctest/doctest.h>
#include <net/if.h>
#include <sched.h>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/inet.hpp"
#include "platform/netlink.hpp"
#include "platform/udp_socket.hpp"
#include "tests/unit/support/poll_test_util.hpp"

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

// wait_readable() is every test's (support/poll_test_util.hpp).
using ::esptun::test::wait_readable;

/// bytes_of() - the bytes of @s, for a SendSlot
inline std::span<const uint8_t> bytes_of(const std::string& s) {
	return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

/// numbered() - datagram @i of a GSO test: @size bytes, distinct per @i
inline std::string numbered(size_t i, size_t size) {
	std::string s = "datagram " + std::to_string(i) + " ";
	s.resize(size, char('a' + i % 26));
	return s;
}

/// Receiver - a receive buffer set with one RecvSlot per buffer.
struct Receiver {
	explicit Receiver(size_t n, size_t size = 2048) : bufs(n, std::vector<uint8_t>(size)), slots(n) {
		for (size_t i = 0; i < n; i++)
			slots[i] = RecvSlot(bufs[i]);
	}
	std::string text(size_t i) const {
		return {bufs[i].begin(), bufs[i].begin() + static_cast<ptrdiff_t>(slots[i].len)};
	}
	std::vector<std::vector<uint8_t>> bufs;
	std::vector<RecvSlot> slots;
};

/**
 * receive_all() - collect @want datagrams from @src (a UdpSocket or a
 * UdpEngine), polling @poll_fd, in arrival order with their senders
 */
template <class Source>
std::vector<std::pair<std::string, Endpoint>> receive_all(Source& src, int poll_fd, size_t want) {
	std::vector<std::pair<std::string, Endpoint>> got;
	Receiver rx(64);
	while (got.size() < want && wait_readable(poll_fd)) {
		const BatchResult r = src.recv_batch(rx.slots);
		for (size_t i = 0; i < r.count; i++)
			got.emplace_back(rx.text(i), rx.slots[i].from);
		if (r.count == 0) REQUIRE(r.err == EAGAIN);
	}
	return got;
}

} // namespace esptun::platform::test
