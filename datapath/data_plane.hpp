// The packet loop: moves packets between the tun device and the underlay
// UDP socket through tunnel/esp.cpp. Runs on its own thread, free of Asio;
// the control plane only reads its counters and asks it to stop. The tun side
// is a TunPort (tun_port.hpp): direct read()/write() or vhost-net rings.
#pragma once

#include "base/counters.hpp"
#include "datapath/codel.hpp"
#include "datapath/flow_queue.hpp"
#include "datapath/ike_inbox.hpp"
#include "datapath/precedence.hpp"
#include "datapath/tun_port.hpp"
#include "platform/thread_priority.hpp"
#include "platform/udp_engine.hpp"
#include "platform/udp_socket.hpp"
#include "tunnel/esp_wire.hpp"
#include "tunnel/sa.hpp"

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <sys/epoll.h>
#include <vector>

namespace esptun::datapath {

class DataPlane {
public:
	/// Packets handled per wake-up in each direction.
	static constexpr size_t kBatch = kTunBatch;

	/**
	 * DataPlane() - set up one worker over a tun port (and its epoll set)
	 * @table: the SAs (outlives the data plane)
	 * @tun:   the tun side (outlives the data plane)
	 * @udp:   the underlay socket's engine (platform/udp_engine.hpp)
	 * @stats: counters this worker writes
	 * @worker: this worker's index: which of each SA's transforms it uses,
	 *          and its slot in the table's reclamation epochs
	 * Throws SystemError when the epoll set cannot be made, and
	 * std::invalid_argument for a worker the table has no transforms for.
	 */
	DataPlane(const tunnel::SaTable& table, TunPort& tun, platform::UdpEngine& udp, DataPathStats& stats,
	          size_t worker = 0);

	/// DataPlane() - direct read()/write() on @tun_fd (non-blocking) and
	/// recvmmsg()/sendmmsg() on @udp (tests)
	DataPlane(const tunnel::SaTable& table, int tun_fd, platform::UdpSocket& udp, DataPathStats& stats);

	/**
	 * run() - forward packets until @stop_fd (an eventfd) becomes readable
	 *
	 * Sleeps in epoll_wait() when there is nothing to do. Never throws, never
	 * logs per packet; every drop is counted by reason.
	 * Return: 0 once stopped; an errno when @stop_fd cannot be watched or
	 * epoll_wait() fails (the packet loop cannot go on).
	 */
	[[nodiscard]] int run(int stop_fd) noexcept;

	/// One pass over each direction: what run() does per wake-up. Public for
	/// tests. run() wraps them in the table's enter()/leave(); a caller that
	/// replaces SAs concurrently must do the same.
	void outbound_batch() noexcept;
	void inbound_batch() noexcept;

	/// IKE messages on the ESP port (behind the non-ESP marker) go to
	/// @inbox for the control thread; without one they are only counted.
	void set_ike_inbox(IkeInbox* inbox) noexcept { ike_inbox_ = inbox; }

	/**
	 * set_busy_poll() - after a pass that found work, poll for up to @us
	 * before sleeping (0: sleep at once, the default). Call before run().
	 *
	 * A worker asleep in epoll_wait() is woken by whoever queues the next
	 * packet: in a VM that is an IPI and a halted vCPU to restart, paid by
	 * the sender's system call, and the packet waits for it. Traffic that
	 * keeps coming finds the worker still polling. Idle tunnels never poll:
	 * only a pass that moved something starts a window.
	 */
	void set_busy_poll(std::chrono::microseconds us) noexcept;

	/**
	 * set_wake_poll() - after a pass that followed an idle spell (at least
	 * @idle_spell asleep), poll for up to @us before sleeping again (0: never,
	 * the default here; the gateway's configured default is 50 us). Call
	 * before run(). busy_poll, when set, applies instead.
	 *
	 * Sparse traffic (a ping, a keystroke, a DNS query) is request and
	 * answer: the worker that just passed the request on is the one the
	 * answer comes back to, often within tens of microseconds. Polling for it
	 * saves the sleep and the wake-up. Bulk traffic never sleeps that long,
	 * so it never pays; a window is opened once per idle spell, not renewed
	 * by the work it finds, so the CPU it can take is at most @us per
	 * @idle_spell (5% of one CPU at 50 us per 1 ms) and in practice far less.
	 */
	void set_wake_poll(std::chrono::microseconds us,
	                   std::chrono::nanoseconds idle_spell = kIdleSpell) noexcept;
	static constexpr std::chrono::milliseconds kIdleSpell{1};

	/**
	 * set_precedence() - the thread that calls run() starts under
	 * SCHED_FIFO (the caller made it so, platform/thread_priority.hpp);
	 * run() steps it down to an ordinary thread while it uses most of a CPU
	 * and up again when its load leaves room (datapath/precedence.hpp).
	 * Call before run(); without it the thread's policy is left alone.
	 */
	void set_precedence(PrecedenceParams p = {}) noexcept { precedence_params_ = p; }

	/**
	 * set_queue_limit() - limit how long datagrams wait in the underlay
	 * socket's receive queue (datapath/codel.hpp); call before run()
	 * @p: target and interval; target 0 turns the limit off (the default)
	 *
	 * A bulk ESP datagram the limit signals is marked CE in its outer ECN
	 * field when it is ECN-capable (decapsulation carries the mark inside,
	 * tunnel/ecn.hpp) and dropped before decryption when it is not
	 * (Drop::queue_delay). The socket must report arrival times
	 * (UdpSocket::enable_rx_timestamps()); a datagram without one passes.
	 */
	void set_queue_limit(CodelParams p) noexcept;

