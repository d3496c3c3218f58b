// How the underlay socket's batches reach the kernel: UdpEngine, one
// interface with two engines behind it.
//   - MmsgEngine: one recvmmsg() per receive batch, one sendmmsg() per send
//     round of up to kMaxBatch datagrams.
//   - UringEngine: io_uring through liburing. Sends are one IORING_OP_SENDMSG
//     per message, linked, submitted and reaped with one io_uring_enter().
//     Receives are either a multishot IORING_OP_RECVMSG into buffers the
//     engine owns (a registered provided-buffer ring; recv_batch() copies
//     each datagram into the caller's slot and usually makes no system call)
//     or one IORING_OP_RECVMSG per slot, linked, reaped before returning.
// Both have exactly the same contract, below, and share the train layout and
// the GSO fallback (UdpEngine::send_batch()). docs/udp-engines.md measures
// them against each other.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <netinet/in.h>
#include <span>
#include <string>
#include <sys/socket.h>

#include "platform/udp_socket.hpp"

namespace esptun::platform {

/// System calls an engine made, by direction (status JSON, the benchmark).
struct EngineCounts {
	uint64_t recv_syscalls = 0; ///< recvmmsg() / io_uring_enter() in recv_batch()
	uint64_t send_syscalls = 0; ///< sendmmsg() / io_uring_enter() in send_batch()
};

/**
 * SendRound - the messages of one send round: up to UdpSocket::kMaxBatch
 * datagrams from the front of a batch, consecutive ones to one destination
 * with equal sizes (the last may be shorter) and ECN fields merged into a
 * UDP GSO train (one message, one iovec per datagram, a UDP_SEGMENT cmsg).
 * A message whose ECN field is not Not-ECT carries it in an IP_TOS (IPv4
 * destination) or IPV6_TCLASS (IPv6) cmsg. Both engines
 * hand these msghdrs to the kernel; it lives on the caller's stack (~16 KiB).
 */
struct SendRound {
	static constexpr size_t kMax = UdpSocket::kMaxBatch;
	struct alignas(cmsghdr) Control {
		uint8_t bytes[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))];
	};

	std::array<mmsghdr, kMax> msgs; ///< msg_hdr for each message (msg_len: sendmmsg's)
	std::array<iovec, kMax> iov;    ///< one per datagram
	std::array<sockaddr_storage, kMax> addrs;
	std::array<Control, kMax> ctrl;     ///< UDP_SEGMENT of each train, the outer ECN field
	std::array<uint16_t, kMax> per_msg; ///< datagrams in each message
	size_t messages = 0;

	/**
	 * build() - lay out the front of @slots as messages
	 * @slots: the datagrams still to send
	 * @af:    the socket's family (AF_INET or AF_INET6)
	 * @gso:   merge runs into trains
	 *
	 * Stops before a destination the socket cannot reach (an IPv6 one on an
	 * AF_INET socket): the next round starts there and finds nothing to send.
	 * Return: the number of messages (0 when slots[0] cannot be sent)
	 */
	size_t build(std::span<const SendSlot> slots, int af, bool gso) noexcept;
};

/// Control-message space of one received datagram: UDP_GRO's segment size,
/// the outer header's TOS (IP_TOS, 1 byte) or traffic class (IPV6_TCLASS, an
/// int) and the arrival time (SCM_TIMESTAMPNS, a timespec).
struct alignas(cmsghdr) RecvControl {
	uint8_t bytes[2 * CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(timespec))];
};

/**
 * read_recv_cmsg() - what one control message of a received datagram says
 * @c: the message
 * @s: the slot, len already set: gets segment (UDP_GRO), ecn (IP_TOS,
 *     IPV6_TCLASS) or rx_ns (SCM_TIMESTAMPNS); other messages are ignored
 */
void read_recv_cmsg(const cmsghdr& c, RecvSlot& s) noexcept;

