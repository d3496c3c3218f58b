// Precedence: see precedence.hpp.
#include "datapath/precedence.hpp"

namespace esptun::datapath {

Precedence::Change Precedence::update(int64_t now_ns, int64_t cpu_ns,
                                      std::optional<RunWaits> waits) noexcept {
	const int64_t wall = now_ns - window_start_;
	const int64_t used = cpu_ns - cpu_start_;
	bool contended = true; // unknown counts as contended: the load alone decides
	last_wait_ns_ = 0;
	if (waits && waits_start_) {
		const int64_t runs = waits->runs - waits_start_->runs;
		const int64_t waited = waits->waited_ns - waits_start_->waited_ns;
		last_wait_ns_ = runs > 0 && waited > 0 ? waited / runs : 0;
		contended = last_wait_ns_ >= p_.contended_wait_ns;
	}
	window_start_ = now_ns;
	cpu_start_ = cpu_ns;
	waits_start_ = waits;
	if (wall <= 0) return Change::none; // a clock that did not move judges nothing
	const int64_t pct = used <= 0 ? 0 : used >= wall ? 100 : used * 100 / wall;
	last_pct_ = unsigned(pct);
	saturated_run_ = pct >= int64_t(p_.saturated_pct) ? saturated_run_ + 1 : 0;
	if (elevated_ && (saturated_run_ >= p_.saturated_windows || pct < int64_t(p_.idle_below_pct))) {
		elevated_ = false;
		return Change::lower;
	}
	if (!elevated_ && contended && pct >= int64_t(p_.busy_from_pct) && pct < int64_t(p_.room_below_pct)) {
		elevated_ = true;
		return Change::raise;
	}
	return Change::none;
}

} // namespace esptun::datapath
