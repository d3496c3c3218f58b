// The IKEv2 engine: see engine.hpp for the exchanges and their order. This
// file: receiving, IKE_SA_INIT, sending and status; IKE_AUTH (with the
// configuration payload and address leases) is in engine_auth.cpp, rekeys
// and deletes in engine_rekey.cpp, timers and teardown in engine_timers.cpp.
#include "ike/engine_internal.hpp"

namespace esptun::ike {

std::optional<Identity> parse_identity(std::string_view text) {
	if (text.empty()) return std::nullopt;
	Identity id;
	if (auto ip = parse_ip(text)) {
		id.type = ip->family == Family::v4 ? IdType::ipv4 : IdType::ipv6;
		id.data.assign(ip->bytes.begin(), ip->bytes.begin() + long(ip->size()));
		return id;
	}
	if (text.front() == '@') {
		text.remove_prefix(1);
		if (text.empty()) return std::nullopt;
		id.type = IdType::fqdn;
	} else {
		id.type = text.find('@') != std::string_view::npos ? IdType::rfc822 : IdType::fqdn;
	}
	id.data.assign(text.begin(), text.end());
	return id;
}

std::string identity_text(const Identity& id) {
	if ((id.type == IdType::ipv4 && id.data.size() == 4) ||
	    (id.type == IdType::ipv6 && id.data.size() == 16)) {
		IpAddress a;
		a.family = id.type == IdType::ipv4 ? Family::v4 : Family::v6;
		std::copy(id.data.begin(), id.data.end(), a.bytes.begin());
		return to_string(a);
	}
	std::string s;
	for (uint8_t c : id.data)
		s += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
	return s;
}

TrafficSelector selector_of(const IpPrefix& p) {
	TrafficSelector t;
	t.start = p.addr.masked(p.len);
	t.end = last_address(p);
	return t;
}

std::vector<IpPrefix> selector_prefixes(const TrafficSelector& ts) {
	// From the start, the largest aligned block that does not pass the end,
	// then on from the address after it (RFC 4632 section 3.1 aggregation).
	std::vector<IpPrefix> out;
	if (ts.start.family != ts.end.family || compare_addr(ts.start, ts.end) > 0) return out;
	IpAddress at = ts.start;
	const unsigned max = at.max_prefix();
	for (;;) {
		unsigned len = max;
		while (len > 0) {
			const IpPrefix wider{at, uint8_t(len - 1)};
			if (at.masked(len - 1) != at || compare_addr(last_address(wider), ts.end) > 0) break;
			len--;
		}
		const IpPrefix block{at, uint8_t(len)};
		out.push_back(block);
		IpAddress next = last_address(block);
		if (next == ts.end) break;
		for (size_t i = next.size(); i-- > 0;) // +1, big-endian; cannot wrap: next < end
			if (++next.bytes[i] != 0) break;
		at = next;
	}
	return out;
}

std::vector<std::string> selector_strings(std::span<const TrafficSelector> ts) {
	std::vector<std::string> out;
	for (const TrafficSelector& t : ts) {
		std::string restrict;
		if (t.ip_protocol != 0) restrict += " proto " + std::to_string(t.ip_protocol);
		if (t.start_port != 0 || t.end_port != 65535)
			restrict +=
			    " ports " + std::to_string(t.start_port) + "-" + std::to_string(t.end_port);
		for (const IpPrefix& p : selector_prefixes(t))
			out.push_back(to_string(p) + restrict);
	}
	return out;
}

std::vector<TrafficSelector> narrow(std::span<const TrafficSelector> offered,
                                    std::span<const IpPrefix> allowed) {
	std::vector<TrafficSelector> out;
	for (const TrafficSelector& o : offered) {
		for (const IpPrefix& p : allowed) {
			if (p.addr.family != o.start.family || o.end.family != o.start.family) continue;
			const TrafficSelector a = selector_of(p);
			TrafficSelector cut = o;
			if (compare_addr(a.start, cut.start) > 0) cut.start = a.start;
			if (compare_addr(a.end, cut.end) < 0) cut.end = a.end;
			if (compare_addr(cut.start, cut.end) > 0) continue;
			if (std::find(out.begin(), out.end(), cut) != out.end()) continue;
			// A reply must fit the TS payload's one-byte count: one past the
			// bound refuses the whole offer rather than cut it arbitrarily.
			if (out.size() == Engine::kMaxNarrowedSelectors) return {};
			out.push_back(cut);
		}
	}
	return out;
}

Engine::Engine(std::vector<PeerPolicy> peers, Host& host)
    : peers_(std::move(peers)), host_(host), restart_at_(peers_.size()),
      restart_backoff_s_(peers_.size(), kRestartMinS), leased_(peers_.size()), cookie_secret_(32) {
	random_bytes(cookie_secret_);
	for (const PeerPolicy& p : peers_)
		for (const IkeSuite& s : p.ike_proposals)
			if (std::find(responder_suites_.begin(), responder_suites_.end(), s) ==
			    responder_suites_.end())
				responder_suites_.push_back(s);
}

Engine::~Engine() = default;

std::string Engine::peer_label(const IkeSa& sa) const {
	if (sa.peer) return "peer " + peers_[*sa.peer].name;
	return "IKE from " + endpoint_text(sa.remote);
}

void Engine::log_limited(const std::string& line) {
	const Clock::time_point now = Clock::now();
	if (now - log_window_ >= kLogWindow) {
		if (counters_.logs_suppressed && logs_in_window_ >= kLogsPerWindow)
			host_.log("(IKE log lines held back so far: " +
			          std::to_string(counters_.logs_suppressed) + ")");
		log_window_ = now;
		logs_in_window_ = 0;
	}
	if (logs_in_window_++ < kLogsPerWindow)
		host_.log(line);
	else
		counters_.logs_suppressed++;
}

Engine::IkeSa* Engine::find(uint64_t our_spi) noexcept {
	auto it = sas_.find(our_spi);
	return it == sas_.end() || it->second->state == IkeSa::State::closed ? nullptr : it->second.get();
}

void Engine::start(Clock::time_point now) {
	for (size_t i = 0; i < peers_.size(); i++)
		if (peers_[i].initiate && peers_[i].endpoint) initiate(i, now);
}

size_t Engine::peer_children(size_t peer) const {
	size_t n = 0;
	for (const auto& [spi, sa] : sas_)
		if (sa->peer == peer && sa->state != IkeSa::State::closed) n += sa->children.size();
	return n;
}

size_t Engine::peer_ike_sas(size_t peer) const {
	return size_t(std::count_if(sas_.begin(), sas_.end(), [&](const auto& kv) {
		return kv.second->peer == peer && kv.second->state != IkeSa::State::closed;
	}));
}

/**
 * refuse_sa() - count and log (rate-limited) an SA we will not create
 * @sa:  the IKE SA the request came on
 * @why: what was refused and why
 *
 * The caller answers NO_ADDITIONAL_SAS (RFC 7296 section 3.10.1): the peer
 * may try again later, and nothing else of it changes.
 */
void Engine::refuse_sa(IkeSa& sa, const std::string& why) {
	counters_.sa_refused++;
	log_limited(peer_label(sa) + ": " + why + ": answering NO_ADDITIONAL_SAS");
}

/**
 * contain() - end the exchange whose handler threw
 * @what: the exception's text
 * @now:  the time of the message
 *
 * A request on a known IKE SA gets INVALID_SYNTAX (section 3.10.1: a request
 * we cannot process) unless its answer already left; an IKE SA that was not
 * yet established is closed, an established one keeps its other exchanges.
 * A response that could not be handled closes its IKE SA (we cannot know
 * what the peer now holds). Nothing here may throw in turn.
 */
void Engine::contain(const char* what, Clock::time_point now) {
	counters_.internal_errors++;
	const std::optional<Handling> h = std::move(handling_);
	handling_.reset();
	IkeSa* sa = h ? find(h->our_spi) : nullptr;
	try {
		log_limited((sa ? peer_label(*sa) : std::string("IKE message")) +
		            ": exchange ended by an internal error: " + what);
		if (sa && !h->header.is_response()) {
			if (counters_.sent == h->sent_before) {
				const Payload p[] = {make_notify(notify::invalid_syntax)};
				send_response(*sa, h->header, p);
			}
			if (sa->state != IkeSa::State::established)
				close(*sa, std::string("internal error: ") + what, false, now);
		} else if (sa) {
			close(*sa, std::string("internal error: ") + what, true, now, true);
		}
	} catch (...) {
		if (sa) sa->state = IkeSa::State::closed; // sweep() removes what it holds
	}
	try {
		sweep();
	} catch (...) {
		counters_.internal_errors++; // what is left is swept again on the next tick
	}
}

// ---- receiving -------------------------------------------------------------

void Engine::receive(Port via, const Endpoint& from, std::span<const uint8_t> msg, Clock::time_point now) {
	// Every message is hostile, authenticated or not: what a handler throws
	// ends that one exchange here, never the control loop and with it every
	// other peer's tunnel.
	handling_.reset();
	try {
		receive_message(via, from, msg, now);
	} catch (const std::exception& e) {
		contain(e.what(), now);
	} catch (...) {
		contain("unknown exception", now);
	}
	handling_.reset();
}

void Engine::receive_message(Port via, const Endpoint& from, std::span<const uint8_t> msg,
                             Clock::time_point now) {
	counters_.received++;
	Message m;
	if (!parse_message(msg, m)) {
		counters_.malformed++;
		return;
	}
	const Header& h = m.header;
	if (h.exchange == Exchange::ike_sa_init) {
		if (!h.is_response()) {
			if (!h.from_initiator() || h.spi_r != 0 || h.message_id != 0) {
				counters_.malformed++;
				return;
			}
			handle_init_request(via, from, msg, m, now);
		} else {
			IkeSa* sa = find(h.spi_i);
			// A notify-only answer (COOKIE, INVALID_KE_PAYLOAD, an error) has no responder SPI.
			if (!sa || !sa->initiator || sa->state != IkeSa::State::init_sent) {
				counters_.unknown_sa++;
				return;
			}
			handling_ = Handling{h.spi_i, h, counters_.sent};
			handle_init_response(*sa, msg, m, now);
		}
		sweep();
		return;
	}

	// Every later exchange is protected by the SK payload of a known IKE SA.
	const uint64_t our_spi = h.from_initiator() ? h.spi_r : h.spi_i;
	IkeSa* sa = find(our_spi);
	if (!sa || sa->spi_i != h.spi_i || sa->spi_r != h.spi_r || sa->initiator == h.from_initiator() ||
	    !sa->sk_in || sa->state == IkeSa::State::init_sent) {
		counters_.unknown_sa++;
		return;
	}
	const SkPayload* sk = m.find<SkPayload>();
	if (!sk) {
		counters_.malformed++;
		return;
	}
	const bool retransmitted_request =
	    !h.is_response() && sa->peer_next_id > 0 && h.message_id == sa->peer_next_id - 1;
	if (h.is_response() ? (!sa->pending || h.message_id != sa->pending->id)
	                    : (h.message_id != sa->peer_next_id && !retransmitted_request)) {
		counters_.unknown_sa++; // a stale or out-of-window message ID (section 2.3)
		return;
	}
	std::optional<std::vector<uint8_t>> plain = sa->sk_in->open(msg, sk->offset);
	if (!plain) {
		counters_.bad_icv++;
		return;
	}
	if (retransmitted_request) {
		// The peer did not get our answer: the same answer again (section 2.1).
		if (!sa->last_response.empty()) {
			host_.send(sa->via, sa->remote, sa->last_response);
			counters_.sent++;
		}
		return;
	}
	std::vector<Payload> inner;
	if (!parse_payloads(sk->first_inner, *plain, inner)) {
		counters_.malformed++;
		if (!h.is_response()) {
			sa->peer_next_id++;
			NotifyPayload n = make_notify(notify::invalid_syntax);
			const Payload p[] = {n};
			send_response(*sa, h, p);
		}
		return;
	}
	sa->last_heard = now;
	// An authenticated message from a new address: the peer moved, or a NAT
	// in between did (section 2.23); follow it.
	if (!(from == sa->remote) || via != sa->via) {
		const bool moved =
		    !(from == sa->remote) && sa->state == IkeSa::State::established && sa->peer;
		sa->remote = from;
		sa->via = via;
		if (moved && via == Port::natt) host_.peer_moved(*sa->peer, from);
	}
	handling_ = Handling{our_spi, h, counters_.sent};
	if (h.is_response()) {
		handle_response(*sa, inner, now);
	} else {
		sa->peer_next_id++;
		switch (h.exchange) {
		case Exchange::ike_auth:
			if (sa->state == IkeSa::State::responder_init)
				handle_auth_request(*sa, msg, inner, now);
			else
				counters_.malformed++;
			break;
		case Exchange::informational:
			handle_informational_request(*sa, inner, now);
			break;
		case Exchange::create_child_sa:
			handle_create_child_request(*sa, inner, now);
			break;
		default:
			counters_.malformed++;
			break;
		}
	}
	sweep();
}

void Engine::handle_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	PendingRequest req = std::move(*sa.pending);
	sa.pending.reset();
	switch (req.kind) {
	case RequestKind::auth:
		handle_auth_response(sa, inner, now);
		break;
	case RequestKind::liveness:
		break; // any authenticated answer proves the peer is alive
	case RequestKind::del_ike:
		close(sa, "deleted", false, now);
		break;
	case RequestKind::del_child:
		handle_delete_child_response(sa, req);
		break;
	case RequestKind::rekey_child:
		handle_rekey_child_response(sa, req, inner, now);
		break;
	case RequestKind::rekey_ike:
		handle_rekey_ike_response(sa, req, inner, now);
		break;
	case RequestKind::init:
		break;
	}
	if (sa.state == IkeSa::State::established) send_child_deletes(sa, now);
}

