// The tun side of the packet loop, behind one small interface so data_plane.cpp
// reads the same for every tun I/O mode: DirectTunPort (read()/write() on the
// tun fd) here, OffloadTunPort (the same with tun offloads) in
// offload_tun_port.hpp, VhostTunPort (vhost-net virtqueues) in vhost_tun_port.hpp.
//
// Outbound: epoll(read_fd) -> read_batch() -> encapsulate in place -> send -> read_done().
// Inbound:  recvmmsg into recv_slots() -> decapsulate in place -> write_batch().
#pragma once

#include "base/counters.hpp"
#include "platform/udp_socket.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace esptun::datapath {

/// Packets per read_batch()/recv_slots(): the data plane's batch size. 64:
/// one TSO super-packet from a tun with offloads (at most 64 segments, see
/// OffloadTunPort) fits in one batch.
inline constexpr size_t kTunBatch = 64;

/// What the tun I/O did (status JSON "tun_io"). The ring counters stay zero in
/// direct mode; the system call counters count in both modes. The data path
/// thread is the only writer.
struct TunIoStats {
	Counter rx_ring_packets; ///< outbound packets taken from the vhost RX ring
	Counter tx_ring_packets; ///< inbound packets handed to the vhost TX ring
	Counter direct_writes;   ///< vhost mode: inbound packets written to the tun fd instead
	Counter rx_kicks;        ///< kick eventfd writes for the RX ring (more buffers posted)
	Counter tx_kicks;        ///< kick eventfd writes for the TX ring
	Counter call_wakeups;    ///< wake-ups by the RX ring's call eventfd (never read: edge-triggered)
	Counter ring_full;       ///< inbound packets that found no free TX buffer and went direct
	Counter device_errors;   ///< used entries the device got wrong (short, too long, bad id)
	// Ring publishes that needed no kick: the device was still busy with
	// earlier buffers (event index). Kicks + these = the ring's batches.
	Counter rx_kicks_suppressed; ///< RX ring publishes (re-posted buffers) without a kick
	Counter tx_kicks_suppressed; ///< TX ring publishes (inbound packets) without a kick
	/// kicks the device had not asked for (SplitQueue::kick_unasked()): 0
	/// unless the kick logic is broken, whatever the timing
	Counter needless_kicks;
	// Tun-side system calls of the data path, one per call made (an EINTR
	// retry inside the platform wrapper is not counted). Kick eventfd writes
	// are rx_kicks + tx_kicks: each is exactly one write(). The call eventfd
	// is never read (see read_fd_signals_only()).
	Counter tun_reads;      ///< read() on the tun fd, including the one that returns EAGAIN
	Counter tun_writes;     ///< write() on the tun fd (direct mode, vhost direct writes)
	Counter polls;          ///< epoll_wait() calls of the data plane's loop
	Counter poll_waits;     ///< those of them that could block (no work known to be waiting)
	Counter busy_polls;     ///< times the loop polled (busy_poll_us) instead of sleeping at once
	Counter busy_poll_hits; ///< of them, those that found work before the time was up
	Counter wake_polls;     ///< times the loop polled (wake_poll_us) after waking from an idle spell
	Counter wake_poll_hits; ///< of them, those that found work before the time was up
	// tun offloads (OffloadTunPort): super-packets both ways.
	Counter gso_reads;    ///< super-packets read from the tun (TSO/USO)
	Counter gso_segments; ///< packets they were cut into
	Counter gro_writes;   ///< super-packets written to the tun (merged TCP segments)
	Counter gro_segments; ///< packets merged into them
	Counter
	    offload_errors; ///< packets from the tun whose offload header or layout was unusable (dropped)

	/// add() - this += @o (the status sums the workers' counters)
	void add(const TunIoStats& o) noexcept {
		for (auto [mine, theirs] : {std::pair{&rx_ring_packets, &o.rx_ring_packets},
		                            {&tx_ring_packets, &o.tx_ring_packets},
		                            {&direct_writes, &o.direct_writes},
		                            {&rx_kicks, &o.rx_kicks},
		                            {&tx_kicks, &o.tx_kicks},
		                            {&rx_kicks_suppressed, &o.rx_kicks_suppressed},
		                            {&tx_kicks_suppressed, &o.tx_kicks_suppressed},
		                            {&needless_kicks, &o.needless_kicks},
		                            {&call_wakeups, &o.call_wakeups},
		                            {&ring_full, &o.ring_full},
		                            {&device_errors, &o.device_errors},
		                            {&tun_reads, &o.tun_reads},
		                            {&tun_writes, &o.tun_writes},
		                            {&polls, &o.polls},
		                            {&poll_waits, &o.poll_waits},
		                            {&busy_polls, &o.busy_polls},
		                            {&busy_poll_hits, &o.busy_poll_hits},
		                            {&wake_polls, &o.wake_polls},
		                            {&wake_poll_hits, &o.wake_poll_hits},
		                            {&gso_reads, &o.gso_reads},
		                            {&gso_segments, &o.gso_segments},
		                            {&gro_writes, &o.gro_writes},
		                            {&gro_segments, &o.gro_segments},
		                            {&offload_errors, &o.offload_errors}})
			mine->add(theirs->get());
	}
};

