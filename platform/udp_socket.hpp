// The underlay UDP socket (RFC 3948 ESP-in-UDP, port 4500): outbound ESP
// packets leave through send_batch(), inbound ones arrive through recv_batch().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "base/error.hpp"
#include "base/inet.hpp"
#include "platform/unique_fd.hpp"

namespace esptun::platform {

/// One datagram to receive: the caller provides @buf, recv_batch() fills the rest.
struct RecvSlot {
	RecvSlot() = default;
	/// RecvSlot() - a slot receiving into @buffer
	explicit RecvSlot(std::span<uint8_t> buffer) noexcept : buf(buffer) {}

	std::span<uint8_t> buf; ///< in: where the datagram goes
	size_t len = 0;         ///< out: bytes stored in buf
	bool truncated = false; ///< out: the datagram was longer than buf (drop it)
	Endpoint from;          ///< out: sender; IPv4-mapped senders come out as IPv4
	/// out, UDP GRO (UdpSocket::enable_gro()): buf holds back-to-back datagrams
	/// of this many bytes, the last one possibly shorter; 0: one datagram
	uint16_t segment = 0;
	/// out: the ECN field of the datagram's outer IP header (of every
	/// datagram of a GRO train: the kernel merges only equal TOS/traffic class)
	uint8_t ecn = 0;
	/// out: when the kernel queued the datagram (CLOCK_REALTIME ns, from
	/// SO_TIMESTAMPNS: UdpSocket::enable_rx_timestamps()); 0: not reported
	int64_t rx_ns = 0;
};

/// One datagram to send.
struct SendSlot {
	std::span<const uint8_t> data;
	Endpoint to;
	/// the ECN field for the outer IP header (IP_TOS / IPV6_TCLASS); DSCP stays 0
	uint8_t ecn = 0;
};

/// Socket buffer sizes as the kernel reports them (it doubles what was asked).
struct BufferSizes {
	int rcv = 0;
	int snd = 0;
};

/// What UDP GSO did on a socket (status JSON "udp"); read from any thread.
struct GsoStats {
	bool enabled = false;   ///< trains are being sent with UDP_SEGMENT
	int disabled_errno = 0; ///< why it was switched off (EIO: the route cannot offload it)
	uint64_t trains = 0;    ///< sendmmsg() messages that carried a train
	uint64_t segments = 0;  ///< datagrams that went out inside trains
};

/// A bound, non-blocking UDP socket with batched I/O. An IPv6 socket is
/// dual-stack: it also sends to and receives from IPv4 peers. The socket owns
/// the descriptor, its options and the GSO state; the batched I/O itself is
/// done by a UdpEngine (platform/udp_engine.hpp: recvmmsg/sendmmsg or
/// io_uring), which both share this socket's GSO switch and counters.
///
/// UDP GSO (UDP_SEGMENT, Linux 4.18): send_batch() hands consecutive
/// datagrams to the same destination whose sizes are equal (the last may be
/// shorter) to the kernel as one "train", one message with one iovec per
/// datagram, which the stack segments once, after routing and netfilter,
/// instead of traversing them datagram by datagram. The wire is unchanged:
/// the peer receives the same datagrams. A kernel or route that cannot do it
/// answers EIO (e.g. a device without checksum offload, an xfrm policy on the
/// route): GSO is then switched off for the socket and the train re-sent
/// datagram by datagram, so nothing is lost.
class UdpSocket {
public:
	/// Most datagrams in one train (the kernel's UDP_MAX_SEGMENTS is 64 before Linux 6.6).
	static constexpr size_t kMaxGsoSegments = 64;
	/// Most bytes in one train: an IP datagram's payload must stay under 64 KiB.
	static constexpr size_t kMaxGsoBytes = 65000;
	/// Datagrams per recvmmsg()/sendmmsg() call; the kernel's own cap is UIO_MAXIOV (1024).
	static constexpr size_t kMaxBatch = 64;
	/// Socket buffer size asked for; the 208 KiB default overflowed on every peer.
	static constexpr int kDefaultBufferBytes = 4 << 20;

	/**
	 * bind() - open a UDP socket bound to @listen
	 * @listen:       local address and port; [::] gives a dual-stack socket,
	 *                port 0 lets the kernel pick one (see local_endpoint())
	 * @buffer_bytes: SO_RCVBUF/SO_SNDBUF wanted; forced past the
	 *                net.core.[rw]mem_max limits when privileged
	 * @reuse_port:   SO_REUSEPORT, for one socket per worker on one port
	 *
	 * Return: the socket. Throws SystemError.
	 */
	static UdpSocket bind(const Endpoint& listen, int buffer_bytes = kDefaultBufferBytes,
	                      bool reuse_port = false);

