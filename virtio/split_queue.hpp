// The driver side of one split virtqueue (virtio 1.1 section 2.6) over memory
// the process owns. esptun is the driver and the kernel's vhost-net worker the
// device: vring 0 (RX) carries packets the tun hands us, vring 1 (TX) packets
// we hand the tun. No syscalls here: kicks and calls are the caller's eventfds.
//
// Theory of operation. A buffer goes free -> queued (add_buffer: descriptor
// and avail slot written) -> in flight (publish: avail->idx stored) -> free
// again (harvest_used: the device returned it in the used ring). Which
// buffers are in flight, their lengths and tokens live in private memory, not
// in the shared descriptor table: the device can scribble on shared memory,
// so every device-written word (used->idx, used entries, avail_event) is
// read once and validated against private state before it is believed.
// Notifications use VIRTIO_RING_F_EVENT_IDX both ways: needs_kick() after a
// publish, enable_call_notifications() before sleeping on the call eventfd.
#pragma once

#include "base/counters.hpp"
#include "virtio/virtio_ring_layout.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace esptun::virtio {

/// Why a used-ring entry (or used->idx) written by the device was rejected.
enum class UsedError : uint8_t {
	id_out_of_range,  ///< used id >= queue size
	id_not_in_flight, ///< descriptor free, not yet published, or already returned (duplicate)
	len_too_large,    ///< device claims to have written more than the buffer holds
	idx_jump,         ///< used->idx ran more than queue size ahead of the last entry consumed
	count_,
};
inline constexpr size_t kUsedErrors = static_cast<size_t>(UsedError::count_);

constexpr std::string_view used_error_name(UsedError e) noexcept {
	constexpr std::array<std::string_view, kUsedErrors> names{"id_out_of_range", "id_not_in_flight",
	                                                          "len_too_large", "idx_jump"};
	return names[static_cast<size_t>(e)];
}

/// Counters of one queue. The driver thread is the only writer.
struct QueueStats {
	Counter added;            ///< buffers placed in the descriptor table and an avail slot
	Counter published;        ///< buffers made visible to the device by an avail->idx store
	Counter harvested;        ///< buffers handed back by harvest_used() (bad_len ones included)
	Counter kicks_needed;     ///< needs_kick() decisions that said "kick"
	Counter kicks_suppressed; ///< needs_kick() decisions after a publish that said "no kick"
	Counter ring_full;        ///< add_buffer() refused: no free descriptor
	std::array<Counter, kUsedErrors> corrupt{};

	uint64_t corrupt_of(UsedError e) const noexcept { return corrupt[static_cast<size_t>(e)].get(); }
	uint64_t corrupt_total() const noexcept {
		uint64_t n = 0;
		for (const Counter& c : corrupt)
			n += c.get();
		return n;
	}
};

/// One buffer the device has finished with.
struct UsedBuffer {
	uint64_t token = 0; ///< what the caller passed to add_buffer()
	uint32_t len = 0;   ///< bytes the device wrote (device-writable buffers); 0 for device-readable ones
	/// The device claimed to write more than the buffer holds: the buffer is the
	/// caller's again (recycle it) but its contents must not be trusted. Counted
	/// as UsedError::len_too_large.
	bool bad_len = false;
};

/// The avail->idx values before and after a publish(), for needs_kick().
struct Published {
	uint16_t old_idx = 0;
	uint16_t new_idx = 0;
	uint16_t count() const noexcept { return uint16_t(new_idx - old_idx); }
};

class SplitQueue {
public:
	/**
	 * SplitQueue() - a driver for a fresh queue laid out by ring_layout()
	 * @region:     ring memory the process owns, aligned to RingLayout::region_align
	 *              and at least ring_layout(@queue_size, @used_align)->total_bytes long;
	 *              it is zeroed here, so construct before the device is attached
	 * @queue_size: N, a power of two in 1..32768 (VHOST_SET_VRING_NUM)
	 * @used_align: see ring_layout()
	 * @start_idx:  first avail and used index; the device must be given the
	 *              same (VHOST_SET_VRING_BASE; vhost reads used->idx from the
	 *              ring when the backend is attached). 0 normally; tests use
	 *              it to start next to the 16-bit wrap.
	 *
	 * The device must have negotiated VIRTIO_RING_F_EVENT_IDX. Throws
	 * std::invalid_argument on a bad size, a short region or a misaligned
	 * region (set-up code).
	 */
	SplitQueue(std::span<uint8_t> region, uint32_t queue_size, size_t used_align = kDefaultUsedAlign,
	           uint16_t start_idx = 0);
	SplitQueue(const SplitQueue&) = delete;
	SplitQueue& operator=(const SplitQueue&) = delete;

