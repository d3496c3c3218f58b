// Conversions between the project's Endpoint/IpAddress values and the
// kernel's sockaddr structures, including IPv4-mapped IPv6 (::ffff:a.b.c.d)
// for dual-stack sockets.
#pragma once

#include <optional>
#include <string>
#include <sys/socket.h>

#include "base/inet.hpp"

namespace esptun::platform {

/**
 * to_sockaddr() - fill a sockaddr for sending to @ep on a socket of @socket_family
 * @ep:            destination
 * @socket_family: AF_INET or AF_INET6 (the socket's own family)
 * @out:           filled in
 *
 * On an AF_INET6 socket an IPv4 @ep becomes ::ffff:a.b.c.d, which a dual-stack
 * socket (IPV6_V6ONLY=0) sends as plain IPv4.
 * Return: the address length, or 0 when @ep cannot be reached from such a
 * socket (IPv6 on an AF_INET socket)
 */
socklen_t to_sockaddr(const Endpoint& ep, int socket_family, sockaddr_storage& out) noexcept;

/**
 * from_sockaddr() - the Endpoint a received sockaddr names
 * @sa:  from recvmsg(), getsockname() and friends
 * @len: its length
 *
 * IPv4-mapped IPv6 addresses become plain IPv4 Endpoints, so a peer is the
 * same Endpoint whichever socket it arrived on. The IPv6 scope id is dropped.
 * Return: the Endpoint, or nullopt for other families or a short @len
 */
std::optional<Endpoint> from_sockaddr(const sockaddr_storage& sa, socklen_t len) noexcept;

/**
 * address_family() - AF_INET or AF_INET6 for @f
 * @f: the project's family value
 */
constexpr int address_family(Family f) noexcept { return f == Family::v4 ? AF_INET : AF_INET6; }

/**
 * unix_socket_listening() - whether a stream connection to the AF_UNIX
 * socket at @path is accepted now (the connection is closed at once)
 *
 * The socket file appears when the listener binds, before it listens: a
 * file that exists is not yet a socket that answers (ECONNREFUSED until
 * listen()). False also for no file, or a file nothing listens on any more
 * (a process that died or could not remove it); true when the check itself
 * cannot be made (no socket to connect with), so the caller's own request
 * says what is wrong.
 */
bool unix_socket_listening(const std::string& path) noexcept;

} // namespace esptun::platform