	/// fd() - the descriptor, for poll/epoll/io_uring; still owned by the socket
	int fd() const noexcept { return fd_.get(); }
	/// family() - v4 for an AF_INET socket, v6 for a (dual-stack) AF_INET6 one
	Family family() const noexcept { return family_; }

	/// local_endpoint() - the bound address and port (getsockname). Throws SystemError.
	Endpoint local_endpoint() const;
	/// buffer_sizes() - the SO_RCVBUF and SO_SNDBUF in effect. Throws SystemError.
	BufferSizes buffer_sizes() const;

	/**
	 * recv_batch() - receive up to min(slots.size(), kMaxBatch) datagrams, one recvmmsg()
	 * @slots: buffers to fill, in order
	 *
	 * MmsgEngine::recv_batch() on this socket (platform/udp_engine.hpp), for
	 * callers that hold the socket rather than an engine. Never blocks and
	 * never allocates. Call again while count == slots used.
	 * Return: count slots filled; count == 0 with err (EAGAIN: nothing queued)
	 */
	BatchResult recv_batch(std::span<RecvSlot> slots) noexcept;

	/**
	 * send_batch() - send every slot, sendmmsg() in chunks of kMaxBatch
	 * @slots: datagrams and destinations
	 *
	 * MmsgEngine::send_batch() on this socket; see UdpEngine::send_batch()
	 * for the error conventions.
	 * Return: count sent, and err when count < slots.size()
	 */
	BatchResult send_batch(std::span<const SendSlot> slots) noexcept;

	/// set_gso() - send trains with UDP_SEGMENT (the default) or never
	void set_gso(bool on) noexcept { gso_on_.store(on, std::memory_order_relaxed); }
	/**
	 * enable_gro() - let the kernel hand over a train of same-sized datagrams
	 * from one sender as one buffer (UDP_GRO, Linux 5.0)
	 *
	 * recv_batch() then reports RecvSlot::segment; receive buffers must be
	 * 64 KiB or a train comes out truncated. Return: false when the kernel
	 * refused (nothing changes then).
	 */
	bool enable_gro() noexcept;
	/**
	 * enable_rx_timestamps() - have the kernel report when each datagram
	 * arrived (SO_TIMESTAMPNS): recv_batch() fills RecvSlot::rx_ns, and the
	 * time a datagram waited in the receive queue is now minus that.
	 * Return: false when the kernel refused (rx_ns stays 0).
	 */
	bool enable_rx_timestamps() noexcept;
	/// rx_queued_bytes() - memory the datagrams waiting in the receive queue
	/// take (SO_MEMINFO's rmem_alloc: payload plus the kernel's per-buffer
	/// overhead); 0 when the kernel does not say
	uint64_t rx_queued_bytes() const noexcept;
	/// gro_on() - enable_gro() succeeded
	bool gro_on() const noexcept { return gro_on_.load(std::memory_order_relaxed); }
	/// gso_stats() - what GSO did so far
	GsoStats gso_stats() const noexcept;
	/// gso_on() - whether send_batch() may send trains now (for the engines)
	bool gso_on() const noexcept { return gso_on_.load(std::memory_order_relaxed); }
	/**
	 * count_train() - an engine sent a train of @segments datagrams
	 * @segments: datagrams in it (> 1)
	 *
	 * Called by the sending thread only: a relaxed load and store, no locked instruction.
	 */
	void count_train(size_t segments) noexcept;
	/**
	 * disable_gso() - the kernel cannot send trains on this socket's route
	 * @err: what it answered (EIO); shown in gso_stats().disabled_errno
	 */
	void disable_gso(int err) noexcept;

	UdpSocket(UdpSocket&& o) noexcept;
	UdpSocket& operator=(UdpSocket&&) = delete;

private:
	UdpSocket(UniqueFd fd, Family family) noexcept : fd_(std::move(fd)), family_(family) {}

	UniqueFd fd_;
	Family family_;
	// Written by the sending thread only, read by anyone (status).
	std::atomic<bool> gso_on_{true};
	std::atomic<bool> gro_on_{false};
	std::atomic<int> gso_errno_{0};
	std::atomic<uint64_t> gso_trains_{0}, gso_segments_{0};
};

/**
 * path_mtu() - the MTU of the route towards @dst (IP_MTU / IPV6_MTU)
 * @dst: the peer; only its address matters
 *
 * Connects a throwaway UDP socket (no packet is sent) and asks the kernel
 * for the route MTU, including any learnt path MTU. The tun MTU is this
 * minus the ESP-in-UDP overhead.
 * Return: the MTU, or nullopt when there is no route to @dst.
 * Throws SystemError on other failures.
 */
std::optional<unsigned> path_mtu(const IpAddress& dst);

} // namespace esptun::platform
