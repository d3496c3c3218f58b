// tun_io = "vhost": the tun side of the packet loop through vhost-net's two
// virtqueues, with the direct-write fallback for small batches. The rings are
// virtio::SplitQueue; the ioctls are platform/vhost_net.hpp.
//
// Theory of operation. One mapping holds the RX ring, the TX ring and a pool
// of equal buffers (buffer_size(mtu) bytes each, esp::kHeadroom + inner +
// esp::kTailroom):
//   - queue_size RX buffers, always posted to the RX ring (queue 0). The
//     device gets the address kHeadroom - 12 into a buffer, so the 12-byte
//     virtio_net_hdr it writes lands in the headroom and the packet at
//     kHeadroom, where encapsulate() wants it: outbound needs no copy.
//   - queue_size + kTunBatch inbound buffers: kTunBatch of them sit in the
//     underlay socket's receive slots, the rest are free or in the TX ring
//     (queue 1). decapsulate() leaves the inner packet behind at least 16
//     bytes of ESP header and IV, so a zero virtio_net_hdr is written right
//     in front of it and (hdr, 12 + len) goes to the TX ring as is; the slot
//     takes a free buffer instead, and the ring's buffer comes back to the
//     free list when its used entry is harvested.
// Direct writes: when the TX ring is idle (the device asked to be kicked for
// the next buffer, so it has nothing queued) and a batch has at most
// direct_write_max packets, write() them to the tun fd: one system call per
// packet instead of a kick plus a wake-up of the vhost worker. A packet that
// finds no free buffer (the ring holds them all) is written directly too.
//
// tun offloads (vnet_hdr = true: the tun has IFF_VNET_HDR, TUNSETVNETHDRSZ 12
// and TUNSETOFFLOAD; vhost-net passes its virtio_net_hdr through, see
// VhostNet::use_tun_vnet_hdr()):
//   - RX: mergeable buffers (VIRTIO_NET_F_MRG_RXBUF). The RX buffers stay
//     MTU-sized; vhost spreads a TCP/UDP super-packet of up to 64 KiB over as
//     many of them as it needs and puts their count in the first one's
//     num_buffers. Chosen over 64 KiB RX buffers (256 of them would be 16 MiB
//     per worker, and every small packet would pin one) and over descriptor
//     chains per RX buffer (the same memory, posted in pieces): the pool stays
//     as it was, a plain packet stays zero-copy in one buffer, and only a
//     super-packet pays one copy into a 64 KiB staging buffer (SegmentStage,
//     offload_batch.hpp), which offload::segment() needs contiguous anyway.
//     segment() then cuts it into kTunBatch wire-size buffers with the same headroom and
//     tailroom as the pool's, so encapsulate() works in place. A one-buffer
//     packet with NEEDS_CSUM has its checksum finished in place. A
//     super-packet with more segments than the batch has room for waits in
//     the staging buffer for the next batch (the interface's gso_max_segs is
//     kTunBatch, so it always fits an empty one).
//   - TX: GroPlan (offload_batch.hpp) finds runs of one TCP flow and
//     patches each run's first packet; the run goes to the TX ring as one
//     descriptor chain [header + first packet][payload 2]...[payload n]
//     (SplitQueue::add_chain(), no copy: each piece stays in its receive
//     buffer, and each slot takes a free buffer as for a single packet), or
//     with one writev() of the same pieces on the direct path. Other packets
//     go alone behind a zero header, written in place in front of them.
// UDP GRO (gro_slots = true): a receive slot then holds a train of up to
// ~45 ESP datagrams, one kernel buffer instead of one per datagram, and the
// pool-sized slot buffers cannot take it. The slots become kTunBatch buffers
// of esp::kBufferSize outside the device's memory (4 MiB per worker), and
// each decrypted packet bound for the TX ring is copied (~1.4 KB) into a
// free pool buffer, which goes to the ring; a GRO run
// goes as a chain of such copies. The slot keeps its buffer, so the packets
// of one train need no shared ownership of it. Direct writes still go from
// the slot in place. The pool buffers that would have been slots join the
// free stack.
//   Memory per worker (MTU 1500, 256-entry rings): the pool of
//   (2 * 256 + 64) buffers of 1600 bytes (~0.9 MiB) and the rings (~24 KiB)
//   as without offloads, plus the staging buffer (64 KiB) and kTunBatch
//   segment buffers (~100 KiB): about 1.1 MiB, fixed at start-up. Nothing
//   grows: a full TX ring pushes runs and packets to direct writes, a full
//   batch leaves a super-packet staged and the rest in the used ring.
#pragma once

