// IkeInbox - IKE messages that arrive on the ESP port, handed from the
// data-path workers to the control thread.
//
// RFC 3948 puts IKE and ESP on one UDP port (4500): a datagram that starts
// with the four-byte non-ESP marker is IKE. The workers own that port's
// sockets, so they copy such a datagram into fixed slots and signal an
// eventfd; the control thread drains them. Nothing grows: a full lane (an
// IKE flood) drops and counts, so ESP forwarding never waits for IKE and no
// memory is allocated per datagram.
//
// A flood must not cost the IKE SAs we already have (issue 16, item 4), so
// there are two lanes, each a ring of its own slots:
//   - known: the message names an IKE SA of ours. Our SPIs are 64 random
//     bits (RFC 7296 section 2.6), so a stranger cannot land here by
//     guessing; DPD, rekeys and IKE_AUTH of a half-open SA go here.
//   - stranger: everything else, mostly IKE_SA_INIT (responder SPI zero).
// Each lane also caps what one source address may hold in it, so one host
// (any number of ports) cannot take a lane from the others. The control
// thread takes a bounded batch per drain(), known lane first, so its timers
// (retransmission, DPD, the sequence-number refresh) run between batches.
#pragma once

#include "base/counters.hpp"
#include "base/inet.hpp"
#include "platform/unique_fd.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace esptun::datapath {

class IkeInbox {
public:
	/// Messages per lane (known, stranger) and in all, and the bytes each
	/// lane keeps them in. Sized for every client coming back at once after
	/// a restart (esptun-bench ike-load --storm): the control thread takes
	/// about 0.2-0.3 ms per message, so 4,096 strangers are about a second
	/// of its work, about an initiator's first retransmission timeout.
	/// Whatever the lane holds is worked off between the clients' waves of
	/// retransmissions; what it drops waits for the next wave. With 256
	/// slots a 10,000-client storm kept the gateway 90% idle while it
	/// dropped 4 of every 5 messages, and a third of the clients were not
	/// back after 20 s. An IKE_SA_INIT takes 300-600 bytes, so the bytes
	/// are a byte ring (untouched until used), not kMaxMessage per message.
	static constexpr size_t kPrioritySlots = 2048;
	static constexpr size_t kStrangerSlots = 4096;
	static constexpr size_t kSlots = kPrioritySlots + kStrangerSlots;
	static constexpr size_t kPriorityBytes = size_t(1) << 20;
	static constexpr size_t kStrangerBytes = size_t(2) << 20;
	/// What one source address may hold at once in each lane: 1/64 of the
	/// stranger lane, so it takes 64 sources to fill it, while many clients
	/// behind one (carrier-grade) NAT address still wait rather than drop.
	static constexpr size_t kPerSourceKnown = 64;
	static constexpr size_t kPerSourceStranger = 64;
	/// Messages handed over per drain() call: an IKE_SA_INIT costs a DH
	/// computation (a millisecond or less), so a batch stays well below the
	/// control loop's 100 ms timers.
	static constexpr size_t kDrainBatch = 16;
	/// Of a batch, this many are kept for the stranger lane when it has
	/// messages, so a busy known lane does not lock new clients out.
	static constexpr size_t kStrangerShare = 4;
	/// The largest IKE message kept (bigger ones are counted as too_big:
	/// esptun's own messages stay far below it), and the smallest: the fixed
	/// IKE header (RFC 7296 section 3.1).
	static constexpr size_t kMaxMessage = 8192;
	static constexpr size_t kMinMessage = 28;

	IkeInbox();

	/**
	 * push() - a worker hands over @msg (the marker already removed) from @from
	 *
	 * The lane is chosen from the header's SPIs alone (a binary search in the
	 * published set); the message is not parsed further here.
	 * Return: false when it was dropped (and counted).
	 */
	bool push(std::span<const uint8_t> msg, const Endpoint& from) noexcept;

	/**
	 * publish_spis() - the control thread states the SPIs of its IKE SAs
	 * @spis: our SPI of every IKE SA it holds, half-open ones included
	 *
	 * Messages naming one of them go to the known lane from now on. The
	 * old set is freed outside the lock, so a worker never waits on free().
	 */
	void publish_spis(std::vector<uint64_t> spis);

