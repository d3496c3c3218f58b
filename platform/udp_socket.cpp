// UdpSocket: bind with dual-stack and large buffers, the GSO state, and
// path_mtu(). The batched I/O lives in udp_engine.cpp.
#include "platform/udp_socket.hpp"

#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include "platform/sockaddr.hpp"
#include "platform/udp_engine.hpp"

namespace esptun::platform {

namespace {

/**
 * set_int_option() - setsockopt() for an int value
 * @fd, @level, @name, @value: as for setsockopt()
 *
 * Return: 0, or errno
 */
int set_int_option(int fd, int level, int name, int value) noexcept {
	return ::setsockopt(fd, level, name, &value, sizeof value) < 0 ? errno : 0;
}

/**
 * get_int_option() - getsockopt() for an int value. Throws SystemError.
 * @fd, @level, @name: as for getsockopt()
 * @what: option name for the error message
 */
int get_int_option(int fd, int level, int name, const char* what) {
	int value = 0;
	socklen_t len = sizeof value;
	if (::getsockopt(fd, level, name, &value, &len) < 0) throw_errno("getsockopt", what);
	return value;
}

/**
 * set_buffer() - grow one socket buffer, forced past the sysctl limit if allowed
 * @fd:     socket
 * @force:  SO_RCVBUFFORCE or SO_SNDBUFFORCE (needs CAP_NET_ADMIN)
 * @plain:  SO_RCVBUF or SO_SNDBUF (silently capped at net.core.[rw]mem_max)
 * @bytes:  size wanted
 * @what:   option name for the error message
 *
 * Failure of the forced call is normal without privileges and falls back to
 * the plain option, whose cap the kernel applies without an error.
 */
void set_buffer(int fd, int force, int plain, int bytes, const char* what) {
	if (set_int_option(fd, SOL_SOCKET, force, bytes) == 0) return;
	if (int err = set_int_option(fd, SOL_SOCKET, plain, bytes))
		throw SystemError(err, std::string("setsockopt ") + what);
}

} // namespace

UdpSocket UdpSocket::bind(const Endpoint& listen, int buffer_bytes, bool reuse_port) {
	const int af = address_family(listen.addr.family);
	const std::string where = to_string(listen);
	UniqueFd fd(::socket(af, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
	if (!fd) throw_errno("socket for", where);
	// One socket per data-path worker on the same port: the kernel hashes
	// each datagram's 4-tuple to one of them, so a peer stays on one worker.
	if (reuse_port)
		if (int err = set_int_option(fd.get(), SOL_SOCKET, SO_REUSEPORT, 1))
			throw SystemError(err, "SO_REUSEPORT on " + where);

	if (af == AF_INET6) {
		// Dual stack: with V6ONLY off, a socket bound to [::] also carries
		// IPv4 as ::ffff:a.b.c.d, so one socket serves both kinds of peer.
		// Set explicitly: the default follows net.ipv6.bindv6only.
		if (int err = set_int_option(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0))
			throw SystemError(err, "IPV6_V6ONLY=0 on " + where);
	}

	// Allow fragmentation of the outer packet. ESP-in-UDP datagrams are sized
	// from the configured tun MTU, and the real path may be narrower (PPPoE,
	// another tunnel on the way). Linux's default, IP_PMTUDISC_WANT, sets DF
	// on every datagram that fits the cached route MTU (ip_dont_fragment()),
	// so a narrower hop drops it and relies on ICMP "fragmentation needed"
	// getting back to us; where ICMP is filtered that is a silent black hole,
	// the most common tunnel failure. With DONT the kernel never sets DF:
	// routers fragment, the peer reassembles, packets keep flowing (slower,
	// but alive) until the MTU is corrected. IPv6 routers never fragment;
	// there DONT (like WANT) makes the kernel fragment locally to the path
	// MTU instead of failing the send; it is set for symmetry and so a
	// system default cannot change it.
	const int pmtu_err =
	    af == AF_INET ? set_int_option(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
	                  : set_int_option(fd.get(), IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DONT);
	if (pmtu_err) throw SystemError(pmtu_err, "MTU_DISCOVER=DONT on " + where);

	// Each datagram's outer TOS / traffic class as a control message: its
	// ECN field goes into the decapsulated packet (tunnel/ecn.hpp). An IPv6
	// socket needs both: IPv4 peers arrive on it as ::ffff:a.b.c.d.
	if (int err = set_int_option(fd.get(), IPPROTO_IP, IP_RECVTOS, 1))
		throw SystemError(err, "IP_RECVTOS on " + where);
	if (af == AF_INET6)
		if (int err = set_int_option(fd.get(), IPPROTO_IPV6, IPV6_RECVTCLASS, 1))
			throw SystemError(err, "IPV6_RECVTCLASS on " + where);

	set_buffer(fd.get(), SO_RCVBUFFORCE, SO_RCVBUF, buffer_bytes, "SO_RCVBUF");
	set_buffer(fd.get(), SO_SNDBUFFORCE, SO_SNDBUF, buffer_bytes, "SO_SNDBUF");

	sockaddr_storage sa;
	const socklen_t len = to_sockaddr(listen, af, sa);
	if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) < 0)
		throw_errno("bind UDP", where,
		            errno == EADDRINUSE ? "another socket is bound to that port" : "");
	return UdpSocket(std::move(fd), listen.addr.family);
}

Endpoint UdpSocket::local_endpoint() const {
	sockaddr_storage sa{};
	socklen_t len = sizeof sa;
	if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len) < 0) throw_errno("getsockname");
	auto ep = from_sockaddr(sa, len);
	if (!ep) throw SystemError(EAFNOSUPPORT, "getsockname");
	return *ep;
}

