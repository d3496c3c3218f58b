// A device model for the virtqueue and vhost port tests (virtio/ and
// datapath/): plays the kernel's vhost side of a split virtqueue on the same
// memory the SplitQueue drives, following what drivers/vhost/vhost.c does
// (vhost_get_vq_desc, vhost_add_used_n, vhost_notify, vhost_enable_notify)
// with VIRTIO_RING_F_EVENT_IDX. It also writes raw, corrupt used entries for
// the validation tests.
#pragma once

#include "virtio/split_queue.hpp"
#include "virtio/virtio_ring_layout.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>

namespace esptun::virtio::test {

/// Ring memory with the alignment a SplitQueue needs (64, which covers 16).
class AlignedRegion {
public:
	explicit AlignedRegion(size_t n) : n_(n), p_(new (std::align_val_t(64)) uint8_t[n]) {}
	~AlignedRegion() { ::operator delete[](p_, std::align_val_t(64)); }
	AlignedRegion(const AlignedRegion&) = delete;
	AlignedRegion& operator=(const AlignedRegion&) = delete;
	uint8_t* data() const noexcept { return p_; }
	size_t size() const noexcept { return n_; }
	std::span<uint8_t> span() const noexcept { return {p_, n_}; }

private:
	size_t n_;
	uint8_t* p_;
};

/// One descriptor as the device read it from the table.
struct DeviceDesc {
	uint16_t id = 0;
	uint64_t addr = 0;
	uint32_t len = 0;
	uint16_t flags = 0;
};

class DeviceModel {
public:
	/// @start_idx: VHOST_SET_VRING_BASE (and the used->idx vhost finds in the ring)
	DeviceModel(uint8_t* region, const RingLayout& l, uint16_t start_idx = 0)
	    : n_(l.queue_size), desc_(region + l.desc_offset), avail_(region + l.avail_offset),
	      used_(region + l.used_offset), last_avail_(start_idx), shadow_used_(start_idx),
	      signalled_used_(start_idx) {}

	/// Buffers published but not yet taken (vhost_get_avail_idx - last_avail_idx).
	uint16_t avail_pending() const noexcept {
		return uint16_t(ring_load<uint16_t>(avail_ + kAvailIdxOff, std::memory_order_acquire) -
		                last_avail_);
	}

	/// vhost_get_vq_desc(): the next published buffer, or nullopt when the ring is empty.
	std::optional<DeviceDesc> take_avail() noexcept {
		// Acquire pairs with the driver's release store of avail->idx.
		const uint16_t idx = ring_load<uint16_t>(avail_ + kAvailIdxOff, std::memory_order_acquire);
		if (idx == last_avail_) return std::nullopt;
		const uint16_t slot = last_avail_ & uint16_t(n_ - 1);
		DeviceDesc d;
		d.id = ring_load<uint16_t>(avail_ + kAvailRingOff + size_t(slot) * kAvailEntrySize);
		const uint8_t* p = desc_ + size_t(d.id % n_) * kDescSize;
		d.addr = ring_load<uint64_t>(p + kDescAddrOff);
		d.len = ring_load<uint32_t>(p + kDescLenOff);
		d.flags = ring_load<uint16_t>(p + kDescFlagsOff);
		last_avail_++;
		return d;
	}

	/// Write a used entry at the next used slot; visible only after flush_used().
	void push_used(uint32_t id, uint32_t len) noexcept {
		write_used_raw(uint16_t(shadow_used_ & uint16_t(n_ - 1)), id, len);
		shadow_used_++;
	}

	/**
	 * flush_used() - vhost_add_used_n()'s idx store, then vhost_notify()
	 * Return: true when the driver must be signalled (its used_event was passed).
	 */
	bool flush_used() noexcept {
		ring_store<uint16_t>(used_ + kUsedIdxOff, shadow_used_, std::memory_order_release);
		std::atomic_thread_fence(std::memory_order_seq_cst); // vhost_notify: smp_mb()
		const uint16_t event = used_event();
		const uint16_t old = signalled_used_;
		signalled_used_ = shadow_used_;
		return need_event(event, shadow_used_, old);
	}

	/**
	 * enable_notify() - vhost_enable_notify(): ask for a kick at the next
	 * avail entry, then re-check. Return: true when more buffers arrived
	 * meanwhile (keep going instead of sleeping).
	 */
	bool enable_notify() noexcept {
		ring_store<uint16_t>(used_ + used_avail_event_off(n_), last_avail_);
		std::atomic_thread_fence(std::memory_order_seq_cst);
		return ring_load<uint16_t>(avail_ + kAvailIdxOff, std::memory_order_acquire) != last_avail_;
	}

	// --- Raw access for the corruption tests ---
	void write_used_raw(uint16_t slot, uint32_t id, uint32_t len) noexcept {
		uint8_t* e = used_ + kUsedRingOff + size_t(slot % n_) * kUsedElemSize;
		ring_store<uint32_t>(e + kUsedElemIdOff, id);
		ring_store<uint32_t>(e + kUsedElemLenOff, len);
	}
	void set_used_idx(uint16_t v) noexcept {
		ring_store<uint16_t>(used_ + kUsedIdxOff, v, std::memory_order_release);
		shadow_used_ = v;
		signalled_used_ = v;
	}
	void set_avail_event(uint16_t v) noexcept {
		ring_store<uint16_t>(used_ + used_avail_event_off(n_), v);
	}

	uint16_t used_idx() const noexcept { return shadow_used_; }
	uint16_t last_avail() const noexcept { return last_avail_; }
	uint16_t used_event() const noexcept {
		return ring_load<uint16_t>(avail_ + avail_used_event_off(n_));
	}
	uint16_t avail_flags() const noexcept { return ring_load<uint16_t>(avail_ + kAvailFlagsOff); }

private:
	uint32_t n_;
	uint8_t* desc_;
	uint8_t* avail_;
	uint8_t* used_;
	uint16_t last_avail_;     ///< next avail entry to take (VHOST_SET_VRING_BASE)
	uint16_t shadow_used_;    ///< used->idx including unflushed entries
	uint16_t signalled_used_; ///< used->idx at the last signal decision
};

/// A driver's queue of @n entries, its memory, and the device model on it.
struct QueueFixture {
	explicit QueueFixture(uint32_t n)
	    : mem(ring_layout(n)->total_bytes), q(mem.span(), n), dev(mem.data(), q.layout()) {}
	AlignedRegion mem;
	SplitQueue q;
	DeviceModel dev;
};

} // namespace esptun::virtio::test
