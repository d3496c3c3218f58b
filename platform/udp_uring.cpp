// UringEngine: the underlay socket's batches through io_uring (liburing).
//
// Sends: one IORING_OP_SENDMSG per message of the round (a datagram or a GSO
// train), MSG_DONTWAIT, linked (IOSQE_IO_LINK) so that the first failure
// cancels the rest: the messages that went out are exactly a prefix, as
// with sendmmsg(). One io_uring_enter() submits them and waits for all
// their completions (each completes inline: a UDP send never waits with
// MSG_DONTWAIT), so the send ring is empty between calls and the msghdrs
// can live on the stack.
//
// Receives, two modes (docs/udp-engines.md measures both):
//   - multishot: one IORING_OP_RECVMSG with IORING_RECV_MULTISHOT stays armed
//     on the socket. When datagrams arrive, the kernel receives them (task
//     work of this thread, run on its way back to user space) into buffers of
//     a provided-buffer ring the engine registered, and posts one completion
//     each. recv_batch() only reads completions from shared memory, copies
//     each datagram into its slot and gives the buffer back: no system call.
//     The kernel never sees the caller's buffers, so slots may be re-pointed
//     freely. The receive ends when the ring runs out of buffers (more than
//     recv_buffers datagrams waited) or on an error; recv_batch() arms it
//     again before returning (one io_uring_enter()). The ring's fd, not the
//     socket, says when there is something to take: poll_fd().
//   - oneshot: one IORING_OP_RECVMSG per slot straight into its buffer,
//     MSG_DONTWAIT (a request that finds the socket empty completes with
//     EAGAIN instead of waiting) and linked, so the first EAGAIN cancels the
//     rest and the datagrams fill a prefix, in order. All completions are
//     reaped before returning: no receive is left pointing into a slot.
//
// The socket is a registered file in both rings (no file lookup per request).
// Registered buffers do not apply to sendmsg/recvmsg (only to the
// SEND_ZC/READ_FIXED family); the provided-buffer ring is the registered
// memory the receive side uses. The rings are set up without SINGLE_ISSUER,
// DEFER_TASKRUN or a registered ring fd: all three tie the ring to the thread
// that creates it, and esptun sets the engine up on the main thread and runs
// it on the data-plane thread.
#include "platform/udp_engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <liburing.h>
#include <sys/mman.h>
#include <utility>

#include "platform/sockaddr.hpp"

namespace esptun::platform {

namespace {

/// user_data of the multishot receive's completions.
constexpr uint64_t kMultishotTag = ~uint64_t(0);
/// The provided-buffer group of the receive ring.
constexpr uint16_t kBufGroup = 0;

/**
 * uring_hint() - advice for an errno from io_uring set-up
 * @err: errno value
 */
std::string_view uring_hint(int err) noexcept {
	switch (err) {
	case ENOSYS:
		return "this kernel has no io_uring";
	case EPERM:
		return "io_uring is disabled: sysctl kernel.io_uring_disabled, or a seccomp filter";
	case ENOMEM:
		return "RLIMIT_MEMLOCK too low for the rings before Linux 5.12";
	default:
		return {};
	}
}

/**
 * init_ring() - set up @ring with @sq/@cq entries and register @fd as file 0
 * @what: "send" or "receive", for the error message
 *
 * SUBMIT_ALL (5.18) makes the kernel consume every SQE of a submission even
 * when one fails early, so none is left behind to be submitted later by a
 * call that does not expect it; older kernels get the same by resubmitting
 * (reap()). Throws SystemError.
 */
void init_ring(io_uring& ring, unsigned sq, unsigned cq, int fd, const char* what) {
	io_uring_params p{};
	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE;
	p.cq_entries = cq;
	int ret = io_uring_queue_init_params(sq, &ring, &p);
	if (ret == -EINVAL) {
		p = {};
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = cq;
		ret = io_uring_queue_init_params(sq, &ring, &p);
	}
	if (ret < 0)
		throw SystemError(-ret, std::string("io_uring_queue_init (") + what + " ring)",
		                  uring_hint(-ret));
	ret = io_uring_register_files(&ring, &fd, 1);
	if (ret < 0) {
		io_uring_queue_exit(&ring);
		throw SystemError(-ret, std::string("io_uring_register_files (") + what + " ring)");
	}
}

/**
 * retryable() - an io_uring_enter() error after which the call is simply repeated
 * @ret: its negative errno
 */
bool retryable(int ret) noexcept { return ret == -EINTR || ret == -EAGAIN || ret == -EBUSY; }

/**
 * reap() - submit the @n requests queued on @ring (user_data 0..n-1) and
 * collect all @n completions
 * @res: gets each request's result, by user_data
 *
 * Returns only when every request has completed: the kernel holds no
 * pointer into the caller's memory afterwards. Requests that complete
 * inline (all of ours) make this one io_uring_enter().
 * Return: the io_uring_enter() calls made
 */
uint64_t reap(io_uring& ring, unsigned n, int* res) noexcept {
	uint64_t calls = 1;
	int ret = io_uring_submit_and_wait(&ring, n);
	unsigned got = 0;
	for (;;) {
		io_uring_cqe* cqe = nullptr;
		while (got < n && io_uring_cq_ready(&ring) && io_uring_peek_cqe(&ring, &cqe) == 0) {
			res[cqe->user_data] = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			got++;
		}
		if (got == n) return calls;
		// Not all in yet: the wait was interrupted, or (no SUBMIT_ALL) some
		// requests were not taken. Submit what is left and wait again.
		if (ret < 0 && !retryable(ret))
			// EBADF, EFAULT...: the ring is broken while requests may still
			// point into the caller's memory. Returning would be unsafe.
			std::abort();
		ret = io_uring_submit_and_wait(&ring, 1);
		calls++;
	}
}

} // namespace

struct UringEngine::Rings {
	UringOptions opt;
	io_uring send{}, recv{};
	bool send_up = false, recv_up = false;