// ---- IKE_SA_INIT -----------------------------------------------------------

std::vector<uint8_t> Engine::cookie_for(const Endpoint& from, uint64_t spi_i,
                                        std::span<const uint8_t> ni) const {
	// Section 2.6: Cookie = <VersionIDofSecret> | Hash(Ni | IPi | SPIi | <secret>);
	// the secret is per process, so a restart invalidates old cookies.
	std::vector<uint8_t> data(ni.begin(), ni.end());
	data.insert(data.end(), from.addr.bytes.begin(), from.addr.bytes.begin() + long(from.addr.size()));
	uint8_t b[10];
	store_be16(b, from.port);
	store_be64(b + 2, spi_i);
	data.insert(data.end(), b, b + sizeof b);
	return declassify(prf(PrfId::hmac_sha256, cookie_secret_, data)); // the cookie is public
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
	host_.send(via, to, build_message(h, p));
	counters_.sent++;
}

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
	size_t half_open = 0;
	for (auto& [spi, s] : sas_) {
		if (s->initiator || s->state != IkeSa::State::responder_init) continue;
		if (s->spi_i == h.spi_i && s->remote == from) {
			// A retransmitted request: the same answer (section 2.1).
			host_.send(via, from, s->init_response);
			counters_.sent++;
			return;
		}
		half_open++;
	}
	if (half_open >= kHalfOpenLimit) {
		counters_.half_open_dropped++;
		return;
	}
	if (half_open >= kCookieThreshold) {
		const std::vector<uint8_t> want = cookie_for(from, h.spi_i, nonce->data);
		const NotifyPayload* c = m.find_notify(notify::cookie);
		if (!c || !ct_equal(c->data, want)) {
			counters_.cookies_sent++;
			send_plain_notify(via, from, h, notify::cookie, want);
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
		            "; we accept " + ours);
		send_plain_notify(via, from, h, notify::no_proposal_chosen, {});
		return;
	}
	if (ke->group != uint16_t(choice->suite.dh)) {
		// Section 1.2: tell the initiator which group to use and let it retry.
		send_plain_notify(via, from, h, notify::invalid_ke_payload,
		                  be16_bytes(uint16_t(choice->suite.dh)));
		return;
	}

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
	sa->init_response = build_message(rh, payloads);
	sa->peer_next_id = 1;
	sa->next_id = 0;
	sa->created = sa->last_heard = now;
	host_.send(via, from, sa->init_response);
	counters_.sent++;
	const uint64_t key = sa->spi_r;
	sas_.emplace(key, std::move(sa));
}

