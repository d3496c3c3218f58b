// The IKEv2 engine, EAP in IKE_AUTH (RFC 7296 section 2.16), both roles.
//
// Gateway (EapRole::server), as the responder:
//   1. IDi, [CERTREQ,] [IDr,] SA, TSi, TSr, [CP] without AUTH asks for EAP:
//      we answer IDr, CERT, AUTH (our signature) and EAP-Request/Identity,
//      and keep SA, TS and CP for the end.
//   2. Each IKE_AUTH request then carries one EAP response; we answer with
//      the method's next request, then EAP-Success (or EAP-Failure and
//      AUTHENTICATION_FAILED).
//   3. The peer's AUTH, computed with the MSK as the shared secret over its
//      signed octets with the IDi of step 1, is checked; ours goes back with
//      the configuration payload and the first CHILD_SA from step 1.
// Client (EapRole::client), as the initiator: the mirror image. Our first
// IKE_AUTH has no AUTH; the gateway's first answer must prove its
// certificate; then we answer each EAP request and, after EAP-Success, send
// AUTH with the MSK and check the gateway's.
//
// Every EAP conversation is bounded (kMaxEapRounds); anything out of order
// or malformed ends it with a reason in the log and, as gateway,
// AUTHENTICATION_FAILED. The IKE SA stays half-open (and expires as one)
// until AUTH with the MSK has verified.
#include "ike/eap_mschapv2.hpp"
#include "ike/eap_tls.hpp"
#include "ike/engine_internal.hpp"

