// The driver side of a split virtqueue: see split_queue.hpp for the theory of
// operation. The memory-ordering rules each function follows are written next
// to its barrier; they pair with the barriers of the device (drivers/vhost/
// vhost.c) as the virtio spec describes (virtio 1.1 sections 2.6.13-2.6.14,
// 2.7.13-2.7.14 in virtio 1.2).
#include "virtio/split_queue.hpp"

#include <algorithm>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

namespace esptun::virtio {

namespace {

RingLayout checked_layout(std::span<uint8_t> region, uint32_t queue_size, size_t used_align) {
	const std::optional<RingLayout> l = ring_layout(queue_size, used_align);
	if (!l)
		throw std::invalid_argument(
		    "virtqueue size " + std::to_string(queue_size) +
		    " is not a power of two in 1..32768 (or bad used ring alignment)");
	if (region.size() < l->total_bytes)
		throw std::invalid_argument("virtqueue region of " + std::to_string(region.size()) +
		                            " bytes is shorter than the " + std::to_string(l->total_bytes) +
		                            " the rings need");
	if (reinterpret_cast<uintptr_t>(region.data()) % RingLayout::region_align != 0)
		throw std::invalid_argument("virtqueue region is not aligned to 16 bytes");
	return *l;
}

} // namespace

SplitQueue::SplitQueue(std::span<uint8_t> region, uint32_t queue_size, size_t used_align, uint16_t start_idx)
    : layout_(checked_layout(region, queue_size, used_align)), desc_(region.data() + layout_.desc_offset),
      avail_(region.data() + layout_.avail_offset), used_(region.data() + layout_.used_offset),
      mask_(uint16_t(queue_size - 1)), descs_(queue_size), free_ids_(queue_size), avail_slots_(queue_size),
      free_count_(queue_size), next_avail_(start_idx), published_idx_(start_idx), last_used_(start_idx) {
	// Plain writes are fine: no device is attached yet. avail->flags stays 0 for
	// good, as the spec requires with EVENT_IDX (section 2.6.7.2).
	std::memset(region.data(), 0, layout_.total_bytes);
	// Both rings start empty at start_idx. The two event words start there too:
	// avail_event = start_idx makes the first publish kick (a zeroed ring gives
	// the same at index 0), used_event = start_idx asks for the first call.
	ring_store<uint16_t>(avail_ + kAvailIdxOff, start_idx);
	ring_store<uint16_t>(avail_ + avail_used_event_off(queue_size), start_idx);
	ring_store<uint16_t>(used_ + kUsedIdxOff, start_idx);
	ring_store<uint16_t>(used_ + used_avail_event_off(queue_size), start_idx);
	// Pop order 0, 1, 2, ...: easier to follow in a ring dump.
	for (uint32_t i = 0; i < queue_size; i++)
		free_ids_[i] = uint16_t(queue_size - 1 - i);
}

bool SplitQueue::add_buffer(uint64_t addr, uint32_t len, bool device_writable, uint64_t token) noexcept {
	if (free_count_ == 0) {
		stats_.ring_full.add();
		return false;
	}
	const uint16_t id = free_ids_[--free_count_];
	descs_[id] = Desc{token, len, device_writable, State::queued};

	// One descriptor per buffer: no NEXT flag, so the device never follows
	// next and the used id always names the whole buffer (section 2.6.5).
	uint8_t* d = desc_ + size_t(id) * kDescSize;
	ring_store<uint64_t>(d + kDescAddrOff, addr);
	ring_store<uint32_t>(d + kDescLenOff, len);
	ring_store<uint16_t>(d + kDescFlagsOff, device_writable ? kDescFWrite : uint16_t(0));
	ring_store<uint16_t>(d + kDescNextOff, 0);

	// The avail slot is written now, relaxed; publish() orders it before idx.
	// The slot cannot be one the device has yet to read: at most N buffers are
	// outstanding and this one was free (section 2.6.13.2).
	const uint16_t slot = next_avail_ & mask_;
	ring_store<uint16_t>(avail_ + kAvailRingOff + size_t(slot) * kAvailEntrySize, id);
	avail_slots_[slot] = id;
	next_avail_++;
	stats_.added.add();
	return true;
}

bool SplitQueue::add_chain(std::span<const ChainPart> parts) noexcept {
	if (parts.empty() || parts.size() > free_count_) {
		if (!parts.empty()) stats_.ring_full.add();
		return false;
	}
	// Pop every id first: each descriptor names the next one.
	const size_t n = parts.size();
	const uint16_t head = free_ids_[free_count_ - 1];
	uint16_t id = head;
	for (size_t i = 0; i < n; i++) {
		free_count_--;
		const uint16_t next = i + 1 < n ? free_ids_[free_count_ - 1] : uint16_t(0);
		descs_[id] =
		    Desc{parts[i].token, parts[i].len, false, State::queued, uint16_t(n - i), next, i == 0};
		uint8_t* d = desc_ + size_t(id) * kDescSize;
		ring_store<uint64_t>(d + kDescAddrOff, parts[i].addr);
		ring_store<uint32_t>(d + kDescLenOff, parts[i].len);
		ring_store<uint16_t>(d + kDescFlagsOff, i + 1 < n ? kDescFNext : uint16_t(0));
		ring_store<uint16_t>(d + kDescNextOff, next);
		id = next;
	}
	const uint16_t slot = next_avail_ & mask_;
	ring_store<uint16_t>(avail_ + kAvailRingOff + size_t(slot) * kAvailEntrySize, head);
	avail_slots_[slot] = head;
	next_avail_++;
	stats_.added.add(n);
	longest_chain_ = std::max(longest_chain_, uint16_t(n));
	return true;
}

Published SplitQueue::publish() noexcept {
	const Published p{published_idx_, next_avail_};
	if (p.count() == 0) return p;
	uint32_t descs = 0;
	for (uint16_t i = p.old_idx; i != p.new_idx; i++) {
		// A chain: every piece, through the private links.
		uint16_t id = avail_slots_[i & mask_];
		for (uint16_t left = descs_[id].chain; left > 0; left--) {
			descs_[id].state = State::in_flight;
			descs++;
			id = descs_[id].next;
		}
	}
	in_flight_ += descs;

	// Section 2.6.13.3 "Updating idx": the descriptors and avail slots written
	// by add_buffer() must be visible before the device can see the new idx.
	// A release store orders every earlier store before it; it pairs with the
	// device's read barrier after its avail->idx load (vhost_get_vq_desc:
	// smp_rmb after vhost_get_avail_idx). On x86 this is a plain mov.
	ring_store<uint16_t>(avail_ + kAvailIdxOff, p.new_idx, std::memory_order_release);
	published_idx_ = p.new_idx;
	stats_.published.add(descs);
	return p;
}

bool SplitQueue::needs_kick(uint16_t old_idx, uint16_t new_idx) noexcept {
	if (old_idx == new_idx) return false;
	// Section 2.6.13.4: a full barrier between the avail->idx store and the
	// avail_event load. Without it the store can sit in the store buffer while
	// the load runs: the device finds the ring empty, writes avail_event and
	// re-reads avail->idx (vhost_enable_notify: store, smp_mb, load), still
	// sees the old idx and sleeps, while we read the old avail_event and do
	// not kick - a lost wake-up. Store->load ordering needs seq_cst (mfence or
	// a locked instruction on x86); release/acquire does not give it.
	std::atomic_thread_fence(std::memory_order_seq_cst);
	const uint16_t event = ring_load<uint16_t>(used_ + used_avail_event_off(size()));
	const bool kick = need_event(event, new_idx, old_idx);
	(kick ? stats_.kicks_needed : stats_.kicks_suppressed).add();
	return kick;
}

bool SplitQueue::kick_unasked(const Published& pub) const noexcept {
	if (pub.count() == 0) return true;
	const uint16_t event = device_avail_event();
	// In [old, new): the device sleeps waiting for one of these buffers. At
	// new: it has taken all of them since (woken some other way). Anywhere
	// else it is behind old: still busy with buffers published earlier.
	return !need_event(event, pub.new_idx, pub.old_idx) && event != pub.new_idx;
}

bool SplitQueue::ring_idle() const noexcept {
	// need_event(event, published + 1, published) reduces to event == published.
	return device_avail_event() == published_idx_;
}

uint16_t SplitQueue::device_avail_event() const noexcept {
	return ring_load<uint16_t>(used_ + used_avail_event_off(size()));
}

uint16_t SplitQueue::used_end() noexcept {
	// Section 2.6.14 (and 2.6.8.2 for the device): the device writes a used
	// entry, then (after its write barrier) used->idx. The acquire load orders
	// our reads of the entries after the idx load, pairing with that barrier
	// (vhost_add_used_n: smp_wmb before storing used->idx).
	const uint16_t idx = ring_load<uint16_t>(used_ + kUsedIdxOff, std::memory_order_acquire);
	if (uint16_t(idx - last_used_) > size()) {
		// More entries than the ring holds: nothing below idx can be trusted.
		// Consume nothing and count each bad value once; a device that later
		// writes a sane idx again finds the queue where it left it.
		if (bad_used_idx_ != idx) corrupt(UsedError::idx_jump);
		bad_used_idx_ = idx;
		return last_used_;
	}
	bad_used_idx_.reset();
	return idx;
}

bool SplitQueue::take_used(UsedBuffer& out, uint16_t& id_out) noexcept {
	const uint8_t* e = used_ + kUsedRingOff + size_t(last_used_ & mask_) * kUsedElemSize;
	// Each device-written field is loaded exactly once, then only the local copy is used.
	const uint32_t id = ring_load<uint32_t>(e + kUsedElemIdOff);
	const uint32_t len = ring_load<uint32_t>(e + kUsedElemLenOff);
	last_used_++;

	if (id >= size()) {
		corrupt(UsedError::id_out_of_range);
		return false;
	}
	Desc& d = descs_[id];
	// Only a published, unreturned descriptor may come back: this rejects
	// duplicates, ids never handed out and ids the device read past avail->idx
	// to find. A chain's pieces are known privately (add_chain()), so nothing
	// here walks next pointers in shared memory that the device could have
	// turned into a loop.
	// A chain comes back under its head only: a used entry naming one of its
	// later pieces is as wrong as a free id.
	if (d.state != State::in_flight || !d.head) {
		corrupt(UsedError::id_not_in_flight);
		return false;
	}
	id_out = uint16_t(id);
	d.state = State::free;
	free_ids_[free_count_++] = uint16_t(id);
	in_flight_--;

	out.token = d.token;
	out.bad_len = false;
	// Section 2.6.8: len counts bytes written into device-writable buffers. For
	// a device-readable buffer it carries no information (vhost-net writes 0;
	// the spec notes legacy devices set it wrongly), so it is ignored.
	out.len = d.writable ? len : 0;
	if (d.writable && len > d.len) {
		corrupt(UsedError::len_too_large);
		out.len = 0;
		out.bad_len = true;
	}
	stats_.harvested.add();
	return true;
}

size_t SplitQueue::harvest_used(std::span<UsedBuffer> out) noexcept {
	// A used entry hands back a whole chain at once: take one entry at a
	// time while the longest chain ever added still fits.
	size_t n = 0;
	while (out.size() - n >= longest_chain_ &&
	       harvest_used([&](const UsedBuffer& u) noexcept { out[n++] = u; }, 1) == 1)
		;
	return n;
}

bool SplitQueue::enable_call_notifications() noexcept {
	// Section 2.6.7.2: with EVENT_IDX the device signals once used->idx moves
	// past used_event, so ask for a signal when entry last_used_ is written.
	ring_store<uint16_t>(avail_ + avail_used_event_off(size()), last_used_);
	// The store must be visible before used->idx is re-read (store->load, so a
	// full barrier). Otherwise the device can add an entry, read the stale
	// used_event and skip the call (vhost_notify: smp_mb, then used_event
	// load), while we read the stale used->idx and sleep: the race the design
	// notes describe. Re-reading after the barrier closes it.
	std::atomic_thread_fence(std::memory_order_seq_cst);
	return ring_load<uint16_t>(used_ + kUsedIdxOff, std::memory_order_acquire) != last_used_;
}

} // namespace esptun::virtio
