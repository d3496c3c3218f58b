// PortClaim: the probe that keeps a second endpoint out of the first one's
// SO_REUSEPORT group, on the same, a wildcard or a dual-stack address.
#include "platform/port_claim.hpp"
#include "platform/udp_socket.hpp"
#include "tests/unit/platform/platform_test_util.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace esptun;
using namespace esptun::platform;
using namespace esptun::platform::test;

namespace {

/// @addr with @port.
Endpoint at(const char* addr, uint16_t port) { return Endpoint{ip(addr), port}; }

} // namespace

TEST_CASE("PortClaim refuses a port an SO_REUSEPORT group holds, naming the port") {
	enter_fresh_netns();
	// The first endpoint: two workers' sockets in one SO_REUSEPORT group.
	UdpSocket w0 = UdpSocket::bind(any_port("127.0.0.1"), UdpSocket::kDefaultBufferBytes, true);
	const uint16_t port = w0.local_endpoint().port;
	UdpSocket w1 = UdpSocket::bind(at("127.0.0.1", port), UdpSocket::kDefaultBufferBytes, true);
	const std::string why = "UDP port " + std::to_string(port) + " is already used by another endpoint";
	// Without the claim, a second group would join silently: that is the bug.
	CHECK_NOTHROW(UdpSocket::bind(at("127.0.0.1", port), UdpSocket::kDefaultBufferBytes, true));
	for (const char* addr : {"127.0.0.1", "0.0.0.0", "::"}) {
		CAPTURE(addr);
		CHECK_THROWS_WITH_AS(PortClaim::take(at(addr, port)), doctest::Contains(why.c_str()),
		                     SystemError);
	}
}

TEST_CASE("PortClaim refuses a specific address under a wildcard group, and allows another port") {
	enter_fresh_netns();
	UdpSocket w0 = UdpSocket::bind(any_port("0.0.0.0"), UdpSocket::kDefaultBufferBytes, true);
	const uint16_t port = w0.local_endpoint().port;
	CHECK_THROWS_AS(PortClaim::take(at("127.0.0.1", port)), SystemError);
	// A free port (one the kernel just handed out and took back): claimed,
	// and the group binds while the claim is held.
	const uint16_t free_port = UdpSocket::bind(any_port("127.0.0.1")).local_endpoint().port;
	const PortClaim claim = PortClaim::take(at("127.0.0.1", free_port));
	CHECK_NOTHROW(UdpSocket::bind(at("127.0.0.1", free_port), UdpSocket::kDefaultBufferBytes, true));
	// Port 0 (the kernel picks) needs no claim.
	CHECK_NOTHROW(PortClaim::take(at("127.0.0.1", 0)));
}
