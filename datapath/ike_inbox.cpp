// IkeInbox: see ike_inbox.hpp.
#include "datapath/ike_inbox.hpp"

#include "base/bytes.hpp"

#include <utility>

namespace esptun::datapath {

IkeInbox::IkeInbox() : efd_(platform::make_eventfd()) {}

size_t IkeInbox::Lane::held_by(const IpAddress& a) const noexcept {
	size_t n = 0;
	for (size_t i = 0; i < count; i++)
		if (slots[(head + i) % slots.size()].from.addr == a) n++;
	return n;
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
		if (lane.count == lane.slots.size()) {
			(is_known ? dropped_known_ : dropped_stranger_).add();
			return false;
		}
		if (lane.held_by(from.addr) >= (is_known ? kPerSourceKnown : kPerSourceStranger)) {
			dropped_source_.add();
			return false;
		}
		const size_t at = (lane.head + lane.count) % lane.slots.size();
		lane.slots[at] = Slot{msg.size(), from};
		std::copy(msg.begin(), msg.end(), lane.data(at));
		lane.count++;
	}
	platform::eventfd_signal(efd_.get());
	return true;
}

} // namespace esptun::datapath
