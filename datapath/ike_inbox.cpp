// IkeInbox: see ike_inbox.hpp.
#include "datapath/ike_inbox.hpp"

#include "base/bytes.hpp"

#include <utility>

namespace esptun::datapath {

IkeInbox::IkeInbox() : efd_(platform::make_eventfd()) {}

IkeInbox::SourceCounts::SourceCounts(size_t max_keys) {
	size_t n = 1;
	while (n < 2 * max_keys)
		n <<= 1;
	t_.resize(n);
	mask_ = n - 1;
}

size_t IkeInbox::SourceCounts::home(const IpAddress& a) const noexcept {
	// FNV-1a over the address: the table needs spread, not secrecy (a
	// source can only ever hold its own bucket's chain kPerSource* deep).
	uint64_t h = 0xcbf29ce484222325ull ^ uint64_t(a.family);
	for (size_t i = 0; i < a.size(); i++)
		h = (h ^ a.bytes[i]) * 0x100000001b3ull;
	return size_t(h ^ (h >> 29)) & mask_;
}

size_t IkeInbox::SourceCounts::find(const IpAddress& a) const noexcept {
	size_t i = home(a);
	while (t_[i].count != 0 && !(t_[i].addr == a))
		i = (i + 1) & mask_;
	return i;
}

size_t IkeInbox::SourceCounts::get(const IpAddress& a) const noexcept { return t_[find(a)].count; }

void IkeInbox::SourceCounts::add(const IpAddress& a) noexcept {
	Bucket& b = t_[find(a)];
	if (b.count == 0) b.addr = a;
	b.count++;
}

void IkeInbox::SourceCounts::remove(const IpAddress& a) noexcept {
	size_t i = find(a);
	if (t_[i].count == 0) return; // not expected: every queued message was added
	if (--t_[i].count != 0) return;
	// Backward-shift deletion: move up every later member of the probe run
	// whose home is not between the hole and it, so lookups never stop at
	// the hole too early.
	for (size_t j = (i + 1) & mask_; t_[j].count != 0; j = (j + 1) & mask_) {
		const size_t k = home(t_[j].addr);
		const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays) continue;
		t_[i] = t_[j];
		t_[j].count = 0;
		i = j;
	}
}

IkeInbox::Lane::Lane(size_t max_entries, size_t max_bytes)
    : entries(max_entries), bytes(new uint8_t[max_bytes]), cap(max_bytes), sources(max_entries) {}

bool IkeInbox::Lane::place(size_t len, uint32_t& off) noexcept {
	if (count == entries.size()) return false;
	if (count == 0) rd = wr = 0, wrapped = false;
	if (!wrapped) {
		// In use: [rd, wr). Room at the end, else at the start before rd.
		if (len <= cap - wr) {
			off = uint32_t(wr);
			wr += len;
			return true;
		}
		if (len > rd) return false;
		wrapped = true;
		off = 0;
		wr = len;
		return true;
	}
	// In use: from rd to where the bytes at the end stop, and [0, wr). Room: [wr, rd).
	if (len > rd - wr) return false;
	off = uint32_t(wr);
	wr += len;
	return true;
}

void IkeInbox::Lane::pop() noexcept {
	sources.remove(entries[head].from.addr);
	head = (head + 1) % entries.size();
	if (--count == 0) {
		rd = wr = 0;
		wrapped = false;
		return;
	}
	const size_t next = entries[head].off;
	if (wrapped && next < rd) wrapped = false; // the bytes at the end are used up
	rd = next;
}

bool IkeInbox::known(uint64_t spi) const noexcept {
	// Zero is "not chosen yet" (the responder SPI of an IKE_SA_INIT request,
	// RFC 7296 section 3.1), never an SPI of ours.
	return spi != 0 && std::binary_search(spis_.begin(), spis_.end(), spi);
}

void IkeInbox::publish_spis(std::vector<uint64_t> spis) {
	if (!std::is_sorted(spis.begin(), spis.end())) std::sort(spis.begin(), spis.end());
	{
		std::lock_guard lock(mu_);
		spis_.swap(spis);
	}
	// The old set is freed here, after the lock.
}

bool IkeInbox::push(std::span<const uint8_t> msg, const Endpoint& from) noexcept {
	if (msg.size() > kMaxMessage) {
		too_big_.add();
		return false;
	}
	if (msg.size() < kMinMessage) { // no IKE header: the engine would drop it anyway
		too_short_.add();
		return false;
	}
	// Either SPI may be ours: the responder's when the peer initiated the
	// IKE SA, the initiator's when we did (RFC 7296 section 3.1).
	const uint64_t spi_i = load_be64(msg.data()), spi_r = load_be64(msg.data() + 8);
	{
		std::lock_guard lock(mu_);
		const bool is_known = known(spi_i) || known(spi_r);
		Lane& lane = is_known ? known_ : stranger_;
		if (lane.sources.get(from.addr) >= (is_known ? kPerSourceKnown : kPerSourceStranger)) {
			dropped_source_.add();
			return false;
		}
		uint32_t off = 0;
		if (!lane.place(msg.size(), off)) {
			(is_known ? dropped_known_ : dropped_stranger_).add();
			return false;
		}
		lane.entries[(lane.head + lane.count) % lane.entries.size()] =
		    Lane::Entry{off, uint32_t(msg.size()), from};
		std::copy(msg.begin(), msg.end(), lane.bytes.get() + off);
		lane.sources.add(from.addr);
		lane.count++;
	}
	platform::eventfd_signal(efd_.get());
	return true;
}

} // namespace esptun::datapath
