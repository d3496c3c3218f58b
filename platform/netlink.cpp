// rtnetlink requests (see netlink.hpp). Messages are built and parsed with
// memcpy over byte buffers, so neither alignment nor aliasing rules depend on
// how the kernel laid out a reply.
#include "platform/netlink.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <optional>
#include <span>
#include <string_view>
#include <sys/socket.h>
#include <sys/time.h>
#include <vector>

#include "base/error.hpp"
#include "platform/sockaddr.hpp"
#include "platform/unique_fd.hpp"

namespace esptun::platform {

namespace {

/// netlink aligns messages and attributes to 4 bytes (NLMSG_ALIGNTO, RTA_ALIGNTO).
constexpr size_t align4(size_t n) noexcept { return (n + 3) & ~size_t{3}; }

/// How long to wait for the kernel's answer. It always answers at once; the
/// timeout only turns a bug into an error instead of a hung daemon.
constexpr time_t kReplyTimeoutSeconds = 5;

/// Receive buffer: RTM_NEWLINK replies carry statistics and run to a few KiB.
constexpr size_t kReplyBufferBytes = 64 * 1024;

/// One rtnetlink request under construction: nlmsghdr, the family header
/// (ifinfomsg, ifaddrmsg, rtmsg), then attributes.
class Request {
public:
	/**
	 * Request() - start a request
	 * @type:  RTM_* message type
	 * @flags: NLM_F_CREATE, NLM_F_EXCL...; NLM_F_REQUEST and NLM_F_ACK are added
	 */
	Request(uint16_t type, uint16_t flags)
	    : buf_(NLMSG_HDRLEN), type_(type),
	      flags_(static_cast<uint16_t>(flags | NLM_F_REQUEST | NLM_F_ACK)) {}

	/// put() - append a fixed header struct such as rtmsg
	template <class T> void put(const T& value) { append(&value, sizeof value); }

	/**
	 * attr() - append one attribute
	 * @type: IFLA_*, IFA_*, RTA_*
	 * @data: its value
	 * @len:  value length; padding to 4 bytes is added
	 */
	void attr(uint16_t type, const void* data, size_t len) {
		const rtattr header{static_cast<unsigned short>(RTA_LENGTH(len)), type};
		append(&header, sizeof header);
		append(data, len);
	}
	/// attr_u32() - append a 32-bit attribute (host order, as rtnetlink wants)
	void attr_u32(uint16_t type, uint32_t value) { attr(type, &value, sizeof value); }
	/// attr_addr() - append an address attribute: 4 or 16 bytes, network order
	void attr_addr(uint16_t type, const IpAddress& a) { attr(type, a.bytes.data(), a.size()); }

	/**
	 * finish() - write the header
	 * @seq: sequence number that the kernel echoes in its replies
	 *
	 * Return: the complete message
	 */
	std::span<const uint8_t> finish(uint32_t seq) {
		nlmsghdr h{};
		h.nlmsg_len = static_cast<uint32_t>(buf_.size());
		h.nlmsg_type = type_;
		h.nlmsg_flags = flags_;
		h.nlmsg_seq = seq;
		std::memcpy(buf_.data(), &h, sizeof h);
		return buf_;
	}

private:
	/// append() - copy @len bytes and zero padding up to 4-byte alignment
	void append(const void* data, size_t len) {
		const size_t off = buf_.size();
		buf_.resize(off + align4(len));
		std::memcpy(buf_.data() + off, data, len);
	}

