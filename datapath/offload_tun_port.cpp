// OffloadTunPort: the direct tun port with offloads, see offload_tun_port.hpp.
#include "datapath/offload_tun_port.hpp"

#include "platform/tun.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>

namespace esptun::datapath {

using offload::VnetHdr;

namespace {

constexpr size_t kAlign = 64;
constexpr size_t round_up(size_t n) noexcept { return (n + kAlign - 1) / kAlign * kAlign; }

} // namespace

OffloadTunPort::OffloadTunPort(int tun_fd, unsigned mtu, TunIoStats& stats)
    : fd_(tun_fd), stats_(stats),
      stage_(VnetHdr::kSize + tunnel::esp::kMaxInner,
             round_up(tunnel::esp::kHeadroom + std::min<size_t>(mtu, tunnel::esp::kMaxInner) +
                      tunnel::esp::kTailroom)),
      in_mem_(kTunBatch * tunnel::esp::kBufferSize) {
	for (size_t i = 0; i < kTunBatch; i++)
		recv_slots_[i].buf = std::span<uint8_t>(in_mem_).subspan(i * tunnel::esp::kBufferSize,
		                                                         tunnel::esp::kBufferSize);
}

// --- Outbound: read, then cut into wire packets ---

size_t OffloadTunPort::read_batch(std::span<TunPacket> out) noexcept {
	const size_t max = std::min(out.size(), kTunBatch);
	size_t n = 0;
	while (n < max) {
		if (!stage_.held()) {
			IoResult r = platform::tun_read(fd_, stage_.buffer());
			stats_.tun_reads.add();
			if (!r.ok()) break; // EAGAIN: drained. Other errors: wait again.
			if (size_t(r.n) <= VnetHdr::kSize) {
				stats_.offload_errors.add(); // no packet behind the header
				continue;
			}
			stage_.hold(size_t(r.n));
		}
		const size_t got = stage_.emit(n, out, stats_);
		if (got == 0 && stage_.held()) break; // does not fit: first thing of the next batch
		n += got;
	}
	return n;
}

// --- Outbound read ahead (the flow queue): read now, cut when sent ---

size_t OffloadTunPort::raw_buffer_size() const noexcept { return VnetHdr::kSize + tunnel::esp::kMaxInner; }

size_t OffloadTunPort::read_raw(std::span<uint8_t> buf) noexcept {
	for (;;) {
		IoResult r = platform::tun_read(fd_, buf);
		stats_.tun_reads.add();
		if (!r.ok()) return 0;
		if (size_t(r.n) > VnetHdr::kSize) return size_t(r.n);
		stats_.offload_errors.add(); // no packet behind the header: the next one
	}
}

std::span<uint8_t> OffloadTunPort::raw_packet(std::span<uint8_t> buf, size_t len) noexcept {
	return len > VnetHdr::kSize ? buf.subspan(VnetHdr::kSize, len - VnetHdr::kSize)
	                            : std::span<uint8_t>{};
}

size_t OffloadTunPort::emit_raw(std::span<uint8_t> buf, size_t len, size_t at, std::span<TunPacket> out,
                                bool& keep) noexcept {
	return stage_.emit_from(buf.first(len), at, out, stats_, keep);
}

// --- Inbound: GRO runs and single packets, one writev() each ---

void OffloadTunPort::write_gathered(size_t iov_n, size_t pkts, size_t& failed) noexcept {
	stats_.tun_writes.add();
	if (!platform::tun_writev(fd_, std::span(iov_).first(iov_n)).ok()) failed += pkts;
}

size_t OffloadTunPort::write_batch(std::span<const TunWrite> pkts) noexcept {
	size_t failed = 0;
	gro_.for_each_write(
	    pkts, stats_,
	    [&](const offload::GroRun& run, std::span<const TunWrite> chunk) noexcept {
		    (void)run.hdr.write(run_hdr_);
		    const std::span<uint8_t> head = chunk[run.first].inner;
		    iov_[0] = {run_hdr_.data(), run_hdr_.size()};
		    iov_[1] = {head.data(), head.size()};
		    gro_payload_iov(run, chunk, &iov_[2]);
		    write_gathered(1 + run.count, run.count, failed);
	    },
	    [&](const TunWrite& w) noexcept {
		    iov_[0] = {zero_hdr_.data(), zero_hdr_.size()};
		    iov_[1] = {w.inner.data(), w.inner.size()};
		    write_gathered(2, 1, failed);
	    });
	return failed;
}

} // namespace esptun::datapath
