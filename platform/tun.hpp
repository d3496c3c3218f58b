// The tun device: the inner side of the tunnel. Outbound packets are read
// from it (one IP packet per read), inbound decrypted packets written to it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <sys/uio.h>

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

namespace esptun::platform {

/// An open tun interface. Not persistent: the kernel deletes the interface
/// (and with it its addresses and routes) when the last queue fd closes.
struct TunDevice {
	UniqueFd fd;      ///< non-blocking, close-on-exec queue descriptor
	std::string name; ///< the name the kernel gave it (matters when asked for "")
	int ifindex = 0;  ///< for netlink (addresses, routes, MTU)
};

/**
 * open_tun() - create (or attach a queue to) a layer-3 tun interface
 * @name:        interface name, at most 15 bytes; "" lets the kernel pick tunN
 * @multi_queue: IFF_MULTI_QUEUE; calling again with the same name then adds
 *               another queue (fd) to the same interface, one per worker
 *
 * Opens /dev/net/tun with O_NONBLOCK|O_CLOEXEC and sets IFF_TUN|IFF_NO_PI:
 * every read/write is exactly one bare IPv4/IPv6 packet, no 4-byte packet
 * info header. The interface starts down; bring it up with set_link_up().
 * Return: the device. Throws SystemError naming the step and the interface
 * (missing /dev/net/tun, missing privileges, a name in use by another kind
 * of interface, an invalid name).
 */
TunDevice open_tun(std::string_view name, bool multi_queue = false, bool vnet_hdr = false);

/// Bytes of the virtio-net header in front of every packet of a tun opened
/// with vnet_hdr (TUNSETVNETHDRSZ: struct virtio_net_hdr_v1, as on the vhost rings).
inline constexpr size_t kTunVnetHdrLen = 12;

/// The offloads a tun accepted (TUNSETOFFLOAD, linux/if_tun.h TUN_F_*).
struct TunOffloads {
	bool csum = false;               ///< packets may come with a partial checksum (NEEDS_CSUM)
	bool tso4 = false, tso6 = false; ///< TCP super-packets up to 64 KiB
	bool uso4 = false, uso6 = false; ///< UDP super-packets (Linux 6.2+)
};

/**
 * enable_tun_offloads() - let the kernel hand us (and take from us) super-packets
 * @fd: a tun queue opened with vnet_hdr
 *
 * Asks for checksum, TSO4/6 and USO4/6; a kernel without USO refuses the
 * whole set with EINVAL, so it is asked again without USO.
 * Return: what the kernel accepted. Throws SystemError when even checksum
 * and TSO are refused.
 */
TunOffloads enable_tun_offloads(int fd);

/**
 * tun_writev() - hand one packet, gathered from @iov, to the kernel
 * @fd:  the tun fd
 * @iov: the pieces (with vnet_hdr: the header first), at most IOV_MAX
 *
 * Return: bytes written, or n == -1 and err
 */
IoResult tun_writev(int fd, std::span<const iovec> iov) noexcept;

/**
 * tun_read() - read one packet from a tun queue
 * @fd:  the tun fd (non-blocking)
 * @buf: room for the packet; a packet longer than @buf is truncated by the
 *       kernel, so size it for the interface MTU
 *
 * Return: the packet length, or n == -1 and err (EAGAIN: no packet queued)
 */
IoResult tun_read(int fd, std::span<uint8_t> buf) noexcept;

/**
 * tun_write() - hand one IP packet to the kernel through a tun queue
 * @fd:  the tun fd
 * @pkt: a whole IPv4 or IPv6 packet
 *
 * Return: bytes written, or n == -1 and err (EINVAL: not an IP packet;
 * EIO: interface down)
 */
IoResult tun_write(int fd, std::span<const uint8_t> pkt) noexcept;

} // namespace esptun::platform