	/**
	 * add_buffer() - queue one single-descriptor buffer for the device
	 * @addr:            device address of the buffer (identity-mapped: the user address)
	 * @len:             its length in bytes
	 * @device_writable: true for RX buffers the device fills, false for TX buffers it reads
	 * @token:           returned by harvest_used() when the device is done with the buffer
	 * Return: false when every descriptor is taken (counted as ring_full);
	 * nothing changes then. The buffer is not visible to the device until publish().
	 */
	bool add_buffer(uint64_t addr, uint32_t len, bool device_writable, uint64_t token) noexcept;

	/// One piece of a device-readable descriptor chain for add_chain().
	struct ChainPart {
		uint64_t addr = 0;  ///< device address (identity-mapped: the user address)
		uint32_t len = 0;   ///< bytes
		uint64_t token = 0; ///< returned by harvest_used() for this piece
	};

	/**
	 * add_chain() - queue one device-readable buffer made of @parts, in order
	 * (descriptors linked with VIRTQ_DESC_F_NEXT, one avail slot for the head)
	 * @parts: 1..size() pieces; the device reads them as one contiguous buffer
	 *
	 * The device returns the chain with one used entry naming the head;
	 * harvest_used() then calls its function once per piece, head first, each
	 * with its own token (len 0). The links are also kept privately, so the
	 * harvest never follows a next field in shared memory.
	 * Return: false when fewer than parts.size() descriptors are free (counted
	 * as ring_full) or @parts is empty; nothing changes then.
	 */
	bool add_chain(std::span<const ChainPart> parts) noexcept;

	/**
	 * publish() - make every queued buffer visible to the device
	 * Return: avail->idx before and after; pass both to needs_kick(). A store
	 * with release ordering, so descriptors and avail slots are visible first.
	 */
	Published publish() noexcept;

	/**
	 * needs_kick() - must the device be notified of buffers published from
	 * @old_idx up to @new_idx? (VIRTIO_RING_F_EVENT_IDX, the device's avail_event)
	 * @old_idx: avail->idx at the previous kick decision (or publish().old_idx)
	 * @new_idx: avail->idx now (publish().new_idx)
	 * Issues a full barrier first, so the avail->idx store is ordered before
	 * the avail_event load (see split_queue.cpp). Counted in kicks_needed or
	 * kicks_suppressed when anything was published.
	 */
	bool needs_kick(uint16_t old_idx, uint16_t new_idx) noexcept;

	/**
	 * kick_unasked() - would a kick for @pub, sent now, be one the device never
	 * asked for? The audit behind the "needless_kicks" counter: call it after
	 * needs_kick() said "kick" and before the eventfd write.
	 * @pub: what publish() returned for the buffers the kick is about
	 *
	 * True when nothing was published, or when the device's avail_event lies
	 * before pub.old_idx: the device has not gone to sleep since before these
	 * buffers were published (vhost-net rewrites avail_event only in
	 * vhost_enable_notify(), when it finds the ring empty), so it is still
	 * working and will find them without a kick. Not a second needs_kick():
	 * it re-reads avail_event, so it also catches a kick decided without (or
	 * against) event index. Race-free before the kick: a device asleep at
	 * the decision cannot move avail_event until it is woken, and one woken
	 * some other way can only move it forward, to pub.new_idx, which is not
	 * counted. Like need_event(), it assumes the device is less than 2^16
	 * entries behind.
	 */
	bool kick_unasked(const Published& pub) const noexcept;

	/**
	 * ring_idle() - would the next published buffer need a kick?
	 * True when the device's avail_event equals avail->idx: the device has taken
	 * every published buffer and asked to be woken for the next one. vhost-net
	 * writes avail_event only when it finds the ring empty after handling all
	 * earlier buffers, so a direct tun write() now cannot overtake ring packets.
	 * Advisory (no barrier): a stale answer costs a kick or a direct write, never
	 * correctness, as long as needs_kick() decides the kicks.
	 */
	bool ring_idle() const noexcept;

	/**
	 * harvest_used() - hand back buffers the device has finished with
	 * @fn:  called as fn(const UsedBuffer&) once per valid used entry, in ring
	 *       order, and for a chain once per piece (add_chain()); it may call
	 *       add_buffer() (e.g. to recycle an RX buffer)
	 * @max: stop after this many used entries; the rest stay for the next call
	 * Return: the number of used entries taken. Corrupt entries are consumed,
	 * counted per UsedError and skipped; a token is never returned twice.
	 */
	template <std::invocable<const UsedBuffer&> F> size_t harvest_used(F&& fn, size_t max = SIZE_MAX);

	/// harvest_used() into @out, at most out.size() buffers; returns how many
	/// were filled. Whole chains only: it stops while the longest chain this
	/// queue ever had might not fit in the room left (so with chains, give it
	/// room for at least one; a queue without chains fills @out).
	size_t harvest_used(std::span<UsedBuffer> out) noexcept;