	/**
	 * set_flow_queue() - send from a flow queue (datapath/flow_queue.hpp)
	 * instead of in the order the tun hands packets over; call before run()
	 * @p: the controller's target and interval; target 0: off (the default)
	 * @slots: packets the queue holds at most (buffers of the port's
	 *         raw_buffer_size() each, reserved here; memory is used as they are)
	 * @max_bytes: bytes the queue holds at most
	 *
	 * Each pass then reads whatever the tun holds (up to kReadAheadPackets
	 * or kReadAheadBytes) into the queue and sends up to one batch from it: sparse flows first,
	 * the others in turn by bytes. A flow whose packets keep waiting longer
	 * than the target gets CE in the inner header of its ECN-capable
	 * packets (encapsulation copies it outward) and loses its Not-ECT ones
	 * (Drop::queue_delay); when every buffer is taken, the fullest flow
	 * loses its oldest packet (Drop::queue_overflow).
	 * Return: false when the tun port cannot read ahead (vhost): nothing changes.
	 */
	bool set_flow_queue(CodelParams p, uint32_t slots = kFlowQueueSlots,
	                    uint64_t max_bytes = kFlowQueueBytes);
	/// Packets the flow queue holds at most, and bytes: when either is
	/// reached, the fullest flow loses its oldest packet before the next read.
	static constexpr uint32_t kFlowQueueSlots = 512;
	static constexpr uint64_t kFlowQueueBytes = 4 << 20;
	/// Reads per pass into the flow queue at most: twice a batch's packets,
	/// or about two and a half batches of full-sized packets' bytes.
	static constexpr size_t kReadAheadPackets = 2 * kBatch;
	/// inbound_batch() reads the clock again for a datagram's sojourn every
	/// this many receive slots (a GRO buffer or a datagram each).
	static constexpr size_t kClockSlots = 8;
	static constexpr size_t kReadAheadBytes = 256 * 1024;
	/// The flow queue is on.
	bool flow_queue_on() const noexcept { return fq_.has_value(); }

	/// The tun port's counters, with this loop's epoll_wait() calls in them.
	const TunIoStats& io_stats() noexcept { return tun_.io_stats(); }

private:
	enum Source : uint64_t { kTun, kUdp, kStop }; ///< epoll_event.data of each watched fd

	/// Steps 3 and 4 for tun_packets_[0, @got).
	void seal_and_send(size_t got) noexcept;
	/// outbound_batch() with the flow queue: read ahead, then send from it.
	void outbound_queued() noexcept;
	std::span<uint8_t> fq_buffer(uint32_t slot) noexcept {
		return {fq_mem_.get() + size_t(slot) * fq_buf_size_, fq_buf_size_};
	}
	void send_all(size_t n) noexcept;
	/// Makes the epoll set with the tun and the socket in it. Throws SystemError.
	void watch_sources();
	/// Adds @fd to the epoll set, edge-triggered when @edge. Return: 0 or errno.
	int watch(int fd, bool edge, uint64_t source) noexcept;
	/// Judges @p's window when one is over and changes the thread's policy
	/// as it says; @p ends (reset) when the kernel refuses a step up.
	void govern(std::optional<Precedence>& p, const platform::RunQueueStats& waits) noexcept;
	/// epoll_wait() without blocking until something is ready or @ns are
	/// up; counts in @windows and @hits. Return: as epoll_wait() (0: nothing came).
	int poll_for(int64_t ns, std::span<epoll_event> evs, TunIoStats& io, Counter& windows,
	             Counter& hits) noexcept;

	const tunnel::SaTable& table_;
	std::unique_ptr<TunPort> owned_tun_;             ///< only with the tun_fd constructor
	std::unique_ptr<platform::UdpEngine> owned_udp_; ///< only with the tun_fd constructor
	TunPort& tun_;
	platform::UdpEngine& udp_;
	DataPathStats& stats_;
	size_t worker_ = 0;
	IkeInbox* ike_inbox_ = nullptr;
	std::array<TunPacket, kBatch> tun_packets_{};
	std::array<platform::SendSlot, kBatch> send_slots_{};
	std::array<TunWrite, kBatch> tun_writes_{};
	platform::UniqueFd epoll_;
	int64_t busy_poll_ns_ = 0;
	int64_t wake_poll_ns_ = 0;
	int64_t idle_spell_ns_ = 0;
	tunnel::RouteCache routes_; ///< cleared at the start of each batch
	std::optional<Codel> queue_limit_;
	std::optional<PrecedenceParams> precedence_params_;
	// The flow queue (set_flow_queue()): its buffers, the free ones, the
	// packet taken but not yet sent (it fits only an empty batch), the
	// buffers of the packets in the batch being sent.
	std::optional<FlowQueue> fq_;
	std::unique_ptr<uint8_t[]> fq_mem_; ///< slots x fq_buf_size_, not zeroed: pages are touched as used
	size_t fq_buf_size_ = 0;
	std::vector<uint32_t> fq_free_;
	std::optional<FlowQueue::Item> fq_next_;
	std::array<uint32_t, kBatch> fq_sending_{};
	uint64_t fq_key_ = 0;
	uint64_t fq_max_bytes_ = 0;
};

} // namespace esptun::datapath
