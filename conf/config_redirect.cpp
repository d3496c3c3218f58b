// The config loader, [redirect]: which IKE clients a gateway sends to other
// gateways instead of serving them (IKE Redirect, RFC 5685), and where (see
// config.hpp, RedirectConfig; the IKE service hands it to the engine).
#include "conf/loader.hpp"
#include "conf/redirect.hpp"

#include <algorithm>

namespace esptun::conf {

namespace {
constexpr RedirectWhen kRedirectWhens[] = {RedirectWhen::never, RedirectWhen::capacity, RedirectWhen::share,
                                           RedirectWhen::all};
} // namespace

// The same values in the same order as the engine's (checked here, where
// both are seen), so the one spelling is the engine's.
static_assert(int(RedirectWhen::never) == int(ike::RedirectPolicy::When::never) &&
              int(RedirectWhen::capacity) == int(ike::RedirectPolicy::When::capacity) &&
              int(RedirectWhen::share) == int(ike::RedirectPolicy::When::share) &&
              int(RedirectWhen::all) == int(ike::RedirectPolicy::When::all));

ike::RedirectPolicy::When engine_when(RedirectWhen w) noexcept {
	return static_cast<ike::RedirectPolicy::When>(w);
}

std::string_view redirect_when_name(RedirectWhen w) noexcept {
	return ike::redirect_when_name(engine_when(w));
}

namespace detail {

namespace {

constexpr std::string_view kRedirectKeys[] = {"to", "when", "capacity", "share", "move_rate"};

char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

/// Two entries of `to` name one gateway: DNS names ignore ASCII case
/// (RFC 4343); addresses are compared in their one written form.
bool same_target(std::string_view a, std::string_view b) {
	return std::equal(a.begin(), a.end(), b.begin(), b.end(),
	                  [](char x, char y) { return lower(x) == lower(y); });
}

/// A "DNS name" whose last label is all digits is a mistyped IPv4 address
/// ("192.0.2.300"): no top-level domain is numeric (RFC 3696 section 2).
bool numeric_last_label(std::string_view name) {
	if (name.ends_with('.')) name.remove_suffix(1);
	const std::string_view last = name.substr(name.rfind('.') + 1);
	return !last.empty() &&
	       std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

void Loader::parse_redirect(const toml::table& t, int line) {
	constexpr std::string_view where = "[redirect]";
	if (role_ != Role::gateway)
		fail(line, "[redirect] is for a gateway (it sends clients to other gateways); remove it "
		           "from the client config");
	if (std::none_of(config_.peers.begin(), config_.peers.end(),
	                 [](const PeerConfig& p) { return p.ike.has_value(); }))
		fail(line, "[redirect] sends IKE clients to other gateways, but no peer here is keyed by "
		           "IKEv2, so there is nobody to redirect; remove [redirect], or give a peer psk, "
		           "cert_file or auth");
	check_keys(t, kRedirectKeys, where);
	RedirectConfig& rc = config_.redirect;

	int when_line = line;
	if (auto v = get_string(t, "when", where)) {
		when_line = v->line;
		const auto* w =
		    std::find_if(std::begin(kRedirectWhens), std::end(kRedirectWhens),
		                 [&](RedirectWhen x) { return redirect_when_name(x) == v->value; });
		if (w == std::end(kRedirectWhens))
			fail(v->line,
			     "when " + q(v->value) +
			         " is unknown; use \"never\" (the default), \"capacity\" (from a number "
			         "of clients on), \"share\" (a percentage of new clients) or \"all\"");
		rc.when = *w;
	}

	int to_line = 0;
	typed(t, "to", where, toml::node_type::array,
	      "write a list in brackets, e.g. to = [\"192.0.2.2\", \"gw2.example.net\"]");
	for (const auto& a : get_strings(t, "to", where, &to_line)) {
		const std::optional<ike::RedirectTarget> target = ike::parse_redirect_target(a.value);
		if (!target ||
		    (target->type == ike::RedirectTarget::Type::fqdn && numeric_last_label(a.value)))
			fail(a.line,
			     "to entry " + q(a.value) +
			         " is neither an IP address nor a DNS name; write e.g. \"192.0.2.2\", "
			         "\"2001:db8::2\" or \"gw2.example.net\" (no port: a client keeps the one "
			         "it has)");
		if (target->type != ike::RedirectTarget::Type::fqdn &&
		    std::all_of(target->data.begin(), target->data.end(), [](uint8_t b) { return b == 0; }))
			fail(a.line, "to entry " + q(a.value) +
			                 " is the unspecified address; name another gateway's real address");
		std::string text = ike::redirect_target_text(*target);
		for (const std::string& had : rc.to)
			if (same_target(had, text))
				fail(a.line, "to entry " + q(a.value) + " names " + q(had) +
				                 " a second time; list each gateway once");
		if (rc.to.size() == kMaxRedirectTargets)
			fail(a.line, "to lists more than " + std::to_string(kMaxRedirectTargets) +
			                 " gateways; name at most that many (a DNS name may stand for more)");
		rc.to.push_back(std::move(text));
	}

	if (auto v = get_int(t, "capacity", where)) {
		if (v->value < 1 || v->value > kMaxRedirectCapacity)
			fail(v->line,
			     "capacity " + std::to_string(v->value) + " is out of range; use 1 up to " +
			         std::to_string(kMaxRedirectCapacity) + " (peers with an IKE SA here)");
		rc.capacity = static_cast<uint32_t>(v->value);
	}
	if (auto v = get_int(t, "share", where)) {
		if (v->value < 1 || v->value > 100)
			fail(v->line, "share " + std::to_string(v->value) +
			                  " is out of range; use 1 up to 100 (percent of new clients)");
		rc.share = static_cast<uint32_t>(v->value);
	}
	if (auto v = get_int(t, "move_rate", where)) {
		if (v->value < 1 || v->value > kMaxRedirectMoveRate)
			fail(v->line, "move_rate " + std::to_string(v->value) +
			                  " is out of range; use 1 up to " +
			                  std::to_string(kMaxRedirectMoveRate) +
			                  " established clients a second (default " +
			                  std::to_string(kDefaultRedirectMoveRate) + ")");
		rc.move_rate = static_cast<uint32_t>(v->value);
	}

	const std::string when = "when = \"" + std::string(redirect_when_name(rc.when)) + "\"";
	if (rc.when == RedirectWhen::capacity && rc.capacity == 0)
		fail(when_line, when +
		                    " needs capacity, the number of peers with an IKE SA from which on new "
		                    "clients are redirected; add e.g. capacity = 5000");
	if (rc.when == RedirectWhen::share && rc.share == 0)
		fail(when_line, when + " needs share, the percentage of new clients to redirect; add e.g. "
		                       "share = 25");
	if (rc.when != RedirectWhen::never && rc.to.empty())
		fail(to_line > 0 ? to_line : when_line,
		     when + " needs the gateways to send clients to; add e.g. to = [\"192.0.2.2\"] "
		            "(addresses or DNS names)");
}

} // namespace detail
} // namespace esptun::conf
