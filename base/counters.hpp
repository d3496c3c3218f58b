// Counters: single-writer per-worker counters, shared atomic ones, and the
// drop and ignore reasons every layer of the data path counts by.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace esptun {

/**
 * Counter - a statistic with one writer thread and any number of readers.
 * The writer does a relaxed load and store instead of an atomic add: with a
 * single writer no increment is lost, and it avoids a locked instruction per
 * packet.
 */
class Counter {
public:
	void add(uint64_t n = 1) noexcept {
		v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
	}
	void set(uint64_t n) noexcept { v_.store(n, std::memory_order_relaxed); }
	uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
	std::atomic<uint64_t> v_{0};
};

/**
 * SharedCounter - a statistic any number of threads add to (the SAs, which
 * every data-path worker uses): an atomic add, as increments from two
 * workers must not be lost.
 */
class SharedCounter {
public:
	void add(uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
	uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
	std::atomic<uint64_t> v_{0};
};

/// Why a packet was dropped: one counter each, named in the status JSON.
enum class Drop : uint8_t {
	malformed,       ///< too short, bad alignment, not IPv4/IPv6, lengths that disagree
	unknown_spi,     ///< no inbound SA with this SPI
	auth_failed,     ///< ICV did not verify
	replay,          ///< sequence number already seen or left of the window
	policy,          ///< inner source not in the peer's allowed_ips
	dest_policy,     ///< inner destination outside the CHILD_SA's local traffic selectors
	padding,         ///< pad length or padding bytes wrong (RFC 4303 section 2.4)
	no_route,        ///< no peer's allowed_ips covers the inner destination
	no_endpoint,     ///< the peer has not been heard from and has no configured endpoint
	no_sa,           ///< the peer has no SA yet (key exchange not done)
	seq_exhausted,   ///< 32-bit sequence space used up: a sender never wraps (RFC 4303 3.3.3)
	seq_not_saved,   ///< the state file has not reserved this sequence number yet (disk too slow or
	                 ///< failing)
	too_big,         ///< inner packet larger than a buffer can encapsulate
	tun_write_error, ///< write() to the tun device failed
	udp_send_error,  ///< sending on the underlay socket failed
	ce_not_ect,      ///< outer header CE-marked, inner packet not ECN-capable (RFC 6040: drop)
	queue_delay,     ///< waited too long in a receive or send queue, not ECN-capable (datapath/codel.hpp)
	queue_overflow,  ///< the send queue was full: the oldest packet of its fullest flow (flow_queue.hpp)
	count_,
};
inline constexpr size_t kDropReasons = static_cast<size_t>(Drop::count_);

/// Packets that are not ESP but are expected on port 4500: counted, not errors.
enum class Ignore : uint8_t {
	nat_keepalive,  ///< single 0xff byte, RFC 3948 section 2.3
	non_esp_marker, ///< IKE packet behind the 4-byte zero marker, RFC 3948 section 2.2
	dummy_packet,   ///< next header 59, RFC 4303 section 2.6
	count_,
};
inline constexpr size_t kIgnoreKinds = static_cast<size_t>(Ignore::count_);

/// drop_name() - the status JSON's name for @d (the enum's spelling).
constexpr std::string_view drop_name(Drop d) noexcept {
	constexpr std::array<std::string_view, kDropReasons> names{
	    "malformed",     "unknown_spi",   "auth_failed",   "replay",          "policy",
	    "dest_policy",   "padding",       "no_route",      "no_endpoint",     "no_sa",
	    "seq_exhausted", "seq_not_saved", "too_big",       "tun_write_error", "udp_send_error",
	    "ce_not_ect",    "queue_delay",   "queue_overflow"};
	return names[static_cast<size_t>(d)];
}
// A reason added to the enum without a name would print as "" in the status.
static_assert(!drop_name(Drop(kDropReasons - 1)).empty(), "every Drop needs a name in drop_name()");

/**
 * drop_is_per_peer() - whether drops of reason @d are counted for a peer
 * too: the packet was that peer's when it was dropped (found by its SPI
 * inbound, by its allowed_ips outbound). The others happen before any peer
 * is known (unknown_spi, no_route, too_big) or after the packet left the
 * peer's hands (tun_write_error, udp_send_error in a mixed batch).
 */
constexpr bool drop_is_per_peer(Drop d) noexcept {
	switch (d) {
	case Drop::malformed: // inbound, once its SA is found: the peer's packet is short or misaligned
	case Drop::auth_failed:
	case Drop::replay:
	case Drop::policy:
	case Drop::dest_policy:
	case Drop::padding:
	case Drop::no_endpoint:
	case Drop::no_sa:
	case Drop::seq_exhausted:
	case Drop::seq_not_saved:
		return true;
	default:
		return false;
	}
}

constexpr std::string_view ignore_name(Ignore i) noexcept {
	constexpr std::array<std::string_view, kIgnoreKinds> names{"nat_keepalive", "non_esp_marker",
	                                                           "dummy_packet"};
	return names[static_cast<size_t>(i)];
}

/// Counters of one data path (one per worker thread).
struct DataPathStats {
	std::array<Counter, kDropReasons> drops{};
	std::array<Counter, kIgnoreKinds> ignored{};
	Counter tun_rx_packets, tun_tx_packets; ///< inner packets read from / written to the tun
	Counter udp_rx_packets, udp_tx_packets; ///< datagrams received / sent on the underlay
	Counter udp_gro_buffers;                ///< receive buffers that held a UDP GRO train
	/// The receive queue limit (datapath/codel.hpp): ECN-capable datagrams
	/// marked CE for waiting too long (the others count as Drop::queue_delay)
	/// and the times the limit engaged (entered its signalling state).
	Counter queue_marks, queue_engaged;
	/// Gauges, not summed by add(): how long the oldest datagram of the last
	/// receive batch had waited (us), and whether the limit is signalling now.
	Counter queue_sojourn_us, queue_signalling;
	/// The send-side flow queue (datapath/flow_queue.hpp): inner packets
	/// marked CE for waiting too long (Not-ECT ones count as
	/// Drop::queue_delay, and tx_queue_drops too) and the times a flow's
	/// controller engaged.
	Counter tx_queue_marks, tx_queue_drops, tx_queue_engaged;
	/// Gauges, not summed by add(): what the flow queue holds after the last
	/// pass, how long the oldest packet sent in it had waited (us), and how
	/// many flows are being signalled.
	Counter tx_queue_bytes, tx_queue_packets, tx_queue_flows, tx_queue_sojourn_us, tx_queue_signalling;
	/// The worker's precedence (datapath/precedence.hpp): times it stepped
	/// down to an ordinary thread for using most of a CPU, and up again;
	/// times a step up was refused by the kernel.
	Counter realtime_lowered, realtime_raised, realtime_refused;
	/// Gauges: whether the worker runs ahead now (1) or not (0), the share
	/// of a CPU it used in its last judged window (percent), and how long it
	/// waited for a CPU each time it got one then, on average (us).
	Counter realtime_now, load_pct, run_wait_us;

