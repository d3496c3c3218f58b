// The vhost tun port: see vhost_tun_port.hpp for the theory of operation.
//
// Outbound: RX call eventfd edge (or a full previous batch) -> harvest up to
//   kTunBatch used RX entries (len - 12 = packet at kHeadroom) -> the data
//   plane encapsulates and sends -> read_done(): re-post, publish, kick only
//   if needs_kick() says so. With vnet_hdr: a packet of one buffer and no GSO
//   as before (checksum finished in place if partial); otherwise its buffers
//   are gathered into the staging buffer (re-posted at once) and segmented.
// Inbound: recvmmsg into pool buffers (with UDP GRO: into 64 KiB slot
//   buffers, copied to pool buffers for the ring) -> decapsulate -> write_batch(): an
//   idle ring and a small batch go to the tun fd, the rest into the TX ring
//   with one publish and at most one kick. With vnet_hdr: GRO runs first, a
//   run is one descriptor chain (or one writev()).
#include "datapath/vhost_tun_port.hpp"

#include "platform/tun.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace esptun::datapath {
namespace {

using offload::VnetHdr;
using platform::kVirtioNetHdrLen;
static_assert(VnetHdr::kSize == kVirtioNetHdrLen);

constexpr size_t kPage = 4096;
constexpr size_t kBufAlign = 64; // one cache line: buffers never share one

constexpr size_t round_up(size_t n, size_t a) noexcept { return (n + a - 1) / a * a; }

/// Bytes one ring takes in the region, page-rounded so each starts on a page.
size_t ring_bytes(uint32_t queue_size) {
	const auto l = virtio::ring_layout(queue_size);
	if (!l)
		throw std::invalid_argument("vhost queue size " + std::to_string(queue_size) +
		                            " is not a power of two");
	return round_up(l->total_bytes, kPage);
}

std::span<uint8_t> ring_region(std::span<uint8_t> region, const VhostPortParams& p, unsigned q) {
	if (p.buf_size < tunnel::esp::kHeadroom + tunnel::esp::kTailroom + 64 || p.buf_size % kBufAlign != 0)
		throw std::invalid_argument("vhost buffer size " + std::to_string(p.buf_size) +
		                            " is unusable");
	if (region.size() < VhostTunPort::region_bytes(p.queue_size, p.buf_size))
		throw std::invalid_argument("vhost region of " + std::to_string(region.size()) +
		                            " bytes is too short");
	const size_t rb = ring_bytes(p.queue_size);
	return region.subspan(q * rb, rb);
}

uint64_t device_addr(const void* p) noexcept { return reinterpret_cast<uintptr_t>(p); }

} // namespace

size_t VhostTunPort::buffer_size(unsigned mtu) noexcept {
	return round_up(tunnel::esp::kHeadroom + std::max(mtu, 576u) + tunnel::esp::kTailroom, kBufAlign);
}

size_t VhostTunPort::region_bytes(uint32_t queue_size, size_t buf_size) noexcept {
	const auto l = virtio::ring_layout(queue_size);
	if (!l) return 0;
	// queue_size RX buffers + queue_size TX-ring buffers + one batch of receive slots.
	return 2 * round_up(l->total_bytes, kPage) + (2 * size_t(queue_size) + kTunBatch) * buf_size;
}