	std::vector<uint8_t> buf_;
	uint16_t type_;
	uint16_t flags_;
};

/**
 * for_each_attr() - walk rtattrs, skipping malformed tails
 * @data: attribute area of a message
 * @fn:   called with (type, value bytes) for each attribute
 */
template <class Fn> void for_each_attr(std::span<const uint8_t> data, Fn&& fn) {
	size_t off = 0;
	while (off + sizeof(rtattr) <= data.size()) {
		rtattr h;
		std::memcpy(&h, data.data() + off, sizeof h);
		if (h.rta_len < sizeof h || h.rta_len > data.size() - off) break;
		fn(static_cast<uint16_t>(h.rta_type & NLA_TYPE_MASK),
		   data.subspan(off + sizeof h, h.rta_len - sizeof h));
		off += align4(h.rta_len);
	}
}

/// read_u32() - a 32-bit attribute value, or 0 when too short
uint32_t read_u32(std::span<const uint8_t> v) noexcept {
	uint32_t x = 0;
	if (v.size() >= sizeof x) std::memcpy(&x, v.data(), sizeof x);
	return x;
}

/// read_addr() - an address attribute of @f, or nullopt when its size is wrong
std::optional<IpAddress> read_addr(Family f, std::span<const uint8_t> v) noexcept {
	IpAddress a;
	a.family = f;
	if (v.size() != a.size()) return std::nullopt;
	std::memcpy(a.bytes.data(), v.data(), v.size());
	return a;
}

/// The kernel's verdict on a request: 0 or a positive errno, plus the
/// extended-ack text when the kernel gave one.
struct Ack {
	int err = 0;
	std::string message;
};

/**
 * parse_ack() - decode an NLMSG_ERROR message (an ack when error == 0)
 * @flags:   its nlmsg_flags (NLM_F_CAPPED, NLM_F_ACK_TLVS)
 * @payload: the bytes after its nlmsghdr
 */
Ack parse_ack(uint16_t flags, std::span<const uint8_t> payload) {
	nlmsgerr e;
	if (payload.size() < sizeof e) return {EBADMSG, "short netlink ack"};
	std::memcpy(&e, payload.data(), sizeof e);
	Ack ack{-e.error, {}};
	if (!(flags & NLM_F_ACK_TLVS)) return ack;
	// The TLVs follow the echoed request: only its header when capped.
	const size_t tlv_off = (flags & NLM_F_CAPPED) ? sizeof e : sizeof e.error + align4(e.msg.nlmsg_len);
	if (tlv_off > payload.size()) return ack;
	for_each_attr(payload.subspan(tlv_off), [&](uint16_t type, std::span<const uint8_t> v) {
		if (type == NLMSGERR_ATTR_MSG)
			ack.message.assign(reinterpret_cast<const char*>(v.data()),
			                   ::strnlen(reinterpret_cast<const char*>(v.data()), v.size()));
	});
	return ack;
}

using ReplyFn = std::function<void(uint16_t type, std::span<const uint8_t> payload)>;

/**
 * transact() - send one request on a fresh NETLINK_ROUTE socket and wait for its ack
 * @req:      the request
 * @what:     what it does, for error messages ("add route ... dev esp0")
 * @on_reply: called for each reply message before the ack (GET requests)
 *
 * Transport failures throw SystemError; the kernel's own verdict is returned.
 * Return: the ack
 */
/// open_socket() - a NETLINK_ROUTE socket with extended and capped acks
/// and a receive timeout; @what names the request in errors
UniqueFd open_socket(const std::string& what) {
	UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
	if (!fd) throw_errno("netlink socket for", what);
	const int one = 1;
	// Extended acks: the kernel explains many refusals in words. Capped acks:
	// an error does not echo our request back. Both optional (Linux 4.12+).
	::setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
	::setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
	const timeval timeout{kReplyTimeoutSeconds, 0};
	::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
	return fd;
}

/// send_to_kernel() - send @msg (one or more requests back to back)
void send_to_kernel(int fd, std::span<const uint8_t> msg, const std::string& what) {
	sockaddr_nl kernel{};
	kernel.nl_family = AF_NETLINK;
	ssize_t sent;
	do
		sent = ::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<const sockaddr*>(&kernel),
		                sizeof kernel);
	while (sent < 0 && errno == EINTR);
	if (sent < 0) throw_errno("netlink send for", what);
}

/**
 * receive() - read the kernel's messages until @on_message says done
 * @on_message: called with (header, payload) of each message; returns true
 *              when no more are wanted
 * Malformed or oversized replies and a silent kernel throw SystemError.
 */
template <class F> void receive(int fd, const std::string& what, F&& on_message) {
	std::vector<uint8_t> buf(kReplyBufferBytes);
	for (;;) {
		sockaddr_nl from{};
		socklen_t from_len = sizeof from;
		// MSG_TRUNC makes recvfrom() return the real size of a longer message.
		const ssize_t n = ::recvfrom(fd, buf.data(), buf.size(), MSG_TRUNC,
		                             reinterpret_cast<sockaddr*>(&from), &from_len);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0)
			throw_errno("netlink receive for", what,
			            errno == EAGAIN ? "no answer from the kernel" : "");
		if (static_cast<size_t>(n) > buf.size())
			throw SystemError(EMSGSIZE, "netlink receive for " + what);
		if (from.nl_pid != 0) continue;

		const std::span<const uint8_t> data(buf.data(), static_cast<size_t>(n));
		size_t off = 0;
		while (off + NLMSG_HDRLEN <= data.size()) {
			nlmsghdr h;
			std::memcpy(&h, data.data() + off, sizeof h);
			if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > data.size() - off)
				throw SystemError(EBADMSG, "netlink reply for " + what);
			const auto payload = data.subspan(off + NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
			off += align4(h.nlmsg_len);
			if (on_message(h, payload)) return;
		}
	}
}