	// multishot only
	msghdr ms{};                     ///< the request's template: name and control space
	uint8_t* pool = nullptr;         ///< recv_buffers buffers, stride bytes apart
	size_t buf_bytes = 0;            ///< each one's size as the kernel sees it
	size_t stride = 0;               ///< buf_bytes rounded up to a cache line
	io_uring_buf_ring* br = nullptr; ///< the provided-buffer ring (mmap)
	size_t br_bytes = 0;
	bool armed = false; ///< the multishot receive is active
	std::atomic<uint64_t> rearms{0};

	int pending_err = 0; ///< an error met after datagrams were taken: the next call's

	~Rings() {
		// The rings go first: exiting cancels the multishot receive, after
		// which nothing writes into the buffers.
		if (recv_up) io_uring_queue_exit(&recv);
		if (send_up) io_uring_queue_exit(&send);
		if (br) ::munmap(br, br_bytes);
		delete[] pool;
	}

	uint8_t* buffer(unsigned bid) const noexcept { return pool + size_t(bid) * stride; }
};

UringEngine::UringEngine(UdpSocket& sock, const UringOptions& opt)
    : UdpEngine(sock), r_(std::make_unique<Rings>()) {
	Rings& r = *r_;
	r.opt = opt;
	const auto batch = static_cast<unsigned>(kMaxBatch);
	init_ring(r.send, batch, 2 * batch, sock.fd(), "send");
	r.send_up = true;
	if (opt.recv == UringRecv::oneshot) {
		init_ring(r.recv, batch, 2 * batch, sock.fd(), "receive");
		r.recv_up = true;
		return;
	}

	const unsigned nbufs = opt.recv_buffers;
	if (nbufs == 0 || nbufs > 32768 || (nbufs & (nbufs - 1)) != 0)
		throw SystemError(EINVAL, "io_uring receive buffers " + std::to_string(nbufs),
		                  "a power of two up to 32768");
	// One completion per buffer at most between two calls, plus the arm's.
	init_ring(r.recv, 4, 2 * nbufs, sock.fd(), "receive");
	r.recv_up = true;

	// Each buffer: io_uring_recvmsg_out, the sender's address, the control
	// messages (the outer TOS / traffic class), the payload.
	// The control messages follow the name space: rounded up to 8 bytes
	// (sockaddr_in6 is 28), so that the first cmsghdr is aligned.
	const size_t name = sock.family() == Family::v4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
	r.ms.msg_namelen = socklen_t((name + alignof(cmsghdr) - 1) & ~(alignof(cmsghdr) - 1));
	r.ms.msg_controllen = sizeof(RecvControl);
	r.buf_bytes =
	    sizeof(io_uring_recvmsg_out) + r.ms.msg_namelen + r.ms.msg_controllen + opt.recv_buf_bytes;
	r.stride = (r.buf_bytes + 63) & ~size_t(63);
	r.pool = new uint8_t[r.stride * nbufs];
	r.br_bytes = nbufs * sizeof(io_uring_buf);
	void* mem = ::mmap(nullptr, r.br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) throw_errno("mmap", "io_uring buffer ring");
	r.br = static_cast<io_uring_buf_ring*>(mem);
	io_uring_buf_reg reg{};
	reg.ring_addr = reinterpret_cast<uintptr_t>(r.br);
	reg.ring_entries = nbufs;
	reg.bgid = kBufGroup;
	if (int ret = io_uring_register_buf_ring(&r.recv, &reg, 0); ret < 0)
		throw SystemError(-ret, "io_uring_register_buf_ring",
		                  "provided-buffer rings need Linux 5.19");
	io_uring_buf_ring_init(r.br);
	const int mask = io_uring_buf_ring_mask(nbufs);
	for (unsigned i = 0; i < nbufs; i++)
		io_uring_buf_ring_add(r.br, r.buffer(i), static_cast<unsigned>(r.buf_bytes),
		                      static_cast<unsigned short>(i), mask, static_cast<int>(i));
	io_uring_buf_ring_advance(r.br, static_cast<int>(nbufs));

	if (!arm()) throw SystemError(r.pending_err, "io_uring submit (multishot recvmsg)");
	// A kernel without multishot recvmsg (before 6.0) fails it at once.
	io_uring_cqe* cqe = nullptr;
	if (io_uring_cq_ready(&r.recv) && io_uring_peek_cqe(&r.recv, &cqe) == 0 && cqe->res < 0 &&
	    !(cqe->flags & IORING_CQE_F_MORE)) {
		const int err = -cqe->res;
		io_uring_cqe_seen(&r.recv, cqe);
		throw SystemError(err, "io_uring multishot recvmsg", err == EINVAL ? "needs Linux 6.0" : "");
	}
}

UringEngine::~UringEngine() = default;

int UringEngine::poll_fd() const noexcept {
	// Oneshot receives leave nothing on the ring between calls: the socket says when to call.
	return r_->opt.recv == UringRecv::multishot ? r_->recv.ring_fd : socket().fd();
}
UringRecv UringEngine::recv_mode() const noexcept { return r_->opt.recv; }
uint64_t UringEngine::rearms() const noexcept { return r_->rearms.load(std::memory_order_relaxed); }

bool UringEngine::arm() noexcept {
	Rings& r = *r_;
	io_uring_sqe* sqe = io_uring_get_sqe(&r.recv);
	if (!sqe) { // cannot happen: nothing else is ever queued on this ring
		r.pending_err = EBUSY;
		return false;
	}
	io_uring_prep_recvmsg_multishot(sqe, 0, &r.ms, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = kBufGroup;
	io_uring_sqe_set_data64(sqe, kMultishotTag);
	int ret;
	do {
		count_recv_syscall();
		ret = io_uring_submit(&r.recv);
	} while (retryable(ret));
	if (ret < 0) {
		r.pending_err = -ret;
		return false;
	}
	r.armed = true;
	return true;
}

BatchResult UringEngine::recv_batch(std::span<RecvSlot> slots) noexcept {
	Rings& r = *r_;
	const size_t n = std::min(slots.size(), kMaxBatch);
	if (n == 0) return {0, 0};
	if (r.pending_err) {
		const int err = std::exchange(r.pending_err, 0);
		if (r.opt.recv == UringRecv::multishot && !r.armed) arm();
		return {0, err};
	}
	return r.opt.recv == UringRecv::multishot ? recv_multishot(slots.first(n))
	                                          : recv_oneshot(slots.first(n));
}

BatchResult UringEngine::recv_multishot(std::span<RecvSlot> slots) noexcept {
	Rings& r = *r_;
	const int mask = io_uring_buf_ring_mask(r.opt.recv_buffers);
	size_t k = 0;
	int recycled = 0, err = 0;
	// Only completions already posted: the kernel posts them as task work
	// of this thread on its way back to user space, so there is nothing to
	// enter the kernel for, unless completions overflowed the CQ ring.
	if (!io_uring_cq_ready(&r.recv) && io_uring_cq_has_overflow(&r.recv)) {
		count_recv_syscall();
		io_uring_get_events(&r.recv);
	}
	io_uring_cqe* cqe = nullptr;
	while (k < slots.size() && io_uring_cq_ready(&r.recv) && io_uring_peek_cqe(&r.recv, &cqe) == 0) {
		const int res = cqe->res;
		const unsigned flags = cqe->flags;
		if (!(flags & IORING_CQE_F_MORE)) r.armed = false;
		if (flags & IORING_CQE_F_BUFFER) {
			const auto bid = static_cast<unsigned short>(flags >> IORING_CQE_BUFFER_SHIFT);
			uint8_t* buf = r.buffer(bid);
			if (res >= 0) {
				if (io_uring_recvmsg_out* out = io_uring_recvmsg_validate(buf, res, &r.ms)) {
					RecvSlot& s = slots[k++];
					const size_t avail = io_uring_recvmsg_payload_length(out, res, &r.ms);
					const size_t len = std::min(avail, s.buf.size());
					std::memcpy(s.buf.data(), io_uring_recvmsg_payload(out, &r.ms), len);
					s.len = len;
					s.truncated = (out->flags & MSG_TRUNC) != 0 || avail > s.buf.size();
					s.segment = 0; // no UDP_GRO on this engine
					s.ecn = 0;
					s.rx_ns = 0;
					for (cmsghdr* c = io_uring_recvmsg_cmsg_firsthdr(out, &r.ms); c;
					     c = io_uring_recvmsg_cmsg_nexthdr(out, &r.ms, c))
						read_recv_cmsg(*c, s);
					sockaddr_storage sa;
					const socklen_t namelen = std::min(out->namelen, r.ms.msg_namelen);
					std::memcpy(&sa, io_uring_recvmsg_name(out), namelen);
					s.from = from_sockaddr(sa, namelen).value_or(Endpoint{});
				}
			}
			io_uring_buf_ring_add(r.br, buf, static_cast<unsigned>(r.buf_bytes), bid, mask,
			                      recycled++);
		} else if (res < 0 && res != -ENOBUFS) {
			// The receive failed (ENOBUFS only means it ran out of buffers:
			// the datagrams wait in the socket for the re-armed one).
			err = -res;
		}
		io_uring_cqe_seen(&r.recv, cqe);
		if (err) break;
	}
	if (recycled) io_uring_buf_ring_advance(r.br, recycled);
	if (!r.armed) {
		r.rearms.store(r.rearms.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
		if (!arm() && !err) err = std::exchange(r.pending_err, 0);
	}
	if (k == 0) return {0, err ? err : EAGAIN};
	if (err) r.pending_err = err;
	return {k, 0};
}

BatchResult UringEngine::recv_oneshot(std::span<RecvSlot> slots) noexcept {
	Rings& r = *r_;
	const size_t n = slots.size();
	// On the stack: the kernel is done with them when reap() returns.
	std::array<msghdr, kMaxBatch> hdr;
	std::array<iovec, kMaxBatch> iov;
	std::array<sockaddr_storage, kMaxBatch> addrs;
	std::array<RecvControl, kMaxBatch> ctrl;
	std::array<int, kMaxBatch> res;
	for (size_t i = 0; i < n; i++) {
		iov[i] = {slots[i].buf.data(), slots[i].buf.size()};
		hdr[i] = {};
		hdr[i].msg_name = &addrs[i];
		hdr[i].msg_namelen = sizeof addrs[i];
		hdr[i].msg_iov = &iov[i];
		hdr[i].msg_iovlen = 1;
		hdr[i].msg_control = ctrl[i].bytes;
		hdr[i].msg_controllen = sizeof ctrl[i].bytes;
		io_uring_sqe* sqe = io_uring_get_sqe(&r.recv);
		io_uring_prep_recvmsg(sqe, 0, &hdr[i], MSG_DONTWAIT);
		sqe->flags |= IOSQE_FIXED_FILE | (i + 1 < n ? IOSQE_IO_LINK : 0);
		io_uring_sqe_set_data64(sqe, i);
	}
	count_recv_syscall(reap(r.recv, static_cast<unsigned>(n), res.data()));
	size_t k = 0;
	for (; k < n && res[k] >= 0; k++) {
		RecvSlot& s = slots[k];
		s.len = static_cast<size_t>(res[k]);
		s.truncated = (hdr[k].msg_flags & MSG_TRUNC) != 0;
		s.segment = 0;
		s.ecn = 0;
		s.rx_ns = 0;
		for (cmsghdr* c = CMSG_FIRSTHDR(&hdr[k]); c; c = CMSG_NXTHDR(&hdr[k], c))
			read_recv_cmsg(*c, s);
		s.from = from_sockaddr(addrs[k], hdr[k].msg_namelen).value_or(Endpoint{});
	}
	const int err = k < n ? -res[k] : 0;
	if (k == 0) return {0, err};
	if (err && err != EAGAIN) r.pending_err = err;
	return {k, 0};
}

BatchResult UringEngine::send_messages(SendRound& round) noexcept {
	Rings& r = *r_;
	const size_t m = round.messages;
	std::array<int, kMaxBatch> res;
	for (size_t i = 0; i < m; i++) {
		io_uring_sqe* sqe = io_uring_get_sqe(&r.send);
		io_uring_prep_sendmsg(sqe, 0, &round.msgs[i].msg_hdr, MSG_DONTWAIT);
		sqe->flags |= IOSQE_FIXED_FILE | (i + 1 < m ? IOSQE_IO_LINK : 0);
		io_uring_sqe_set_data64(sqe, i);
	}
	count_send_syscall(reap(r.send, static_cast<unsigned>(m), res.data()));
	size_t k = 0;
	while (k < m && res[k] >= 0)
		k++;
	return {k, k < m ? -res[k] : 0};
}

} // namespace esptun::platform
