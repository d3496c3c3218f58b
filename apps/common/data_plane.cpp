// The packet loop: see data_plane.hpp.
//
// Outbound: poll says the tun side has packets (tun fd readable, or the vhost
//   RX ring's call eventfd) -> TunPort::read_batch() up to kBatch packets,
//   each in its own buffer behind esp::kHeadroom -> encapsulate() in place ->
//   one sendmmsg() for the batch -> TunPort::read_done() recycles the buffers.
// Inbound: poll says the socket is readable -> one recvmmsg() of up to kBatch
//   datagrams into the port's receive slots -> decapsulate() in place ->
//   TunPort::write_batch() hands the inner packets to the tun.
#include "apps/common/data_plane.hpp"

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

DataPlane::DataPlane(const SaTable& table, TunPort& tun, platform::UdpSocket& udp, DataPathStats& stats)
    : table_(table), tun_(tun), udp_(udp), stats_(stats) {}

DataPlane::DataPlane(const SaTable& table, int tun_fd, platform::UdpSocket& udp, DataPathStats& stats)
    : table_(table), owned_tun_(std::make_unique<DirectTunPort>(tun_fd)), tun_(*owned_tun_), udp_(udp),
      stats_(stats) {}

void DataPlane::run(int stop_fd) noexcept {
	pollfd fds[3] = {{tun_.read_fd(), POLLIN, 0}, {udp_.fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
	TunIoStats& io = tun_.io_stats();
	for (;;) {
		// A vhost RX ring can hold work without its eventfd firing (a full
		// batch left entries behind, or they came in while re-arming).
		const bool sleep = tun_.can_sleep();
		io.polls.add();
		if (sleep) io.poll_waits.add();
		if (poll(fds, 3, sleep ? -1 : 0) < 0) {
			if (errno == EINTR) continue;
			return; // only EFAULT/ENOMEM: nothing sane left to do
		}
		if (fds[2].revents) return;
		if (fds[1].revents) inbound_batch();
		if (fds[0].revents) tun_.on_read_wakeup();
		if (fds[0].revents || !sleep) outbound_batch();
	}
}

void DataPlane::outbound_batch() noexcept {
	const size_t got = tun_.read_batch(tun_packets_);
	size_t n = 0;
	for (size_t i = 0; i < got; i++) {
		stats_.tun_rx_packets.add();
		OutboundResult res = encapsulate(table_, tun_packets_[i].buf, tun_packets_[i].len);
		if (res.verdict != Verdict::forward) {
			stats_.drop(res.drop);
			continue;
		}
		send_slots_[n++] = {res.datagram, *res.peer->endpoint()};
	}
	if (n) send_all(n);
	tun_.read_done();
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
	std::span<platform::RecvSlot> slots = tun_.recv_slots();
	platform::BatchResult r = udp_.recv_batch(slots);
	if (r.count == 0) return;
	int64_t now = wall_ms();
	size_t n = 0;
	for (size_t i = 0; i < r.count; i++) {
		platform::RecvSlot& slot = slots[i];
		stats_.udp_rx_packets.add();
		if (slot.truncated) {
			stats_.drop(Drop::malformed);
			continue;
		}
		InboundResult res = decapsulate(table_, slot.buf.first(slot.len), slot.from, now);
		if (res.verdict == Verdict::drop)
			stats_.drop(res.drop);
		else if (res.verdict == Verdict::ignore)
			stats_.ignore(res.ignore);
		else
			tun_writes_[n++] = {i, res.inner};
	}
	if (n == 0) return;
	const size_t failed = tun_.write_batch({tun_writes_.data(), n});
	stats_.tun_tx_packets.add(n - failed);
	stats_.drops[size_t(Drop::tun_write_error)].add(failed);
}

} // namespace esptun
