// The gateway's [redirect] as the IKE engine takes it (ike::RedirectPolicy),
// and the one line the log and a reload say it in (ike_service.hpp).
#include "service/ike_service.hpp"

#include "conf/redirect.hpp"

namespace esptun::service {

ike::RedirectPolicy redirect_policy(const conf::Config& config) {
	const conf::RedirectConfig& rc = config.redirect;
	ike::RedirectPolicy p;
	p.when = conf::engine_when(rc.when);
	for (const std::string& t : rc.to)
		if (std::optional<ike::RedirectTarget> target = ike::parse_redirect_target(t))
			p.to.push_back(std::move(*target)); // the loader took each one
	p.capacity = rc.capacity;
	p.share_percent = rc.share;
	p.move_rate = rc.move_rate;
	return p;
}

std::string redirect_text(const ike::RedirectPolicy& policy) {
	using When = ike::RedirectPolicy::When;
	std::string out = "redirect: when " + std::string(ike::redirect_when_name(policy.when));
	if (policy.when == When::never) return out + " (every client is served here)";
	for (size_t i = 0; i < policy.to.size(); i++)
		out += (i ? ", " : ", to ") + ike::redirect_target_text(policy.to[i]);
	switch (policy.when) {
	case When::capacity:
		return out + "; new clients go while " + std::to_string(policy.capacity) +
		       " peers or more hold an IKE SA";
	case When::share:
		return out + "; " + std::to_string(policy.share_percent) +
		       "% of new clients go (none that another gateway sent here)";
	case When::all:
		return out + "; established clients move at " + std::to_string(policy.move_rate) + "/s";
	case When::never:
		break;
	}
	return out;
}

} // namespace esptun::service
