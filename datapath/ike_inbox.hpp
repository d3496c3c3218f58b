// IkeInbox - IKE messages that arrive on the ESP port, handed from the
// data-path workers to the control thread.
//
// RFC 3948 puts IKE and ESP on one UDP port (4500): a datagram that starts
// with the four-byte non-ESP marker is IKE. The workers own that port's
// sockets, so they copy such a datagram into a fixed ring of slots and
// signal an eventfd; the control thread drains the ring. The ring never
// grows: a full ring (an IKE flood) drops and counts, so ESP forwarding
// never waits for IKE and no memory is allocated per datagram.
#pragma once

#include "base/counters.hpp"
#include "base/inet.hpp"
#include "platform/unique_fd.hpp"

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace esptun::datapath {

class IkeInbox {
public:
	/// Slots in the ring, and the largest IKE message kept (bigger ones are
	/// counted as too_big: esptun's own messages stay far below it).
	static constexpr size_t kSlots = 64;
	static constexpr size_t kMaxMessage = 8192;

	IkeInbox();

	/// push() - a worker hands over @msg (the marker already removed) from @from.
	/// Return: false when it was dropped (ring full or message too big).
	bool push(std::span<const uint8_t> msg, const Endpoint& from) noexcept;

	/// drain() - the control thread takes everything queued, in order, calling
	/// @fn(msg, from) for each outside the lock.
	template <class Fn> void drain(Fn&& fn) {
		platform::eventfd_drain(efd_.get());
		for (;;) {
			size_t len = 0;
			Endpoint from;
			{
				std::lock_guard lock(mu_);
				if (count_ == 0) return;
				Slot& s = slots_[head_];
				len = s.len;
				from = s.from;
				std::copy(s.data.begin(), s.data.begin() + long(len), scratch_.begin());
				head_ = (head_ + 1) % kSlots;
				count_--;
			}
			fn(std::span<const uint8_t>(scratch_.data(), len), from);
		}
	}

	/// The eventfd signalled on every push (the control thread waits on it).
	int fd() const noexcept { return efd_.get(); }
	uint64_t dropped() const noexcept { return dropped_.get(); }
	uint64_t too_big() const noexcept { return too_big_.get(); }

private:
	struct Slot {
		size_t len = 0;
		Endpoint from;
		std::array<uint8_t, kMaxMessage> data;
	};
	std::mutex mu_;
	std::vector<Slot> slots_;
	std::array<uint8_t, kMaxMessage> scratch_{};
	size_t head_ = 0, count_ = 0;
	platform::UniqueFd efd_;
	SharedCounter dropped_, too_big_;
};

} // namespace esptun::datapath