/**
 * UdpEngine - batched receive and send on one UdpSocket.
 *
 * The contract, the same for every engine:
 *   - recv_batch() and send_batch() never block and never allocate.
 *   - recv_batch() fills slots [0, count) in arrival order: len, truncated
 *     (the datagram was longer than the slot's buffer, which holds its
 *     first buf.size() bytes) and from (IPv4-mapped senders come out as
 *     IPv4). count == 0 comes with err (EAGAIN: nothing queued). When it
 *     returns, nothing the kernel does later writes into any slot's buffer:
 *     the caller may re-point slots between calls.
 *   - send_batch() stops at the first datagram the kernel refuses; see there.
 *   - Both count their system calls (counts()).
 *   - One thread may receive while another sends; two threads must not
 *     receive (or send) on one engine at the same time.
 * The engine keeps a reference to the socket: the socket must outlive it
 * and must not be moved while it exists.
 */
class UdpEngine {
public:
	/// Datagrams per receive batch and per send round.
	static constexpr size_t kMaxBatch = UdpSocket::kMaxBatch;

	explicit UdpEngine(UdpSocket& sock) noexcept : sock_(sock) {}
	virtual ~UdpEngine() = default;
	UdpEngine(const UdpEngine&) = delete;
	UdpEngine& operator=(const UdpEngine&) = delete;

	/**
	 * recv_batch() - receive up to min(slots.size(), kMaxBatch) datagrams
	 * @slots: buffers to fill, in order
	 *
	 * Call again while count == the slots used. An error the kernel reports
	 * after some datagrams were taken is returned by the next call.
	 * Return: count slots filled; count == 0 with err (EAGAIN: nothing queued)
	 */
	virtual BatchResult recv_batch(std::span<RecvSlot> slots) noexcept = 0;

	/**
	 * send_batch() - send every slot, in rounds of up to kMaxBatch datagrams
	 * @slots: datagrams and destinations
	 *
	 * Stops at the first datagram the kernel refuses: slots [0, count) went
	 * out; slots[count] failed with err (EAGAIN/ENOBUFS: send buffer full,
	 * retry later, e.g. after poll(socket().fd(), POLLOUT); EMSGSIZE,
	 * ENETUNREACH...: drop that one and call again with the rest;
	 * EAFNOSUPPORT: an IPv6 destination on an IPv4 socket). A GSO train the
	 * kernel refuses is re-sent datagram by datagram; EIO switches GSO off
	 * for the socket (UdpSocket's class comment).
	 * Return: count sent, and err when count < slots.size()
	 */
	BatchResult send_batch(std::span<const SendSlot> slots) noexcept;

	/// poll_fd() - readable (POLLIN) when recv_batch() may have datagrams;
	/// not the socket for the io_uring engine. For POLLOUT use socket().fd().
	virtual int poll_fd() const noexcept = 0;
	/// name() - "mmsg" or "uring" (status JSON, logs)
	virtual const char* name() const noexcept = 0;

	/// counts() - system calls made so far; from any thread
	EngineCounts counts() const noexcept {
		return {recv_syscalls_.load(std::memory_order_relaxed),
		        send_syscalls_.load(std::memory_order_relaxed)};
	}
	/// socket() - the socket: fd for POLLOUT, GSO switch and stats, addresses
	UdpSocket& socket() const noexcept { return sock_; }

protected:
	/**
	 * send_messages() - hand the messages of @round to the kernel
	 * @round: built, round.messages > 0
	 *
	 * Return: count = how many messages (a prefix) went out; err = why the
	 * next one did not, or 0 when it is unknown (sendmmsg() drops it: the
	 * next round then meets it first)
	 */
	virtual BatchResult send_messages(SendRound& round) noexcept = 0;

	/// count_recv_syscall() - one more system call in recv_batch() (the receiving thread only)
	void count_recv_syscall(uint64_t n = 1) noexcept {
		recv_syscalls_.store(recv_syscalls_.load(std::memory_order_relaxed) + n,
		                     std::memory_order_relaxed);
	}
	/// count_send_syscall() - one more system call in send_batch() (the sending thread only)
	void count_send_syscall(uint64_t n = 1) noexcept {
		send_syscalls_.store(send_syscalls_.load(std::memory_order_relaxed) + n,
		                     std::memory_order_relaxed);
	}

private:
	/// One round from the front of @slots, trains when @gso: datagrams sent and the error.
	BatchResult send_round(std::span<const SendSlot> slots, bool gso) noexcept;

	UdpSocket& sock_;
	std::atomic<uint64_t> recv_syscalls_{0}, send_syscalls_{0};
};

