// UdpEngine's shared send loop (trains, the GSO fallback), MmsgEngine
// (recvmmsg/sendmmsg) and open_udp_engine(). UringEngine is in udp_uring.cpp.
#include "platform/udp_engine.hpp"

#include <algorithm>
#include <cstring>
#include <netinet/udp.h>

#include "platform/sockaddr.hpp"

namespace esptun::platform {

size_t SendRound::build(std::span<const SendSlot> slots, int af, bool gso) noexcept {
	const size_t want = std::min(slots.size(), kMax);
	size_t n = 0, m = 0;
	while (n < want) {
		const SendSlot& first = slots[n];
		const socklen_t len = to_sockaddr(first.to, af, addrs[m]);
		if (len == 0) break; // unreachable family: send those before it
		// A train: same destination and ECN field, every datagram but the
		// last as long as the first, within the kernel's limits.
		size_t k = 1, bytes = first.data.size();
		if (gso)
			while (n + k < want && k < UdpSocket::kMaxGsoSegments &&
			       slots[n + k - 1].data.size() == first.data.size() &&
			       slots[n + k].data.size() <= first.data.size() && slots[n + k].to == first.to &&
			       slots[n + k].ecn == first.ecn &&
			       bytes + slots[n + k].data.size() <= UdpSocket::kMaxGsoBytes)
				bytes += slots[n + k++].data.size();
		for (size_t i = 0; i < k; i++)
			// iovec is shared with readv(), hence non-const; the kernel only reads.
			iov[n + i] = {const_cast<uint8_t*>(slots[n + i].data.data()),
			              slots[n + i].data.size()};
		msgs[m] = {};
		msghdr& h = msgs[m].msg_hdr;
		h.msg_name = &addrs[m];
		h.msg_namelen = len;
		h.msg_iov = &iov[n];
		h.msg_iovlen = k;
		if (k > 1 || first.ecn != 0) {
			// Control messages one after the other; msg_controllen ends up
			// covering those written (CMSG_FIRSTHDR needs the full size first).
			h.msg_control = ctrl[m].bytes;
			h.msg_controllen = sizeof ctrl[m].bytes;
			size_t used = 0;
			cmsghdr* c = CMSG_FIRSTHDR(&h);
			if (k > 1) {
				c->cmsg_level = SOL_UDP;
				c->cmsg_type = UDP_SEGMENT;
				c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
				const auto seg = static_cast<uint16_t>(first.data.size());
				std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
				used += CMSG_SPACE(sizeof seg);
				c = reinterpret_cast<cmsghdr*>(ctrl[m].bytes + used);
			}
			if (first.ecn != 0) {
				// The outer ECN field; the socket's DSCP (0) is kept. An
				// IPv4 destination on a dual-stack socket takes IP_TOS.
				const bool v4 = first.to.addr.family == Family::v4;
				c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
				c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
				c->cmsg_len = CMSG_LEN(sizeof(int));
				const int tos = first.ecn & 3;
				std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
				used += CMSG_SPACE(sizeof tos);
			}
			h.msg_controllen = used;
		}
		per_msg[m++] = static_cast<uint16_t>(k);
		n += k;
	}
	messages = m;
	return m;
}

BatchResult UdpEngine::send_batch(std::span<const SendSlot> slots) noexcept {
	size_t done = 0;
	while (done < slots.size()) {
		const bool gso = sock_.gso_on();
		BatchResult r = send_round(slots.subspan(done), gso);
		done += r.count;
		if (r.err == 0) continue;
		// A message the kernel refused is retried datagram by datagram: it
		// may be a train the route cannot take (EIO: none ever will, so GSO
		// goes off for the socket). A lone datagram simply fails again.
		if (gso && r.err != EAGAIN && r.err != ENOBUFS && r.err != EAFNOSUPPORT) {
			if (r.err == EIO) sock_.disable_gso(EIO);
			r = send_round(slots.subspan(done), false);
			done += r.count;
			if (r.err == 0) continue;
		}
		return {done, r.err};
	}
	return {done, 0};
}

BatchResult UdpEngine::send_round(std::span<const SendSlot> slots, bool gso) noexcept {
	SendRound round; // on the stack: no allocation, safe from several threads
	if (round.build(slots, address_family(sock_.family()), gso) == 0) return {0, EAFNOSUPPORT};
	const BatchResult r = send_messages(round);
	size_t sent = 0;
	for (size_t i = 0; i < r.count; i++) {
		sent += round.per_msg[i];
		if (round.per_msg[i] > 1) sock_.count_train(round.per_msg[i]);
	}
	// A short count without an error (sendmmsg() drops it, or the round
	// stopped at an unsendable family): the caller's next round starts
	// with that message and reports it.
	return {sent, r.err};
}

BatchResult MmsgEngine::recv_batch(std::span<RecvSlot> slots) noexcept {
	const size_t n = std::min(slots.size(), kMaxBatch);
	if (n == 0) return {0, 0};
	// On the stack (about 13 KiB): no allocation, and concurrent calls from
	// several threads on one socket stay safe.
	std::array<mmsghdr, kMaxBatch> msgs;
	std::array<iovec, kMaxBatch> iov;
	std::array<sockaddr_storage, kMaxBatch> addrs;
	std::array<RecvControl, kMaxBatch> ctrl;
	for (size_t i = 0; i < n; i++) {
		iov[i] = {slots[i].buf.data(), slots[i].buf.size()};
		msgs[i] = {};
		msgs[i].msg_hdr.msg_name = &addrs[i];
		msgs[i].msg_hdr.msg_namelen = sizeof addrs[i];
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_control = ctrl[i].bytes;
		msgs[i].msg_hdr.msg_controllen = sizeof ctrl[i].bytes;
	}
	int r;
	do {
		count_recv_syscall();
		r = ::recvmmsg(socket().fd(), msgs.data(), static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
	} while (r < 0 && errno == EINTR);
	// An error after some datagrams arrived is kept by the kernel in
	// sk_err and reported by the next call, so nothing is lost here.
	if (r < 0) return {0, errno};
	for (size_t i = 0; i < static_cast<size_t>(r); i++) {
		RecvSlot& s = slots[i];
		s.len = msgs[i].msg_len;
		s.truncated = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
		s.from = from_sockaddr(addrs[i], msgs[i].msg_hdr.msg_namelen).value_or(Endpoint{});
		s.segment = 0;
		s.ecn = 0;
		s.rx_ns = 0;
		for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c))
			read_recv_cmsg(*c, s);
	}
	return {static_cast<size_t>(r), 0};
}

