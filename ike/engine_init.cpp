// The IKEv2 engine, part 2: IKE_SA_INIT from both sides (see engine.hpp),
// with what keeps unauthenticated initiators from crowding out the others:
// cookies (RFC 7296 section 2.6), half-open bounds per source and in all,
// and the cost of the key exchange group the initiator picks.
#include "ike/engine_internal.hpp"

namespace esptun::ike {

// ---- IKE_SA_INIT -----------------------------------------------------------

namespace {

/**
 * half_open_source() - the source a half-open SA is counted against
 * @a: the initiator's address
 *
 * An IPv4 address, or the /64 of an IPv6 one: a subscriber usually holds a
 * whole /64, and per address it would have 2^64 shares of the table.
 */
std::array<uint8_t, 17> half_open_source(const IpAddress& a) {
	std::array<uint8_t, 17> k{};
	const IpAddress m = a.family == Family::v6 ? a.masked(64) : a;
	k[0] = uint8_t(a.family);
	std::copy(m.bytes.begin(), m.bytes.end(), k.begin() + 1);
	return k;
}

/**
 * half_open_cost() - what our side of a key exchange in @g costs, in units
 *
 * The initiator picks the group and the responder pays for it: a key pair
 * and the shared secret took 0.25 ms for X25519, 0.27-0.35 ms for ECP-256
 * and 1.8-1.9 ms for MODP-2048 on the reference machine. Counting a
 * MODP-2048 SA as Engine::kModpCost units makes the per-source and global
 * bounds bounds on CPU rather than on SAs: an initiator that insists on
 * MODP-2048 gets an eighth as many half-open SAs. ECP-384 and MODP-3072
 * cost 2.7 times MODP-2048 (`openssl speed ecdhp384 ffdh3072`: 0.75-0.77
 * ms an operation against 0.28) and MODP-4096 5 times; they count twice and
 * three times kModpCost, less than they cost, so that one source still fits
 * one of them under kHalfOpenPerSource. MODP-1024 is cheap but weak and
 * counts as MODP-2048. A group we do not know is assumed dear (it is
 * refused later anyway).
 */
size_t half_open_cost(uint16_t group) {
	switch (DhGroup(group)) {
	case DhGroup::curve25519:
	case DhGroup::ecp256:
		return 1;
	case DhGroup::ecp384:
	case DhGroup::modp3072:
		return 2 * Engine::kModpCost;
	case DhGroup::modp4096:
		return 3 * Engine::kModpCost;
	case DhGroup::modp1024:
	case DhGroup::modp2048:
		break;
	}
	return Engine::kModpCost;
}

/**
 * accept_hint() - what would accept an offer that has nothing in common
 * with any peer's ike_proposals, for the end of the refusal's log line
 * @offered: the initiator's SA payload
 *
 * IKE_SA_INIT names no peer yet, so this names what holds for any: the
 * suite of the offer esptun can run and the settings that would accept it.
 * A weak one (SHA-1, MODP-1024: the defaults of Windows' built-in client)
 * needs allow_weak = true; the client can usually be set to stronger ones.
 * Empty when esptun runs nothing offered (3DES only, say).
 */
std::string accept_hint(const SaPayload& offered) {
	const std::optional<IkeSuite> s = implemented_ike_suite(offered);
	if (!s) return "";
	const std::string name = ike_suite_name(*s);
	if (!weak_suite(*s)) return "; to accept it, add " + name + " to the peer's ike_proposals";
	return "; " + name + " would be accepted from a peer with allow_weak = true and " + name +
	       " in its ike_proposals (RFC 8247 advises against it), or set the client to stronger "
	       "proposals (Windows: Set-VpnConnectionIPsecConfiguration)";
}

/// The groups cheapest first (the measurements above), for steering under
/// load. MODP-1024 is left out: nobody is steered to a weak group.
constexpr DhGroup kGroupsByCost[] = {DhGroup::curve25519, DhGroup::ecp256,   DhGroup::modp2048,
                                     DhGroup::ecp384,     DhGroup::modp3072, DhGroup::modp4096};

} // namespace

/**
 * cookie_for() - the cookie an initiator must return (section 2.6)
 * @from:     where the IKE_SA_INIT came from
 * @spi_i:    its SPIi
 * @ni:       its nonce
 * @previous: made with the previous secret instead of the current one
 *
 * Cookie = <VersionIDofSecret> | HMAC-SHA-256(<secret>, Ni | IPi | port | SPIi),
 * as section 2.6 suggests: the version byte says which secret to check with.
 */
std::vector<uint8_t> Engine::cookie_for(const Endpoint& from, uint64_t spi_i, std::span<const uint8_t> ni,
                                        bool previous) const {
	const CookieSecret& secret = cookie_secrets_[previous ? 1 : 0];
	std::vector<uint8_t> data(ni.begin(), ni.end());
	data.insert(data.end(), from.addr.bytes.begin(), from.addr.bytes.begin() + long(from.addr.size()));
	uint8_t b[10];
	store_be16(b, from.port);
	store_be64(b + 2, spi_i);
	data.insert(data.end(), b, b + sizeof b);
	std::vector<uint8_t> cookie{secret.version};
	const std::vector<uint8_t> mac = declassify(prf(PrfId::hmac_sha256, secret.key, data)); // public
	cookie.insert(cookie.end(), mac.begin(), mac.end());
	return cookie;
}

/// cookie_valid() - @cookie is ours for this request, made with the current or the previous secret.
bool Engine::cookie_valid(std::span<const uint8_t> cookie, const Endpoint& from, uint64_t spi_i,
                          std::span<const uint8_t> ni) const {
	if (cookie.empty()) return false;
	for (int i = 0; i < 2; i++)
		if (cookie[0] == cookie_secrets_[size_t(i)].version)
			return ct_equal(cookie, cookie_for(from, spi_i, ni, i == 1));
	return false; // a secret retired two rotations ago or more, or a forgery
}

/**
 * rotate_cookie_secret() - a new cookie secret every kCookieSecretLifetime
 * @now: the time
 *
 * Section 2.6 asks for a secret that changes: a cookie seen once (or an
 * old secret guessed) must not open the door for ever. The previous secret
 * stays valid for one period, so a cookie sent just before a rotation still
 * passes; the one before it is overwritten. Called from tick() and before
 * each cookie check, so the period holds whatever the tick rate; after two
 * periods without a call both secrets are replaced.
 */
void Engine::rotate_cookie_secret(Clock::time_point now) {
	if (cookie_rotate_at_ == Clock::time_point{}) {
		cookie_rotate_at_ = now + kCookieSecretLifetime;
		return;
	}
	if (now < cookie_rotate_at_) return;
	const int turns = now - cookie_rotate_at_ >= kCookieSecretLifetime ? 2 : 1;
	for (int i = 0; i < turns; i++) {
		OPENSSL_cleanse(cookie_secrets_[1].key.data(), cookie_secrets_[1].key.size());
		cookie_secrets_[1] = cookie_secrets_[0];
		cookie_secrets_[0].version = uint8_t(cookie_secrets_[1].version + 1);
		random_bytes(cookie_secrets_[0].key);
	}
	cookie_rotate_at_ = now + kCookieSecretLifetime;
}

/**
 * admit_half_open() - room for one more half-open SA of @cost units from @from
 * @from: the initiator
 * @cost: half_open_cost() of the group it will use
 *
 * Within the source's own bound (checked before, in handle_init_request),
 * a request is admitted while the table has room. When it is full, the
 * busiest source gives up its oldest half-open SAs to a source that holds
 * less (max-min fairness): a source over its share can never keep a new
 * one out, and a request is dropped only when no source holds more than
 * the requester would. Each eviction frees at least one unit, so this
 * evicts at most @cost SAs; finding the busiest source walks the sources
 * (at most kHalfOpenLimit), only when the table is full.
 * Return: false, counted in half_open_dropped, when there is no room.
 */
bool Engine::admit_half_open(const Endpoint& from, size_t cost) {
	const auto key = half_open_source(from.addr);
	auto mine = half_open_.find(key);
	const size_t my_load = mine == half_open_.end() ? 0 : mine->second.load;
	while (half_open_load_ + cost > kHalfOpenLimit) {
		auto busiest = half_open_.end();
		for (auto it = half_open_.begin(); it != half_open_.end(); ++it)
			if (busiest == half_open_.end() || it->second.load > busiest->second.load)
				busiest = it;
		if (busiest == half_open_.end() || busiest->first == key ||
		    busiest->second.load <= my_load + cost) {
			counters_.half_open_dropped++;
			return false;
		}
		const uint64_t spi = busiest->second.spis.front();
		auto victim = sas_.find(spi);
		if (victim == sas_.end() || victim->second->half_open_cost == 0) {
			// Not expected (sweep() keeps the index); repair rather than loop.
			busiest->second.spis.erase(busiest->second.spis.begin());
			if (busiest->second.spis.empty()) {
				half_open_load_ -= std::min(half_open_load_, busiest->second.load);
				half_open_.erase(busiest);
			}
			continue;
		}
		// Unauthenticated and unanswered by us since: nobody to tell.
		counters_.half_open_evicted++;
		mark_closed(*victim->second);
		half_open_forget(*victim->second);
	}
	return true;
}

/// half_open_forget() - @sa no longer counts against its source or the table.
void Engine::half_open_forget(IkeSa& sa) {
	if (sa.half_open_cost == 0) return;
	if (auto it = half_open_.find(sa.half_open_key); it != half_open_.end()) {
		HalfOpenSource& src = it->second;
		if (auto at = std::find(src.spis.begin(), src.spis.end(), sa.spi_r); at != src.spis.end())
			src.spis.erase(at);
		src.load -= std::min(src.load, sa.half_open_cost);
		if (src.spis.empty()) half_open_.erase(it);
	}
	half_open_load_ -= std::min(half_open_load_, sa.half_open_cost);
	sa.half_open_cost = 0;
}

std::vector<Payload> Engine::nat_detection(uint64_t spi_i, uint64_t spi_r, Port via, const Endpoint& remote) {
	// esptun carries ESP in UDP only (RFC 3948), so the peer must
	// encapsulate whether or not there is a NAT. A peer does that when it
	// believes one side is behind a NAT, so our source hash is deliberately
	// one of no address (strongSwan's encap=yes does the same). The
	// destination hash is honest: it lets the peer find out about its own NAT.
	(void)via;
	std::vector<uint8_t> fake(SHA_DIGEST_LENGTH);
	random_bytes(fake);
	std::vector<Payload> out;
	out.push_back(make_notify(notify::nat_detection_source_ip, std::move(fake)));
	out.push_back(make_notify(notify::nat_detection_destination_ip, nat_hash(spi_i, spi_r, remote)));
	return out;
}

bool Engine::we_are_behind_nat(const Message& m, uint64_t spi_i, uint64_t spi_r, Port via,
                               const Endpoint& remote) {
	// Section 2.23: the peer hashed our address as it saw it arrive; if none
	// of its NAT_DETECTION_DESTINATION_IP values is the hash of the address
	// we sent from, something in between rewrote it.
	std::optional<Endpoint> local = host_.local_endpoint(via, remote);
	bool any = false;
	for (const Payload& p : m.payloads) {
		const auto* n = std::get_if<NotifyPayload>(&p);
		if (!n || n->type != notify::nat_detection_destination_ip) continue;
		any = true;
		if (local && ct_equal(n->data, nat_hash(spi_i, spi_r, *local))) return false;
	}
	return any && local;
}

void Engine::send_plain_notify(Port via, const Endpoint& to, const Header& req, uint16_t type,
                               std::span<const uint8_t> data) {
	Header h;
	h.spi_i = req.spi_i;
	h.spi_r = 0;
	h.exchange = req.exchange;
	h.flags = kFlagResponse;
	h.message_id = req.message_id;
	const Payload p[] = {make_notify(type, std::vector<uint8_t>(data.begin(), data.end()))};
	const std::vector<uint8_t> bytes = build_message(h, p);
	debug_sent(nullptr, to, bytes, {});
	host_.send(via, to, bytes);
	counters_.sent++;
}

/**
 * handle_init_request() - an IKE_SA_INIT request: a half-open SA and our answer
 * @via, @from: where it came from
 * @msg, @m:    the message as received and parsed
 * @now:        the time
 *
 * In order of cost: a retransmission gets the same answer; a source at its
 * half-open bound is dropped (no answer, no key exchange); under load the
 * initiator must return a cookie (section 2.6) and is steered to the
 * cheapest group; only then is the table asked for room and our DH done.
 */
void Engine::handle_init_request(Port via, const Endpoint& from, std::span<const uint8_t> msg,
                                 const Message& m, Clock::time_point now) {
	const Header& h = m.header;
	const SaPayload* sa_p = m.find<SaPayload>();
	const KePayload* ke = m.find<KePayload>();
	const NoncePayload* nonce = m.find<NoncePayload>();
	if (!sa_p || !ke || !nonce) {
		counters_.malformed++;
		send_plain_notify(via, from, h, notify::invalid_syntax, {});
		return;
	}
	const auto source = half_open_source(from.addr);
	size_t source_load = 0;
	if (auto it = half_open_.find(source); it != half_open_.end()) {
		source_load = it->second.load;
		for (uint64_t spi : it->second.spis) {
			const IkeSa* s = find(spi);
			if (s && s->spi_i == h.spi_i && s->remote == from &&
			    std::equal(msg.begin(), msg.end(), s->init_request.begin(),
			               s->init_request.end())) {
				// A retransmitted request: the same answer (section 2.1).
				debug_sent(s, from, s->init_response, {},
				           "sent again (a retransmitted request)");
				host_.send(via, from, s->init_response);
				counters_.sent++;
				return;
			}
		}
	}
	// One source holds at most kHalfOpenPerSource units: past it, drop
	// before any work (no cookie: the answer would only feed a reflector).
	if (source_load + half_open_cost(ke->group) > kHalfOpenPerSource) {
		counters_.half_open_source_dropped++;
		return;
	}
	rotate_cookie_secret(now);
	// IKE Redirect (RFC 5685 section 4): before any work, stateless. Only
	// an initiator that announced support can be sent away; REDIRECTED_FROM
	// announces it too (another gateway sent it here).
	const bool was_redirected = m.find_notify(notify::redirected_from) != nullptr;
	const bool redirect_supported = was_redirected || m.find_notify(notify::redirect_supported);
	if (redirect_supported)
		if (const RedirectTarget* t = redirect_choice(from, h.spi_i, was_redirected)) {
			counters_.redirects_sent++;
			send_plain_notify(via, from, h, notify::redirect, redirect_data(*t, nonce->data));
			return;
		}
	const bool loaded = half_open_load_ >= kCookieThreshold;
	if (loaded) {
		const NotifyPayload* c = m.find_notify(notify::cookie);
		if (!c || !cookie_valid(c->data, from, h.spi_i, nonce->data)) {
			// A wrong or retired cookie gets a fresh one: an initiator whose
			// cookie's secret was retired meanwhile just tries again.
			if (c) counters_.cookies_rejected++;
			counters_.cookies_sent++;
			send_plain_notify(via, from, h, notify::cookie,
			                  cookie_for(from, h.spi_i, nonce->data));
			return;
		}
	}
	std::optional<IkeChoice> choice = choose_ike(*sa_p, responder_suites_);
	if (!choice) {
		counters_.no_proposal++;
		std::string ours;
		for (const IkeSuite& s : responder_suites_)
			ours += (ours.empty() ? "" : ", ") + ike_suite_name(s);
		log_limited("IKE_SA_INIT from " + endpoint_text(from) +
		            ": no IKE proposal in common; it offered " + describe_offer(*sa_p) +
		            "; we accept " + ours + accept_hint(*sa_p));
		send_plain_notify(via, from, h, notify::no_proposal_chosen, {});
		return;
	}
	if (loaded) {
		// Under load (and only then: otherwise the initiator's order is its
		// preference, section 2.7, and we follow it), the cheapest group both
		// sides allow. Weighting alone (half_open_cost) bounds what an
		// initiator insisting on MODP-2048 costs; this also spares us the
		// dear DH of initiators that merely prefer it. The cookie already
		// proved the address, so INVALID_KE_PAYLOAD reflects nothing.
		for (DhGroup g : kGroupsByCost) {
			if (half_open_cost(uint16_t(g)) >= half_open_cost(uint16_t(choice->suite.dh))) break;
			std::vector<IkeSuite> cheaper;
			for (const IkeSuite& s : responder_suites_)
				if (s.dh == g) cheaper.push_back(s);
			if (std::optional<IkeChoice> c = choose_ike(*sa_p, cheaper)) {
				if (ke->group == uint16_t(choice->suite.dh)) counters_.groups_steered++;
				choice = std::move(c);
				break;
			}
		}
	}
	if (ke->group != uint16_t(choice->suite.dh)) {
		// Section 1.2: tell the initiator which group to use and let it retry.
		send_plain_notify(via, from, h, notify::invalid_ke_payload,
		                  be16_bytes(uint16_t(choice->suite.dh)));
		return;
	}
	const size_t cost = half_open_cost(ke->group);
	if (!admit_half_open(from, cost)) return;

	auto sa = std::make_unique<IkeSa>();
	sa->initiator = false;
	sa->state = IkeSa::State::responder_init;
	sa->spi_i = h.spi_i;
	do
		sa->spi_r = random_spi();
	while (sas_.count(sa->spi_r));
	sa->remote = from;
	sa->via = via;
	sa->suite = choice->suite;
	sa->dh = std::make_unique<DhKeyPair>(choice->suite.dh);
	std::optional<SecretBytes> g_ir = sa->dh->shared_secret(ke->data);
	if (!g_ir) {
		counters_.malformed++;
		send_plain_notify(via, from, h, notify::invalid_syntax, {});
		return;
	}
	sa->ni = nonce->data;
	sa->nr = random_nonce();
	sa->keys = derive_ike_keys(sa->suite, sa->ni, sa->nr, *g_ir, sa->spi_i, sa->spi_r);
	sa->sk_in = std::make_unique<SkCipher>(sa->suite, sa->keys.sk_ei, sa->keys.sk_ai);
	sa->sk_out = std::make_unique<SkCipher>(sa->suite, sa->keys.sk_er, sa->keys.sk_ar);
	sa->init_request.assign(msg.begin(), msg.end());
	sa->behind_nat = we_are_behind_nat(m, sa->spi_i, 0, via, from);
	sa->redirect_supported = redirect_supported;

	Header rh;
	rh.spi_i = sa->spi_i;
	rh.spi_r = sa->spi_r;
	rh.exchange = Exchange::ike_sa_init;
	rh.flags = kFlagResponse;
	std::vector<Payload> payloads;
	payloads.push_back(SaPayload{{choice->reply}});
	payloads.push_back(
	    KePayload{uint16_t(sa->suite.dh),
	              std::vector<uint8_t>(sa->dh->public_value().begin(), sa->dh->public_value().end())});
	payloads.push_back(NoncePayload{sa->nr});
	for (Payload& p : nat_detection(sa->spi_i, sa->spi_r, via, from))
		payloads.push_back(std::move(p));
	if (const NotifyPayload* n = m.find_notify(notify::signature_hash_algorithms))
		sa->peer_sig_hashes = parse_sig_hashes(n->data);
	for (Payload& p : cert_init_payloads())
		payloads.push_back(std::move(p));

	// RFC 7383 section 2.3: announced back only to an initiator that announced it.
	sa->frag_peer = m.find_notify(notify::ikev2_fragmentation_supported) != nullptr;
	if (sa->frag_peer) payloads.push_back(make_notify(notify::ikev2_fragmentation_supported));
	sa->init_response = build_message(rh, payloads);
	sa->peer_next_id = 1;
	sa->next_id = 0;
	sa->created = sa->last_heard = now;
	debug_sent(sa.get(), from, sa->init_response, {});
	host_.send(via, from, sa->init_response);
	counters_.sent++;
	const uint64_t key = sa->spi_r;
	HalfOpenSource& src = half_open_[source];
	src.spis.reserve(kHalfOpenPerSource);
	sa->half_open_cost = cost;
	sa->half_open_key = source;
	sas_.emplace(key, std::move(sa));
	note_added(key);
	src.spis.push_back(key);
	src.load += cost;
	half_open_load_ += cost;
}

void Engine::initiate(size_t peer, Clock::time_point now, std::optional<Endpoint> to,
                      std::optional<Endpoint> from) {
	const PeerPolicy& pol = peers_[peer];
	if (pol.ike_proposals.empty() || !pol.endpoint) return;
	auto sa = std::make_unique<IkeSa>();
	sa->initiator = true;
	sa->state = IkeSa::State::init_sent;
	do
		sa->spi_i = random_spi();
	while (sas_.count(sa->spi_i));
	sa->peer = peer;
	sa->remote = to ? *to : *pol.endpoint;
	sa->redirected_from = from;
	sa->via = Port::natt; // RFC 7296 section 2.23 lets an initiator start on the NAT-T port
	sa->dh = std::make_unique<DhKeyPair>(pol.ike_proposals.front().dh);
	sa->ni = random_nonce();
	sa->created = sa->last_heard = now;
	IkeSa& ref = *sa;
	const uint64_t key = sa->spi_i;
	sas_.emplace(key, std::move(sa));
	note_added(key);
	restart_at_[peer] = {};
	send_init(ref, now);
}

void Engine::send_init(IkeSa& sa, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	Header h;
	h.spi_i = sa.spi_i;
	h.exchange = Exchange::ike_sa_init;
	h.flags = kFlagInitiator;
	std::vector<Payload> payloads;
	if (!sa.cookie.empty()) payloads.push_back(make_notify(notify::cookie, sa.cookie));
	// The proposals that use the group of our key share come first, so a
	// responder that picks the first match needs no INVALID_KE round trip.
	std::vector<IkeSuite> order;
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh == sa.dh->group()) order.push_back(s);
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh != sa.dh->group()) order.push_back(s);
	payloads.push_back(ike_offer(order));
	payloads.push_back(
	    KePayload{uint16_t(sa.dh->group()),
	              std::vector<uint8_t>(sa.dh->public_value().begin(), sa.dh->public_value().end())});
	payloads.push_back(NoncePayload{sa.ni});
	for (Payload& p : nat_detection(sa.spi_i, 0, sa.via, sa.remote))
		payloads.push_back(std::move(p));
	if (pol.we_sign() || pol.peer_signs())
		payloads.push_back(make_notify(notify::signature_hash_algorithms, sig_hashes_notify_data()));

	// RFC 7383 section 2.3: we take fragments and send them when the responder does too.
	payloads.push_back(make_notify(notify::ikev2_fragmentation_supported));
	// RFC 5685 section 3: we follow redirects. Sent here by another
	// gateway, we name it instead (section 4), which says the same.
	if (!pol.follow_redirects) {
		// Not announced: a gateway then serves us rather than send us away.
	} else if (sa.redirected_from) {
		RedirectTarget origin;
		origin.type = sa.redirected_from->addr.family == Family::v4 ? RedirectTarget::Type::ipv4
		                                                            : RedirectTarget::Type::ipv6;
		origin.data.assign(sa.redirected_from->addr.bytes.begin(),
		                   sa.redirected_from->addr.bytes.begin() +
		                       long(sa.redirected_from->addr.size()));
		payloads.push_back(make_notify(notify::redirected_from, redirect_data(origin)));
	} else {
		payloads.push_back(make_notify(notify::redirect_supported));
	}
	sa.init_request = build_message(h, payloads);
	sa.pending = new_request({sa.init_request}, 0, RequestKind::init, now);
	debug_sent(&sa, sa.remote, sa.init_request, {});
	host_.send(sa.via, sa.remote, sa.init_request);
	counters_.sent++;
}

