// A token bucket for log lines that someone else's packets cause: the IKE
// engine's debug lines, one per message, must stay bounded however many
// messages an attacker sends.
#pragma once

#include <chrono>
#include <cstdint>

namespace esptun::ike {

/**
 * LogBudget - @burst lines at once, then one more per @refill; the lines
 * held back meanwhile are counted, and report_due() hands the count out at
 * most once per @report_every, for a single "N lines held back" line.
 * So a flood of any size costs at most burst + (time / refill) lines, plus
 * one report per report_every.
 */
class LogBudget {
public:
	using Clock = std::chrono::steady_clock;

	LogBudget(unsigned burst, Clock::duration refill, Clock::duration report_every) noexcept
	    : burst_(burst), tokens_(burst), refill_(refill), report_every_(report_every) {}

	/// take() - whether one more line may be written at @now; if not, it is counted as held back
	bool take(Clock::time_point now) noexcept {
		top_up(now);
		if (tokens_ > 0) {
			tokens_--;
			return true;
		}
		if (held_++ == 0) held_since_ = now;
		return false;
	}

	/**
	 * report_due() - the lines held back since the last report, once
	 * @report_every has passed since the first of them; 0 otherwise (then
	 * nothing is to be written). A nonzero answer starts a new count.
	 */
	uint64_t report_due(Clock::time_point now) noexcept {
		if (held_ == 0 || now - held_since_ < report_every_) return 0;
		const uint64_t n = held_;
		held_ = 0;
		return n;
	}

	/// held_back() - lines held back and not yet reported
	uint64_t held_back() const noexcept { return held_; }

private:
	void top_up(Clock::time_point now) noexcept {
		if (!started_) {
			started_ = true;
			last_ = now;
			return;
		}
		if (now <= last_ || refill_.count() <= 0) return;
		const auto earned = uint64_t((now - last_) / refill_);
		if (earned == 0) return;
		if (earned >= uint64_t(burst_ - tokens_)) {
			tokens_ = burst_;
			last_ = now; // a full bucket saves nothing up
		} else {
			tokens_ += unsigned(earned);
			last_ += refill_ * int64_t(earned);
		}
	}

	unsigned burst_, tokens_;
	Clock::duration refill_, report_every_;
	bool started_ = false;
	Clock::time_point last_{};
	uint64_t held_ = 0;
	Clock::time_point held_since_{};
};

} // namespace esptun::ike