	/**
	 * drain() - the control thread takes up to kDrainBatch queued messages
	 * @fn: called as fn(msg, from) for each, outside the lock
	 *
	 * The known lane goes first, less kStrangerShare slots of the batch kept
	 * for strangers when any wait; each lane keeps its order. When messages
	 * are left, the eventfd is signalled again, so the loop comes back after
	 * the handlers that are already due.
	 * Return: true when messages are left for another call.
	 */
	template <class Fn> bool drain(Fn&& fn) {
		platform::eventfd_drain(efd_.get());
		size_t from_known = 0;
		{
			std::lock_guard lock(mu_);
			const size_t reserve = std::min(stranger_.count, kStrangerShare);
			from_known = std::min(known_.count, kDrainBatch - reserve);
		}
		for (size_t i = 0; i < kDrainBatch; i++) {
			size_t len = 0;
			Endpoint from;
			{
				std::lock_guard lock(mu_);
				Lane* lane = i < from_known && known_.count ? &known_ : &stranger_;
				if (lane->count == 0) lane = &known_;
				if (lane->count == 0) return false;
				const Lane::Entry& e = lane->entries[lane->head];
				len = e.len;
				from = e.from;
				std::copy_n(lane->bytes.get() + e.off, len, scratch_.begin());
				lane->pop();
			}
			fn(std::span<const uint8_t>(scratch_.data(), len), from);
		}
		std::lock_guard lock(mu_);
		if (known_.count + stranger_.count == 0) return false;
		platform::eventfd_signal(efd_.get());
		return true;
	}

	/// The eventfd signalled on every push (the control thread waits on it).
	int fd() const noexcept { return efd_.get(); }
	/// Every drop for want of room: dropped_known + dropped_stranger + dropped_source.
	uint64_t dropped() const noexcept {
		return dropped_known_.get() + dropped_stranger_.get() + dropped_source_.get();
	}
	uint64_t dropped_known() const noexcept { return dropped_known_.get(); }       ///< known lane full
	uint64_t dropped_stranger() const noexcept { return dropped_stranger_.get(); } ///< stranger lane full
	uint64_t dropped_source() const noexcept { return dropped_source_.get(); } ///< source's share full
	uint64_t too_big() const noexcept { return too_big_.get(); }
	uint64_t too_short() const noexcept { return too_short_.get(); }

private:
	/**
	 * SourceCounts - queued messages per source address: a fixed table,
	 * open addressing with linear probing, twice as many buckets as the
	 * lane holds messages (so never full); nothing allocated per message.
	 */
	class SourceCounts {
	public:
		explicit SourceCounts(size_t max_keys);
		size_t get(const IpAddress& a) const noexcept;
		void add(const IpAddress& a) noexcept;
		/// remove() - one less from @a (which must have one)
		void remove(const IpAddress& a) noexcept;

	private:
		struct Bucket {
			IpAddress addr;
			uint32_t count = 0; ///< 0: empty
		};
		size_t home(const IpAddress& a) const noexcept;
		size_t
		find(const IpAddress& a) const noexcept; ///< its bucket, or the empty one it would take
		std::vector<Bucket> t_;
		size_t mask_;
	};

	/**
	 * Lane - the messages of one lane in arrival order: a ring of entries
	 * and a ring of bytes (allocated, not written until used, so a gateway
	 * that never sees a burst never has those pages resident). A message's
	 * bytes are contiguous: one that does not fit before the end of the
	 * byte ring goes to its start when the oldest has moved on far enough.
	 */
	struct Lane {
		Lane(size_t max_entries, size_t max_bytes);
		struct Entry {
			uint32_t off = 0, len = 0;
			Endpoint from;
		};
		/// place() - room for @len bytes: their offset, or false when full
		bool place(size_t len, uint32_t& off) noexcept;
		/// pop() - forget the oldest message
		void pop() noexcept;
		std::vector<Entry> entries;
		std::unique_ptr<uint8_t[]> bytes;
		size_t cap;                 ///< bytes
		size_t head = 0, count = 0; ///< the oldest entry, and how many
		size_t rd = 0, wr = 0;      ///< the oldest message's bytes; where the next goes
		bool wrapped = false;       ///< the newest are at the start, the oldest at the end
		SourceCounts sources;
	};
	bool known(uint64_t spi) const noexcept;

	std::mutex mu_;
	Lane known_{kPrioritySlots, kPriorityBytes}, stranger_{kStrangerSlots, kStrangerBytes};
	std::vector<uint64_t> spis_; ///< sorted
	std::array<uint8_t, kMaxMessage> scratch_{};
	platform::UniqueFd efd_;
	SharedCounter dropped_known_, dropped_stranger_, dropped_source_, too_big_, too_short_;
};

} // namespace esptun::datapath
