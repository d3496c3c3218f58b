// The underlay UDP socket (RFC 3948 ESP-in-UDP, port 4500): outbound ESP
// packets leave through send_batch(), inbound ones arrive through recv_batch().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "platform/error.hpp"
#include "platform/unique_fd.hpp"
#include "tunnel/inet.hpp"

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
};

/// One datagram to send.
struct SendSlot {
	std::span<const uint8_t> data;
	Endpoint to;
};

/// Socket buffer sizes as the kernel reports them (it doubles what was asked).
struct BufferSizes {
	int rcv = 0;
	int snd = 0;
};

/// A bound, non-blocking UDP socket with batched I/O. An IPv6 socket is
/// dual-stack: it also sends to and receives from IPv4 peers.
class UdpSocket {
public:
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
	 *
	 * Return: the socket. Throws SystemError.
	 */
	static UdpSocket bind(const Endpoint& listen, int buffer_bytes = kDefaultBufferBytes);

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
	 * Never blocks and never allocates. Call again while count == slots used.
	 * Return: count slots filled; count == 0 with err (EAGAIN: nothing queued)
	 */
	BatchResult recv_batch(std::span<RecvSlot> slots) noexcept;

	/**
	 * send_batch() - send every slot, sendmmsg() in chunks of kMaxBatch
	 * @slots: datagrams and destinations
	 *
	 * Never blocks and never allocates. Stops at the first datagram the kernel
	 * refuses: slots [0, count) went out; slots[count] failed with err
	 * (EAGAIN/ENOBUFS: send buffer full, retry later; EMSGSIZE, ENETUNREACH...:
	 * drop that one and call again with the rest; EAFNOSUPPORT: an IPv6
	 * destination on an IPv4 socket).
	 * Return: count sent, and err when count < slots.size()
	 */
	BatchResult send_batch(std::span<const SendSlot> slots) noexcept;

private:
	UdpSocket(UniqueFd fd, Family family) noexcept : fd_(std::move(fd)), family_(family) {}

	UniqueFd fd_;
	Family family_;
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
