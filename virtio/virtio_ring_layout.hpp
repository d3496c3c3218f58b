// The split virtqueue's memory layout and constants (virtio 1.1 section 2.6;
// the same text is section 2.7 in virtio 1.2), copied here so that virtio/
// needs no <linux/*> header. Also the shared-memory accessors every ring
// access goes through, and the event-index arithmetic (vring_need_event).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace esptun::virtio {

// Virtio 1.0+ rings are little-endian (virtio 1.1 section 2.4, "le16/le32/le64").
// The accessors below store native integers, which is only right on a
// little-endian host. A big-endian port would byte-swap in ring_load/ring_store.
static_assert(std::endian::native == std::endian::little, "virtio rings are little-endian");

// --- Feature bits (virtio 1.1 section 6, "Reserved Feature Bits") ---
inline constexpr unsigned kFeatureRingIndirectDesc = 28; ///< VIRTIO_RING_F_INDIRECT_DESC (not used)
inline constexpr unsigned kFeatureRingEventIdx = 29;     ///< VIRTIO_RING_F_EVENT_IDX: required by SplitQueue
inline constexpr unsigned kFeatureVersion1 = 32;         ///< VIRTIO_F_VERSION_1

// --- Queue size (virtio 1.1 section 2.6: "Queue Size ... is always a power of
// 2. The maximum Queue Size value is 32768.") ---
inline constexpr uint32_t kMaxQueueSize = 32768;

// --- Descriptor table: struct virtq_desc, 16 bytes each (section 2.6.5) ---
//   le64 addr; le32 len; le16 flags; le16 next;
inline constexpr size_t kDescSize = 16;
inline constexpr size_t kDescAddrOff = 0;
inline constexpr size_t kDescLenOff = 8;
inline constexpr size_t kDescFlagsOff = 12;
inline constexpr size_t kDescNextOff = 14;
inline constexpr uint16_t kDescFNext = 1;     ///< VIRTQ_DESC_F_NEXT: chain continues via next
inline constexpr uint16_t kDescFWrite = 2;    ///< VIRTQ_DESC_F_WRITE: device writes (else reads)
inline constexpr uint16_t kDescFIndirect = 4; ///< VIRTQ_DESC_F_INDIRECT (never set by esptun)

// --- Available ring: struct virtq_avail (section 2.6.6), written by the driver ---
//   le16 flags; le16 idx; le16 ring[N]; le16 used_event; /* only with EVENT_IDX */
inline constexpr size_t kAvailFlagsOff = 0;
inline constexpr size_t kAvailIdxOff = 2;
inline constexpr size_t kAvailRingOff = 4;
inline constexpr size_t kAvailEntrySize = 2;
inline constexpr uint16_t kAvailFNoInterrupt = 1; ///< VIRTQ_AVAIL_F_NO_INTERRUPT; must stay 0 with EVENT_IDX
constexpr size_t avail_used_event_off(uint32_t n) noexcept { return kAvailRingOff + kAvailEntrySize * n; }
constexpr size_t avail_bytes(uint32_t n) noexcept { return 6 + kAvailEntrySize * size_t(n); }

// --- Used ring: struct virtq_used (section 2.6.8), written by the device ---
//   le16 flags; le16 idx; struct virtq_used_elem { le32 id; le32 len; } ring[N];
//   le16 avail_event; /* only with EVENT_IDX; it sits after the N entries */
inline constexpr size_t kUsedFlagsOff = 0;
inline constexpr size_t kUsedIdxOff = 2;
inline constexpr size_t kUsedRingOff = 4;
inline constexpr size_t kUsedElemSize = 8;
inline constexpr size_t kUsedElemIdOff = 0;
inline constexpr size_t kUsedElemLenOff = 4;
inline constexpr uint16_t kUsedFNoNotify = 1; ///< VIRTQ_USED_F_NO_NOTIFY; ignored with EVENT_IDX
constexpr size_t used_avail_event_off(uint32_t n) noexcept { return kUsedRingOff + kUsedElemSize * n; }
constexpr size_t used_bytes(uint32_t n) noexcept { return 6 + kUsedElemSize * size_t(n); }