namespace esptun::ike {

std::string eap_method_name(uint8_t type) {
	switch (type) {
	case eap::type::mschapv2:
		return "EAP-MSCHAPv2";
	case eap::type::tls:
		return "EAP-TLS";
	default:
		return "EAP type " + std::to_string(type);
	}
}

namespace {

/// The EAP payload of @inner, parsed; nullopt without one or when it does not parse.
std::optional<eap::Packet> find_eap(const std::vector<Payload>& inner, bool& present) {
	present = false;
	for (const Payload& p : inner)
		if (const auto* r = std::get_if<RawPayload>(&p); r && r->type == PayloadType::eap) {
			present = true;
			return eap::parse(r->body);
		}
	return std::nullopt;
}

RawPayload eap_payload(const eap::Packet& p) { return RawPayload{PayloadType::eap, false, eap::encode(p)}; }

/// An EAP identity for a log line: printable ASCII, the rest as '?'.
std::string printable(std::span<const uint8_t> b) {
	std::string s;
	for (uint8_t c : b)
		s += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
	return s;
}

} // namespace

// ---- gateway -----------------------------------------------------------------

void Engine::begin_eap_server(IkeSa& sa, const Header& req, size_t peer, const IdPayload& idi,
                              const std::vector<Payload>& inner, Clock::time_point /*now*/) {
	const PeerPolicy& pol = peers_[peer];
	auto e = std::make_unique<EapState>();
	e->peer = peer;
	e->id_body = idi.body();
	e->idi = Identity{idi.type, idi.data};
	for (const Payload& p : inner)
		if (std::holds_alternative<SaPayload>(p) || std::holds_alternative<TsPayload>(p) ||
		    std::holds_alternative<CpPayload>(p))
			e->first_request.push_back(p);
	uint8_t first_id[1];
	random_bytes(first_id);
	e->id = first_id[0];

	IdPayload idr{false, pol.local_id.type, pol.local_id.data};
	std::vector<Payload> reply{idr};
	for (Payload& p : cert_payloads(*pol.credentials))
		reply.push_back(std::move(p));
	reply.push_back(pol.credentials->sign(
	    signed_octets(sa.suite.prf, sa.init_response, sa.ni, sa.keys.sk_pr, idr.body()),
	    sa.peer_sig_hashes, pol.rsa_pss));
	reply.push_back(eap_payload({eap::Code::request, e->id, eap::type::identity, {}}));
	sa.eap = std::move(e);
	send_response(sa, req, reply);
}

void Engine::fail_eap_server(IkeSa& sa, const Header& req, const std::string& why, bool send_failure) {
	std::vector<Payload> extra;
	if (send_failure) extra.push_back(eap_payload({eap::Code::failure, sa.eap->id, 0, {}}));
	if (sa.eap->refused) {
		// Counted and logged when the method refused (see handle_eap_request).
		sa.eap.reset();
		extra.push_back(make_notify(notify::authentication_failed));
		send_response(sa, req, extra);
		mark_closed(sa);
		return;
	}
	counters_.eap_failed++;
	sa.eap.reset();
	refuse_auth(sa, req, why, std::move(extra));
}

void Engine::handle_eap_request(IkeSa& sa, const Header& req, std::vector<Payload>& inner,
                                Clock::time_point now) {
	EapState& e = *sa.eap;
	const PeerPolicy& pol = peers_[e.peer];
	const std::string who = "peer " + pol.name + ": " + eap_method_name(pol.eap_method) + " with " +
	                        endpoint_text(sa.remote) +
	                        (e.identity.empty() ? "" : " (EAP identity '" + e.identity + "')");
	if (!active_[e.peer]) {
		fail_eap_server(sa, req, who + ": the peer was removed from the configuration", true);
		return;
	}
	if (e.stage == EapState::Stage::success) {
		// Step 3: AUTH with the MSK (section 2.16: the MSK is the shared secret).
		const AuthPayload* auth = find_in<AuthPayload>(inner);
		if (!auth) {
			fail_eap_server(sa, req, who + ": after EAP-Success the request has no AUTH payload",
			                false);
			return;
		}
		const std::vector<uint8_t> want =
		    psk_auth(sa.suite.prf, e.msk, sa.init_request, sa.nr, sa.keys.sk_pi, e.id_body);
		if (auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
			fail_eap_server(
			    sa, req,
			    who + ": authentication failed: its AUTH does not match the EAP key (MSK)",
			    false);
			return;
		}
		if (pol.is_template()) {
			// The user is who the method proved (MSCHAPv2: the user name;
			// EAP-TLS: the certificate's subject), whatever the IDi said.
			std::string why;
			const std::optional<size_t> instance =
			    instantiate(e.peer, e.authenticated_as, e.idi, why);
			if (!instance) {
				fail_eap_server(sa, req, who + ": " + why, false);
				return;
			}
			sa.peer = instance;
		} else {
			sa.peer = e.peer;
		}
		index_peer(sa, sa.spi_r);
		// peers_ may have grown (a new instance): pol is not to be used from here.
		const PeerPolicy& us = peers_[*sa.peer];
		sa.peer_auth = eap_method_name(us.eap_method);
		sa.eap_identity = e.authenticated_as;
		host_.log("peer " + us.name + ": authenticated by " + sa.peer_auth + " as '" +
		          e.authenticated_as + "'");
		IdPayload idr{false, us.local_id.type, us.local_id.data};
		std::vector<Payload> reply{
		    AuthPayload{AuthMethod::psk, psk_auth(sa.suite.prf, e.msk, sa.init_response, sa.ni,
		                                          sa.keys.sk_pr, idr.body())}};
		const std::vector<Payload> first = std::move(e.first_request);
		sa.eap.reset();
		finish_auth_request(sa, req, first, std::move(reply), now);
		return;
	}
	bool present = false;
	const std::optional<eap::Packet> in = find_eap(inner, present);
	if (!in) {
		fail_eap_server(
		    sa, req,
		    who + (present ? ": its EAP payload is malformed" : ": the request has no EAP payload"),
		    true);
		return;
	}
	if (in->code != eap::Code::response || in->id != e.id) {
		fail_eap_server(sa, req, who + ": its EAP packet is not the response to our request", true);
		return;
	}
	if (++e.rounds > kMaxEapRounds) {
		fail_eap_server(sa, req, who + ": more than " + std::to_string(kMaxEapRounds) + " EAP rounds",
		                true);
		return;
	}
	eap::Packet out{eap::Code::request, uint8_t(e.id + 1), pol.eap_method, {}};
	if (e.stage == EapState::Stage::identity) {
		if (in->type != eap::type::identity || in->data.empty() ||
		    in->data.size() > kMaxEapIdentity) {
			fail_eap_server(sa, req, who + ": no usable EAP-Identity in its response", true);
			return;
		}
		e.identity = printable(in->data);
		try {
			if (pol.eap_method == eap::type::mschapv2) {
				std::shared_ptr<const Users> users = pol.users;
				e.server = eap::make_mschapv2_server(
				    [users](std::string_view user) -> std::optional<SecretBytes> {
					    if (!users) return std::nullopt;
					    auto it = users->find(user);
					    if (it == users->end() || it->second.nt_hash.empty())
						    return std::nullopt;
					    return it->second.nt_hash;
				    },
				    identity_text(pol.local_id));
			} else {
				e.server = eap::make_tls_server(pol.credentials, pol.trust);
			}
			out.data = e.server->start();
		} catch (const std::exception& ex) {
			counters_.internal_errors++;
			fail_eap_server(sa, req, who + ": cannot start the method: " + ex.what(), true);
			return;
		}
		e.stage = EapState::Stage::method;
	} else {
		if (in->type == eap::type::nak) {
			std::string wants;
			for (uint8_t t : in->data)
				wants += (wants.empty() ? "" : ", ") + eap_method_name(t);
			fail_eap_server(sa, req,
			                who + ": the client does not do " + eap_method_name(pol.eap_method) +
			                    (wants.empty() ? "" : "; it asks for " + wants),
			                true);
			return;
		}
		if (in->type != pol.eap_method) {
			fail_eap_server(sa, req,
			                who + ": its response is of another EAP type (" +
			                    eap_method_name(in->type) + ")",
			                true);
			return;
		}
		eap::Step step = e.server->on_response(in->data);
		if (step.kind == eap::Step::Kind::failure) {
			fail_eap_server(sa, req, who + ": authentication failed: " + step.error, true);
			return;
		}
		if (step.kind == eap::Step::Kind::success) {
			e.msk = e.server->msk();
			e.authenticated_as = e.server->authenticated_as();
			if (e.msk.size() < 32) {
				fail_eap_server(sa, req, who + ": the method derived no key (MSK)", true);
				return;
			}
			e.stage = EapState::Stage::success;
			const Payload p[] = {eap_payload({eap::Code::success, in->id, 0, {}})};
			send_response(sa, req, p);
			return;
		}
		if (!step.error.empty() && !e.refused) {
			// The method refuses the peer (MSCHAPv2's Failure request) and
			// waits for its acknowledgement, which some clients (strongSwan)
			// never send: the reason is logged now, and the half-open SA
			// expires if nothing follows.
			e.refused = true;
			counters_.eap_failed++;
			counters_.auth_failed++;
			log_limited(who + ": authentication failed: " + step.error);
		}
		out.data = std::move(step.data);
	}
	e.id = out.id;
	const Payload p[] = {eap_payload(out)};
	send_response(sa, req, p);
}

// ---- client ------------------------------------------------------------------

void Engine::handle_eap_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	EapState& e = *sa.eap;
	const PeerPolicy& pol = peers_[*sa.peer];
	const auto give_up = [&](const std::string& why) {
		counters_.eap_failed++;
		counters_.auth_failed++;
		sa.eap.reset();
		close(sa, why, true, now);
	};
	bool present = false;
	const std::optional<eap::Packet> in = find_eap(inner, present);
	if (find_notify_in(inner, notify::authentication_failed)) {
		std::string detail;
		if (in && in->code == eap::Code::failure) detail = " with EAP-Failure";
		give_up("authentication failed: " + endpoint_text(sa.remote) + " refused our " +
		        eap_method_name(pol.eap_method) + " as '" + pol.eap_identity + "'" + detail +
		        " (AUTHENTICATION_FAILED)" + (e.refusal.empty() ? "" : ": " + e.refusal));
		return;
	}
	if (e.stage == EapState::Stage::success) {
		// The last answer: the gateway's AUTH with the MSK, then what
		// finish_auth_response() installs.
		const AuthPayload* auth = find_in<AuthPayload>(inner);
		const std::vector<uint8_t> want =
		    psk_auth(sa.suite.prf, e.msk, sa.init_response, sa.ni, sa.keys.sk_pr, e.id_body);
		if (!auth || auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
			give_up(
			    "authentication failed: " + endpoint_text(sa.remote) +
			    (auth ? "'s AUTH does not match the EAP key (MSK)" : " sent no AUTH after EAP"));
			return;
		}
		sa.eap.reset();
		finish_auth_response(sa, inner, now);
		return;
	}
	if (e.id_body.empty()) {
		// The first answer: the gateway proves its certificate (section 2.16).
		if (!pol.trust || (pol.eap_method == eap::type::tls && !pol.credentials)) {
			give_up(!pol.trust ? "EAP: no CAs (ca_dir) to check the gateway's certificate with"
			                   : "EAP-TLS: no certificate of ours (cert_file) to log in with");
			return;
		}
		const IdPayload* idr = find_id(inner, false);
		const AuthPayload* auth = find_in<AuthPayload>(inner);
		if (!idr || !auth) {
			const NotifyPayload* err = first_error(inner);
			give_up("IKE_AUTH failed: " +
			        (err ? notify_name(err->type)
			             : std::string("the gateway's answer has no AUTH payload")));
			return;
		}
		if (!same_identity(Identity{idr->type, idr->data}, pol.remote_id)) {
			give_up("authentication failed: the responder identifies as '" +
			        identity_text({idr->type, idr->data}) + "', expected '" +
			        identity_text(pol.remote_id) + "'");
			return;
		}
		const std::string why = verify_cert_auth(
		    sa, pol, pol.remote_id, inner, *auth,
		    signed_octets(sa.suite.prf, sa.init_response, sa.ni, sa.keys.sk_pr, idr->body()));
		if (!why.empty()) {
			give_up("authentication failed: " + endpoint_text(sa.remote) + ": " + why);
			return;
		}
		e.id_body = idr->body();
	}
	if (!in) {
		give_up(std::string("EAP failed: ") + (present ? "the gateway's EAP payload is malformed"
		                                               : "the gateway sent no EAP payload"));
		return;
	}
	if (++e.rounds > kMaxEapRounds) {
		give_up("EAP failed: more than " + std::to_string(kMaxEapRounds) + " rounds");
		return;
	}
	if (in->code == eap::Code::failure) {
		give_up("authentication failed: " + endpoint_text(sa.remote) + " refused our " +
		        eap_method_name(pol.eap_method) + " as '" + pol.eap_identity + "' (EAP-Failure)" +
		        (e.refusal.empty() ? "" : ": " + e.refusal));
		return;
	}
	if (in->code == eap::Code::success) {
		if (!e.client || !e.client->finished()) {
			give_up("EAP failed: EAP-Success before " + eap_method_name(pol.eap_method) +
			        " had finished (the gateway did not prove itself)");
			return;
		}
		e.msk = e.client->msk();
		e.stage = EapState::Stage::success;
		IdPayload idi{true, pol.local_id.type, pol.local_id.data};
		const Payload p[] = {
		    AuthPayload{AuthMethod::psk, psk_auth(sa.suite.prf, e.msk, sa.init_request, sa.nr,
		                                          sa.keys.sk_pi, idi.body())}};
		send_request(sa, Exchange::ike_auth, p, now);
		sa.pending->kind = RequestKind::auth;
		return;
	}
	if (in->code != eap::Code::request) {
		give_up("EAP failed: the gateway sent an EAP response");
		return;
	}
	eap::Packet out{eap::Code::response, in->id, in->type, {}};
	if (in->type == eap::type::identity) {
		out.data.assign(pol.eap_identity.begin(), pol.eap_identity.end());
	} else if (in->type == eap::type::notification) {
		// RFC 3748 section 5.2: acknowledged with an empty response.
	} else if (in->type != pol.eap_method) {
		// Section 5.3.1: a Nak naming the method we do.
		out.type = eap::type::nak;
		out.data = {pol.eap_method};
	} else {
		try {
			if (!e.client)
				e.client =
				    pol.eap_method == eap::type::mschapv2
				        ? eap::make_mschapv2_peer(pol.eap_identity, pol.eap_password)
				        : eap::make_tls_peer(pol.credentials, pol.trust, pol.remote_id);
			eap::Step step = e.client->on_request(in->data);
			if (step.kind == eap::Step::Kind::failure) {
				give_up("EAP failed: " + eap_method_name(pol.eap_method) + ": " + step.error);
				return;
			}
			if (!step.error.empty()) e.refusal = step.error;
			out.data = std::move(step.data);
		} catch (const std::exception& ex) {
			counters_.internal_errors++;
			give_up("EAP failed: " + std::string(ex.what()));
			return;
		}
	}
	e.stage = EapState::Stage::method;
	const Payload p[] = {eap_payload(out)};
	send_request(sa, Exchange::ike_auth, p, now);
	sa.pending->kind = RequestKind::auth;
}

} // namespace esptun::ike