/// recvmmsg()/sendmmsg(): one system call per receive batch and per send round.
class MmsgEngine final : public UdpEngine {
public:
	explicit MmsgEngine(UdpSocket& sock) noexcept : UdpEngine(sock) {}
	BatchResult recv_batch(std::span<RecvSlot> slots) noexcept override;
	int poll_fd() const noexcept override { return socket().fd(); }
	const char* name() const noexcept override { return "mmsg"; }

protected:
	BatchResult send_messages(SendRound& round) noexcept override;
};

/// How UringEngine receives.
enum class UringRecv {
	/// A multishot IORING_OP_RECVMSG (Linux 6.0) into a provided-buffer ring
	/// the engine owns; recv_batch() copies each datagram into its slot.
	multishot,
	/// One IORING_OP_RECVMSG per slot (MSG_DONTWAIT, linked so the first
	/// EAGAIN cancels the rest), reaped before recv_batch() returns.
	oneshot,
};

/// Set-up of a UringEngine.
struct UringOptions {
	UringRecv recv = UringRecv::multishot;
	/// multishot: payload bytes of each engine buffer. A longer datagram is
	/// reported truncated, as if the slot were that small: set it to at
	/// least the receive slots' buffer size.
	size_t recv_buf_bytes = 2048;
	/// multishot: buffers in the ring (a power of two, at most 32768): how
	/// many datagrams may wait between two recv_batch() calls before the
	/// receive has to be re-armed.
	unsigned recv_buffers = 256;
};

/**
 * UringEngine - io_uring through liburing. Two rings, so that one thread can
 * receive while another sends: the receive ring (in multishot mode its fd is
 * poll_fd(): readable when completions wait; in oneshot mode poll_fd() is
 * the socket) and the send ring (always empty between calls). The socket is
 * a registered file in both.
 */
class UringEngine final : public UdpEngine {
public:
	/**
	 * UringEngine() - set up the rings (and arm the multishot receive)
	 * @sock: the socket, bound
	 * @opt:  receive mode and buffers
	 *
	 * Throws SystemError when io_uring cannot be used: ENOSYS (no io_uring
	 * in the kernel), EPERM (kernel.io_uring_disabled, or a seccomp
	 * filter), EINVAL (multishot receive needs Linux 6.0), ENOMEM
	 * (RLIMIT_MEMLOCK before Linux 5.12); what() says which.
	 */
	UringEngine(UdpSocket& sock, const UringOptions& opt = {});
	~UringEngine() override;

	BatchResult recv_batch(std::span<RecvSlot> slots) noexcept override;
	int poll_fd() const noexcept override;
	const char* name() const noexcept override { return "uring"; }
	/// recv_mode() - how this engine receives
	UringRecv recv_mode() const noexcept;
	/// rearms() - times the multishot receive ended and was submitted again
	uint64_t rearms() const noexcept;

protected:
	BatchResult send_messages(SendRound& round) noexcept override;

private:
	/// arm() - submit the multishot receive; false (pending_err set) when that failed
	bool arm() noexcept;
	BatchResult recv_multishot(std::span<RecvSlot> slots) noexcept;
	BatchResult recv_oneshot(std::span<RecvSlot> slots) noexcept;

	struct Rings; // liburing's types stay in udp_uring.cpp
	std::unique_ptr<Rings> r_;
};

/// The io_engine choice in [tunnel].
enum class IoEngineChoice { automatic, uring, mmsg };

/// What open_udp_engine() chose and why.
struct OpenedEngine {
	std::unique_ptr<UdpEngine> engine;
	/// Empty when an engine was asked for by name; for auto, one line
	/// saying why this one, for the log and the status JSON.
	std::string reason;
};

/**
 * open_udp_engine() - the engine @want on @sock
 * @want: uring or mmsg: that one or a SystemError; automatic: the one
 *        docs/udp-engines.md found faster on this kernel (mmsg), with a reason
 * @sock: the socket, which must outlive the engine
 * @opt:  for the io_uring engine
 *
 * Throws SystemError when the engine asked for explicitly cannot be set up.
 */
OpenedEngine open_udp_engine(IoEngineChoice want, UdpSocket& sock, const UringOptions& opt = {});

} // namespace esptun::platform