Ack transact(Request& req, const std::string& what, const ReplyFn& on_reply = {}) {
	UniqueFd fd = open_socket(what);
	// One request per socket, so any sequence number will do; replies are
	// still matched on it and on the sender (pid 0 is the kernel).
	constexpr uint32_t seq = 1;
	send_to_kernel(fd.get(), req.finish(seq), what);
	Ack ack;
	receive(fd.get(), what, [&](const nlmsghdr& h, std::span<const uint8_t> payload) {
		if (h.nlmsg_seq != seq) return false;
		if (h.nlmsg_type == NLMSG_ERROR) {
			ack = parse_ack(h.nlmsg_flags, payload);
			return true;
		}
		if (h.nlmsg_type == NLMSG_DONE) return true;
		if (on_reply) on_reply(h.nlmsg_type, payload);
		return false;
	});
	return ack;
}

/**
 * check() - turn a refusal into SystemError
 * @ack:  the kernel's verdict
 * @what: what was asked, for the message
 */
void check(const Ack& ack, const std::string& what) {
	if (ack.err == 0) return;
	std::string hint(privilege_hint(ack.err));
	if (!ack.message.empty()) hint += (hint.empty() ? "kernel: " : "; kernel: ") + ack.message;
	throw SystemError(ack.err, what, hint);
}

/// describe_route() - "10.99.0.0/24 via 10.99.0.1 dev esp0 table 100"
std::string describe_route(const IpPrefix& dst, int ifindex, const std::optional<IpAddress>& gateway,
                           const std::optional<uint32_t>& table) {
	std::string s = to_string(dst);
	if (gateway) s += " via " + to_string(*gateway);
	s += " dev " + link_name(ifindex);
	if (table) s += " table " + std::to_string(*table);
	return s;
}

/**
 * route_request() - an RTM_NEWROUTE or RTM_DELROUTE request
 * @type: RTM_NEWROUTE or RTM_DELROUTE
 * @dst, @ifindex, @gateway, @table: see add_route()
 */