BufferSizes UdpSocket::buffer_sizes() const {
	return {get_int_option(fd_.get(), SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF"),
	        get_int_option(fd_.get(), SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF")};
}

BatchResult UdpSocket::recv_batch(std::span<RecvSlot> slots) noexcept {
	return MmsgEngine(*this).recv_batch(slots);
}

BatchResult UdpSocket::send_batch(std::span<const SendSlot> slots) noexcept {
	return MmsgEngine(*this).send_batch(slots);
}

UdpSocket::UdpSocket(UdpSocket&& o) noexcept
    : fd_(std::move(o.fd_)), family_(o.family_), gso_on_(o.gso_on_.load()), gro_on_(o.gro_on_.load()),
      gso_errno_(o.gso_errno_.load()), gso_trains_(o.gso_trains_.load()),
      gso_segments_(o.gso_segments_.load()) {}

bool UdpSocket::enable_gro() noexcept {
	if (set_int_option(fd_.get(), SOL_UDP, UDP_GRO, 1) != 0) return false;
	gro_on_.store(true, std::memory_order_relaxed);
	return true;
}

bool UdpSocket::enable_rx_timestamps() noexcept {
	return set_int_option(fd_.get(), SOL_SOCKET, SO_TIMESTAMPNS, 1) == 0;
}

uint64_t UdpSocket::rx_queued_bytes() const noexcept {
	uint32_t mem[SK_MEMINFO_VARS] = {};
	socklen_t len = sizeof mem;
	if (::getsockopt(fd_.get(), SOL_SOCKET, SO_MEMINFO, mem, &len) < 0 ||
	    len < (SK_MEMINFO_RMEM_ALLOC + 1) * sizeof(uint32_t))
		return 0;
	return mem[SK_MEMINFO_RMEM_ALLOC];
}

GsoStats UdpSocket::gso_stats() const noexcept {
	return {gso_on_.load(std::memory_order_relaxed), gso_errno_.load(std::memory_order_relaxed),
	        gso_trains_.load(std::memory_order_relaxed), gso_segments_.load(std::memory_order_relaxed)};
}

void UdpSocket::count_train(size_t segments) noexcept {
	gso_trains_.store(gso_trains_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
	gso_segments_.store(gso_segments_.load(std::memory_order_relaxed) + segments,
	                    std::memory_order_relaxed);
}

void UdpSocket::disable_gso(int err) noexcept {
	gso_errno_.store(err, std::memory_order_relaxed);
	gso_on_.store(false, std::memory_order_relaxed);
}

std::optional<unsigned> path_mtu(const IpAddress& dst) {
	const int af = address_family(dst.family);
	const std::string where = to_string(dst);
	UniqueFd fd(::socket(af, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP));
	if (!fd) throw_errno("socket for path MTU to", where);
	// connect() on UDP only looks up and caches the route; nothing is sent.
	// The port is irrelevant to routing but must be non-zero for IPv6.
	sockaddr_storage sa;
	const socklen_t len = to_sockaddr(Endpoint{dst, 9}, af, sa);
	if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) < 0) {
		if (errno == ENETUNREACH || errno == EHOSTUNREACH) return std::nullopt;
		throw_errno("connect for path MTU to", where);
	}
	const int mtu = af == AF_INET ? get_int_option(fd.get(), IPPROTO_IP, IP_MTU, "IP_MTU")
	                              : get_int_option(fd.get(), IPPROTO_IPV6, IPV6_MTU, "IPV6_MTU");
	return static_cast<unsigned>(mtu);
}

} // namespace esptun::platform
