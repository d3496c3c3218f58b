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
	/// Slots per lane (known, stranger) and in all. Sized for clients that
	/// start together (a restart brings every client back at once): 256
	/// IKE_SA_INIT are about 50 ms of the control thread's work here
	/// (esptun-bench ike-load: 0.2 ms each), far below an initiator's first
	/// retransmission (1 s or more), so a burst waits instead of being
	/// dropped and sent again; beyond that, dropping is the cheaper answer.
	/// With 32 slots, half of a 64-client burst was dropped.
	static constexpr size_t kPrioritySlots = 128;
	static constexpr size_t kStrangerSlots = 256;
	static constexpr size_t kSlots = kPrioritySlots + kStrangerSlots;
	/// What one source address may hold at once in each lane. A peer has at
	/// most a few requests and answers in flight (RFC 7296 section 2.3 window
	/// of 1 by default), so 8 is room for several SAs behind one NAT address.
	static constexpr size_t kPerSourceKnown = 8;
	static constexpr size_t kPerSourceStranger = 4;
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
				const Slot& s = lane->slots[lane->head];
				len = s.len;
				from = s.from;
				std::copy_n(lane->data(lane->head), len, scratch_.begin());
				lane->head = (lane->head + 1) % lane->slots.size();
				lane->count--;
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
	struct Slot {
		size_t len = 0;
		Endpoint from;
	};
	/// A ring of slots: what each holds, and its bytes in one block of
	/// kMaxMessage per slot, allocated but not written until used (so a
	/// gateway that never sees a burst never has those pages resident).
	struct Lane {
		explicit Lane(size_t n) : slots(n), bytes(new uint8_t[n * kMaxMessage]) {}
		std::vector<Slot> slots;
		std::unique_ptr<uint8_t[]> bytes;
		size_t head = 0, count = 0;
		uint8_t* data(size_t slot) noexcept { return bytes.get() + slot * kMaxMessage; }
		/// Queued messages from @a (a scan of the queued ones only).
		size_t held_by(const IpAddress& a) const noexcept;
	};
	bool known(uint64_t spi) const noexcept;

	std::mutex mu_;
	Lane known_{kPrioritySlots}, stranger_{kStrangerSlots};
	std::vector<uint64_t> spis_; ///< sorted
	std::array<uint8_t, kMaxMessage> scratch_{};
	platform::UniqueFd efd_;
	SharedCounter dropped_known_, dropped_stranger_, dropped_source_, too_big_, too_short_;
};

} // namespace esptun::datapath
