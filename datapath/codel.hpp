// Codel: the receive-side queue limit, a CoDel controller (RFC 8289) on the
// time each datagram waited in the underlay socket's receive queue.
//
// Why there: under load the standing queue of a tunnel gateway sits in the
// receiving socket's buffer (docs/latency-under-load.md measures where), a
// FIFO no queue discipline sees, so an inner TCP flow fills it to the
// buffer's size and every other flow's packets wait behind it. The kernel
// stamps each datagram when it arrives (SO_TIMESTAMPNS); the worker knows
// when it takes it. That difference is the sojourn time CoDel needs, exact
// and without estimating the drain rate, so the limit adapts to whatever
// the worker can process.
//
// What a signal does is the caller's choice: the data plane sets CE in the
// outer ECN field of an ECN-capable datagram (decapsulation carries it into
// the inner header, RFC 6040) and drops a Not-ECT one before decrypting it.
// Signals fall on bulk datagrams only: one due when a small datagram (a TCP
// ACK, a ping, a DNS answer) is at the head is owed to the next bulk one,
// so sparse flows are not the ones that pay.
//
// Pure: time is passed in; one instance per receiving worker.
#pragma once

#include <cstddef>
#include <cstdint>

namespace esptun::datapath {

/// Packets this long or longer may carry a queue signal: full-sized ones,
/// not ACKs, pings or DNS (Codel::on_dequeue()'s @bulk).
inline constexpr size_t kBulkBytes = 512;

/// Parameters of a Codel (RFC 8289 section 4.3 and 4.4).
struct CodelParams {
	/// Acceptable standing sojourn time (ns): below it nothing is signalled.
	int64_t target_ns = 0;
	/// How long the sojourn must stay above target before the first signal,
	/// and the base of the control law's spacing (ns).
	int64_t interval_ns = 0;
};

class Codel {
public:
	/// Owed signals kept for bulk datagrams at most (a run of small ones
	/// cannot bank an unbounded burst).
	static constexpr unsigned kMaxOwed = 4;

	explicit Codel(CodelParams p) noexcept : p_(p) {}

	/**
	 * on_dequeue() - one datagram leaves the queue; should it be signalled?
	 * @sojourn_ns: how long it waited (negative, e.g. after a clock step, counts as 0)
	 * @now_ns:     the present, on any clock that only moves forward
	 * @bulk:       a full-sized datagram, which may carry a signal
	 *
	 * Return: true when this datagram is to be marked or dropped
	 */
	bool on_dequeue(int64_t sojourn_ns, int64_t now_ns, bool bulk) noexcept;

	/// dropping() - in the signalling state (the queue has stayed above target)
	bool dropping() const noexcept { return dropping_; }
	/// engaged() - times the signalling state was entered
	uint64_t engaged() const noexcept { return engaged_; }
	/// count() - signals due in the current signalling state (the control law's n)
	uint32_t count() const noexcept { return count_; }
	const CodelParams& params() const noexcept { return p_; }

private:
	/// RFC 8289's ok_to_drop: above target for at least an interval.
	bool above_for_interval(int64_t sojourn_ns, int64_t now_ns) noexcept;
	/// next signal time: @t + interval / sqrt(count)
	int64_t control_law(int64_t t) const noexcept;

	CodelParams p_;
	int64_t first_above_ = 0; ///< when the sojourn may be judged too long; 0: below target
	int64_t drop_next_ = 0;   ///< when the next signal is due while dropping
	uint32_t count_ = 0;
	uint32_t last_count_ = 0;
	bool dropping_ = false;
	unsigned owed_ = 0;
	uint64_t engaged_ = 0;
};

} // namespace esptun::datapath
