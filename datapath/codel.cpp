// Codel (codel.hpp), RFC 8289 section 5's state machine applied per datagram.
#include "datapath/codel.hpp"

#include <cmath>

namespace esptun::datapath {

bool Codel::above_for_interval(int64_t sojourn_ns, int64_t now_ns) noexcept {
	if (sojourn_ns < p_.target_ns) {
		first_above_ = 0;
		return false;
	}
	if (first_above_ == 0) {
		// Zero means "below target"; a clock that reads 0 here is a test's.
		first_above_ = now_ns + p_.interval_ns;
		if (first_above_ == 0) first_above_ = 1;
		return false;
	}
	return now_ns >= first_above_;
}

int64_t Codel::control_law(int64_t t) const noexcept {
	return t + int64_t(double(p_.interval_ns) / std::sqrt(double(count_ ? count_ : 1)));
}

bool Codel::on_dequeue(int64_t sojourn_ns, int64_t now_ns, bool bulk) noexcept {
	if (sojourn_ns < 0) sojourn_ns = 0;
	const bool above = above_for_interval(sojourn_ns, now_ns);
	bool due = false;
	if (dropping_) {
		if (!above) {
			// Back under target: leave the signalling state, forget debts.
			dropping_ = false;
			owed_ = 0;
		} else if (now_ns >= drop_next_) {
			count_++;
			drop_next_ = control_law(drop_next_);
			due = true;
		}
	} else if (above) {
		dropping_ = true;
		engaged_++;
		// Re-entering soon after the last spell: resume near its rate
		// instead of starting over at one signal per interval.
		const uint32_t delta = count_ - last_count_;
		count_ = (delta > 1 && now_ns - drop_next_ < 16 * p_.interval_ns) ? delta : 1;
		drop_next_ = control_law(now_ns);
		last_count_ = count_;
		due = true;
	}
	if (due && owed_ < kMaxOwed) owed_++;
	if (bulk && owed_ > 0) {
		owed_--;
		return true;
	}
	return false;
}

} // namespace esptun::datapath
