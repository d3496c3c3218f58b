// DirectTunPort: tun_io = "direct" without tun offloads, one system call per
// packet. See tun_port.hpp.
#include "datapath/tun_port.hpp"

#include "platform/tun.hpp"
#include "tunnel/esp_wire.hpp"

namespace esptun::datapath {

std::span<uint8_t> TunPort::raw_packet(std::span<uint8_t> buf, size_t len) noexcept {
	if (buf.size() < tunnel::esp::kHeadroom + len) return {};
	return buf.subspan(tunnel::esp::kHeadroom, len);
}

size_t TunPort::emit_raw(std::span<uint8_t> buf, size_t len, size_t at, std::span<TunPacket> out,
                         bool& keep) noexcept {
	keep = at >= out.size();
	if (keep) return 0;
	out[at] = {buf, len};
	return 1;
}

DirectTunPort::DirectTunPort(int tun_fd, TunIoStats* stats)
    : fd_(tun_fd), stats_(stats ? *stats : own_stats_), out_mem_(kTunBatch * tunnel::esp::kBufferSize),
      in_mem_(kTunBatch * tunnel::esp::kBufferSize) {
	for (size_t i = 0; i < kTunBatch; i++)
		recv_slots_[i].buf = std::span<uint8_t>(in_mem_).subspan(i * tunnel::esp::kBufferSize,
		                                                         tunnel::esp::kBufferSize);
}

size_t DirectTunPort::read_batch(std::span<TunPacket> out) noexcept {
	size_t n = 0;
	while (n < out.size() && n < kTunBatch) {
		std::span<uint8_t> buf = std::span<uint8_t>(out_mem_).subspan(n * tunnel::esp::kBufferSize,
		                                                              tunnel::esp::kBufferSize);
		IoResult r =
		    platform::tun_read(fd_, buf.subspan(tunnel::esp::kHeadroom, tunnel::esp::kMaxInner));
		stats_.tun_reads.add();
		if (!r.ok()) break; // EAGAIN: drained. Other errors: poll again.
		out[n++] = {buf, size_t(r.n)};
	}
	return n;
}

size_t DirectTunPort::raw_buffer_size() const noexcept { return tunnel::esp::kBufferSize; }

size_t DirectTunPort::read_raw(std::span<uint8_t> buf) noexcept {
	if (buf.size() < tunnel::esp::kBufferSize) return 0;
	IoResult r = platform::tun_read(fd_, buf.subspan(tunnel::esp::kHeadroom, tunnel::esp::kMaxInner));
	stats_.tun_reads.add();
	return r.ok() ? size_t(r.n) : 0;
}

size_t DirectTunPort::write_batch(std::span<const TunWrite> pkts) noexcept {
	size_t failed = 0;
	for (const TunWrite& w : pkts)
		if (!platform::tun_write(fd_, w.inner).ok()) failed++;
	stats_.tun_writes.add(pkts.size());
	return failed;
}

} // namespace esptun::datapath