/**
 * handle_init_response() - the answer to our IKE_SA_INIT; on success, IKE_AUTH
 * @sa:     our initiating IKE SA, in init_sent
 * @msg, @m: the answer as received and parsed
 * @now:    the time
 *
 * Nothing here is authenticated yet: COOKIE and INVALID_KE_PAYLOAD are
 * followed (they are the protocol), any other error is only noted
 * (note_init_error()), and a usable answer sends IKE_AUTH.
 */
void Engine::handle_init_response(IkeSa& sa, std::span<const uint8_t> msg, const Message& m,
                                  Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	if (m.header.message_id != 0) {
		counters_.malformed++;
		return;
	}
	if (const NotifyPayload* r = m.find_notify(notify::redirect)) {
		follow_redirect(sa, *r, true, now);
		return;
	}
	if (const NotifyPayload* c = m.find_notify(notify::cookie)) {
		if (c->data.empty() || c->data.size() > 64 || !sa.cookie.empty()) {
			counters_.malformed++;
			return;
		}
		sa.cookie = c->data;
		send_init(sa, now);
		return;
	}
	if (const NotifyPayload* k = m.find_notify(notify::invalid_ke_payload)) {
		// Part of the protocol (section 1.2), so acted on although anyone on
		// the path can forge it. What a forgery can do: make us start over,
		// at most twice per IKE SA, with another group that our own policy
		// offers (never one outside it: that is ignored like any other
		// unusable error), costing a round trip; the real responder's answer
		// to our earlier key share is then ignored as stale and we wait for
		// its answer to the new one.
		const uint16_t group = k->data.size() == 2 ? load_be16(k->data.data()) : 0;
		const bool offered = std::any_of(pol.ike_proposals.begin(), pol.ike_proposals.end(),
		                                 [&](const IkeSuite& s) { return uint16_t(s.dh) == group; });
		if (!offered || sa.ke_retries >= 2 || group == uint16_t(sa.dh->group())) {
			note_init_error(sa, *k);
			return;
		}
		sa.ke_retries++;
		sa.dh = std::make_unique<DhKeyPair>(DhGroup(group));
		send_init(sa, now);
		return;
	}
	if (const NotifyPayload* e = first_error(m.payloads)) {
		note_init_error(sa, *e);
		return;
	}
	const SaPayload* sa_p = m.find<SaPayload>();
	const KePayload* ke = m.find<KePayload>();
	const NoncePayload* nonce = m.find<NoncePayload>();
	if (!sa_p || !ke || !nonce || m.header.spi_r == 0) {
		counters_.malformed++;
		return;
	}
	std::optional<IkeSuite> suite = accept_ike(*sa_p, pol.ike_proposals);
	if (suite && ke->group != uint16_t(sa.dh->group())) {
		// An answer to a key share we sent before INVALID_KE_PAYLOAD made us
		// change groups: its key pair is gone; the answer to the new one follows.
		counters_.init_errors_ignored++;
		return;
	}
	if (!suite || suite->dh != sa.dh->group() || ke->group != uint16_t(suite->dh)) {
		close(sa, "the responder chose " + describe_offer(*sa_p) + ", which is not one we offered",
		      true, now);
		return;
	}
	std::optional<SecretBytes> g_ir = sa.dh->shared_secret(ke->data);
	if (!g_ir) {
		close(sa, "the responder's key exchange value is invalid", true, now);
		return;
	}
	sa.suite = *suite;
	sa.spi_r = m.header.spi_r;
	sa.nr = nonce->data;
	sa.keys = derive_ike_keys(sa.suite, sa.ni, sa.nr, *g_ir, sa.spi_i, sa.spi_r);
	sa.sk_in = std::make_unique<SkCipher>(sa.suite, sa.keys.sk_er, sa.keys.sk_ar);
	sa.sk_out = std::make_unique<SkCipher>(sa.suite, sa.keys.sk_ei, sa.keys.sk_ai);
	sa.init_response.assign(msg.begin(), msg.end());
	sa.frag_peer = m.find_notify(notify::ikev2_fragmentation_supported) != nullptr;
	sa.behind_nat = we_are_behind_nat(m, sa.spi_i, sa.spi_r, sa.via, sa.remote);
	if (const NotifyPayload* n = m.find_notify(notify::signature_hash_algorithms))
		sa.peer_sig_hashes = parse_sig_hashes(n->data);
	sa.pending.reset();
	sa.next_id = 1;
	sa.last_heard = now;

	// IKE_AUTH: who we are, proof of the PSK, and the first CHILD_SA.
	std::optional<uint32_t> reserved = host_.allocate_spi();
	if (!reserved) {
		close(sa, "no inbound SPI free for the CHILD_SA: the SA table is full", true, now);
		return;
	}
	sa.reserved_spi = *reserved;
	IdPayload idi{true, pol.local_id.type, pol.local_id.data};
	IdPayload idr{false, pol.remote_id.type, pol.remote_id.data};
	std::vector<Payload> payloads{idi};
	if (pol.eap_role == EapRole::client) {
		// Section 2.16: IDi, [CERTREQ,] [IDr,] and no AUTH: we authenticate
		// by EAP once the gateway has proven itself with its certificate.
		payloads.push_back(RawPayload{PayloadType::certreq, false, pol.trust->certreq_body()});
		payloads.push_back(idr);
		sa.eap = std::make_unique<EapState>();
		sa.eap->peer = *sa.peer;
		sa.eap->identity = pol.eap_identity;
	} else if (pol.we_sign()) {
		// Section 1.2: IDi, [CERT,] [CERTREQ,] [IDr,] AUTH.
		for (Payload& p : cert_payloads(*pol.credentials))
			payloads.push_back(std::move(p));
		payloads.push_back(RawPayload{PayloadType::certreq, false, pol.trust->certreq_body()});
		payloads.push_back(idr);
		payloads.push_back(pol.credentials->sign(
		    signed_octets(sa.suite.prf, sa.init_request, sa.nr, sa.keys.sk_pi, idi.body()),
		    sa.peer_sig_hashes, pol.rsa_pss));
	} else {
		payloads.push_back(idr);
		payloads.push_back(
		    AuthPayload{AuthMethod::psk, psk_auth(sa.suite.prf, pol.psk, sa.init_request, sa.nr,
		                                          sa.keys.sk_pi, idi.body())});
	}
	TsPayload tsi{true, {}}, tsr{false, {}};
	bool v6 = false;
	for (const IpPrefix& p : pol.allowed_ips) {
		tsr.selectors.push_back(selector_of(p));
		v6 = v6 || p.addr.family == Family::v6;
	}
	// Our side: local_ts when set, else any address (of IPv6 too when the
	// peer's side has some).
	for (const IpPrefix& p : pol.local_ts)
		tsi.selectors.push_back(selector_of(p));
	if (pol.local_ts.empty()) tsi.selectors.push_back(selector_of(*parse_prefix("0.0.0.0/0")));
	if (pol.local_ts.empty() && v6) tsi.selectors.push_back(selector_of(*parse_prefix("::/0")));
	if (pol.request_address) {
		// Empty attributes ask for a value (section 3.15.1): an IPv4 address
		// and DNS servers; IPv6 too when some allowed_ips are IPv6.
		CpPayload cp{CpType::request,
		             {{cp_attr::internal_ip4_address, {}}, {cp_attr::internal_ip4_dns, {}}}};
		if (v6) {
			cp.attributes.push_back({cp_attr::internal_ip6_address, {}});
			cp.attributes.push_back({cp_attr::internal_ip6_dns, {}});
		}
		payloads.push_back(cp);
	}
	payloads.push_back(esp_offer(pol.esp_proposals, sa.reserved_spi, ChildExchange::ike_auth));
	payloads.push_back(tsi);
	payloads.push_back(tsr);
	sa.state = IkeSa::State::auth_sent;
	send_request(sa, Exchange::ike_auth, payloads, now);
	sa.pending->kind = RequestKind::auth;
}

/**
 * note_init_error() - an unauthenticated error answered our IKE_SA_INIT
 * @sa: our initiating IKE SA
 * @n:  the error notify (or an INVALID_KE_PAYLOAD we cannot follow)
 *
 * Section 2.21.1: such an answer may be forged by anyone on the path, so
 * it does not end the IKE SA. We keep retransmitting and waiting as usual;
 * a valid answer meanwhile is used, and if the wait ends, tick_sa()'s log
 * line names the error. Counted, not logged: it may come at packet rate.
 */
void Engine::note_init_error(IkeSa& sa, const NotifyPayload& n) {
	counters_.init_errors_ignored++;
	sa.init_error = n.type;
}

} // namespace esptun::ike