#include "datapath/offload_batch.hpp"
#include "datapath/tun_port.hpp"
#include "platform/vhost_net.hpp"
#include "virtio/split_queue.hpp"

#include <array>
#include <memory>
#include <sys/uio.h>
#include <vector>

namespace esptun::datapath {

/// What a VhostTunPort works with; the fds are not owned.
struct VhostPortParams {
	uint32_t queue_size = 256;      ///< both rings; a power of two
	size_t buf_size = 0;            ///< VhostTunPort::buffer_size(mtu)
	unsigned direct_write_max = 4;  ///< 0: every inbound packet goes through the TX ring
	int tun_fd = -1;                ///< for direct writes
	int rx_kick = -1, rx_call = -1; ///< RX ring eventfds
	int tx_kick = -1;               ///< TX ring kick eventfd (its call eventfd is never waited on)
	/// The tun has IFF_VNET_HDR (header size 12) and vhost passes its header
	/// through with mergeable RX buffers: offloads both ways. false: vhost adds
	/// and strips a zero header (VHOST_NET_F_VIRTIO_NET_HDR).
	bool vnet_hdr = false;
	/// The underlay socket has UDP GRO (UdpSocket::enable_gro()): the receive
	/// slots are 64 KiB buffers of the port's own, and each inbound packet is
	/// copied into a pool buffer for the TX ring (see the theory above).
	bool gro_slots = false;
};

class VhostTunPort final : public TunPort {
public:
	/// buffer_size() - one pool buffer for a tun of @mtu, 64-byte multiple
	static size_t buffer_size(unsigned mtu) noexcept;
	/// region_bytes() - how much memory the rings and the pool need
	static size_t region_bytes(uint32_t queue_size, size_t buf_size) noexcept;

	/**
	 * VhostTunPort() - lay out rings and pool in @region and post every RX buffer
	 * @region: region_bytes() long, page aligned; the device is not attached yet
	 * @p:      sizes, threshold and eventfds
	 * @stats:  counters this port writes
	 * Throws std::invalid_argument on a short region or a bad size (set-up).
	 */
	VhostTunPort(std::span<uint8_t> region, const VhostPortParams& p, TunIoStats& stats);

	/// Where vring @q (platform::kVhostRxQueue or kVhostTxQueue) lives, for VhostNet::setup_queue().
	platform::VringAddrs vring(unsigned q) const noexcept;
	/// start() - after the backend is attached: tell the device about the RX buffers
	void start() noexcept;

	int read_fd() const noexcept override { return p_.rx_call; }
	bool read_fd_signals_only() const noexcept override { return true; }
	bool can_sleep() noexcept override;
	void on_read_wakeup() noexcept override;
	size_t read_batch(std::span<TunPacket> out) noexcept override;
	void read_done() noexcept override;
	/// Read-ahead by copy: the ring's buffers go back to the device batch by
	/// batch, each packet copied out into a packet buffer of the caller's.
	size_t raw_buffer_size() const noexcept override;
	size_t read_raw(std::span<uint8_t> buf) noexcept override;
	std::span<platform::RecvSlot> recv_slots() noexcept override { return recv_slots_; }
	size_t write_batch(std::span<const TunWrite> pkts) noexcept override;
	TunIoStats& io_stats() noexcept override { return stats_; }

	const virtio::SplitQueue& rx_queue() const noexcept { return rx_; }
	const virtio::SplitQueue& tx_queue() const noexcept { return tx_; }
	/// Inbound buffers neither in a receive slot nor in the TX ring.
	size_t free_buffers() const noexcept { return free_n_; }
	/// A super-packet waits in the staging buffer for the next batch.
	bool staged() const noexcept { return stage_.held(); }