Request route_request(uint16_t type, const IpPrefix& dst, int ifindex,
                      const std::optional<IpAddress>& gateway, const std::optional<uint32_t>& table) {
	const bool add = type == RTM_NEWROUTE;
	Request req(type, add ? NLM_F_CREATE | NLM_F_EXCL : 0);
	rtmsg rt{};
	rt.rtm_family = static_cast<uint8_t>(address_family(dst.addr.family));
	rt.rtm_dst_len = dst.len;
	// Table ids past 255 only fit the RTA_TABLE attribute.
	const uint32_t table_id = table.value_or(RT_TABLE_MAIN);
	rt.rtm_table = static_cast<uint8_t>(table_id < 256 ? table_id : uint32_t{RT_TABLE_UNSPEC});
	if (add) {
		rt.rtm_protocol = RTPROT_BOOT; // what "ip route add" uses
		// A route without a gateway reaches its destination directly on
		// the link (scope link); one through a gateway is global.
		rt.rtm_scope = gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
		rt.rtm_type = RTN_UNICAST;
	} else {
		// Like "ip route del": match any scope, protocol and type.
		rt.rtm_scope = RT_SCOPE_NOWHERE;
	}
	req.put(rt);
	// The kernel refuses host bits past the prefix (EINVAL); clear them.
	if (dst.len > 0) req.attr_addr(RTA_DST, dst.addr.masked(dst.len));
	if (gateway) req.attr_addr(RTA_GATEWAY, *gateway);
	req.attr_u32(RTA_OIF, static_cast<uint32_t>(ifindex));
	if (table) req.attr_u32(RTA_TABLE, *table);
	return req;
}

/**
 * unreachable_request() - an RTM_NEWROUTE or RTM_DELROUTE request for an
 * "unreachable" route: no device, no gateway, only the prefix and a metric
 * @type:   RTM_NEWROUTE or RTM_DELROUTE
 * @dst:    destination prefix
 * @metric: RTA_PRIORITY; on delete it picks this route among those for @dst
 */
Request unreachable_request(uint16_t type, const IpPrefix& dst, uint32_t metric) {
	const bool add = type == RTM_NEWROUTE;
	Request req(type, add ? NLM_F_CREATE | NLM_F_EXCL : 0);
	rtmsg rt{};
	rt.rtm_family = static_cast<uint8_t>(address_family(dst.addr.family));
	rt.rtm_dst_len = dst.len;
	rt.rtm_table = RT_TABLE_MAIN;
	rt.rtm_protocol = add ? RTPROT_BOOT : 0;
	// A reject route has no next hop, so it is global, as iproute2 makes it;
	// a delete matches any scope.
	rt.rtm_scope = add ? RT_SCOPE_UNIVERSE : RT_SCOPE_NOWHERE;
	rt.rtm_type = RTN_UNREACHABLE;
	req.put(rt);
	if (dst.len > 0) req.attr_addr(RTA_DST, dst.addr.masked(dst.len));
	req.attr_u32(RTA_PRIORITY, metric);
	return req;
}

/**
 * address_request() - an RTM_NEWADDR or RTM_DELADDR request
 * @type:    RTM_NEWADDR or RTM_DELADDR
 * @ifindex: interface
 * @addr:    address and prefix length
 */
Request address_request(uint16_t type, int ifindex, const IpPrefix& addr) {
	Request req(type, type == RTM_NEWADDR ? NLM_F_CREATE | NLM_F_EXCL : 0);
	ifaddrmsg ifa{};
	ifa.ifa_family = static_cast<uint8_t>(address_family(addr.addr.family));
	ifa.ifa_prefixlen = addr.len;
	ifa.ifa_scope = RT_SCOPE_UNIVERSE;
	ifa.ifa_index = static_cast<uint32_t>(ifindex);
	// No duplicate address detection for IPv6. A new address stays
	// "tentative" until DAD finishes, which happens in a work item after
	// the add (and not at all while the link is down), and a tentative
	// address cannot be used: bind() to it fails with EADDRNOTAVAIL and the
	// kernel will not pick it as a source. On a point-to-point layer-3 tun
	// there are no neighbours to collide with, so DAD only adds that race.
	const uint32_t flags = addr.addr.family == Family::v6 ? IFA_F_NODAD : 0;
	ifa.ifa_flags = static_cast<uint8_t>(flags);
	req.put(ifa);
	// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
	// point-to-point links. Equal values mean "no peer", as "ip addr add"
	// sends them, and make the kernel add the prefix route.
	req.attr_addr(IFA_LOCAL, addr.addr);
	req.attr_addr(IFA_ADDRESS, addr.addr);
	if (flags) req.attr_u32(IFA_FLAGS, flags);
	return req;
}

