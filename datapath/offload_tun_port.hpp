// tun_io = "direct" with tun offloads: the tun is opened with IFF_VNET_HDR
// and TUNSETOFFLOAD (checksum, TSO4/6, USO4/6), so the kernel hands over TCP
// and UDP "super-packets" of up to 64 KiB and takes merged ones back. One
// read() then carries up to 64 packets' worth of data, and one writev() as
// many: the per-packet system calls of the direct port go away for bulk
// traffic, which is where the direct port spent most of its time.
//
// Outbound: read() [virtio-net header][super-packet] into a staging buffer
//   -> datapath/offload.hpp segment() into one buffer per wire packet (full
//   IP/TCP/UDP headers and checksums; the peer sees ordinary packets) ->
//   the data plane encapsulates each. A packet without GSO is copied to one
//   buffer and its checksum finished if the kernel left it partial.
// Inbound: the batch's decrypted packets -> plan_gro() finds runs of one TCP
//   flow's consecutive segments -> per run, patch_gro_head() rewrites the
//   first packet's headers and one writev() sends [header][first packet]
//   [payload 2]...[payload n]; other packets go alone behind a zero header.
//
// The interface's gso_max_segs is set to kTunBatch, so a super-packet never
// has more segments than a batch has buffers.
#pragma once

#include "datapath/offload.hpp"
#include "datapath/tun_port.hpp"

#include <array>
#include <sys/uio.h>
#include <vector>

namespace esptun::datapath {

/**
 * cut_staged() - one packet as the tun handed it over (@staged: virtio-net
 * header, then the packet) into wire packets at @seg_out[@at...], their
 * lengths in @seg_len: a TSO/USO super-packet cut by offload::segment(), any
 * other copied whole with its checksum finished if the kernel left it partial
 * @stats: gso_reads/gso_segments, or offload_errors for a packet that is
 *         malformed or does not fit (it is dropped: return 0)
 * @keep:  set when the packet would fit only in a batch of its own (@at > 0):
 *         nothing is written, keep it for the next batch
 * Shared by OffloadTunPort and VhostTunPort. Return: wire packets written.
 */
size_t cut_staged(std::span<uint8_t> staged, std::span<const std::span<uint8_t>> seg_out,
                  std::span<size_t> seg_len, size_t at, TunIoStats& stats, bool& keep) noexcept;

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
	bool can_sleep() noexcept override { return !staged_; }
	size_t read_batch(std::span<TunPacket> out) noexcept override;
	std::span<platform::RecvSlot> recv_slots() noexcept override { return recv_slots_; }
	size_t write_batch(std::span<const TunWrite> pkts) noexcept override;
	TunIoStats& io_stats() noexcept override { return stats_; }

private:
	/// Cuts the staged packet into out buffers from @at on. Return: packets
	/// produced; 0 with staged_ still set when they do not fit after @at.
	size_t emit_staged(size_t at, std::span<TunPacket> out) noexcept;
	/// One write of @iov_n pieces covering @pkts packets.
	void write_gathered(size_t iov_n, size_t pkts, size_t& failed) noexcept;

	int fd_;
	TunIoStats& stats_;
	size_t seg_buf_size_;
	// Preallocated: the data path never allocates.
	std::vector<uint8_t> stage_;   ///< header + one super-packet as read
	size_t stage_len_ = 0;         ///< bytes in stage_
	bool staged_ = false;          ///< stage_ holds a packet not yet emitted
	std::vector<uint8_t> out_mem_; ///< kTunBatch wire-packet buffers
	std::vector<uint8_t> in_mem_;  ///< kTunBatch receive slots
	std::array<platform::RecvSlot, kTunBatch> recv_slots_{};
	std::array<std::span<uint8_t>, kTunBatch> seg_out_{};
	std::array<size_t, kTunBatch> seg_len_{};
	std::array<std::span<uint8_t>, kTunBatch> gro_pkts_{};
	std::array<offload::GroRun, kTunBatch> gro_runs_{};
	std::array<uint8_t, offload::VnetHdr::kSize> zero_hdr_{};
	std::array<uint8_t, offload::VnetHdr::kSize> run_hdr_{};
	std::array<iovec, kTunBatch + 1> iov_{};
};

} // namespace esptun::datapath