void read_recv_cmsg(const cmsghdr& c, RecvSlot& s) noexcept {
	const uint8_t* data = CMSG_DATA(&c);
	if (c.cmsg_level == SOL_UDP && c.cmsg_type == UDP_GRO && c.cmsg_len >= CMSG_LEN(sizeof(int))) {
		int size = 0;
		std::memcpy(&size, data, sizeof size);
		if (size > 0 && size_t(size) < s.len) s.segment = uint16_t(size);
	} else if (c.cmsg_level == IPPROTO_IP && c.cmsg_type == IP_TOS && c.cmsg_len >= CMSG_LEN(1)) {
		s.ecn = data[0] & 3; // one byte: the TOS
	} else if (c.cmsg_level == IPPROTO_IPV6 && c.cmsg_type == IPV6_TCLASS &&
	           c.cmsg_len >= CMSG_LEN(sizeof(int))) {
		int tclass = 0;
		std::memcpy(&tclass, data, sizeof tclass);
		s.ecn = uint8_t(tclass & 3);
	} else if (c.cmsg_level == SOL_SOCKET && c.cmsg_type == SCM_TIMESTAMPNS &&
	           c.cmsg_len >= CMSG_LEN(sizeof(timespec))) {
		timespec ts{};
		std::memcpy(&ts, data, sizeof ts);
		s.rx_ns = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
	}
}

BatchResult MmsgEngine::send_messages(SendRound& round) noexcept {
	int r;
	do {
		count_send_syscall();
		r = ::sendmmsg(socket().fd(), round.msgs.data(), static_cast<unsigned>(round.messages),
		               MSG_DONTWAIT);
	} while (r < 0 && errno == EINTR);
	if (r < 0) return {0, errno};
	// A short count means message r failed; sendmmsg() drops that errno.
	return {static_cast<size_t>(r), 0};
}

OpenedEngine open_udp_engine(IoEngineChoice want, UdpSocket& sock, const UringOptions& opt) {
	if (want == IoEngineChoice::uring) return {std::make_unique<UringEngine>(sock, opt), {}};
	if (want == IoEngineChoice::mmsg) return {std::make_unique<MmsgEngine>(sock), {}};
	// automatic: recvmmsg/sendmmsg. esptun-bench udp-engines found io_uring
	// no cheaper per datagram at batches of 64 on Linux 6.18 (the system
	// call is 1/64 of a batch either way; docs/udp-engines.md), and mmsg
	// needs nothing io_uring might be refused (kernel.io_uring_disabled,
	// seccomp in containers).
	return {std::make_unique<MmsgEngine>(sock),
	        "auto: recvmmsg/sendmmsg, measured as fast as io_uring (docs/udp-engines.md)"};
}

} // namespace esptun::platform