/**
 * link_request() - an RTM_NEWLINK (change) or RTM_GETLINK request for @ifindex
 * @type:    RTM_NEWLINK or RTM_GETLINK
 * @ifindex: interface
 * @flags:   ifi_flags to set
 * @change:  which ifi_flags bits to change
 */
Request link_request(uint16_t type, int ifindex, unsigned flags = 0, unsigned change = 0) {
	Request req(type, 0);
	ifinfomsg ifi{};
	ifi.ifi_family = AF_UNSPEC;
	ifi.ifi_index = ifindex;
	ifi.ifi_flags = flags;
	ifi.ifi_change = change;
	req.put(ifi);
	return req;
}

} // namespace

std::string link_name(int ifindex) {
	char name[IF_NAMESIZE] = {};
	if (ifindex > 0 && ::if_indextoname(static_cast<unsigned>(ifindex), name)) return name;
	return "ifindex " + std::to_string(ifindex);
}

void set_link_mtu(int ifindex, unsigned mtu) {
	const std::string what = "set mtu " + std::to_string(mtu) + " on " + link_name(ifindex);
	Request req = link_request(RTM_NEWLINK, ifindex);
	req.attr_u32(IFLA_MTU, mtu);
	check(transact(req, what), what);
}

void set_link_gso_max_segs(int ifindex, unsigned segs) {
	const std::string what = "set gso_max_segs " + std::to_string(segs) + " on " + link_name(ifindex);
	Request req = link_request(RTM_NEWLINK, ifindex);
	req.attr_u32(IFLA_GSO_MAX_SEGS, segs);
	check(transact(req, what), what);
}

void set_link_up(int ifindex) {
	const std::string what = "set link " + link_name(ifindex) + " up";
	Request req = link_request(RTM_NEWLINK, ifindex, IFF_UP, IFF_UP);
	check(transact(req, what), what);
}

unsigned link_mtu(int ifindex) {
	const std::string what = "get mtu of " + link_name(ifindex);
	Request req = link_request(RTM_GETLINK, ifindex);
	std::optional<unsigned> mtu;
	check(transact(req, what,
	               [&](uint16_t type, std::span<const uint8_t> payload) {
		               if (type != RTM_NEWLINK || payload.size() < sizeof(ifinfomsg)) return;
		               for_each_attr(payload.subspan(NLMSG_ALIGN(sizeof(ifinfomsg))),
		                             [&](uint16_t attr, std::span<const uint8_t> v) {
			                             if (attr == IFLA_MTU) mtu = read_u32(v);
		                             });
	               }),
	      what);
	if (!mtu) throw SystemError(ENODATA, what, "no IFLA_MTU in the reply");
	return *mtu;
}

void add_address(int ifindex, const IpPrefix& addr) {
	const std::string what = "add address " + to_string(addr) + " dev " + link_name(ifindex);
	Request req = address_request(RTM_NEWADDR, ifindex, addr);
	check(transact(req, what), what);
}

void del_address(int ifindex, const IpPrefix& addr) {
	const std::string what = "delete address " + to_string(addr) + " dev " + link_name(ifindex);
	Request req = address_request(RTM_DELADDR, ifindex, addr);
	check(transact(req, what), what);
}

void add_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway,
               std::optional<uint32_t> table) {
	const std::string what = "add route " + describe_route(dst, ifindex, gateway, table);
	if (gateway && gateway->family != dst.addr.family)
		throw SystemError(EINVAL, what, "gateway and destination differ in family");
	Request req = route_request(RTM_NEWROUTE, dst, ifindex, gateway, table);
	check(transact(req, what), what);
}