	void drop(Drop d) noexcept { drops[static_cast<size_t>(d)].add(); }
	/// add() - this += @o (the status sums the workers' counters)
	void add(const DataPathStats& o) noexcept {
		for (size_t i = 0; i < drops.size(); i++)
			drops[i].add(o.drops[i].get());
		for (size_t i = 0; i < ignored.size(); i++)
			ignored[i].add(o.ignored[i].get());
		tun_rx_packets.add(o.tun_rx_packets.get());
		tun_tx_packets.add(o.tun_tx_packets.get());
		udp_rx_packets.add(o.udp_rx_packets.get());
		udp_tx_packets.add(o.udp_tx_packets.get());
		udp_gro_buffers.add(o.udp_gro_buffers.get());
		queue_marks.add(o.queue_marks.get());
		queue_engaged.add(o.queue_engaged.get());
		tx_queue_marks.add(o.tx_queue_marks.get());
		tx_queue_drops.add(o.tx_queue_drops.get());
		tx_queue_engaged.add(o.tx_queue_engaged.get());
		realtime_lowered.add(o.realtime_lowered.get());
		realtime_raised.add(o.realtime_raised.get());
		realtime_refused.add(o.realtime_refused.get());
	}
	void ignore(Ignore i) noexcept { ignored[static_cast<size_t>(i)].add(); }
	uint64_t drops_of(Drop d) const noexcept { return drops[static_cast<size_t>(d)].get(); }
};

} // namespace esptun