	/// Bytes of the staging buffer: a header and the largest super-packet.
	static constexpr size_t kStageBytes = platform::kVirtioNetHdrLen + 65536 + 64;

private:
	std::span<uint8_t> buffer(uint32_t idx) const noexcept {
		return {pool_ + size_t(idx) * p_.buf_size, p_.buf_size};
	}
	void post_rx(uint32_t idx) noexcept;
	/// One used RX entry (vnet_hdr mode): zero-copy, or into the staging buffer.
	void take_rx(const virtio::UsedBuffer& u, std::span<TunPacket> out, size_t& n) noexcept;
	void reclaim_tx() noexcept;
	bool to_ring(const TunWrite& w) noexcept;
	/// gro_slots: @bytes copied into a free pool buffer, @before bytes of
	/// them in front of the packet start (kHeadroom). Return: the buffer's
	/// index, or UINT32_MAX when none is free or the bytes do not fit.
	uint32_t copy_to_pool(std::span<const uint8_t> bytes, size_t before) noexcept;
	/// A patched GRO run of @pkts as one descriptor chain; false: no room or a bad layout.
	bool run_to_ring(const offload::GroRun& run, std::span<const TunWrite> pkts) noexcept;
	/// run_to_ring() with gro_slots: the pieces copied into pool buffers.
	bool run_copy_to_ring(const offload::GroRun& run, std::span<const TunWrite> pkts) noexcept;
	void write_direct(const TunWrite& w, size_t& failed) noexcept;
	void write_run_direct(const offload::GroRun& run, std::span<const TunWrite> pkts,
	                      size_t& failed) noexcept;
	size_t write_batch_vnet(std::span<const TunWrite> pkts) noexcept;
	void kick_tx() noexcept;
	/// The kick for @pub on @q: audited (kick_unasked()), written to @fd, counted in @kicks.
	void kick(const virtio::SplitQueue& q, const virtio::Published& pub, int fd, Counter& kicks) noexcept;
	void sync_device_errors() noexcept;

	VhostPortParams p_;
	TunIoStats& stats_;
	uint8_t* pool_ = nullptr;
	virtio::SplitQueue rx_, tx_;
	std::vector<uint32_t> free_; ///< stack of free inbound buffer indices, free_n_ deep
	size_t free_n_ = 0;
	std::array<uint32_t, kTunBatch> slot_buf_{}; ///< pool index behind each receive slot
	std::array<platform::RecvSlot, kTunBatch> recv_slots_{};
	std::array<uint32_t, kTunBatch> held_{}; ///< RX buffers out with the last read_batch()
	size_t held_n_ = 0;
	bool rx_batch_full_ = false; ///< the last read_batch() stopped at its limit: more may wait
	uint64_t short_used_ = 0;    ///< RX used entries shorter than the virtio-net header
	uint64_t bad_rx_hdr_ = 0;    ///< RX headers with an impossible num_buffers
	// vnet_hdr mode only (no memory otherwise); preallocated, the data path never allocates.
	SegmentStage stage_;        ///< header + one packet gathered from mergeable buffers
	size_t stage_len_ = 0;      ///< bytes gathered into stage_ so far
	uint32_t asm_left_ = 0;     ///< buffers of the packet being gathered still to come
	bool asm_overflow_ = false; ///< it does not fit stage_: drop it when complete
	GroPlan gro_;
	// read_raw(): the batch being copied out, and how far.
	std::array<TunPacket, kTunBatch> ahead_{};
	size_t ahead_n_ = 0, ahead_at_ = 0;
	std::array<virtio::SplitQueue::ChainPart, kTunBatch> chain_{};
	std::array<iovec, kTunBatch> iov_{};
	std::vector<uint8_t> gro_mem_; ///< gro_slots only: the receive slots' buffers
};

/**
 * VhostTun - the vhost tun port with what it runs on: the mapping, the port
 * and the device, torn down in the safe order (the device is detached first,
 * the memory it points into unmapped last).
 */
class VhostTun {
public:
	/**
	 * VhostTun() - finish the set-up begun by VhostNet::open() and start the device
	 * @dev:              the opened device (taken over)
	 * @tun_fd:           the tun (IFF_TUN|IFF_NO_PI), not owned
	 * @mtu:              its MTU: sizes the buffers
	 * @direct_write_max: see VhostPortParams
	 * @vnet_hdr:         the tun was opened with IFF_VNET_HDR (offloads): see VhostPortParams
	 * @gro_slots:        the underlay socket has UDP GRO: see VhostPortParams
	 * Throws SystemError (an ioctl failed) or std::invalid_argument.
	 */
	VhostTun(platform::VhostNet dev, int tun_fd, unsigned mtu, unsigned direct_write_max,
	         TunIoStats& stats, bool vnet_hdr = false, bool gro_slots = false);

	VhostTunPort& port() noexcept { return *port_; }

private:
	platform::MappedRegion region_;
	std::unique_ptr<VhostTunPort> port_;
	platform::VhostNet dev_; ///< declared last: destroyed (detached) first
};

} // namespace esptun::datapath