VhostTunPort::VhostTunPort(std::span<uint8_t> region, const VhostPortParams& p, TunIoStats& stats)
    : p_(p), stats_(stats), rx_(ring_region(region, p, 0), p.queue_size),
      tx_(ring_region(region, p, 1), p.queue_size), free_(size_t(p.queue_size) + kTunBatch),
      stage_(p.vnet_hdr ? kStageBytes : 0, p.vnet_hdr ? p.buf_size : 0) {
	pool_ = region.data() + 2 * ring_bytes(p.queue_size);
	const uint32_t n = p.queue_size;
	// Inbound buffers n .. 2n + kTunBatch - 1: one batch into the receive slots,
	// the rest onto the free stack. With GRO slots all of them are free.
	if (p_.gro_slots) {
		gro_mem_.resize(kTunBatch * tunnel::esp::kBufferSize);
		for (size_t i = 0; i < kTunBatch; i++) {
			slot_buf_[i] = UINT32_MAX; // not a pool buffer
			recv_slots_[i].buf = std::span<uint8_t>(gro_mem_).subspan(
			    i * tunnel::esp::kBufferSize, tunnel::esp::kBufferSize);
			free_[free_n_++] = n + uint32_t(i);
		}
	} else {
		for (size_t i = 0; i < kTunBatch; i++) {
			slot_buf_[i] = n + uint32_t(i);
			recv_slots_[i].buf = buffer(slot_buf_[i]);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		free_[free_n_++] = n + uint32_t(kTunBatch) + i;
	// Every RX buffer is posted before the backend is attached (the set-up
	// order of platform/vhost_net.hpp): the device's first look finds a full ring.
	for (uint32_t i = 0; i < n; i++)
		post_rx(i);
	rx_.publish();
}

platform::VringAddrs VhostTunPort::vring(unsigned q) const noexcept {
	const virtio::SplitQueue& vq = q == platform::kVhostRxQueue ? rx_ : tx_;
	return {vq.size(), vq.desc_area(), vq.avail_area(), vq.used_area()};
}

void VhostTunPort::start() noexcept {
	platform::eventfd_signal(p_.rx_kick);
	stats_.rx_kicks.add();
}

// --- Outbound: the RX ring ---

void VhostTunPort::post_rx(uint32_t idx) noexcept {
	// The device writes the 12-byte header into the headroom and the packet at
	// kHeadroom; the length leaves kTailroom free for encapsulate().
	uint8_t* at = buffer(idx).data() + tunnel::esp::kHeadroom - kVirtioNetHdrLen;
	const size_t len = kVirtioNetHdrLen + p_.buf_size - tunnel::esp::kHeadroom - tunnel::esp::kTailroom;
	// Cannot fail: a buffer is posted at most once and the ring has a slot for each.
	(void)rx_.add_buffer(device_addr(at), uint32_t(len), true, idx);
}

bool VhostTunPort::can_sleep() noexcept {
	// A full batch means more may be waiting: go on without re-arming, so the
	// device does not signal for entries we are about to take anyway. The
	// same while read_raw() has packets of a batch left to copy.
	if (rx_batch_full_ || ahead_at_ < ahead_n_) return false;
	// Re-arm, barrier, re-check (split_queue.hpp): sleep only on a false.
	return !rx_.enable_call_notifications();
}

void VhostTunPort::on_read_wakeup() noexcept {
	// No read() of the eventfd: the loop watches it edge-triggered.
	stats_.call_wakeups.add();
}

size_t VhostTunPort::read_batch(std::span<TunPacket> out) noexcept {
	const size_t max = std::min(out.size(), kTunBatch);
	size_t n = 0;
	held_n_ = 0;
	if (p_.vnet_hdr) {
		out = out.first(max);
		if (max > 0 && stage_.held()) n += stage_.emit(0, out, stats_);
		// One used entry at a time: a super-packet may fill the batch, or not fit
		// it and stay staged, after any entry.
		while (n < max && !stage_.held())
			if (rx_.harvest_used(
			        [&](const virtio::UsedBuffer& u) noexcept { take_rx(u, out, n); }, 1) == 0)
				break;
		rx_batch_full_ = n == max || stage_.held();
		stats_.rx_ring_packets.add(n);
		return n;
	}
	const size_t taken = rx_.harvest_used(
	    [&](const virtio::UsedBuffer& u) noexcept {
		    const auto idx = uint32_t(u.token);
		    if (u.bad_len || u.len < kVirtioNetHdrLen) {
			    // Not a packet (drivers/vhost/net.c never writes less than the
			    // header): count it and give the buffer straight back.
			    if (!u.bad_len) short_used_++;
			    post_rx(idx);
			    return;
		    }
		    out[n++] = {buffer(idx), u.len - kVirtioNetHdrLen};
		    held_[held_n_++] = idx;
	    },
	    max);
	rx_batch_full_ = taken == max;
	stats_.rx_ring_packets.add(n);
	return n;
}

void VhostTunPort::take_rx(const virtio::UsedBuffer& u, std::span<TunPacket> out, size_t& n) noexcept {
	const auto idx = uint32_t(u.token);
	// Where post_rx() told the device to write: the header, then the packet.
	uint8_t* at = buffer(idx).data() + tunnel::esp::kHeadroom - kVirtioNetHdrLen;
	auto gathered = [&]() noexcept {
		if (asm_overflow_) {
			stats_.offload_errors.add();
			return;
		}
		stage_.hold(stage_len_);
		n += stage_.emit(n, out, stats_);
	};
	if (asm_left_ > 0) {
		// A later buffer of a mergeable packet: data from its start, no header.
		if (!u.bad_len && !asm_overflow_ && u.len <= stage_.buffer().size() - stage_len_) {
			std::memcpy(stage_.buffer().data() + stage_len_, at, u.len);
			stage_len_ += u.len;
		} else {
			asm_overflow_ = true;
		}
		post_rx(idx);
		if (--asm_left_ == 0) gathered();
		return;
	}
	if (u.bad_len || u.len < kVirtioNetHdrLen) {
		if (!u.bad_len) short_used_++;
		post_rx(idx);
		return;
	}
	const VnetHdr h = *VnetHdr::parse({at, kVirtioNetHdrLen});
	const std::span<uint8_t> pkt{at + kVirtioNetHdrLen, u.len - kVirtioNetHdrLen};
	// vhost writes num_buffers = the used entries of this packet (handle_rx()):
	// at least 1, and never more than the ring holds.
	if (h.num_buffers == 0 || h.num_buffers > rx_.size()) {
		bad_rx_hdr_++;
		post_rx(idx);
		return;
	}
	if (h.num_buffers == 1 && h.gso_type == VnetHdr::kGsoNone) {
		// The common case stays zero-copy.
		if (offload::finish_checksum(h, pkt) != offload::Error::none) {
			stats_.offload_errors.add();
			post_rx(idx);
			return;
		}
		out[n++] = {buffer(idx), pkt.size()};
		held_[held_n_++] = idx;
		return;
	}
	// u.len <= the posted length < kStageBytes
	std::memcpy(stage_.buffer().data(), at, u.len);
	stage_len_ = u.len;
	asm_overflow_ = false;
	post_rx(idx);
	asm_left_ = h.num_buffers - 1u;
	if (asm_left_ == 0) gathered();
}

size_t VhostTunPort::raw_buffer_size() const noexcept { return tunnel::esp::kBufferSize; }

size_t VhostTunPort::read_raw(std::span<uint8_t> buf) noexcept {
	if (ahead_at_ == ahead_n_) {
		ahead_at_ = 0;
		ahead_n_ = read_batch(ahead_);
		if (ahead_n_ == 0) {
			read_done(); // buffers of entries that were not packets go back
			return 0;
		}
	}
	const TunPacket& p = ahead_[ahead_at_++];
	size_t len = 0;
	if (buf.size() >= tunnel::esp::kHeadroom + p.len + tunnel::esp::kTailroom) {
		std::memcpy(buf.data() + tunnel::esp::kHeadroom, p.buf.data() + tunnel::esp::kHeadroom,
		            p.len);
		len = p.len;
	}
	if (ahead_at_ == ahead_n_) {
		ahead_n_ = ahead_at_ = 0;
		read_done();
	}
	return len;
}

void VhostTunPort::read_done() noexcept {
	for (size_t i = 0; i < held_n_; i++)
		post_rx(held_[i]);
	held_n_ = 0;
	const virtio::Published pub = rx_.publish();
	if (rx_.needs_kick(pub.old_idx, pub.new_idx))
		kick(rx_, pub, p_.rx_kick, stats_.rx_kicks);
	else if (pub.count() > 0)
		stats_.rx_kicks_suppressed.add();
	sync_device_errors();
}

void VhostTunPort::kick(const virtio::SplitQueue& q, const virtio::Published& pub, int fd,
                        Counter& kicks) noexcept {
	// Audited before the write, while a device that asked is still asleep.
	if (q.kick_unasked(pub)) stats_.needless_kicks.add();
	platform::eventfd_signal(fd);
	kicks.add();
}

// --- Inbound: the TX ring ---

void VhostTunPort::reclaim_tx() noexcept {
	tx_.harvest_used([&](const virtio::UsedBuffer& u) noexcept { free_[free_n_++] = uint32_t(u.token); });
}

uint32_t VhostTunPort::copy_to_pool(std::span<const uint8_t> bytes, size_t before) noexcept {
	if (before > tunnel::esp::kHeadroom || bytes.size() - before > p_.buf_size - tunnel::esp::kHeadroom ||
	    free_n_ == 0)
		return UINT32_MAX;
	const uint32_t idx = free_[--free_n_];
	std::memcpy(buffer(idx).data() + tunnel::esp::kHeadroom - before, bytes.data(), bytes.size());
	return idx;
}

bool VhostTunPort::to_ring(const TunWrite& w) noexcept {
	if (w.slot >= kTunBatch) return false;
	const std::span<uint8_t> buf = recv_slots_[w.slot].buf;
	// The header goes right in front of the packet, inside the same buffer.
	if (w.inner.data() < buf.data() + kVirtioNetHdrLen ||
	    w.inner.data() + w.inner.size() > buf.data() + buf.size())
		return false;
	const size_t off = size_t(w.inner.data() - buf.data());
	// With GRO slots there are more free buffers than descriptors: either
	// running out means harvesting what the device has finished.
	if (free_n_ == 0 || tx_.free_count() == 0) reclaim_tx();
	if (free_n_ == 0 || tx_.free_count() == 0) {
		stats_.ring_full.add();
		return false;
	}
	uint8_t* hdr = buf.data() + off - kVirtioNetHdrLen;
	// A zero header: no checksum offload, no GSO (the packet is complete).
	std::memset(hdr, 0, kVirtioNetHdrLen);
	const std::span<const uint8_t> framed(hdr, kVirtioNetHdrLen + w.inner.size());
	if (p_.gro_slots) {
		// The slot keeps its buffer (more of its train may follow): a copy goes.
		const uint32_t idx = copy_to_pool(framed, kVirtioNetHdrLen);
		if (idx == UINT32_MAX) return false; // larger than a pool buffer: written directly
		if (!tx_.add_buffer(
		        device_addr(buffer(idx).data() + tunnel::esp::kHeadroom - kVirtioNetHdrLen),
		        uint32_t(framed.size()), false, idx)) {
			free_[free_n_++] = idx;
			stats_.ring_full.add(); // not expected: a free buffer implies a free descriptor
			return false;
		}
		stats_.tx_ring_packets.add();
		return true;
	}
	if (!tx_.add_buffer(device_addr(hdr), uint32_t(framed.size()), false, slot_buf_[w.slot])) {
		stats_.ring_full.add(); // not expected: a free buffer implies a free descriptor
		return false;
	}
	// The ring owns that buffer now; the slot receives into a free one.
	slot_buf_[w.slot] = free_[--free_n_];
	recv_slots_[w.slot].buf = buffer(slot_buf_[w.slot]);
	stats_.tx_ring_packets.add();
	return true;
}

void VhostTunPort::write_direct(const TunWrite& w, size_t& failed) noexcept {
	stats_.direct_writes.add();
	stats_.tun_writes.add();
	std::span<const uint8_t> bytes = w.inner;
	if (p_.vnet_hdr) {
		// A zero header in front, in place (a TunWrite has 12 bytes of its
		// buffer before it): one contiguous write().
		uint8_t* hdr = w.inner.data() - kVirtioNetHdrLen;
		std::memset(hdr, 0, kVirtioNetHdrLen);
		bytes = {hdr, kVirtioNetHdrLen + w.inner.size()};
	}
	if (!platform::tun_write(p_.tun_fd, bytes).ok()) failed++;
}

void VhostTunPort::kick_tx() noexcept {
	const virtio::Published pub = tx_.publish();
	if (tx_.needs_kick(pub.old_idx, pub.new_idx))
		kick(tx_, pub, p_.tx_kick, stats_.tx_kicks);
	else if (pub.count() > 0)
		stats_.tx_kicks_suppressed.add();
}

size_t VhostTunPort::write_batch(std::span<const TunWrite> pkts) noexcept {
	if (pkts.empty()) return 0;
	if (p_.vnet_hdr) return write_batch_vnet(pkts);
	size_t failed = 0;
	// The latency trick: an idle ring would need a kick (and a wake-up of the
	// vhost worker) for these few packets; write() costs less and cannot
	// overtake ring packets, as the device has taken every one of them.
	if (pkts.size() <= p_.direct_write_max && tx_.ring_idle()) {
		for (const TunWrite& w : pkts)
			write_direct(w, failed);
		return failed;
	}
	for (const TunWrite& w : pkts)
		if (!to_ring(w)) write_direct(w, failed);
	kick_tx();
	sync_device_errors();
	return failed;
}

bool VhostTunPort::run_to_ring(const offload::GroRun& run, std::span<const TunWrite> pkts) noexcept {
	if (p_.gro_slots) return run_copy_to_ring(run, pkts);
	// Every piece must lie in its own slot's buffer (the buffer goes to the
	// ring and the slot takes a free one), the head 12 bytes in.
	uint64_t seen = 0;
	static_assert(kTunBatch <= 64);
	for (size_t i = 0; i < run.count; i++) {
		const TunWrite& w = pkts[run.first + i];
		if (w.slot >= kTunBatch || (seen >> w.slot & 1) != 0) return false;
		seen |= uint64_t(1) << w.slot;
		const std::span<uint8_t> buf = recv_slots_[w.slot].buf;
		if (w.inner.data() < buf.data() + kVirtioNetHdrLen ||
		    w.inner.data() + w.inner.size() > buf.data() + buf.size())
			return false;
	}
	if (free_n_ < run.count || tx_.free_count() < run.count) reclaim_tx();
	if (free_n_ < run.count || tx_.free_count() < run.count) {
		stats_.ring_full.add(run.count);
		return false;
	}
	const TunWrite& head = pkts[run.first];
	chain_[0] = {device_addr(head.inner.data() - kVirtioNetHdrLen),
	             uint32_t(kVirtioNetHdrLen + head.inner.size()), slot_buf_[head.slot]};
	for (size_t i = 1; i < run.count; i++) {
		const TunWrite& w = pkts[run.first + i];
		const std::span<const uint8_t> p = offload::gro_payload(run, w.inner);
		chain_[i] = {device_addr(p.data()), uint32_t(p.size()), slot_buf_[w.slot]};
	}
	if (!tx_.add_chain(std::span(chain_).first(run.count))) {
		stats_.ring_full.add(run.count); // not expected: checked above
		return false;
	}
	for (size_t i = 0; i < run.count; i++) {
		const size_t slot = pkts[run.first + i].slot;
		slot_buf_[slot] = free_[--free_n_];
		recv_slots_[slot].buf = buffer(slot_buf_[slot]);
	}
	stats_.tx_ring_packets.add(run.count);
	return true;
}

bool VhostTunPort::run_copy_to_ring(const offload::GroRun& run, std::span<const TunWrite> pkts) noexcept {
	if (free_n_ < run.count || tx_.free_count() < run.count) reclaim_tx();
	if (free_n_ < run.count || tx_.free_count() < run.count) {
		stats_.ring_full.add(run.count);
		return false;
	}
	// Each piece (the head with its header, then the payloads) into a buffer
	// of its own; as on the direct path, the pieces stay apart in the chain.
	size_t n = 0;
	for (; n < run.count; n++) {
		const TunWrite& w = pkts[run.first + n];
		const std::span<const uint8_t> piece =
		    n == 0 ? std::span<const uint8_t>(w.inner.data() - kVirtioNetHdrLen,
		                                      kVirtioNetHdrLen + w.inner.size())
		           : offload::gro_payload(run, w.inner);
		const size_t before = n == 0 ? kVirtioNetHdrLen : 0;
		const uint32_t idx = copy_to_pool(piece, before);
		if (idx == UINT32_MAX) break;
		chain_[n] = {device_addr(buffer(idx).data() + tunnel::esp::kHeadroom - before),
		             uint32_t(piece.size()), idx};
	}
	// Buffers and descriptors were checked above: a piece that did not go
	// was larger than a pool buffer (a peer with a larger MTU), not a full ring.
	const bool fitted = n == run.count;
	if (!fitted || !tx_.add_chain(std::span(chain_).first(run.count))) {
		for (size_t i = 0; i < n; i++) // back to the free stack: the run goes direct
			free_[free_n_++] = uint32_t(chain_[i].token);
		if (fitted) stats_.ring_full.add(run.count); // not expected: checked above
		return false;
	}
	stats_.tx_ring_packets.add(run.count);
	return true;
}

void VhostTunPort::write_run_direct(const offload::GroRun& run, std::span<const TunWrite> pkts,
                                    size_t& failed) noexcept {
	const TunWrite& head = pkts[run.first];
	iov_[0] = {head.inner.data() - kVirtioNetHdrLen, kVirtioNetHdrLen + head.inner.size()};
	gro_payload_iov(run, pkts, &iov_[1]);
	stats_.direct_writes.add(run.count);
	stats_.tun_writes.add();
	if (!platform::tun_writev(p_.tun_fd, std::span(iov_).first(run.count)).ok()) failed += run.count;
}

size_t VhostTunPort::write_batch_vnet(std::span<const TunWrite> pkts) noexcept {
	size_t failed = 0;
	// As in write_batch(): decided once, before anything is queued.
	const bool direct = pkts.size() <= p_.direct_write_max && tx_.ring_idle();
	gro_.for_each_write(
	    pkts, stats_,
	    [&](const offload::GroRun& run, std::span<const TunWrite> chunk) noexcept {
		    // The run's header in place in front of its first packet.
		    uint8_t* hdr = chunk[run.first].inner.data() - kVirtioNetHdrLen;
		    (void)run.hdr.write({hdr, kVirtioNetHdrLen});
		    if (direct || !run_to_ring(run, chunk)) write_run_direct(run, chunk, failed);
	    },
	    [&](const TunWrite& w) noexcept {
		    if (direct || !to_ring(w)) write_direct(w, failed);
	    });
	if (!direct) kick_tx();
	sync_device_errors();
	return failed;
}

void VhostTunPort::sync_device_errors() noexcept {
	stats_.device_errors.set(short_used_ + bad_rx_hdr_ + rx_.stats().corrupt_total() +
	                         tx_.stats().corrupt_total());
}

// --- VhostTun: set-up in the order of platform/vhost_net.hpp ---

VhostTun::VhostTun(platform::VhostNet dev, int tun_fd, unsigned mtu, unsigned direct_write_max,
                   TunIoStats& stats, bool vnet_hdr, bool gro_slots)
    : dev_(std::move(dev)) {
	// The tun reads and writes the virtio-net header itself: vhost must pass it through.
	if (vnet_hdr) dev_.use_tun_vnet_hdr();
	// Anything but INT_MAX keeps vhost off its XDP TX path (vhost_net.hpp).
	// Not small: direct writes on the non-blocking fd share this budget with
	// ring packets and would fail with EAGAIN when it runs out.
	platform::set_tun_sndbuf(tun_fd, INT32_MAX - 1);

	VhostPortParams p;
	p.buf_size = VhostTunPort::buffer_size(mtu);
	p.direct_write_max = direct_write_max;
	p.tun_fd = tun_fd;
	p.vnet_hdr = vnet_hdr;
	p.gro_slots = gro_slots;
	p.rx_kick = dev_.kick_fd(platform::kVhostRxQueue);
	p.rx_call = dev_.call_fd(platform::kVhostRxQueue);
	p.tx_kick = dev_.kick_fd(platform::kVhostTxQueue);
	region_ = platform::MappedRegion(VhostTunPort::region_bytes(p.queue_size, p.buf_size));
	port_ = std::make_unique<VhostTunPort>(region_.span(), p, stats);

	dev_.set_mem_table(region_.span());
	dev_.setup_queue(platform::kVhostRxQueue, port_->vring(platform::kVhostRxQueue));
	dev_.setup_queue(platform::kVhostTxQueue, port_->vring(platform::kVhostTxQueue));
	dev_.attach(tun_fd);
	port_->start();
}

} // namespace esptun::datapath
