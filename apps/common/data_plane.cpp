// The packet loop: see data_plane.hpp.
//
// Outbound: poll says the tun is readable -> read up to kBatch packets, each
//   into its own buffer behind esp::kHeadroom -> encapsulate() in place ->
//   one sendmmsg() for the batch.
// Inbound: poll says the socket is readable -> one recvmmsg() of up to kBatch
//   datagrams -> decapsulate() in place -> write() each inner packet to the tun.
#include "apps/common/data_plane.hpp"

#include "platform/tun.hpp"
#include "tunnel/esp.hpp"

#include <cerrno>
#include <ctime>
#include <poll.h>

namespace esptun {
namespace {

int64_t wall_ms() noexcept {
	timespec ts{};
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

/// Waits up to @ms for the socket to accept more data. A full send buffer is
/// back-pressure: holding the tun reader makes the sender's TCP slow down
/// instead of losing what was already read.
bool wait_writable(int fd, int ms) noexcept {
	pollfd p{fd, POLLOUT, 0};
	return poll(&p, 1, ms) > 0 && (p.revents & POLLOUT);
}

} // namespace

DataPlane::DataPlane(const SaTable& table, int tun_fd, platform::UdpSocket& udp, DataPathStats& stats)
    : table_(table), tun_fd_(tun_fd), udp_(udp), stats_(stats), out_mem_(kBatch * esp::kBufferSize),
      in_mem_(kBatch * esp::kBufferSize) {
	for (size_t i = 0; i < kBatch; i++)
		recv_slots_[i].buf =
		    std::span<uint8_t>(in_mem_).subspan(i * esp::kBufferSize, esp::kBufferSize);
}

void DataPlane::run(int stop_fd) noexcept {
	pollfd fds[3] = {{tun_fd_, POLLIN, 0}, {udp_.fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
	for (;;) {
		if (poll(fds, 3, -1) < 0) {
			if (errno == EINTR) continue;
			return; // only EFAULT/ENOMEM: nothing sane left to do
		}
		if (fds[2].revents) return;
		if (fds[1].revents) inbound_batch();
		if (fds[0].revents) outbound_batch();
	}
}

void DataPlane::outbound_batch() noexcept {
	size_t n = 0;
	for (size_t i = 0; i < kBatch; i++) {
		std::span<uint8_t> buf =
		    std::span<uint8_t>(out_mem_).subspan(n * esp::kBufferSize, esp::kBufferSize);
		platform::IoResult r =
		    platform::tun_read(tun_fd_, buf.subspan(esp::kHeadroom, esp::kMaxInner));
		if (!r.ok()) break; // EAGAIN: drained. Other errors: poll again.
		stats_.tun_rx_packets.add();
		OutboundResult res = encapsulate(table_, buf, size_t(r.n));
		if (res.verdict != Verdict::forward) {
			stats_.drop(res.drop);
			continue;
		}
		send_slots_[n++] = {res.datagram, *res.peer->endpoint()};
	}
	if (n) send_all(n);
}

void DataPlane::send_all(size_t n) noexcept {
	std::span<const platform::SendSlot> pending(send_slots_.data(), n);
	int full_waits = 0;
	while (!pending.empty()) {
		platform::BatchResult r = udp_.send_batch(pending);
		stats_.udp_tx_packets.add(r.count);
		pending = pending.subspan(r.count);
		if (pending.empty()) break;
		if ((r.err == EAGAIN || r.err == ENOBUFS) && full_waits++ < 10 &&
		    wait_writable(udp_.fd(), 10))
			continue;
		// This datagram cannot go (unreachable, too big, or the buffer stayed
		// full): count it and carry on with the rest.
		stats_.drop(Drop::udp_send_error);
		pending = pending.subspan(1);
	}
}

void DataPlane::inbound_batch() noexcept {
	platform::BatchResult r = udp_.recv_batch(recv_slots_);
	if (r.count == 0) return;
	int64_t now = wall_ms();
	for (size_t i = 0; i < r.count; i++) {
		platform::RecvSlot& slot = recv_slots_[i];
		stats_.udp_rx_packets.add();
		if (slot.truncated) {
			stats_.drop(Drop::malformed);
			continue;
		}
		InboundResult res = decapsulate(table_, slot.buf.first(slot.len), slot.from, now);
		if (res.verdict == Verdict::drop) {
			stats_.drop(res.drop);
		} else if (res.verdict == Verdict::ignore) {
			stats_.ignore(res.ignore);
		} else if (platform::tun_write(tun_fd_, res.inner).ok()) {
			stats_.tun_tx_packets.add();
		} else {
			stats_.drop(Drop::tun_write_error);
		}
	}
}

} // namespace esptun
