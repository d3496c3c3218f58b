// The IKEv2 engine, part 7: IKE Redirect (RFC 5685), both sides.
//
// A gateway with a policy (engine.hpp, RedirectPolicy) answers a new
// client's IKE_SA_INIT with N(REDIRECT) naming another gateway and the
// client's own nonce, keeping no state (like a cookie, RFC 7296 section
// 2.6); under When::all it also sends established clients away with an
// INFORMATIONAL request carrying N(REDIRECT). Only clients that announced
// REDIRECT_SUPPORTED are ever redirected (section 3).
//
// As initiator we always announce REDIRECT_SUPPORTED and follow a redirect
// to an address: in IKE_SA_INIT only when its nonce data is our Ni (the
// answer is unauthenticated, and the nonce shows it answers our request);
// by INFORMATIONAL after the old gateway authenticated it, make-before-
// break (the old IKE SA goes once the new one is up). A DNS name is not
// followed: the engine does no I/O, and esptun's endpoints are addresses.
#include "ike/engine_internal.hpp"

#include <cmath>

namespace esptun::ike {

namespace {

/// A DNS name as RFC 5685 carries one: labels of letters, digits and '-',
/// joined by dots, 1-255 bytes (what arrives from a peer is held to it
/// too, so that no other byte reaches a log line).
bool valid_dns_name(std::string_view text) {
	if (text.empty() || text.size() > 255 || text.front() == '.' || text.front() == '-' ||
	    text.find("..") != std::string_view::npos)
		return false;
	return std::all_of(text.begin(), text.end(), [](char c) {
		return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		       c == '-' || c == '.';
	});
}

} // namespace

std::optional<RedirectTarget> parse_redirect_target(std::string_view text) {
	RedirectTarget t;
	if (std::optional<IpAddress> a = parse_ip(text)) {
		t.type = a->family == Family::v4 ? RedirectTarget::Type::ipv4 : RedirectTarget::Type::ipv6;
		t.data.assign(a->bytes.begin(), a->bytes.begin() + long(a->size()));
		return t;
	}
	if (!valid_dns_name(text)) return std::nullopt;
	t.type = RedirectTarget::Type::fqdn;
	t.data.assign(text.begin(), text.end());
	return t;
}

std::string redirect_target_text(const RedirectTarget& t) {
	if (t.type == RedirectTarget::Type::fqdn) return std::string(t.data.begin(), t.data.end());
	IpAddress a;
	a.family = t.type == RedirectTarget::Type::ipv4 ? Family::v4 : Family::v6;
	std::copy_n(t.data.begin(), std::min(t.data.size(), a.bytes.size()), a.bytes.begin());
	return to_string(a);
}

std::vector<uint8_t> redirect_data(const RedirectTarget& t, std::span<const uint8_t> nonce) {
	std::vector<uint8_t> out(2 + t.data.size() + nonce.size());
	out[0] = uint8_t(t.type);
	out[1] = uint8_t(t.data.size());
	std::copy(t.data.begin(), t.data.end(), out.begin() + 2);
	std::copy(nonce.begin(), nonce.end(), out.begin() + 2 + long(t.data.size()));
	return out;
}

std::optional<std::pair<RedirectTarget, std::vector<uint8_t>>>
parse_redirect_data(std::span<const uint8_t> data) {
	if (data.size() < 2) return std::nullopt;
	const uint8_t type = data[0];
	const size_t len = data[1];
	if (data.size() < 2 + len) return std::nullopt;
	RedirectTarget t;
	switch (type) {
	case uint8_t(RedirectTarget::Type::ipv4):
		if (len != 4) return std::nullopt;
		break;
	case uint8_t(RedirectTarget::Type::ipv6):
		if (len != 16) return std::nullopt;
		break;
	case uint8_t(RedirectTarget::Type::fqdn):
		if (!valid_dns_name(std::string_view(reinterpret_cast<const char*>(data.data() + 2), len)))
			return std::nullopt;
		break;
	default:
		return std::nullopt;
	}
	t.type = RedirectTarget::Type(type);
	t.data.assign(data.begin() + 2, data.begin() + long(2 + len));
	return std::pair{std::move(t), std::vector<uint8_t>(data.begin() + long(2 + len), data.end())};
}

std::string_view redirect_when_name(RedirectPolicy::When w) noexcept {
	switch (w) {
	case RedirectPolicy::When::capacity:
		return "capacity";
	case RedirectPolicy::When::share:
		return "share";
	case RedirectPolicy::When::all:
		return "all";
	case RedirectPolicy::When::never:
		break;
	}
	return "never";
}

void Engine::set_redirect(RedirectPolicy policy) {
	redirect_ = std::move(policy);
	redirect_next_ = 0;
	// A second's worth may go at once, then move_rate a second.
	move_tokens_ = std::max(1u, redirect_.move_rate);
	move_tokens_at_ = {};
}

/**
 * redirect_choice() - whether a new client goes elsewhere, and where
 * @from:           where its IKE_SA_INIT came from
 * @spi_i:          its SPI
 * @was_redirected: it carried REDIRECTED_FROM (another gateway sent it here)
 *
 * A keyed hash of the SPI and address decides When::share and picks the
 * target, so the retransmissions of one request get one answer and both
 * spread evenly over many clients. Under When::share a client another
 * gateway sent here stays (two gateways that each shed a share must not
 * bounce it between them).
 * Return: the target, or nullptr to serve the client.
 */
const RedirectTarget* Engine::redirect_choice(const Endpoint& from, uint64_t spi_i, bool was_redirected) {
	if (redirect_.to.empty() || redirect_.when == RedirectPolicy::When::never) return nullptr;
	if (redirect_.when == RedirectPolicy::When::capacity && peer_sas_.size() < redirect_.capacity)
		return nullptr;
	if (redirect_.when == RedirectPolicy::When::share && was_redirected) return nullptr;
	// Keyed by the cookie secret, so an initiator cannot pick an SPI that
	// stays; the same request (a retransmission) gets the same answer.
	uint8_t b[8];
	store_be64(b, spi_i);
	std::vector<uint8_t> data(b, b + 8);
	data.insert(data.end(), from.addr.bytes.begin(), from.addr.bytes.begin() + long(from.addr.size()));
	const std::vector<uint8_t> mac =
	    declassify(prf(PrfId::hmac_sha256, cookie_secrets_[0].key, data)); // a choice, not a secret
	if (redirect_.when == RedirectPolicy::When::share &&
	    load_be16(mac.data()) % 100 >= redirect_.share_percent)
		return nullptr;
	return &redirect_.to[load_be32(mac.data() + 2) % redirect_.to.size()];
}

/**
 * follow_redirect() - the gateway of @sa sends us elsewhere
 * @sa:      our IKE SA with it: in init_sent (@in_init) or established
 * @n:       the REDIRECT notify
 * @in_init: it answered our IKE_SA_INIT (unauthenticated; its nonce data
 *           must be our Ni), else it came in an authenticated INFORMATIONAL
 * @now:     the time
 *
 * A redirect we cannot use (malformed, a name, a nonce not ours, a loop) is
 * counted and ignored: in IKE_SA_INIT we keep waiting for a real answer, as
 * for any unauthenticated error (RFC 7296 section 2.21.1), and an
 * established IKE SA simply stays.
 */
void Engine::follow_redirect(IkeSa& sa, const NotifyPayload& n, bool in_init, Clock::time_point now) {
	if (!sa.peer) return;
	const size_t peer = *sa.peer;
	const PeerPolicy& pol = peers_[peer];
	auto ignore = [&](const std::string& why) {
		counters_.redirects_ignored++;
		log_limited("peer " + pol.name + ": redirect from " + endpoint_text(sa.remote) +
		            " not followed: " + why);
	};
	const auto parsed = parse_redirect_data(n.data);
	if (!parsed) {
		counters_.malformed++;
		ignore("the REDIRECT notify is malformed");
		return;
	}
	const auto& [target, nonce] = *parsed;
	if (in_init && !ct_equal(nonce, sa.ni)) {
		// Section 4: the nonce data proves the answer is to our request.
		ignore("its nonce data is not our nonce");
		return;
	}
	if (!pol.initiate || !pol.endpoint) {
		ignore("we do not connect to this peer ourselves");
		return;
	}
	if (!pol.follow_redirects) {
		ignore("redirects are not followed for this peer (route_all keeps only the configured "
		       "gateway outside the tunnel)");
		return;
	}
	if (target.type == RedirectTarget::Type::fqdn) {
		ignore("it names " + redirect_target_text(target) +
		       ", a DNS name (esptun follows redirects to addresses)");
		return;
	}
	Endpoint to;
	to.addr.family = target.type == RedirectTarget::Type::ipv4 ? Family::v4 : Family::v6;
	std::copy(target.data.begin(), target.data.end(), to.addr.bytes.begin());
	// The gateways of one service listen alike: the port stays ours.
	to.port = pol.endpoint->port;
	if (to == sa.remote) {
		ignore("it names the gateway itself");
		return;
	}
	std::vector<Clock::time_point>& times = redirected_at_[peer];
	std::erase_if(times, [&](Clock::time_point t) { return now - t >= kRedirectLoopPeriod; });
	if (times.size() >= kMaxRedirects) {
		ignore("followed " + std::to_string(times.size()) + " redirects in the last " +
		       std::to_string(kRedirectLoopPeriod.count()) + " s (a loop between gateways?)");
		return;
	}
	if (!in_init) {
		// One move at a time: a second REDIRECT while the first is under way waits.
		const auto list = peer_sas_.find(peer);
		if (list != peer_sas_.end())
			for (uint64_t spi : list->second)
				if (const IkeSa* other = find(spi);
				    other && other != &sa &&
				    (other->state == IkeSa::State::init_sent ||
				     other->state == IkeSa::State::auth_sent)) {
					ignore("a move to another gateway is already under way");
					return;
				}
	}
	times.push_back(now);
	counters_.redirects_followed++;
	const Endpoint from = sa.remote;
	host_.log("peer " + pol.name + ": " + endpoint_text(from) + " redirects us to " + endpoint_text(to) +
	          (in_init ? " (in IKE_SA_INIT)" : " (the IKE SA with it stays until the new one is up)"));
	if (in_init) close(sa, "redirected to " + endpoint_text(to), false, now);
	initiate(peer, now, to, from);
}

/**
 * move_established() - When::all: send the established client of @sa away
 * @sa:  established, no request of ours out
 * @now: the time
 *
 * Paced by move_rate (a token bucket topped up here); one that got its
 * REDIRECT and has not deleted the IKE SA by redirect_deadline is deleted.
 * Return: whether a request went out (tick_sa() does one thing per SA).
 */
bool Engine::move_established(IkeSa& sa, Clock::time_point now) {
	if (sa.redirect_deadline != Clock::time_point{}) {
		if (now >= sa.redirect_deadline)
			close(sa, "redirected elsewhere, and the client did not delete it", false, now, true);
		return true;
	}
	// A client: it connects to us (whoever initiated the current IKE SA,
	// which a rekey of ours turns around).
	if (redirect_.when != RedirectPolicy::When::all || redirect_.to.empty() || !sa.redirect_supported ||
	    !sa.peer || peers_[*sa.peer].initiate)
		return false;
	if (move_tokens_at_ == Clock::time_point{} || now < move_tokens_at_) move_tokens_at_ = now;
	const double rate = std::max(1u, redirect_.move_rate);
	move_tokens_ = std::min(
	    rate, move_tokens_ + std::chrono::duration<double>(now - move_tokens_at_).count() * rate);
	move_tokens_at_ = now;
	if (move_tokens_ < 1) return false;
	move_tokens_ -= 1;
	const RedirectTarget& t = redirect_.to[redirect_next_ % redirect_.to.size()];
	redirect_next_ = (redirect_next_ + 1) % redirect_.to.size();
	const Payload p[] = {make_notify(notify::redirect, redirect_data(t))};
	send_request(sa, Exchange::informational, p, now);
	sa.pending->kind = RequestKind::redirect;
	sa.redirect_deadline = now + kRedirectGrace;
	counters_.redirects_established++;
	// Up to move_rate a second: a debug line each, rate-limited like the others.
	if (host_.debug_enabled() && debug_allowed(true))
		host_.log_at(LogLevel::debug, peer_label(sa) + ": redirected to " + redirect_target_text(t));
	return true;
}

} // namespace esptun::ike
