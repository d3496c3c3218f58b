// tun_io = "direct" with tun offloads: the tun is opened with IFF_VNET_HDR
// and TUNSETOFFLOAD (checksum, TSO4/6, USO4/6), so the kernel hands over TCP
// and UDP "super-packets" of up to 64 KiB and takes merged ones back. One
// read() then carries up to kTunBatch packets' worth of data, and one
// writev() as many, where the plain direct port (tun_port.hpp) makes one
// system call per packet.
//
// Outbound: read() [virtio-net header][super-packet] into the SegmentStage
//   (offload_batch.hpp) -> cut into one buffer per wire packet (full
//   IP/TCP/UDP headers and checksums; the peer sees ordinary packets) ->
//   the data plane encapsulates each. A packet without GSO is copied to one
//   buffer and its checksum finished if the kernel left it partial.
// Inbound: the batch's decrypted packets -> GroPlan finds runs of one TCP
//   flow's consecutive segments and patches each run's first packet -> one
//   writev() per run sends [header][first packet][payload 2]...[payload n];
//   other packets go alone, each with one writev() behind a zero header.
//
// The interface's gso_max_segs is set to kTunBatch, so a super-packet never
// has more segments than a batch has buffers.
#pragma once

#include "datapath/offload_batch.hpp"
#include "datapath/tun_port.hpp"

#include <array>
#include <sys/uio.h>
#include <vector>

namespace esptun::datapath {

class OffloadTunPort final : public TunPort {
public:
	/**
	 * OffloadTunPort() - buffers for @tun_fd
	 * @tun_fd: a tun opened with vnet_hdr and offloads enabled (not owned, non-blocking)
	 * @mtu:    the interface MTU: the largest wire packet a segment can be
	 * @stats:  counters to write (outlive the port)
	 */
	OffloadTunPort(int tun_fd, unsigned mtu, TunIoStats& stats);

	int read_fd() const noexcept override { return fd_; }
	bool can_sleep() noexcept override { return !stage_.held(); }
	size_t read_batch(std::span<TunPacket> out) noexcept override;
	/// A raw buffer holds the virtio-net header and a packet of up to 64 KiB;
	/// emit_raw() cuts it into the stage's segment buffers.
	size_t raw_buffer_size() const noexcept override;
	size_t read_raw(std::span<uint8_t> buf) noexcept override;
	std::span<uint8_t> raw_packet(std::span<uint8_t> buf, size_t len) noexcept override;
	size_t emit_raw(std::span<uint8_t> buf, size_t len, size_t at, std::span<TunPacket> out,
	                bool& keep) noexcept override;
	std::span<platform::RecvSlot> recv_slots() noexcept override { return recv_slots_; }
	size_t write_batch(std::span<const TunWrite> pkts) noexcept override;
	TunIoStats& io_stats() noexcept override { return stats_; }

private:
	/// One write of @iov_n pieces covering @pkts packets.
	void write_gathered(size_t iov_n, size_t pkts, size_t& failed) noexcept;

	int fd_;
	TunIoStats& stats_;
	// Preallocated: the data path never allocates.
	SegmentStage stage_;          ///< header + one super-packet as read, and its segments
	std::vector<uint8_t> in_mem_; ///< kTunBatch receive slots
	std::array<platform::RecvSlot, kTunBatch> recv_slots_{};
	GroPlan gro_;
	std::array<uint8_t, offload::VnetHdr::kSize> zero_hdr_{};
	std::array<uint8_t, offload::VnetHdr::kSize> run_hdr_{};
	std::array<iovec, kTunBatch + 1> iov_{};
};

} // namespace esptun::datapath