void Engine::initiate(size_t peer, Clock::time_point now) {
	const PeerPolicy& pol = peers_[peer];
	if (pol.ike_proposals.empty() || !pol.endpoint) return;
	auto sa = std::make_unique<IkeSa>();
	sa->initiator = true;
	sa->state = IkeSa::State::init_sent;
	do
		sa->spi_i = random_spi();
	while (sas_.count(sa->spi_i));
	sa->peer = peer;
	sa->remote = *pol.endpoint;
	sa->via = Port::natt; // RFC 7296 section 2.23 lets an initiator start on the NAT-T port
	sa->dh = std::make_unique<DhKeyPair>(pol.ike_proposals.front().dh);
	sa->ni = random_nonce();
	sa->created = sa->last_heard = now;
	IkeSa& ref = *sa;
	sas_.emplace(sa->spi_i, std::move(sa));
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
	sa.init_request = build_message(h, payloads);
	sa.pending = new_request(sa.init_request, 0, RequestKind::init, now);
	host_.send(sa.via, sa.remote, sa.init_request);
	counters_.sent++;
}

void Engine::handle_init_response(IkeSa& sa, std::span<const uint8_t> msg, const Message& m,
                                  Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	if (m.header.message_id != 0) {
		counters_.malformed++;
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
		const uint16_t group = k->data.size() == 2 ? load_be16(k->data.data()) : 0;
		const bool offered = std::any_of(pol.ike_proposals.begin(), pol.ike_proposals.end(),
		                                 [&](const IkeSuite& s) { return uint16_t(s.dh) == group; });
		if (!offered || sa.ke_retries++ >= 2 || group == uint16_t(sa.dh->group())) {
			close(sa,
			      "the responder asks for key exchange group " + std::to_string(group) +
			          ", which we did not offer",
			      true, now);
			return;
		}
		sa.dh = std::make_unique<DhKeyPair>(DhGroup(group));
		send_init(sa, now);
		return;
	}
	if (const NotifyPayload* err = m.find_notify(notify::no_proposal_chosen);
	    err || first_error(m.payloads)) {
		const NotifyPayload* e = err ? err : first_error(m.payloads);
		std::string ours;
		for (const IkeSuite& s : pol.ike_proposals)
			ours += (ours.empty() ? "" : ", ") + ike_suite_name(s);
		if (e->type == notify::no_proposal_chosen) counters_.no_proposal++;
		close(sa,
		      "IKE_SA_INIT refused by " + endpoint_text(sa.remote) + ": " + notify_name(e->type) +
		          (e->type == notify::no_proposal_chosen ? " (we offered " + ours + ")" : ""),
		      true, now);
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
	sa.behind_nat = we_are_behind_nat(m, sa.spi_i, sa.spi_r, sa.via, sa.remote);
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
	AuthPayload auth{AuthMethod::psk,
	                 psk_auth(sa.suite.prf, pol.psk, sa.init_request, sa.nr, sa.keys.sk_pi, idi.body())};
	TsPayload tsi{true, {}}, tsr{false, {}};
	bool v6 = false;
	for (const IpPrefix& p : pol.allowed_ips) {
		tsr.selectors.push_back(selector_of(p));
		v6 = v6 || p.addr.family == Family::v6;
	}
	tsi.selectors.push_back(selector_of(*parse_prefix("0.0.0.0/0")));
	if (v6) tsi.selectors.push_back(selector_of(*parse_prefix("::/0")));
	std::vector<Payload> payloads{idi, idr, auth};
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

// ---- sending -----------------------------------------------------------------

void Engine::send_request(IkeSa& sa, Exchange ex, std::span<const Payload> inner, Clock::time_point now) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.next = PayloadType::sk;
	h.exchange = ex;
	h.flags = sa.initiator ? kFlagInitiator : 0;
	h.message_id = sa.next_id++;
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(inner, first);
	std::vector<uint8_t> bytes(kHeaderLen);
	encode_header(h, bytes.data());
	sa.sk_out->seal(bytes, uint8_t(first), chain);
	sa.pending = new_request(bytes, h.message_id, RequestKind::liveness, now);
	host_.send(sa.via, sa.remote, bytes);
	counters_.sent++;
}

void Engine::send_response(IkeSa& sa, const Header& req, std::span<const Payload> inner) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.next = PayloadType::sk;
	h.exchange = req.exchange;
	h.flags = uint8_t(kFlagResponse | (sa.initiator ? kFlagInitiator : 0));
	h.message_id = req.message_id;
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(inner, first);
	std::vector<uint8_t> bytes(kHeaderLen);
	encode_header(h, bytes.data());
	sa.sk_out->seal(bytes, uint8_t(first), chain);
	sa.last_response = bytes;
	host_.send(sa.via, sa.remote, bytes);
	counters_.sent++;
}

