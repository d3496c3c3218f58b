// The IKEv2 engine: see engine.hpp for the exchanges and their order. This
// file: receiving, sending and status; IKE_SA_INIT (with cookies and the
// half-open bounds) is in engine_init.cpp, IKE_AUTH (with the configuration
// payload and address leases) in engine_auth.cpp, rekeys and deletes in
// engine_rekey.cpp, timers and teardown in engine_timers.cpp, peers added
// and removed at run time in engine_peers.cpp.
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
	if (text.find('=') != std::string_view::npos) {
		std::optional<std::vector<uint8_t>> dn = parse_dn(text);
		if (!dn) return std::nullopt;
		id.type = IdType::der_asn1_dn;
		id.data = std::move(*dn);
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
	if (id.type == IdType::der_asn1_dn)
		if (std::optional<std::string> dn = dn_text(id.data)) return *dn;
	std::string s;
	for (uint8_t c : id.data)
		s += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
	return s;
}

bool same_identity(const Identity& a, const Identity& b) {
	if (a.type == IdType::der_asn1_dn && b.type == IdType::der_asn1_dn)
		return a.data == b.data || dn_equal(a.data, b.data);
	return a == b;
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
    : peers_(std::move(peers)), active_(peers_.size(), true), host_(host), restart_at_(peers_.size()),
      restart_backoff_s_(peers_.size(), kRestartMinS), leased_(peers_.size()) {
	// Two random secrets: the "previous" one is known to no one, so it
	// verifies nothing until the first rotation puts a real one there.
	for (uint8_t i = 0; i < 2; i++) {
		cookie_secrets_[i].version = uint8_t(1 - i);
		random_bytes(cookie_secrets_[i].key);
	}
	responder_suites_ = active_suites();
}

Engine::~Engine() { OPENSSL_cleanse(cookie_secrets_.data(), sizeof cookie_secrets_); }

std::string Engine::peer_label(const IkeSa& sa) const {
	if (sa.peer) return "peer " + peers_[*sa.peer].name;
	return "IKE from " + endpoint_text(sa.remote);
}

void Engine::log_limited(const std::string& line) {
	const Clock::time_point now = Clock::now();
	if (now - log_window_ >= kLogWindow) {
		if (counters_.logs_suppressed && logs_in_window_ >= kLogsPerWindow)
			host_.log_at(LogLevel::warning, "(IKE log lines held back so far: " +
			                                    std::to_string(counters_.logs_suppressed) + ")");
		log_window_ = now;
		logs_in_window_ = 0;
	}
	if (logs_in_window_++ < kLogsPerWindow)
		host_.log_at(LogLevel::warning, line);
	else
		counters_.logs_suppressed++;
}

Engine::IkeSa* Engine::find(uint64_t our_spi) noexcept {
	auto it = sas_.find(our_spi);
	return it == sas_.end() || it->second->state == IkeSa::State::closed ? nullptr : it->second.get();
}

void Engine::start(Clock::time_point now) {
	started_ = true;
	for (size_t i = 0; i < peers_.size(); i++)
		if (active_[i] && peers_[i].initiate && peers_[i].endpoint) initiate(i, now);
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
		if (sa) mark_closed(*sa); // sweep() removes what it holds
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
	if (ParseResult r = parse_message(msg, m); !r) {
		counters_.malformed++;
		debug_dropped(from, msg, parse_error_name(r.error).data());
		return;
	}
	const Header& h = m.header;
	if (h.exchange == Exchange::ike_sa_init) {
		debug_received_plain(from, msg.size(), m);
		if (!h.is_response()) {
			if (!h.from_initiator() || h.spi_r != 0 || h.message_id != 0) {
				counters_.malformed++;
				debug_dropped(
				    from, msg,
				    "an IKE_SA_INIT request must have message ID 0 and no responder SPI");
				return;
			}
			handle_init_request(via, from, msg, m, now);
		} else {
			IkeSa* sa = find(h.spi_i);
			// A notify-only answer (COOKIE, INVALID_KE_PAYLOAD, an error) has no responder SPI.
			if (!sa || !sa->initiator || sa->state != IkeSa::State::init_sent) {
				counters_.unknown_sa++;
				debug_dropped(from, msg, "not an answer to an IKE_SA_INIT we sent");
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
		debug_dropped(from, msg, "no IKE SA with these SPIs");
		return;
	}
	// An SK payload, or one fragment of a message in an SKF payload (RFC
	// 7383); either ends the chain (parse_message() made sure).
	const SkPayload* sk = m.find<SkPayload>();
	const RawPayload* skf = nullptr;
	if (!sk && !m.payloads.empty())
		if (const auto* r = std::get_if<RawPayload>(&m.payloads.back());
		    r && r->type == PayloadType::skf)
			skf = r;
	if (!sk && !skf) {
		counters_.malformed++;
		debug_dropped(from, msg, "no SK payload");
		return;
	}
	const bool retransmitted_request =
	    !h.is_response() && sa->peer_next_id > 0 && h.message_id == sa->peer_next_id - 1;
	if (h.is_response() ? (!sa->pending || h.message_id != sa->pending->id)
	                    : (h.message_id != sa->peer_next_id && !retransmitted_request)) {
		counters_.unknown_sa++; // a stale or out-of-window message ID (section 2.3)
		debug_dropped(from, msg, "a message ID out of the window");
		return;
	}
	std::optional<std::vector<uint8_t>> plain;
	PayloadType first_inner = PayloadType::none;
	if (skf) {
		// Nothing more to do until the last fragment verified; a
		// retransmitted request is answered there, on its first fragment.
		plain = reassemble(*sa, from, msg, *skf, h, retransmitted_request, now, first_inner);
		if (!plain) return;
	} else {
		plain = sa->sk_in->open(msg, sk->offset);
		if (!plain) {
			counters_.bad_icv++;
			debug_dropped(from, msg, "the SK payload's ICV did not verify");
			return;
		}
		first_inner = sk->first_inner;
		if (retransmitted_request) {
			// The peer did not get our answer: the same answer again (section 2.1).
			if (!sa->last_response.empty())
				transmit(*sa, sa->last_response, {}, "sent again (a retransmitted request)");
			return;
		}
		// The whole message came in one piece: any fragments of it are moot.
		(h.is_response() ? sa->frags_response : sa->frags_request).clear();
	}
	std::vector<Payload> inner;
	if (!parse_payloads(first_inner, *plain, inner)) {
		counters_.malformed++;
		debug_dropped(from, msg, "the payloads inside SK do not parse");
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
	debug_received(*sa, skf ? plain->size() : msg.size(), h, inner);
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
	case RequestKind::redirect: // the client took note; it deletes the IKE SA once it moved
		break;
	}
	if (sa.state == IkeSa::State::established) send_child_deletes(sa, now);
}

// ---- sending -----------------------------------------------------------------

void Engine::send_request(IkeSa& sa, Exchange ex, std::span<const Payload> inner, Clock::time_point now) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.exchange = ex;
	h.flags = sa.initiator ? kFlagInitiator : 0;
	h.message_id = sa.next_id++;
	Datagrams datagrams = seal_message(sa, h, inner);
	sa.pending = new_request(std::move(datagrams), h.message_id, RequestKind::liveness, now);
	transmit(sa, sa.pending->datagrams, inner);
}

void Engine::send_response(IkeSa& sa, const Header& req, std::span<const Payload> inner) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.exchange = req.exchange;
	h.flags = uint8_t(kFlagResponse | (sa.initiator ? kFlagInitiator : 0));
	h.message_id = req.message_id;
	sa.last_response = seal_message(sa, h, inner);
	transmit(sa, sa.last_response, inner);
}

std::vector<IkeSaStatus> Engine::status(Clock::time_point now) const {
	std::vector<IkeSaStatus> out;
	for (const auto& [spi, sa] : sas_) {
		if (sa->peer && !active_[*sa->peer]) continue; // being removed: no longer configured
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
		s.peer_auth = sa->peer_auth;
		s.peer_subject = sa->peer_subject;
		s.eap_identity = sa->eap_identity;
		s.peer_issuer = sa->peer_issuer;
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
