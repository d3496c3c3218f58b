// The batch work that both tun ports with offloads share (OffloadTunPort, and
// VhostTunPort with vnet_hdr): outbound, one packet from the tun held in a
// staging buffer and cut into wire-packet buffers; inbound, a batch of
// decrypted packets planned into GRO runs and handed, run by run, to the
// port's own way of writing. The header parsing and rewriting is offload.hpp.
#pragma once

#include "datapath/offload.hpp"
#include "datapath/tun_port.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sys/uio.h>
#include <vector>

namespace esptun::datapath {

/**
 * class SegmentStage - one packet as the tun handed it over (virtio-net
 * header, then the packet) and kTunBatch wire-packet buffers to cut it into.
 *
 * Each segment buffer has esp::kHeadroom in front of and esp::kTailroom
 * behind its packet, so encapsulate() works on every segment in place. A
 * super-packet that does not fit behind the packets already in a batch stays
 * held for the next one; the interface's gso_max_segs is kTunBatch, so it
 * always fits an empty batch. Everything is allocated by the constructor.
 */
class SegmentStage {
public:
	/**
	 * SegmentStage() - allocate the staging and segment buffers
	 * @stage_bytes: room for a header and the largest packet the tun hands over
	 * @buf_size:    one segment buffer, headroom and tailroom included;
	 *               0 (with @stage_bytes 0): a port without offloads, nothing allocated
	 */
	SegmentStage(size_t stage_bytes, size_t buf_size);

	/// The staging buffer: a port reads (or gathers) the next packet into it.
	std::span<uint8_t> buffer() noexcept { return stage_; }
	/// The first @len bytes of buffer() are a packet to emit.
	void hold(size_t len) noexcept {
		len_ = len;
		held_ = true;
	}
	/// A packet is held that no emit() has taken yet.
	bool held() const noexcept { return held_; }

	/**
	 * emit() - cut the held packet into @out[@at...]
	 * @at:    packets already in @out
	 * @out:   the batch; at most kTunBatch of it is used
	 * @stats: gso_reads/gso_segments, or offload_errors for a packet that is
	 *         malformed or does not fit a segment buffer (it is dropped)
	 *
	 * A TSO/USO super-packet is cut by offload::segment(); any other packet
	 * is copied whole, its checksum finished if the kernel left it partial.
	 * Return: packets written to @out; 0 with held() still true when the
	 * packet fits only in a batch of its own and @at > 0.
	 */
	size_t emit(size_t at, std::span<TunPacket> out, TunIoStats& stats) noexcept;

	/**
	 * emit_from() - emit() of a packet held elsewhere: @staged (header, then
	 * packet) as a port read it ahead, which stays the caller's
	 * @keep: set, with 0 returned, when it fits only a batch of its own
	 */
	size_t emit_from(std::span<uint8_t> staged, size_t at, std::span<TunPacket> out, TunIoStats& stats,
	                 bool& keep) noexcept;

private:
	size_t cut(std::span<uint8_t> staged, size_t at, size_t room, TunIoStats& stats, bool& keep) noexcept;

	std::vector<uint8_t> stage_;
	size_t len_ = 0;
	bool held_ = false;
	size_t buf_size_ = 0;
	std::vector<uint8_t> seg_mem_; ///< kTunBatch buffers of buf_size_ bytes
	std::array<std::span<uint8_t>, kTunBatch> seg_out_{};
	std::array<size_t, kTunBatch> seg_len_{};
};

/**
 * gro_payload_iov() - the pieces that follow a run's head in its write
 * @run:   a patched run of @chunk
 * @chunk: the packets the run was planned over
 * @iov:   receives the payloads of packets 2..n, run.count - 1 entries
 */
inline void gro_payload_iov(const offload::GroRun& run, std::span<const TunWrite> chunk,
                            iovec* iov) noexcept {
	for (size_t i = 1; i < run.count; i++) {
		const std::span<const uint8_t> p = offload::gro_payload(run, chunk[run.first + i].inner);
		iov[i - 1] = {const_cast<uint8_t*>(p.data()), p.size()}; // writev() and the device only read
	}
}

/**
 * class GroPlan - plan_gro() over the decrypted packets of a write_batch(),
 * with room for one chunk of kTunBatch packets and its runs.
 *
 * Before planning, a chunk's TCP segments are grouped by flow (in the order
 * of each flow's first packet, every flow's own order kept): with many
 * peers, or many flows behind one, flows alternate within a batch and
 * plan_gro(), which merges neighbours, found short runs (4.7 packets per
 * tun write with 64 peers against 26 with one, `esptun-bench peers`).
 * The kernel's GRO, too, merges a flow's packets across others. Packets
 * of different flows may change their order; those of one flow never do.
 */
class GroPlan {
public:
	/**
	 * for_each_write() - plan @pkts chunk by chunk and hand each write to the port
	 * @pkts:   decrypted packets in arrival order
	 * @stats:  gro_writes and gro_segments, counted per merged run
	 * @merged: merged(run, chunk) for a run of n > 1 packets of @chunk whose
	 *          head patch_gro_head() has rewritten; run.hdr goes in front
	 * @single: single(w) for each packet that goes alone behind a zero header
	 *
	 * patch_gro_head() refusing a run would be a planner bug: its packets
	 * then go alone, so nothing is lost. A template, so that the port's
	 * writes are inlined: no call through a pointer per packet.
	 */
	template <class Merged, class Single> void for_each_write(std::span<const TunWrite> pkts,
	                                                          TunIoStats& stats, Merged&& merged,
	                                                          Single&& single) noexcept {
		for (size_t done = 0; done < pkts.size();) {
			const std::span<const TunWrite> chunk =
			    group(pkts.subspan(done, std::min(pkts.size() - done, kTunBatch)));
			const size_t runs = plan(chunk);
			size_t planned = 0;
			for (size_t r = 0; r < runs; r++) {
				const offload::GroRun& run = runs_[r];
				planned += run.count;
				if (run.count > 1 && offload::patch_gro_head(run, chunk[run.first].inner)) {
					stats.gro_writes.add();
					stats.gro_segments.add(run.count);
					merged(run, chunk);
					continue;
				}
				for (size_t i = 0; i < run.count; i++)
					single(chunk[run.first + i]);
			}
			// plan_gro() fills at most as many runs as packets, so every packet is planned.
			done += std::max<size_t>(planned, 1);
		}
	}

	/**
	 * group() - @chunk (at most kTunBatch packets) with each TCP flow's
	 * segments together, flows in the order of their first packet, every
	 * other packet a group of its own. Return: @chunk itself when it is
	 * grouped already, else a reordered copy in grouped_.
	 */
	std::span<const TunWrite> group(std::span<const TunWrite> chunk) noexcept;

private:
	/// plan_gro() over @chunk (at most kTunBatch packets). Return: runs in runs_.
	size_t plan(std::span<const TunWrite> chunk) noexcept;

	std::array<std::span<uint8_t>, kTunBatch> pkts_{};
	std::array<offload::GroRun, kTunBatch> runs_{};
	std::array<TunWrite, kTunBatch> grouped_{};
	std::array<uint64_t, kTunBatch> keys_{};      ///< group(): each group's flow key
	std::array<uint8_t, kTunBatch> group_of_{};   ///< group(): each packet's group
	std::array<uint8_t, kTunBatch + 1> starts_{}; ///< group(): where each group goes
};

} // namespace esptun::datapath
