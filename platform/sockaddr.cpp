// Endpoint <-> sockaddr conversions (see sockaddr.hpp).
#include "platform/sockaddr.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

namespace esptun::platform {

namespace {

/// The ::ffff:0:0/96 prefix of IPv4-mapped IPv6 addresses (RFC 4291 2.5.5.2).
constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

} // namespace

socklen_t to_sockaddr(const Endpoint& ep, int socket_family, sockaddr_storage& out) noexcept {
	std::memset(&out, 0, sizeof out);
	if (socket_family == AF_INET) {
		if (ep.addr.family != Family::v4) return 0;
		auto* sin = reinterpret_cast<sockaddr_in*>(&out);
		sin->sin_family = AF_INET;
		sin->sin_port = htons(ep.port);
		std::memcpy(&sin->sin_addr, ep.addr.bytes.data(), 4);
		return sizeof(sockaddr_in);
	}
	if (socket_family != AF_INET6) return 0;
	auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(ep.port);
	if (ep.addr.family == Family::v4) {
		std::memcpy(sin6->sin6_addr.s6_addr, kMappedPrefix, sizeof kMappedPrefix);
		std::memcpy(sin6->sin6_addr.s6_addr + 12, ep.addr.bytes.data(), 4);
	} else {
		std::memcpy(sin6->sin6_addr.s6_addr, ep.addr.bytes.data(), 16);
	}
	return sizeof(sockaddr_in6);
}

std::optional<Endpoint> from_sockaddr(const sockaddr_storage& sa, socklen_t len) noexcept {
	Endpoint ep;
	if (sa.ss_family == AF_INET && len >= sizeof(sockaddr_in)) {
		const auto* sin = reinterpret_cast<const sockaddr_in*>(&sa);
		ep.addr.family = Family::v4;
		std::memcpy(ep.addr.bytes.data(), &sin->sin_addr, 4);
		ep.port = ntohs(sin->sin_port);
		return ep;
	}
	if (sa.ss_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
		const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&sa);
		const uint8_t* a = sin6->sin6_addr.s6_addr;
		ep.port = ntohs(sin6->sin6_port);
		if (std::memcmp(a, kMappedPrefix, sizeof kMappedPrefix) == 0) {
			ep.addr.family = Family::v4;
			std::memcpy(ep.addr.bytes.data(), a + 12, 4);
		} else {
			ep.addr.family = Family::v6;
			std::memcpy(ep.addr.bytes.data(), a, 16);
		}
		return ep;
	}
	return std::nullopt;
}

bool unix_socket_listening(const std::string& path) noexcept {
	sockaddr_un sa{};
	sa.sun_family = AF_UNIX;
	if (path.empty() || path.size() >= sizeof sa.sun_path) return false;
	path.copy(sa.sun_path, path.size());
	const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return true;
	const bool refused = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 &&
	                     (errno == ECONNREFUSED || errno == ENOENT || errno == ENOTSOCK);
	::close(fd);
	return !refused;
}

} // namespace esptun::platform
