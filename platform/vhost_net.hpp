// The kernel side of tun_io = "vhost": /dev/vhost-net set-up (owner, features,
// identity memory table, vring NUM/BASE/ADDR/KICK/CALL, backend = the tun fd)
// and the one anonymous mapping that holds both rings and the packet buffers.
// Every ioctl of the vhost data path lives here; the rings themselves are
// virtio/split_queue.hpp, and datapath/vhost_tun_port.hpp drives them.
//
// Set-up order (the one that works on Linux 6.1, exercised by tests/vm/):
//   tun opened IFF_TUN|IFF_NO_PI, TUNSETSNDBUF != INT_MAX
//   -> open /dev/vhost-net, VHOST_SET_OWNER, VHOST_GET/SET_FEATURES
//      (a tun with IFF_VNET_HDR: use_tun_vnet_hdr() sets them again)
//   -> VHOST_SET_MEM_TABLE (one region, guest address == user address)
//   -> per queue: SET_VRING_NUM, SET_VRING_BASE 0, SET_VRING_ADDR, SET_VRING_KICK, SET_VRING_CALL
//   -> (driver posts RX buffers) -> VHOST_NET_SET_BACKEND(tun) for both -> kick RX.
#pragma once

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace esptun::platform {

inline constexpr const char* kVhostNetPath = "/dev/vhost-net";
/// Queue 0 carries packets the tun hands us (outbound), queue 1 the ones we hand it.
inline constexpr unsigned kVhostRxQueue = 0;
inline constexpr unsigned kVhostTxQueue = 1;
/// struct virtio_net_hdr_mrg_rxbuf: with VIRTIO_F_VERSION_1 every packet on a
/// ring starts with these 12 bytes. Either vhost adds them on RX and strips
/// them on TX (VHOST_NET_F_VIRTIO_NET_HDR, a tun without IFF_VNET_HDR: always
/// a zero header), or the tun reads and writes them itself (IFF_VNET_HDR with
/// TUNSETVNETHDRSZ 12, use_tun_vnet_hdr(): GSO and checksum fields included)
/// and vhost only fills in num_buffers (VIRTIO_NET_F_MRG_RXBUF).
inline constexpr size_t kVirtioNetHdrLen = 12;

/// An anonymous, populated, private read-write mapping; unmapped on destruction.
class MappedRegion {
public:
	MappedRegion() noexcept = default;
	/// MappedRegion() - map @bytes (rounded up to the page size). Throws SystemError.
	explicit MappedRegion(size_t bytes);
	MappedRegion(MappedRegion&& o) noexcept;
	MappedRegion& operator=(MappedRegion&& o) noexcept;
	MappedRegion(const MappedRegion&) = delete;
	MappedRegion& operator=(const MappedRegion&) = delete;
	~MappedRegion();

	std::span<uint8_t> span() const noexcept { return {data_, size_}; }

private:
	uint8_t* data_ = nullptr;
	size_t size_ = 0;
};

/// Where one vring lives, for VHOST_SET_VRING_NUM/ADDR.
struct VringAddrs {
	uint32_t num = 0;
	const void* desc = nullptr;
	const void* avail = nullptr;
	const void* used = nullptr;
};

/**
 * VhostNet - one /dev/vhost-net instance with its four eventfds
 *
 * open() does the part that needs nothing but the device (so tun_io = "auto"
 * can fall back before any interface exists); the rest follows once the
 * rings are laid out. The destructor detaches the backend before closing.
 */
class VhostNet {
public:
	/// The features esptun needs and sets, nothing more (never ACCESS_PLATFORM:
	/// it would need IOTLB messages). The bits are checked in vhost_net.cpp.
	static const uint64_t kWantedFeatures;

	/**
	 * open() - open @path, VHOST_SET_OWNER, negotiate kWantedFeatures, make
	 * the kick and call eventfds of both queues
	 * Return: the device. Throws SystemError: ENOENT when the node is missing
	 * (no vhost_net module), EOPNOTSUPP when a wanted feature is not offered.
	 */
	static VhostNet open(const std::string& path = kVhostNetPath);

	VhostNet(VhostNet&&) noexcept = default;
	VhostNet& operator=(VhostNet&&) = delete;
	VhostNet(const VhostNet&) = delete;
	VhostNet& operator=(const VhostNet&) = delete;
	~VhostNet() { detach(); }

	/**
	 * use_tun_vnet_hdr() - VHOST_SET_FEATURES for a tun opened with IFF_VNET_HDR
	 * (vnet header size 12): VERSION_1, EVENT_IDX and VIRTIO_NET_F_MRG_RXBUF,
	 * without VHOST_NET_F_VIRTIO_NET_HDR. vhost then passes the tun's own
	 * header through (drivers/vhost/net.c: vhost_hlen 0, sock_hlen 12), so
	 * GSO super-packets and partial checksums cross the rings; an RX packet
	 * may span several buffers, the first header's num_buffers says how many.
	 * Before the backend is attached. Throws SystemError (EOPNOTSUPP when not offered).
	 */
	void use_tun_vnet_hdr();
	/// The features set by the last VHOST_SET_FEATURES.
	uint64_t acked_features() const noexcept { return acked_; }

	/// VHOST_SET_MEM_TABLE: @region (rings and buffers) mapped one to one. Throws SystemError.
	void set_mem_table(std::span<const uint8_t> region);
	/// SET_VRING_NUM, SET_VRING_BASE 0, SET_VRING_ADDR, SET_VRING_KICK, SET_VRING_CALL. Throws
	/// SystemError.
	void setup_queue(unsigned index, const VringAddrs& addrs);
	/// VHOST_NET_SET_BACKEND(@tun_fd) for both queues: the device starts. Throws SystemError.
	void attach(int tun_fd);
	/// VHOST_NET_SET_BACKEND(-1) for both queues; errors ignored (tear-down).
	void detach() noexcept;

	int kick_fd(unsigned q) const noexcept { return kick_[q].get(); }
	int call_fd(unsigned q) const noexcept { return call_[q].get(); }
	uint64_t offered_features() const noexcept { return offered_; }

private:
	VhostNet() = default;

	UniqueFd fd_;
	std::array<UniqueFd, 2> kick_, call_;
	uint64_t offered_ = 0;
	uint64_t acked_ = 0;
	bool attached_ = false;
};

/**
 * set_tun_sndbuf() - TUNSETSNDBUF on a tun queue
 * @tun_fd: the tun
 * @bytes:  the send buffer limit
 *
 * Required before vhost TX: at the default INT_MAX vhost-net takes its XDP
 * batching path (vhost_net_build_xdp -> tun_xdp_one), which runs
 * eth_type_trans() even for IFF_TUN and drops every packet while the used
 * entry comes back with length 0 and no error. Throws SystemError.
 */
void set_tun_sndbuf(int tun_fd, int bytes);

} // namespace esptun::platform