std::vector<IkeSaStatus> Engine::status(Clock::time_point now) const {
	std::vector<IkeSaStatus> out;
	for (const auto& [spi, sa] : sas_) {
		IkeSaStatus s;
		s.peer = sa->peer ? peers_[*sa->peer].name : "";
		switch (sa->state) {
		case IkeSa::State::init_sent:
			s.state = "connecting";
			break;
		case IkeSa::State::auth_sent:
			s.state = "authenticating";
			break;
		case IkeSa::State::responder_init:
			s.state = "half-open";
			break;
		case IkeSa::State::established:
			s.state = "established";
			break;
		case IkeSa::State::closed:
			s.state = "closed";
			break;
		}
		s.initiator = sa->initiator;
		s.spi_i = sa->spi_i;
		s.spi_r = sa->spi_r;
		if (sa->sk_in) s.suite = ike_suite_name(sa->suite);
		s.remote = endpoint_text(sa->remote);
		const Clock::time_point since =
		    sa->state == IkeSa::State::established ? sa->established_at : sa->created;
		s.age_s = std::chrono::duration_cast<seconds>(now - since).count();
		s.child_rekeys = sa->child_rekeys;
		s.ike_rekeys = sa->ike_rekeys;
		s.behind_nat = sa->behind_nat;
		if (sa->rekey_at != Clock::time_point{})
			s.rekey_in_s = std::chrono::duration_cast<seconds>(sa->rekey_at - now).count();
		for (const IpAddress& a : sa->virtual_ips)
			s.virtual_ips.push_back(to_string(a));
		for (const IpAddress& a : sa->dns)
			s.dns.push_back(to_string(a));
		for (const ChildSa& c : sa->children) {
			ChildStatus cs;
			cs.spi_in = c.spi_in;
			cs.spi_out = c.spi_out;
			cs.cipher = std::string(crypto::cipher_spec(c.cipher).name);
			cs.esn = c.esn;
			if (c.pfs) cs.pfs = std::string(dh_name(*c.pfs));
			cs.age_s = std::chrono::duration_cast<seconds>(now - c.created).count();
			cs.sending = c.sending;
			if (c.rekey_at != Clock::time_point{} && c.sending)
				cs.rekey_in_s = std::chrono::duration_cast<seconds>(c.rekey_at - now).count();
			cs.local_ts = selector_strings(c.ts_local);
			cs.remote_ts = selector_strings(c.ts_remote);
			s.children.push_back(std::move(cs));
		}
		out.push_back(std::move(s));
	}
	return out;
}

} // namespace esptun::ike