// --- Alignment of each part (section 2.6, table "Virtqueue Part Alignment") ---
inline constexpr size_t kDescAlign = 16;
inline constexpr size_t kAvailAlign = 2;
inline constexpr size_t kUsedAlign = 4;
/// Where ring_layout() puts the used ring by default: its own cache line, so the
/// device's used-ring writes do not bounce the line holding the driver's avail ring.
inline constexpr size_t kDefaultUsedAlign = 64;

constexpr bool valid_queue_size(uint32_t n) noexcept {
	return n >= 1 && n <= kMaxQueueSize && std::has_single_bit(n);
}

/// Where the three parts of one split virtqueue sit inside one contiguous region.
struct RingLayout {
	uint32_t queue_size = 0;
	size_t desc_offset = 0, desc_bytes = 0;   ///< 16 * N, at offset 0 (aligned 16)
	size_t avail_offset = 0, avail_bytes = 0; ///< 6 + 2 * N, right after the table (aligned 2)
	size_t used_offset = 0, used_bytes = 0;   ///< 6 + 8 * N, aligned to used_align (>= 4)
	size_t total_bytes = 0;                   ///< the region must be at least this long
	/// The region's start must be aligned to this (the descriptor table's alignment).
	static constexpr size_t region_align = kDescAlign;
};

/**
 * ring_layout() - sizes and offsets of a split virtqueue in one region
 * @queue_size: N, a power of two in 1..32768
 * @used_align: alignment of the used ring, a power of two >= 4 (the spec's
 *              minimum); the default keeps it off the avail ring's cache line
 * Return: the layout, or nullopt when @queue_size or @used_align is invalid.
 */
constexpr std::optional<RingLayout> ring_layout(uint32_t queue_size,
                                                size_t used_align = kDefaultUsedAlign) noexcept {
	if (!valid_queue_size(queue_size) || used_align < kUsedAlign || !std::has_single_bit(used_align))
		return std::nullopt;
	RingLayout l;
	l.queue_size = queue_size;
	l.desc_offset = 0;
	l.desc_bytes = kDescSize * size_t(queue_size);
	l.avail_offset = l.desc_offset + l.desc_bytes; // a multiple of 16, so aligned 2
	l.avail_bytes = avail_bytes(queue_size);
	l.used_offset = (l.avail_offset + l.avail_bytes + used_align - 1) & ~(used_align - 1);
	l.used_bytes = used_bytes(queue_size);
	l.total_bytes = l.used_offset + l.used_bytes;
	return l;
}

/**
 * need_event() - vring_need_event(): must the other side be notified?
 * @event_idx: the index the other side asked to be woken at (avail_event or used_event)
 * @new_idx:   the index just published
 * @old_idx:   the index at the previous notification decision
 *
 * True when @event_idx lies in [@old_idx, @new_idx) counted modulo 2^16, i.e.
 * the entry the other side waits for was among those just published (virtio 1.1
 * sections 2.6.7.2 and 2.6.10.2). All arithmetic wraps at 16 bits.
 */
constexpr bool need_event(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx) noexcept {
	return uint16_t(new_idx - event_idx - 1) < uint16_t(new_idx - old_idx);
}

// --- Shared-memory access ---
// Ring memory is written concurrently by the other side (the kernel's vhost
// worker). Every access is a std::atomic_ref load or store, so that each
// device-written field is read exactly once (the compiler may not re-load it
// after it was validated) and so that the ordering annotations below mean
// what they say. On x86-64 relaxed loads and stores are plain moves. All
// fields are naturally aligned given the part alignments above.
static_assert(std::atomic_ref<uint16_t>::is_always_lock_free &&
                  std::atomic_ref<uint32_t>::is_always_lock_free &&
                  std::atomic_ref<uint64_t>::is_always_lock_free,
              "ring fields need lock-free atomics: the device does not take our locks");

template <class T>
inline T ring_load(const uint8_t* p, std::memory_order mo = std::memory_order_relaxed) noexcept {
	// const_cast: atomic_ref<T> needs a T& even for loads; nothing is written.
	return std::atomic_ref<T>(*reinterpret_cast<T*>(const_cast<uint8_t*>(p))).load(mo);
}
template <class T>
inline void ring_store(uint8_t* p, T v, std::memory_order mo = std::memory_order_relaxed) noexcept {
	std::atomic_ref<T>(*reinterpret_cast<T*>(p)).store(v, mo);
}

} // namespace esptun::virtio
