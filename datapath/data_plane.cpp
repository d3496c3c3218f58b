// The packet loop, one per worker thread (data_plane.hpp). Each pass between
// two waits runs the direction(s) with work waiting; the steps of each:
//
// Outbound (outbound_batch(), send_all()):
//   1. tun read batch: TunPort::read_batch() gives up to kBatch packets, each
//      in its own buffer behind esp::kHeadroom (tun_port.hpp).
//   2. segment: a port with offloads has already cut each TSO/USO
//      super-packet into wire packets (offload_batch.hpp).
//   3. select SA and encapsulate: tunnel::encapsulate() finds the SA by the
//      inner destination and seals the packet in place (tunnel/).
//   4. UDP send batch: one send_batch() for the batch; TunPort::read_done()
//      then recycles the buffers.
// Inbound (inbound_batch()):
//   5. UDP receive batch: one recv_batch() of up to kBatch datagrams into
//      the port's receive slots (with UDP GRO a slot holds a train).
//   6. decapsulate: tunnel::decapsulate() checks, authenticates and decrypts
//      each datagram in place (tunnel/); IKE behind the non-ESP marker goes
//      to the IkeInbox.
//   7. GRO: a port with offloads merges runs of one TCP flow (offload_batch.hpp).
//   8. tun write: TunPort::write_batch() hands the inner packets to the tun.
//
// Each pass runs inside SaTable::enter()/leave(), so the SAs it finds stay
// valid while the control plane replaces them.
//
// The wait is epoll rather than poll() for one reason: a port whose read_fd()
// is an eventfd that only signals (the vhost RX ring's call eventfd) is
// registered edge-triggered, so each signal wakes the loop once and the
// counter never has to be read back: one system call per wake-up instead of
// two. (The counter would need 2^64 signals to saturate; eventfd_signal()
// wakes the waiters on every signal, saturated or not.) The socket and the
// stop eventfd stay level-triggered.
#include "datapath/data_plane.hpp"

#include "base/error.hpp"
#include "tunnel/ecn.hpp"
#include "tunnel/esp.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/epoll.h>
#include <sys/random.h>
#include <utility>

