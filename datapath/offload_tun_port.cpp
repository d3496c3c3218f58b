// OffloadTunPort: see offload_tun_port.hpp.
#include "datapath/offload_tun_port.hpp"

#include "platform/tun.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <cstring>

namespace esptun::datapath {

using offload::VnetHdr;

namespace {

constexpr size_t kAlign = 64;
constexpr size_t round_up(size_t n) noexcept { return (n + kAlign - 1) / kAlign * kAlign; }

} // namespace

OffloadTunPort::OffloadTunPort(int tun_fd, unsigned mtu, TunIoStats& stats)
    : fd_(tun_fd), stats_(stats),
      seg_buf_size_(round_up(tunnel::esp::kHeadroom + std::min<size_t>(mtu, tunnel::esp::kMaxInner) +
                             tunnel::esp::kTailroom)),
      stage_(VnetHdr::kSize + tunnel::esp::kMaxInner), out_mem_(kTunBatch * seg_buf_size_),
      in_mem_(kTunBatch * tunnel::esp::kBufferSize) {
	for (size_t i = 0; i < kTunBatch; i++) {
		recv_slots_[i].buf = std::span<uint8_t>(in_mem_).subspan(i * tunnel::esp::kBufferSize,
		                                                         tunnel::esp::kBufferSize);
		seg_out_[i] = std::span<uint8_t>(out_mem_).subspan(i * seg_buf_size_ + tunnel::esp::kHeadroom,
		                                                   seg_buf_size_ - tunnel::esp::kHeadroom -
		                                                       tunnel::esp::kTailroom);
	}
}

size_t cut_staged(std::span<uint8_t> staged, std::span<const std::span<uint8_t>> seg_out,
                  std::span<size_t> seg_len, size_t at, TunIoStats& stats, bool& keep) noexcept {
	keep = at >= seg_out.size(); // no room left in this batch at all
	if (keep) return 0;
	const auto hdr = VnetHdr::parse(staged);
	const std::span<uint8_t> pkt = hdr ? staged.subspan(VnetHdr::kSize) : std::span<uint8_t>{};
	const size_t room = seg_out.size() - at;
	offload::SegmentResult r{offload::Error::malformed, 0};
	if (hdr) {
		if (hdr->gso_type == VnetHdr::kGsoNone) {
			// In place, then one copy into a wire buffer.
			r.error = offload::finish_checksum(*hdr, pkt);
			if (r.error == offload::Error::none) {
				if (pkt.size() <= seg_out[at].size()) {
					std::memcpy(seg_out[at].data(), pkt.data(), pkt.size());
					seg_len[at] = pkt.size();
					r.count = 1;
				} else {
					r.error = offload::Error::buffer_too_small;
				}
			}
		} else {
			r = offload::segment(*hdr, pkt, seg_out.subspan(at, room), seg_len.subspan(at, room));
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
	}
	if (!r.ok()) {
		stats.offload_errors.add();
		return 0;
	}
	return r.count;
}

size_t OffloadTunPort::emit_staged(size_t at, std::span<TunPacket> out) noexcept {
	bool keep = false;
	const size_t count = cut_staged({stage_.data(), stage_len_},
	                                std::span(seg_out_).first(std::min(out.size(), kTunBatch)), seg_len_,
	                                at, stats_, keep);
	if (keep) return 0;
	staged_ = false;
	for (size_t i = 0; i < count; i++) {
		const size_t k = at + i;
		out[k] = {std::span<uint8_t>(out_mem_).subspan(k * seg_buf_size_, seg_buf_size_),
		          seg_len_[k]};
	}
	return count;
}

size_t OffloadTunPort::read_batch(std::span<TunPacket> out) noexcept {
	const size_t max = std::min(out.size(), kTunBatch);
	size_t n = 0;
	while (n < max) {
		if (!staged_) {
			IoResult r = platform::tun_read(fd_, stage_);
			stats_.tun_reads.add();
			if (!r.ok()) break; // EAGAIN: drained. Other errors: wait again.
			stage_len_ = size_t(r.n);
			staged_ = true;
			if (stage_len_ <= VnetHdr::kSize) {
				staged_ = false;
				stats_.offload_errors.add();
				continue;
			}
		}
		const size_t got = emit_staged(n, out);
		if (got == 0 && staged_) break; // does not fit: first thing of the next batch
		n += got;
	}
	return n;
}

void OffloadTunPort::write_gathered(size_t iov_n, size_t pkts, size_t& failed) noexcept {
	stats_.tun_writes.add();
	if (!platform::tun_writev(fd_, std::span(iov_).first(iov_n)).ok()) failed += pkts;
}

size_t OffloadTunPort::write_batch(std::span<const TunWrite> pkts) noexcept {
	size_t failed = 0;
	for (size_t done = 0; done < pkts.size();) {
		const size_t n = std::min(pkts.size() - done, kTunBatch);
		for (size_t i = 0; i < n; i++)
			gro_pkts_[i] = pkts[done + i].inner;
		const size_t runs = offload::plan_gro(std::span(gro_pkts_).first(n), gro_runs_);
		size_t planned = 0;
		for (size_t r = 0; r < runs; r++) {
			const offload::GroRun& run = gro_runs_[r];
			planned += run.count;
			if (run.count == 1 || !offload::patch_gro_head(run, gro_pkts_[run.first])) {
				// Alone behind a zero header (patch_gro_head() refusing would be a
				// planner bug: then each packet goes alone, nothing is lost).
				for (size_t i = 0; i < run.count; i++) {
					iov_[0] = {zero_hdr_.data(), zero_hdr_.size()};
					iov_[1] = {gro_pkts_[run.first + i].data(),
					           gro_pkts_[run.first + i].size()};
					write_gathered(2, 1, failed);
				}
				continue;
			}
			(void)run.hdr.write(run_hdr_);
			iov_[0] = {run_hdr_.data(), run_hdr_.size()};
			iov_[1] = {gro_pkts_[run.first].data(), gro_pkts_[run.first].size()};
			for (size_t i = 1; i < run.count; i++) {
				const std::span<const uint8_t> p =
				    offload::gro_payload(run, gro_pkts_[run.first + i]);
				iov_[1 + i] = {const_cast<uint8_t*>(p.data()),
				               p.size()}; // writev() only reads
			}
			write_gathered(1 + run.count, run.count, failed);
			stats_.gro_writes.add();
			stats_.gro_segments.add(run.count);
		}
		// plan_gro() fills at most as many runs as packets, so every packet is planned.
		done += std::max<size_t>(planned, 1);
	}
	return failed;
}

} // namespace esptun::datapath
