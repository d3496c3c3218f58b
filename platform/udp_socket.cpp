// UdpSocket: bind with dual-stack and large buffers, recvmmsg/sendmmsg
// batches, and path_mtu().
#include "platform/udp_socket.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include "platform/sockaddr.hpp"

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

UdpSocket UdpSocket::bind(const Endpoint& listen, int buffer_bytes) {
	const int af = address_family(listen.addr.family);
	const std::string where = to_string(listen);
	UniqueFd fd(::socket(af, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
	if (!fd) throw_errno("socket for", where);

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
	const size_t n = std::min(slots.size(), kMaxBatch);
	if (n == 0) return {0, 0};
	// On the stack (about 13 KiB): no allocation, and concurrent calls from
	// several threads on one socket stay safe.
	std::array<mmsghdr, kMaxBatch> msgs;
	std::array<iovec, kMaxBatch> iov;
	std::array<sockaddr_storage, kMaxBatch> addrs;
	for (size_t i = 0; i < n; i++) {
		iov[i] = {slots[i].buf.data(), slots[i].buf.size()};
		msgs[i] = {};
		msgs[i].msg_hdr.msg_name = &addrs[i];
		msgs[i].msg_hdr.msg_namelen = sizeof addrs[i];
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	int r;
	do
		r = ::recvmmsg(fd_.get(), msgs.data(), static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
	while (r < 0 && errno == EINTR);
	// An error after some datagrams arrived is kept by the kernel in
	// sk_err and reported by the next call, so nothing is lost here.
	if (r < 0) return {0, errno};
	for (size_t i = 0; i < static_cast<size_t>(r); i++) {
		RecvSlot& s = slots[i];
		s.len = msgs[i].msg_len;
		s.truncated = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
		s.from = from_sockaddr(addrs[i], msgs[i].msg_hdr.msg_namelen).value_or(Endpoint{});
	}
	return {static_cast<size_t>(r), 0};
}

UdpSocket::UdpSocket(UdpSocket&& o) noexcept
    : fd_(std::move(o.fd_)), family_(o.family_), gso_on_(o.gso_on_.load()), gso_errno_(o.gso_errno_.load()),
      gso_trains_(o.gso_trains_.load()), gso_segments_(o.gso_segments_.load()) {}

GsoStats UdpSocket::gso_stats() const noexcept {
	return {gso_on_.load(std::memory_order_relaxed), gso_errno_.load(std::memory_order_relaxed),
	        gso_trains_.load(std::memory_order_relaxed), gso_segments_.load(std::memory_order_relaxed)};
}

BatchResult UdpSocket::send_batch(std::span<const SendSlot> slots) noexcept {
	size_t done = 0;
	while (done < slots.size()) {
		const bool gso = gso_on_.load(std::memory_order_relaxed);
		BatchResult r = send_round(slots.subspan(done), gso);
		done += r.count;
		if (r.err == 0) continue;
		// A train the kernel refused (it always comes first in the round that
		// reports the error) is retried datagram by datagram; EIO means this
		// socket's route cannot offload trains at all.
		if (gso && r.err != EAGAIN && r.err != ENOBUFS && r.err != EAFNOSUPPORT) {
			if (r.err == EIO) {
				gso_errno_.store(EIO, std::memory_order_relaxed);
				gso_on_.store(false, std::memory_order_relaxed);
			}
			r = send_round(slots.subspan(done), false);
			done += r.count;
			if (r.err == 0) continue;
		}
		return {done, r.err};
	}
	return {done, 0};
}

BatchResult UdpSocket::send_round(std::span<const SendSlot> slots, bool gso) noexcept {
	const int af = address_family(family_);
	// On the stack (~16 KiB): no allocation, safe from several threads.
	std::array<mmsghdr, kMaxBatch> msgs;
	std::array<iovec, kMaxBatch> iov;
	std::array<sockaddr_storage, kMaxBatch> addrs;
	struct alignas(cmsghdr) Control {
		uint8_t bytes[CMSG_SPACE(sizeof(uint16_t))];
	};
	std::array<Control, kMaxBatch> ctrl;
	std::array<uint16_t, kMaxBatch> per_msg; // datagrams in each message
	const size_t want = std::min(slots.size(), kMaxBatch);
	size_t n = 0, m = 0;
	while (n < want) {
		const SendSlot& first = slots[n];
		const socklen_t len = to_sockaddr(first.to, af, addrs[m]);
		if (len == 0) break; // unreachable family: send those before it
		// A train: same destination, every datagram but the last as long as
		// the first, within the kernel's limits.
		size_t k = 1, bytes = first.data.size();
		if (gso)
			while (n + k < want && k < kMaxGsoSegments &&
			       slots[n + k - 1].data.size() == first.data.size() &&
			       slots[n + k].data.size() <= first.data.size() && slots[n + k].to == first.to &&
			       bytes + slots[n + k].data.size() <= kMaxGsoBytes)
				bytes += slots[n + k++].data.size();
		for (size_t i = 0; i < k; i++)
			// iovec is shared with readv(), hence non-const; sendmmsg() only reads.
			iov[n + i] = {const_cast<uint8_t*>(slots[n + i].data.data()),
			              slots[n + i].data.size()};
		msgs[m] = {};
		msghdr& h = msgs[m].msg_hdr;
		h.msg_name = &addrs[m];
		h.msg_namelen = len;
		h.msg_iov = &iov[n];
		h.msg_iovlen = k;
		if (k > 1) {
			h.msg_control = ctrl[m].bytes;
			h.msg_controllen = sizeof ctrl[m].bytes;
			cmsghdr* c = CMSG_FIRSTHDR(&h);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			const auto seg = static_cast<uint16_t>(first.data.size());
			std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
		}
		per_msg[m++] = static_cast<uint16_t>(k);
		n += k;
	}
	if (m == 0) return {0, EAFNOSUPPORT};
	int r;
	do
		r = ::sendmmsg(fd_.get(), msgs.data(), static_cast<unsigned>(m), MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r < 0) return {0, errno};
	// A short count means message r failed; sendmmsg() drops that errno, so
	// the caller's next round starts with it and reports the error.
	size_t sent = 0;
	for (size_t i = 0; i < size_t(r); i++) {
		sent += per_msg[i];
		if (per_msg[i] > 1) {
			gso_trains_.fetch_add(1, std::memory_order_relaxed);
			gso_segments_.fetch_add(per_msg[i], std::memory_order_relaxed);
		}
	}
	// Stopped early at an unsendable family: the caller's next round starts
	// there and gets EAFNOSUPPORT (m == 0 above).
	return {sent, 0};
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
