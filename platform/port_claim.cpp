// PortClaim: a probe bind without SO_REUSEPORT under a lock; see port_claim.hpp.
#include "platform/port_claim.hpp"

#include "base/error.hpp"
#include "platform/sockaddr.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>

namespace esptun::platform {
namespace {

/// The lock's abstract name (a leading NUL byte, unix(7)): per network
/// namespace, like the ports it guards.
constexpr char kLockName[] = "esptun-udp-port-claim";
/// How long to wait for another endpoint's start-up to finish its binds.
constexpr auto kLockWait = std::chrono::seconds(5);

/**
 * take_lock() - bind the abstract socket kLockName, waiting while another
 * process holds it. Throws SystemError.
 */
UniqueFd take_lock() {
	UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	if (!fd) throw_errno("socket for the port-claim lock");
	sockaddr_un sa{};
	sa.sun_family = AF_UNIX;
	std::copy(std::begin(kLockName), std::end(kLockName) - 1, sa.sun_path + 1);
	const auto len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + sizeof kLockName - 1);
	const auto deadline = std::chrono::steady_clock::now() + kLockWait;
	while (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) != 0) {
		const int err = errno;
		if (err != EADDRINUSE)
			throw SystemError(err, std::string("bind the port-claim lock @") + kLockName);
		if (std::chrono::steady_clock::now() >= deadline)
			throw SystemError(
			    err, std::string("bind the port-claim lock @") + kLockName,
			    "another esptun endpoint has been binding its ports for 5 s; try again");
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	return fd;
}

/// probe() - 0 when a socket without SO_REUSEPORT can bind @listen (as the
/// workers' sockets would: dual-stack on [::]), else errno.
int probe(const Endpoint& listen) {
	const int af = address_family(listen.addr.family);
	UniqueFd fd(::socket(af, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP));
	if (!fd) throw_errno("socket for", to_string(listen));
	if (af == AF_INET6) {
		const int off = 0;
		if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0)
			throw_errno("IPV6_V6ONLY=0 on", to_string(listen));
	}
	sockaddr_storage ss;
	const socklen_t len = to_sockaddr(listen, af, ss);
	return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) == 0 ? 0 : errno;
}

} // namespace

PortClaim PortClaim::take(const Endpoint& listen) {
	if (listen.port == 0) return PortClaim(UniqueFd());
	UniqueFd lock = take_lock();
	if (const int err = probe(listen)) {
		const std::string port = std::to_string(listen.port);
		if (err == EADDRINUSE)
			throw SystemError(
			    err, "listen " + to_string(listen),
			    "UDP port " + port +
			        " is already used by another endpoint, another esptun or another program, on "
			        "this or an overlapping address; it is not shared: stop the other one or "
			        "choose another listen port");
		throw SystemError(err, "bind UDP " + to_string(listen));
	}
	return PortClaim(std::move(lock));
}

} // namespace esptun::platform