	/**
	 * enable_call_notifications() - ask the device to signal the call eventfd
	 * when it next adds a used entry, before the caller sleeps on it
	 * Writes used_event = last used index, issues a full barrier, then re-reads
	 * used->idx. Return: true when used entries arrived meanwhile: harvest again
	 * instead of sleeping, or a completion could go unsignalled forever.
	 */
	bool enable_call_notifications() noexcept;

	uint32_t size() const noexcept { return layout_.queue_size; }
	uint32_t free_count() const noexcept { return free_count_; }
	/// Descriptors published and not yet returned by the device (a chain counts each piece).
	uint32_t in_flight() const noexcept { return in_flight_; }
	/// Buffers added but not yet published.
	uint32_t pending() const noexcept { return uint16_t(next_avail_ - published_idx_); }
	/// The last value stored to avail->idx.
	uint16_t avail_idx() const noexcept { return published_idx_; }
	/// The index of the next used entry to read.
	uint16_t last_used_idx() const noexcept { return last_used_; }
	/// The device's avail_event word as last written (diagnostics and tests).
	uint16_t device_avail_event() const noexcept;

	const RingLayout& layout() const noexcept { return layout_; }
	/// Part addresses for VHOST_SET_VRING_ADDR (desc_user_addr, avail_user_addr, used_user_addr).
	uint8_t* desc_area() const noexcept { return desc_; }
	uint8_t* avail_area() const noexcept { return avail_; }
	uint8_t* used_area() const noexcept { return used_; }

	const QueueStats& stats() const noexcept { return stats_; }

private:
	enum class State : uint8_t { free, queued, in_flight };
	/// What the driver knows about a descriptor: never read back from shared memory.
	struct Desc {
		uint64_t token = 0;
		uint32_t len = 0;
		bool writable = false;
		State state = State::free;
		uint16_t chain = 1; ///< descriptors from this one to the end of its chain
		uint16_t next = 0;  ///< the next piece when chain > 1 (private copy)
		bool head = true;   ///< the id an avail slot (and a used entry) names
	};

	uint16_t used_end() noexcept;
	/// The next used entry; @id receives the head descriptor it names.
	bool take_used(UsedBuffer& out, uint16_t& id) noexcept;
	/// Frees @count chain pieces from @id on (private links) and passes each to @fn.
	template <class F> void release_chain_tail(uint16_t id, uint16_t count, F& fn);
	void corrupt(UsedError e) noexcept { stats_.corrupt[static_cast<size_t>(e)].add(); }

	RingLayout layout_;
	uint8_t* desc_ = nullptr;
	uint8_t* avail_ = nullptr;
	uint8_t* used_ = nullptr;
	uint16_t mask_ = 0;

	std::vector<Desc> descs_;           ///< indexed by descriptor id
	std::vector<uint16_t> free_ids_;    ///< stack of free descriptor ids, free_count_ deep
	std::vector<uint16_t> avail_slots_; ///< private copy of the ids written to avail slots
	uint32_t free_count_ = 0;
	uint32_t in_flight_ = 0;
	uint16_t next_avail_ = 0;              ///< next avail slot index to fill (queued ones included)
	uint16_t published_idx_ = 0;           ///< last value stored to avail->idx
	uint16_t last_used_ = 0;               ///< next used entry to consume
	uint16_t longest_chain_ = 1;           ///< most pieces of any chain added (add_chain())
	std::optional<uint16_t> bad_used_idx_; ///< corrupt used->idx already counted
	QueueStats stats_;
};

template <std::invocable<const UsedBuffer&> F> size_t SplitQueue::harvest_used(F&& fn, size_t max) {
	const uint16_t end = used_end();
	size_t n = 0;
	UsedBuffer u;
	uint16_t id = 0;
	while (last_used_ != end && n < max) {
		if (!take_used(u, id)) continue; // corrupt: consumed, counted, skipped
		// Read before fn(): it may re-use the head's descriptor.
		const uint16_t tail = uint16_t(descs_[id].chain - 1), next = descs_[id].next;
		fn(static_cast<const UsedBuffer&>(u));
		if (tail > 0) release_chain_tail(next, tail, fn);
		n++;
	}
	return n;
}

template <class F> void SplitQueue::release_chain_tail(uint16_t id, uint16_t count, F& fn) {
	// take_used() freed the head; the pieces after it are still in flight.
	uint16_t k = id;
	for (uint16_t left = count; left > 0; left--) {
		Desc& d = descs_[k];
		d.state = State::free;
		d.head = true;
		d.chain = 1;
		free_ids_[free_count_++] = k;
		in_flight_--;
		stats_.harvested.add();
		const UsedBuffer piece{d.token, 0, false};
		k = d.next;
		fn(piece);
	}
}

} // namespace esptun::virtio
