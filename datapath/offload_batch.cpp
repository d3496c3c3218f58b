// SegmentStage and GroPlan: see offload_batch.hpp.
#include "datapath/offload_batch.hpp"

#include "tunnel/esp_wire.hpp"

#include <cstring>

namespace esptun::datapath {

using offload::VnetHdr;

SegmentStage::SegmentStage(size_t stage_bytes, size_t buf_size)
    : stage_(stage_bytes), buf_size_(buf_size), seg_mem_(kTunBatch * buf_size) {
	if (buf_size == 0) return;
	for (size_t i = 0; i < kTunBatch; i++)
		seg_out_[i] = std::span<uint8_t>(seg_mem_).subspan(i * buf_size + tunnel::esp::kHeadroom,
		                                                   buf_size - tunnel::esp::kHeadroom -
		                                                       tunnel::esp::kTailroom);
}

size_t SegmentStage::emit(size_t at, std::span<TunPacket> out, TunIoStats& stats) noexcept {
	bool keep = false;
	const size_t count = emit_from(std::span(stage_).first(len_), at, out, stats, keep);
	if (!keep) held_ = false;
	return count;
}

size_t SegmentStage::emit_from(std::span<uint8_t> staged, size_t at, std::span<TunPacket> out,
                               TunIoStats& stats, bool& keep) noexcept {
	const size_t usable = std::min(out.size(), kTunBatch);
	keep = at >= usable; // no room left in this batch at all
	const size_t count = keep ? 0 : cut(staged, at, usable - at, stats, keep);
	if (keep) return 0;
	for (size_t i = 0; i < count; i++) {
		const size_t k = at + i;
		out[k] = {std::span<uint8_t>(seg_mem_).subspan(k * buf_size_, buf_size_), seg_len_[k]};
	}
	return count;
}

/// Cuts @staged into @room segment buffers from @at on. Return: the
/// packets written; 0 with @keep set when it would fit only an empty batch.
size_t SegmentStage::cut(std::span<uint8_t> staged, size_t at, size_t room, TunIoStats& stats,
                         bool& keep) noexcept {
	const auto hdr = VnetHdr::parse(staged);
	const std::span<uint8_t> pkt = hdr ? staged.subspan(VnetHdr::kSize) : std::span<uint8_t>{};
	offload::SegmentResult r{offload::Error::malformed, 0};
	if (hdr && hdr->gso_type == VnetHdr::kGsoNone) {
		// In place, then one copy into a wire buffer.
		r.error = offload::finish_checksum(*hdr, pkt);
		if (r.error == offload::Error::none && pkt.size() > seg_out_[at].size())
			r.error = offload::Error::buffer_too_small;
		if (r.error == offload::Error::none) {
			std::memcpy(seg_out_[at].data(), pkt.data(), pkt.size());
			seg_len_[at] = pkt.size();
			r.count = 1;
		}
	} else if (hdr) {
		r = offload::segment(*hdr, pkt, std::span(seg_out_).subspan(at, room),
		                     std::span(seg_len_).subspan(at, room));
		// Fits in a batch of its own: wait for the next one.
		if (r.error == offload::Error::too_many_segments && at > 0) {
			keep = true;
			return 0;
		}
		if (r.ok()) {
			stats.gso_reads.add();
			stats.gso_segments.add(r.count);
		}
	}
	if (!r.ok()) {
		stats.offload_errors.add();
		return 0;
	}
	return r.count;
}

std::span<const TunWrite> GroPlan::group(std::span<const TunWrite> chunk) noexcept {
	const size_t n = std::min(chunk.size(), kTunBatch);
	size_t groups = 0;
	bool back = false; // a packet joined a group that another had followed
	for (size_t i = 0; i < n; i++) {
		const uint64_t key = offload::tcp_flow_key(chunk[i].inner);
		size_t g = groups;
		if (key != 0) // the latest group first: a flow's packets tend to come together
			for (size_t j = groups; j-- > 0;)
				if (keys_[j] == key) {
					g = j;
					break;
				}
		if (g == groups) {
			keys_[groups++] = key; // 0 (not TCP) is never searched for: a group of its own
		} else if (g + 1 != groups) {
			back = true;
		}
		group_of_[i] = uint8_t(g);
	}
	if (!back) return chunk.first(n);
	// A counting sort by group: stable, so each flow keeps its order.
	std::fill(starts_.begin(), starts_.begin() + long(groups) + 1, uint8_t(0));
	for (size_t i = 0; i < n; i++)
		starts_[size_t(group_of_[i]) + 1]++;
	for (size_t g = 1; g <= groups; g++)
		starts_[g] = uint8_t(starts_[g] + starts_[g - 1]);
	for (size_t i = 0; i < n; i++)
		grouped_[starts_[group_of_[i]]++] = chunk[i];
	return std::span<const TunWrite>(grouped_).first(n);
}

size_t GroPlan::plan(std::span<const TunWrite> chunk) noexcept {
	for (size_t i = 0; i < chunk.size(); i++)
		pkts_[i] = chunk[i].inner;
	return offload::plan_gro(std::span(pkts_).first(chunk.size()), runs_);
}

} // namespace esptun::datapath