namespace esptun::datapath {
namespace {

int64_t monotonic_ns() noexcept {
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::optional<RunWaits> run_queue_waits(const platform::RunQueueStats& s) noexcept {
	const auto r = s.read();
	if (!r) return std::nullopt;
	return RunWaits{r->waited_ns, r->runs};
}

int64_t realtime_ns() noexcept {
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// ESP, not IKE behind the non-ESP marker (four zero bytes): the SPI is never 0.
bool is_esp(std::span<const uint8_t> d) noexcept {
	return d.size() > tunnel::esp::kNonEspMarkerLen && (d[0] | d[1] | d[2] | d[3]) != 0;
}

int64_t wall_ms() noexcept {
	timespec ts{};
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

/// Waits up to @ms for the socket to accept more data. A full send buffer is
/// back-pressure: holding the tun reader makes the sender's TCP slow down
/// instead of losing what was already read.
bool wait_writable(int fd, int ms) noexcept {
	pollfd p{fd, POLLOUT, 0};
	return poll(&p, 1, ms) > 0 && (p.revents & POLLOUT);
}

} // namespace

// --- Set-up and the wait ---

DataPlane::DataPlane(const tunnel::SaTable& table, TunPort& tun, platform::UdpEngine& udp,
                     DataPathStats& stats, size_t worker)
    : table_(table), tun_(tun), udp_(udp), stats_(stats), worker_(worker) {
	// The worker's transforms and its reclamation slot are indexed by it.
	if (worker >= table.workers())
		throw std::invalid_argument("data plane worker " + std::to_string(worker) +
		                            " of an SA table built for " + std::to_string(table.workers()));
	watch_sources();
}

DataPlane::DataPlane(const tunnel::SaTable& table, int tun_fd, platform::UdpSocket& udp, DataPathStats& stats)
    : table_(table), owned_tun_(std::make_unique<DirectTunPort>(tun_fd)),
      owned_udp_(std::make_unique<platform::MmsgEngine>(udp)), tun_(*owned_tun_), udp_(*owned_udp_),
      stats_(stats) {
	watch_sources();
}

void DataPlane::watch_sources() {
	epoll_ = platform::UniqueFd(epoll_create1(EPOLL_CLOEXEC));
	if (!epoll_) throw SystemError(errno, "epoll_create1");
	if (int err = watch(tun_.read_fd(), tun_.read_fd_signals_only(), kTun))
		throw SystemError(err, "epoll_ctl(tun)");
	if (int err = watch(udp_.poll_fd(), false, kUdp)) throw SystemError(err, "epoll_ctl(udp)");
}

int DataPlane::watch(int fd, bool edge, uint64_t source) noexcept {
	epoll_event ev{};
	ev.events = EPOLLIN | (edge ? uint32_t(EPOLLET) : 0u);
	ev.data.u64 = source;
	return epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : errno;
}

void DataPlane::set_busy_poll(std::chrono::microseconds us) noexcept {
	busy_poll_ns_ = us.count() > 0 ? int64_t(us.count()) * 1000 : 0;
}

void DataPlane::set_wake_poll(std::chrono::microseconds us, std::chrono::nanoseconds idle_spell) noexcept {
	wake_poll_ns_ = us.count() > 0 ? int64_t(us.count()) * 1000 : 0;
	idle_spell_ns_ = int64_t(idle_spell.count());
}

void DataPlane::set_queue_limit(CodelParams p) noexcept {
	if (p.target_ns > 0 && p.interval_ns > 0)
		queue_limit_.emplace(p);
	else
		queue_limit_.reset();
}

bool DataPlane::set_flow_queue(CodelParams p, uint32_t slots, uint64_t max_bytes) {
	fq_.reset();
	fq_next_.reset();
	fq_mem_.reset();
	fq_free_ = {};
	fq_max_bytes_ = max_bytes;
	const size_t size = tun_.raw_buffer_size();
	if (p.target_ns <= 0 || p.interval_ns <= 0 || slots == 0) return true;
	if (size == 0) return false;
	FlowQueueParams fp;
	fp.slots = slots;
	fp.codel = p;
	fq_.emplace(fp);
	fq_buf_size_ = size;
	// Reserved, not touched: a buffer costs memory once a packet was in it,
	// and the free list hands out the most recently freed buffer first.
	fq_mem_ = std::make_unique_for_overwrite<uint8_t[]>(size_t(slots) * size);
	for (uint32_t i = slots; i-- > 0;)
		fq_free_.push_back(i);
	// Flows hash under a key an inner sender cannot know (flow_queue.hpp).
	if (getrandom(&fq_key_, sizeof fq_key_, 0) != ssize_t(sizeof fq_key_))
		fq_key_ = uint64_t(monotonic_ns());
	return true;
}

int DataPlane::poll_for(int64_t ns, std::span<epoll_event> evs, TunIoStats& io, Counter& windows,
                        Counter& hits) noexcept {
	windows.add();
	const int64_t until = monotonic_ns() + ns;
	for (;;) {
		io.polls.add();
		const int n = epoll_wait(epoll_.get(), evs.data(), int(evs.size()), 0);
		if (n > 0) hits.add();
		if (n != 0 || monotonic_ns() >= until) return n;
	}
}

int DataPlane::run(int stop_fd) noexcept {
	if (int err = watch(stop_fd, false, kStop)) return err;
	TunIoStats& io = tun_.io_stats();
	std::array<epoll_event, 3> evs{};
	bool worked = false;     // the last pass had something to do
	bool after_idle = false; // and it came after an idle spell
	std::optional<Precedence> precedence;
	std::optional<platform::RunQueueStats> run_waits;
	if (precedence_params_ && platform::is_realtime()) {
		run_waits.emplace();
		precedence.emplace(*precedence_params_, true, monotonic_ns(), platform::thread_cpu_ns(),
		                   run_queue_waits(*run_waits));
	}
	stats_.realtime_now.set(precedence ? 1 : 0);
	for (;;) {
		// A vhost RX ring can hold work without its eventfd firing (a full
		// batch left entries behind, or they came in while re-arming).
		const bool sleep = tun_.can_sleep() && (!fq_ || (fq_->empty() && !fq_next_));
		int n = 0;
		// A real-time worker polls as an ordinary thread: spinning ahead of
		// every ordinary thread would keep the CPU from the very process
		// whose answer it waits for. Two system calls per window.
		const bool busy = sleep && worked && busy_poll_ns_;
		const bool wake = !busy && sleep && after_idle && wake_poll_ns_;
		const bool step_down = (busy || wake) && precedence && precedence->elevated();
		if (step_down) platform::set_realtime(false);
		if (busy)
			n = poll_for(busy_poll_ns_, evs, io, io.busy_polls, io.busy_poll_hits);
		else if (wake)
			n = poll_for(wake_poll_ns_, evs, io, io.wake_polls, io.wake_poll_hits);
		if (step_down && platform::set_realtime(true) != 0) {
			stats_.realtime_refused.add();
			precedence.reset();
			stats_.realtime_now.set(0);
		}
		after_idle = false;
		if (n == 0) {
			io.polls.add();
			if (sleep) io.poll_waits.add();
			// Only a sleep can start an idle spell, so only a sleep reads the
			// clock (twice per wake-up, vDSO calls, no system call).
			const int64_t slept_from = sleep && wake_poll_ns_ ? monotonic_ns() : 0;
			n = epoll_wait(epoll_.get(), evs.data(), int(evs.size()), sleep ? -1 : 0);
			after_idle = slept_from && n > 0 && monotonic_ns() - slept_from >= idle_spell_ns_;
		}
		worked = n > 0 || !sleep;
		if (n < 0) {
			if (errno == EINTR) continue;
			return errno; // EBADF/EFAULT/EINVAL: a bug, nothing sane left to do
		}
		bool tun_ready = false, udp_ready = false;
		for (int i = 0; i < n; i++) {
			if (evs[size_t(i)].data.u64 == kStop) return 0;
			if (evs[size_t(i)].data.u64 == kUdp) udp_ready = true;
			if (evs[size_t(i)].data.u64 == kTun) tun_ready = true;
		}
		// Announce the SA table's epoch for this pass, and withdraw it before
		// the next wait: SAs replaced meanwhile are freed only once this worker
		// is out (tunnel/sa.hpp). Also when polling without sleep, so a busy
		// worker never holds reclamation up for longer than one pass.
		table_.enter(worker_);
		if (udp_ready) inbound_batch();
		if (tun_ready) tun_.on_read_wakeup();
		if (tun_ready || !sleep) outbound_batch();
		table_.leave(worker_);
		if (precedence) govern(precedence, *run_waits);
	}
}

void DataPlane::govern(std::optional<Precedence>& p, const platform::RunQueueStats& waits) noexcept {
	const int64_t now = monotonic_ns(); // a vDSO call; the thread's CPU clock only once a window
	if (!p->due(now)) return;
	const Precedence::Change change = p->update(now, platform::thread_cpu_ns(), run_queue_waits(waits));
	stats_.load_pct.set(p->last_load_pct());
	stats_.run_wait_us.set(uint64_t(p->last_wait_ns() / 1000));
	if (change == Precedence::Change::lower) {
		platform::set_realtime(false); // always allowed
		stats_.realtime_lowered.add();
	} else if (change == Precedence::Change::raise) {
		if (platform::set_realtime(true) == 0) {
			stats_.realtime_raised.add();
		} else {
			stats_.realtime_refused.add();
			p.reset(); // an ordinary thread from now on
		}
	}
	stats_.realtime_now.set(p && p->elevated() ? 1 : 0);
}

// --- Outbound: steps 1-4 ---

void DataPlane::outbound_batch() noexcept {
	if (fq_) {
		outbound_queued();
		return;
	}
	seal_and_send(tun_.read_batch(tun_packets_));
	tun_.read_done();
}

void DataPlane::seal_and_send(size_t got) noexcept {
	routes_.clear();
	size_t n = 0;
	for (size_t i = 0; i < got; i++) {
		stats_.tun_rx_packets.add();
		tunnel::OutboundResult res =
		    tunnel::encapsulate(table_, tun_packets_[i].buf, tun_packets_[i].len, worker_, &routes_);
		if (res.verdict != tunnel::Verdict::forward) {
			stats_.drop(res.drop);
			if (res.peer) res.peer->drops[size_t(res.drop)].add();
			continue;
		}
		send_slots_[n++] = {res.datagram, res.to, res.ecn};
	}
	if (n) send_all(n);
}

void DataPlane::outbound_queued() noexcept {
	const int64_t now = monotonic_ns();
	// Step 1 with read-ahead: empty the tun's ring into the flow queue, so
	// that what waits, waits here, where flows are told apart. A pass sends
	// at most one batch; it may read more than that (kReadAhead*), so a
	// ring that fills faster than the worker sends still empties and the
	// queue, not the ring, holds the excess. Bounded, so the socket and the
	// sending get their turn.
	size_t read_bytes = 0;
	for (size_t reads = 0; reads < kReadAheadPackets && read_bytes < kReadAheadBytes; reads++) {
		while (fq_free_.empty() || fq_->bytes() >= fq_max_bytes_) {
			std::optional<FlowQueue::Item> shed = fq_->shed();
			if (!shed) break;
			stats_.tun_rx_packets.add();
			stats_.drop(Drop::queue_overflow);
			fq_free_.push_back(shed->slot);
		}
		if (fq_free_.empty()) break; // the one buffer is the packet kept for the next batch
		const uint32_t slot = fq_free_.back();
		const std::span<uint8_t> buf = fq_buffer(slot);
		const size_t len = tun_.read_raw(buf);
		if (len == 0) break;
		fq_free_.pop_back();
		read_bytes += len;
		fq_->enqueue(slot, flow_hash(tun_.raw_packet(buf, len), fq_key_), uint32_t(len), now);
	}
	// Steps 1-2 from the queue: one batch of wire packets, flow by flow.
	size_t got = 0, sending = 0;
	int64_t oldest = 0;
	while (got < kBatch) {
		std::optional<FlowQueue::Item> it =
		    fq_next_ ? std::exchange(fq_next_, std::nullopt) : fq_->dequeue(now);
		if (!it) break;
		const std::span<uint8_t> buf = fq_buffer(it->slot);
		if (it->signal) {
			it->signal = false; // applied once, also when the packet waits for the next batch
			const std::span<uint8_t> pkt = tun_.raw_packet(buf, it->bytes);
			const uint8_t field = tunnel::ecn::field(pkt);
			if (field == tunnel::ecn::kNotEct) {
				stats_.tun_rx_packets.add();
				stats_.drop(Drop::queue_delay);
				stats_.tx_queue_drops.add();
				fq_free_.push_back(it->slot);
				continue;
			}
			if (field != tunnel::ecn::kCe) {
				// Segmentation copies the header into every wire packet.
				tunnel::ecn::set_field(pkt, tunnel::ecn::kCe);
				stats_.tx_queue_marks.add();
			}
		}
		bool keep = false;
		const size_t n = tun_.emit_raw(buf, it->bytes, got, tun_packets_, keep);
		if (keep) {
			fq_next_ = it;
			break;
		}
		oldest = std::max(oldest, it->sojourn_ns);
		if (n == 0) {
			fq_free_.push_back(it->slot); // unusable, counted by the port
			continue;
		}
		got += n;
		fq_sending_[sending++] = it->slot;
	}
	seal_and_send(got);
	for (size_t i = 0; i < sending; i++)
		fq_free_.push_back(fq_sending_[i]);
	stats_.tx_queue_bytes.set(fq_->bytes());
	stats_.tx_queue_packets.set(fq_->packets());
	stats_.tx_queue_flows.set(fq_->active_flows());
	stats_.tx_queue_sojourn_us.set(uint64_t(oldest) / 1000);
	stats_.tx_queue_engaged.set(fq_->engaged());
	stats_.tx_queue_signalling.set(fq_->signalling());
}

void DataPlane::send_all(size_t n) noexcept {
	std::span<const platform::SendSlot> pending(send_slots_.data(), n);
	int full_waits = 0;
	while (!pending.empty()) {
		BatchResult r = udp_.send_batch(pending);
		stats_.udp_tx_packets.add(r.count);
		pending = pending.subspan(r.count);
		if (pending.empty()) break;
		if ((r.err == EAGAIN || r.err == ENOBUFS) && full_waits++ < 10 &&
		    wait_writable(udp_.socket().fd(), 10))
			continue;
		// This datagram cannot go (unreachable, too big, or the buffer stayed
		// full): count it and carry on with the rest.
		stats_.drop(Drop::udp_send_error);
		pending = pending.subspan(1);
	}
}

// --- Inbound: steps 5-8 ---

void DataPlane::inbound_batch() noexcept {
	std::span<platform::RecvSlot> slots = tun_.recv_slots();
	BatchResult r = udp_.recv_batch(slots);
	if (r.count == 0) return;
	int64_t now = wall_ms();
	// Sojourn times: the kernel stamps arrivals with CLOCK_REALTIME; the
	// limit's own clock is the monotonic one. A datagram leaves the queue
	// when it is processed, not when its batch was read: the batch is a
	// queue too (a backlog of a whole socket buffer comes in one batch and
	// takes milliseconds to get through), so the clock is read again every
	// kClockSlots slots (a few microseconds of work apart; a vDSO call per
	// datagram would cost a few per cent), the monotonic one moved on by
	// what the real one advanced.
	int64_t taken_ns = queue_limit_ ? realtime_ns() : 0;
	int64_t mono_ns = queue_limit_ ? monotonic_ns() : 0;
	if (queue_limit_ && slots[0].rx_ns)
		stats_.queue_sojourn_us.set(uint64_t(std::max<int64_t>(0, taken_ns - slots[0].rx_ns)) / 1000);
	routes_.clear();
	size_t n = 0;
	auto flush = [&] {
		if (n == 0) return;
		const size_t failed = tun_.write_batch({tun_writes_.data(), n});
		stats_.tun_tx_packets.add(n - failed);
		stats_.drops[size_t(Drop::tun_write_error)].add(failed);
		n = 0;
	};
	for (size_t i = 0; i < r.count; i++) {
		platform::RecvSlot& slot = slots[i];
		if (queue_limit_ && slot.rx_ns && i > 0 && i % kClockSlots == 0) {
			const int64_t rt = realtime_ns();
			mono_ns += std::max<int64_t>(0, rt - taken_ns);
			taken_ns = rt;
		}
		if (slot.truncated) {
			stats_.udp_rx_packets.add();
			stats_.drop(Drop::malformed);
			continue;
		}
		// UDP GRO: a train of same-sized datagrams in one buffer, each
		// decapsulated in place where it lies.
		const size_t step = slot.segment ? slot.segment : slot.len;
		if (slot.segment) stats_.udp_gro_buffers.add();
		for (size_t off = 0; off < slot.len || off == 0; off += step) {
			stats_.udp_rx_packets.add();
			const size_t len = std::min(step, slot.len - off);
			uint8_t ecn = slot.ecn;
			bool too_late = false;
			// RFC 8289 signals nothing while the queue holds one packet at
			// most: the last datagram of a batch that emptied the socket
			// (fewer than it could take) waited alone, however long; a
			// slow worker is not a standing queue.
			const bool alone =
			    r.count < slots.size() && i + 1 == r.count && off + len >= slot.len;
			const int64_t sojourn = alone ? 0 : taken_ns - slot.rx_ns;
			if (queue_limit_ && slot.rx_ns && is_esp(slot.buf.subspan(off, len)) &&
			    queue_limit_->on_dequeue(sojourn, mono_ns, len >= kBulkBytes)) {
				if (ecn == tunnel::ecn::kNotEct) {
					too_late = true;
				} else {
					ecn = tunnel::ecn::kCe;
					stats_.queue_marks.add();
				}
			}
			tunnel::InboundResult res;
			if (too_late) {
				// Dropped unopened: the decryption is the work being shed.
				res.verdict = tunnel::Verdict::drop;
				res.drop = Drop::queue_delay;
			} else {
				res = tunnel::decapsulate(table_, slot.buf.subspan(off, len), slot.from, now,
				                          worker_, &routes_, ecn);
			}
			if (res.verdict == tunnel::Verdict::drop) {
				stats_.drop(res.drop);
				if (res.peer) res.peer->drops[size_t(res.drop)].add();
			} else if (res.verdict == tunnel::Verdict::ignore) {
				stats_.ignore(res.ignore);
				if (res.ignore == Ignore::non_esp_marker && ike_inbox_ &&
				    len > tunnel::esp::kNonEspMarkerLen)
					ike_inbox_->push(
					    slot.buf.subspan(off + tunnel::esp::kNonEspMarkerLen,
					                     len - tunnel::esp::kNonEspMarkerLen),
					    slot.from);
			} else {
				if (n == tun_writes_.size())
					flush(); // only with GRO: one datagram per slot fits
				tun_writes_[n++] = {i, res.inner};
			}
			if (step == 0) break;
		}
	}
	flush();
	if (queue_limit_) {
		stats_.queue_engaged.set(queue_limit_->engaged());
		stats_.queue_signalling.set(queue_limit_->dropping() ? 1 : 0);
	}
}

} // namespace esptun::datapath
