// IkeInbox: see ike_inbox.hpp.
#include "datapath/ike_inbox.hpp"

#include <algorithm>

namespace esptun::datapath {

IkeInbox::IkeInbox() : slots_(kSlots), efd_(platform::make_eventfd()) {}

bool IkeInbox::push(std::span<const uint8_t> msg, const Endpoint& from) noexcept {
	if (msg.size() > kMaxMessage) {
		too_big_.add();
		return false;
	}
	{
		std::lock_guard lock(mu_);
		if (count_ == kSlots) {
			dropped_.add();
			return false;
		}
		Slot& s = slots_[(head_ + count_) % kSlots];
		s.len = msg.size();
		s.from = from;
		std::copy(msg.begin(), msg.end(), s.data.begin());
		count_++;
	}
	platform::eventfd_signal(efd_.get());
	return true;
}

} // namespace esptun::datapath