void add_routes(std::span<const IpPrefix> dsts, int ifindex, const std::function<void(size_t)>& added) {
	if (dsts.empty()) return;
	const std::string dev = link_name(ifindex);
	const std::string what = "add routes dev " + dev;
	UniqueFd fd = open_socket(what);
	// Up to kRouteBatch requests per datagram, each with its own sequence
	// number (its index + 1): the kernel handles them one by one and acks
	// each, in order.
	constexpr size_t kRouteBatch = 64;
	std::vector<uint8_t> out;
	for (size_t start = 0; start < dsts.size(); start += kRouteBatch) {
		const size_t n = std::min(kRouteBatch, dsts.size() - start);
		out.clear();
		for (size_t i = 0; i < n; i++) {
			Request req = route_request(RTM_NEWROUTE, dsts[start + i], ifindex, {}, {});
			const auto msg = req.finish(uint32_t(start + i + 1));
			out.insert(out.end(), msg.begin(), msg.end());
		}
		send_to_kernel(fd.get(), out, what);
		std::optional<std::pair<size_t, Ack>> refused;
		size_t acked = 0;
		receive(fd.get(), what, [&](const nlmsghdr& h, std::span<const uint8_t> payload) {
			if (h.nlmsg_type != NLMSG_ERROR || h.nlmsg_seq <= start || h.nlmsg_seq > start + n)
				return false;
			const size_t index = h.nlmsg_seq - 1;
			Ack ack = parse_ack(h.nlmsg_flags, payload);
			if (ack.err == 0)
				added(index);
			else if (!refused)
				refused.emplace(index, std::move(ack));
			return ++acked == n;
		});
		if (refused)
			check(refused->second,
			      "add route " + to_string(dsts[refused->first]) + " dev " + dev);
	}
}

void del_route(const IpPrefix& dst, int ifindex, std::optional<IpAddress> gateway,
               std::optional<uint32_t> table) {
	const std::string what = "delete route " + describe_route(dst, ifindex, gateway, table);
	if (gateway && gateway->family != dst.addr.family)
		throw SystemError(EINVAL, what, "gateway and destination differ in family");
	Request req = route_request(RTM_DELROUTE, dst, ifindex, gateway, table);
	check(transact(req, what), what);
}

void add_unreachable_route(const IpPrefix& dst, uint32_t metric) {
	const std::string what =
	    "add route unreachable " + to_string(dst) + " metric " + std::to_string(metric);
	Request req = unreachable_request(RTM_NEWROUTE, dst, metric);
	check(transact(req, what), what);
}

void del_unreachable_route(const IpPrefix& dst, uint32_t metric) {
	const std::string what =
	    "delete route unreachable " + to_string(dst) + " metric " + std::to_string(metric);
	Request req = unreachable_request(RTM_DELROUTE, dst, metric);
	check(transact(req, what), what);
}

std::optional<RouteInfo> get_route(const IpAddress& dst) {
	const std::string what = "get route to " + to_string(dst);
	Request req(RTM_GETROUTE, 0);
	rtmsg rt{};
	rt.rtm_family = static_cast<uint8_t>(address_family(dst.family));
	rt.rtm_dst_len = static_cast<uint8_t>(dst.max_prefix());
	req.put(rt);
	req.attr_addr(RTA_DST, dst);

	std::optional<RouteInfo> route;
	const Ack ack = transact(req, what, [&](uint16_t type, std::span<const uint8_t> payload) {
		if (type != RTM_NEWROUTE || payload.size() < sizeof(rtmsg)) return;
		RouteInfo info;
		for_each_attr(payload.subspan(NLMSG_ALIGN(sizeof(rtmsg))),
		              [&](uint16_t attr, std::span<const uint8_t> v) {
			              if (attr == RTA_OIF) info.ifindex = static_cast<int>(read_u32(v));
			              if (attr == RTA_GATEWAY) info.gateway = read_addr(dst.family, v);
			              if (attr == RTA_PREFSRC) info.prefsrc = read_addr(dst.family, v);
		              });
		route = info;
	});
	// The lookup fails with ENETUNREACH when no route matches and with
	// EHOSTUNREACH for an "unreachable" route: both mean "no route" here.
	if (ack.err == ENETUNREACH || ack.err == EHOSTUNREACH) return std::nullopt;
	check(ack, what);
	return route;
}

} // namespace esptun::platform