/// One packet read from the tun: the inner packet sits at esp::kHeadroom in
/// @buf, which has room for encapsulate() to work in place.
struct TunPacket {
	std::span<uint8_t> buf;
	size_t len = 0;
};

/// One decrypted inner packet to hand to the tun: it lies inside the buffer of
/// recv_slots()[slot], at least 12 bytes after the buffer's start.
struct TunWrite {
	size_t slot = 0;
	std::span<uint8_t> inner; ///< writable: a port may rewrite headers in place (GRO)
};

class TunPort {
public:
	virtual ~TunPort() = default;

	/// The fd the loop watches (EPOLLIN) for "the tun has packets for us".
	virtual int read_fd() const noexcept = 0;
	/// true: read_fd() is an eventfd that only signals and is never read;
	/// the loop watches it edge-triggered (data_plane.cpp).
	virtual bool read_fd_signals_only() const noexcept { return false; }
	/// Before epoll_wait(): may the loop block? false = read work is already waiting.
	virtual bool can_sleep() noexcept { return true; }
	/// The loop found read_fd() readable.
	virtual void on_read_wakeup() noexcept {}
	/// Up to out.size() packets; their buffers stay ours until read_done().
	virtual size_t read_batch(std::span<TunPacket> out) noexcept = 0;
	/// The packets of the last read_batch() have been sent or dropped.
	virtual void read_done() noexcept {}

	// Read-ahead, for the send-side flow queue (flow_queue.hpp): the data
	// plane reads packets into buffers of its own, holds them until their
	// flow's turn, and then has the port cut each into wire packets. A port
	// whose packets live in memory it cannot lend out (the vhost rings)
	// cannot read ahead.

	/// Bytes one read_raw() buffer needs; 0: this port cannot read ahead.
	virtual size_t raw_buffer_size() const noexcept { return 0; }
	/// One packet as the tun hands it over, into @buf (raw_buffer_size()
	/// bytes). Return: its length; 0 when the tun has nothing (or failed).
	virtual size_t read_raw(std::span<uint8_t> /*buf*/) noexcept { return 0; }
	/// The IP packet inside @len bytes read into @buf by read_raw() (to hash
	/// it and mark its ECN field); empty when there is none. This default,
	/// and emit_raw()'s, are for a raw buffer laid out as a packet buffer:
	/// esp::kHeadroom, the packet, room behind it.
	virtual std::span<uint8_t> raw_packet(std::span<uint8_t> buf, size_t len) noexcept;
	/**
	 * emit_raw() - cut what read_raw() put in @buf into @out[@at...], as
	 * read_batch() would have handed it over
	 * @keep: set, with 0 returned, when it fits only a batch of its own
	 * Return: packets written to @out; 0 for a packet that is unusable
	 * (counted in io_stats()). The packets may point into @buf.
	 */
	virtual size_t emit_raw(std::span<uint8_t> buf, size_t len, size_t at, std::span<TunPacket> out,
	                        bool& keep) noexcept;

	/// kTunBatch receive buffers for the underlay socket's recvmmsg().
	virtual std::span<platform::RecvSlot> recv_slots() noexcept = 0;
	/// Hand @pkts to the tun, in order. Return: how many could not be written.
	virtual size_t write_batch(std::span<const TunWrite> pkts) noexcept = 0;

	/// The counters this port writes; the data plane adds its epoll_wait() calls.
	virtual TunIoStats& io_stats() noexcept = 0;
};

/// tun_io = "direct" with tun_offload = false: one read() per outbound and one
/// write() per inbound packet.
class DirectTunPort final : public TunPort {
public:
	/**
	 * DirectTunPort() - buffers for @tun_fd (non-blocking, not owned)
	 * @stats: counters to write (outlive the port); nullptr: the port's own
	 */
	explicit DirectTunPort(int tun_fd, TunIoStats* stats = nullptr);

	int read_fd() const noexcept override { return fd_; }
	size_t read_batch(std::span<TunPacket> out) noexcept override;
	/// A raw buffer is a packet buffer: esp::kHeadroom, the packet, room behind it.
	size_t raw_buffer_size() const noexcept override;
	size_t read_raw(std::span<uint8_t> buf) noexcept override;
	std::span<platform::RecvSlot> recv_slots() noexcept override { return recv_slots_; }
	size_t write_batch(std::span<const TunWrite> pkts) noexcept override;
	TunIoStats& io_stats() noexcept override { return stats_; }

private:
	int fd_;
	TunIoStats own_stats_;
	TunIoStats& stats_;
	// Preallocated: the data path never allocates.
	std::vector<uint8_t> out_mem_, in_mem_;
	std::array<platform::RecvSlot, kTunBatch> recv_slots_{};
};

} // namespace esptun::datapath
