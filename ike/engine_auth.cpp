// The IKEv2 engine, IKE_AUTH (RFC 7296 section 1.2): PSK authentication
// both ways, the configuration payload (virtual addresses, fixed or leased
// from the gateway's pool, and DNS servers; section 3.15), and the first
// CHILD_SA with its traffic selectors narrowed (section 2.9). See engine.hpp.
#include "ike/engine_internal.hpp"

namespace esptun::ike {

// ---- IKE_AUTH --------------------------------------------------------------

ChildKeys Engine::child_keys(const IkeSa& sa, crypto::Cipher c, bool esn, uint32_t spi_in, uint32_t spi_out,
                             bool we_initiated, std::span<const uint8_t> ni, std::span<const uint8_t> nr,
                             std::span<const uint8_t> g_ir) const {
	// Section 2.17: KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr), g^ir with
	// PFS; the exchange initiator's outbound keys (encryption, then
	// integrity) come first.
	const crypto::CipherSpec& spec = crypto::cipher_spec(c);
	const size_t per_dir = spec.enc_key_len + spec.auth_key_len;
	const SecretBytes km = child_keymat(sa.suite.prf, sa.keys.sk_d, g_ir, ni, nr, 2 * per_dir);
	auto part = [&](size_t off, size_t len) {
		return SecretBytes(km.begin() + long(off), km.begin() + long(off + len));
	};
	ChildKeys k;
	k.spi_in = spi_in;
	k.spi_out = spi_out;
	k.cipher = c;
	k.esn = esn;
	k.remote = sa.remote;
	const size_t out_off = we_initiated ? 0 : per_dir, in_off = we_initiated ? per_dir : 0;
	k.enc_out = part(out_off, spec.enc_key_len);
	k.auth_out = part(out_off + spec.enc_key_len, spec.auth_key_len);
	k.enc_in = part(in_off, spec.enc_key_len);
	k.auth_in = part(in_off + spec.enc_key_len, spec.auth_key_len);
	return k;
}

void Engine::refuse_auth(IkeSa& sa, const Header& req, const std::string& why, std::vector<Payload> extra) {
	counters_.auth_failed++;
	log_limited(why);
	extra.push_back(make_notify(notify::authentication_failed));
	send_response(sa, req, extra);
	mark_closed(sa);
}

std::string Engine::suite_refusal(const IkeSa& sa, const PeerPolicy& pol) const {
	// IKE_SA_INIT chose the IKE SA's suite before we knew who the peer is,
	// from all peers' ike_proposals together. Now that we know, the suite
	// must be one of its own, or it could use a suite only another peer
	// allows.
	if (std::find(pol.ike_proposals.begin(), pol.ike_proposals.end(), sa.suite) !=
	    pol.ike_proposals.end())
		return {};
	return "peer " + pol.name + ": refused after authentication: " + endpoint_text(sa.remote) +
	       " negotiated " + ike_suite_name(sa.suite) + ", which is not in this peer's ike_proposals (" +
	       suites_text(pol.ike_proposals) + ")";
}

void Engine::handle_auth_request(IkeSa& sa, std::span<const uint8_t> /*msg*/, std::vector<Payload>& inner,
                                 Clock::time_point now) {
	const Header req{sa.spi_i,           sa.spi_r,       PayloadType::sk,     kVersion2,
	                 Exchange::ike_auth, kFlagInitiator, sa.peer_next_id - 1, 0};
	if (sa.eap) {
		handle_eap_request(sa, req, inner, now);
		return;
	}
	const IdPayload* idi = find_id(inner, true);
	const AuthPayload* auth = find_in<AuthPayload>(inner);
	if (!idi) {
		counters_.malformed++;
		const Payload p[] = {make_notify(notify::invalid_syntax)};
		send_response(sa, req, p);
		close(sa, "IKE_AUTH without identity payload", false, now);
		return;
	}
	const Identity who{idi->type, idi->data};
	const std::optional<size_t> match = match_peer(who);
	if (!match) {
		refuse_auth(sa, req,
		            "IKE_AUTH from " + endpoint_text(sa.remote) +
		                ": authentication failed: identity '" + identity_text(who) +
		                "' is not configured for any peer");
		return;
	}
	const PeerPolicy& pol = peers_[*match];
	const std::string peer_at = "peer " + pol.name +
	                            ": authentication failed: " + endpoint_text(sa.remote) + " (ID '" +
	                            identity_text(who) + "')";
	// Section 2.16: an initiator that leaves AUTH out asks for EAP.
	if (pol.eap_role == EapRole::server) {
		if (auth)
			refuse_auth(sa, req,
			            peer_at +
			                " authenticates with AUTH, but this peer must use EAP (auth = " +
			                eap_method_name(pol.eap_method) + ")");
		else if (const std::string why = suite_refusal(sa, pol); !why.empty())
			refuse_auth(sa, req, why);
		else if (!pol.credentials || (pol.eap_method == eap::type::tls && !pol.trust) ||
		         (pol.eap_method == eap::type::mschapv2 && !pol.users))
			refuse_auth(sa, req,
			            "peer " + pol.name + ": cannot run " + eap_method_name(pol.eap_method) +
			                ": its certificate, users or CAs are not configured");
		else
			begin_eap_server(sa, req, *match, *idi, inner, now);
		return;
	}
	if (!auth) {
		refuse_auth(sa, req,
		            peer_at + " asks for EAP (no AUTH payload), but this peer authenticates with " +
		                (pol.peer_signs() ? "certificates" : "a pre-shared key"));
		return;
	}
	if (pol.peer_signs()) {
		const std::string why = verify_cert_auth(
		    sa, pol, who, inner, *auth,
		    signed_octets(sa.suite.prf, sa.init_request, sa.nr, sa.keys.sk_pi, idi->body()));
		if (!why.empty()) {
			refuse_auth(sa, req, peer_at + ": " + why);
			return;
		}
	} else {
		const std::vector<uint8_t> want =
		    psk_auth(sa.suite.prf, pol.psk, sa.init_request, sa.nr, sa.keys.sk_pi, idi->body());
		if (auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
			refuse_auth(sa, req,
			            peer_at + " " +
			                (auth->method != AuthMethod::psk
			                     ? "uses an authentication method other than PSK"
			                     : "does not prove our pre-shared key"));
			return;
		}
		sa.peer_auth = "psk";
	}
	// Section 2.21.2: any error that makes IKE_AUTH fail is answered
	// AUTHENTICATION_FAILED (NO_PROPOSAL_CHOSEN here would speak of the
	// CHILD_SA only and leave the IKE SA up).
	if (const std::string why = suite_refusal(sa, pol); !why.empty()) {
		refuse_auth(sa, req, why);
		return;
	}
	sa.peer = match;
	index_peer(sa, sa.spi_r);
	if (pol.is_template()) {
		// The user is who the certificate (bound to the IDi) proved.
		std::string why;
		const std::optional<size_t> instance = instantiate(*match, identity_text(who), who, why);
		if (!instance) {
			sa.peer.reset();
			refuse_auth(sa, req, peer_at + ": " + why);
			return;
		}
		sa.peer = instance;
		index_peer(sa, sa.spi_r);
	}

	// peers_ may have grown (a new instance): pol is not to be used from here.
	const PeerPolicy& us = peers_[*sa.peer];
	IdPayload idr{false, us.local_id.type, us.local_id.data};
	std::vector<Payload> reply{idr};
	if (us.we_sign()) {
		for (Payload& p : cert_payloads(*us.credentials))
			reply.push_back(std::move(p));
		reply.push_back(us.credentials->sign(
		    signed_octets(sa.suite.prf, sa.init_response, sa.ni, sa.keys.sk_pr, idr.body()),
		    sa.peer_sig_hashes, us.rsa_pss));
	} else {
		reply.push_back(AuthPayload{AuthMethod::psk, psk_auth(sa.suite.prf, us.psk, sa.init_response,
		                                                      sa.ni, sa.keys.sk_pr, idr.body())});
	}
	finish_auth_request(sa, req, inner, std::move(reply), now);
}

void Engine::finish_auth_request(IkeSa& sa, const Header& req, const std::vector<Payload>& request,
                                 std::vector<Payload> reply, Clock::time_point now) {
	const size_t peer = *sa.peer;
	const PeerPolicy& pol = peers_[peer];
	// A client asking for a virtual address gets its fixed one(s) or a lease
	// from the pool, and the DNS servers. Without any address it gets
	// INTERNAL_ADDRESS_FAILURE and no CHILD_SA (section 3.10.1).
	bool address_failed = false;
	if (const CpPayload* cp = find_in<CpPayload>(request); cp && cp->type == CpType::request) {
		bool want4 = false, want6 = false, want_dns = false;
		for (const CpAttribute& at : cp->attributes) {
			want4 = want4 || at.type == cp_attr::internal_ip4_address;
			want6 = want6 || at.type == cp_attr::internal_ip6_address;
			want_dns = want_dns || at.type == cp_attr::internal_ip4_dns ||
			           at.type == cp_attr::internal_ip6_dns;
		}
		sa.virtual_ips = offer_addresses(sa, pol, want4, want6);
		address_failed = (want4 || want6) && sa.virtual_ips.empty();
		CpPayload out{CpType::reply, {}};
		for (const IpAddress& a : sa.virtual_ips)
			out.attributes.push_back(address_attribute(a, false));
		if (want_dns && !address_failed)
			for (const IpAddress& d : pol.dns)
				out.attributes.push_back(address_attribute(d, true));
		if (!out.attributes.empty()) reply.push_back(out);
		// Status shows what was handed out: none to a client that asked for none.
		sa.dns = want_dns && !address_failed ? pol.dns : std::vector<IpAddress>{};
	}
	const SaPayload* child_sa = find_in<SaPayload>(request);
	const TsPayload* tsi = find_ts(request, true);
	const TsPayload* tsr = find_ts(request, false);
	std::string child_note;
	if (address_failed) {
		child_note = "no CHILD_SA: no virtual address for it";
		reply.push_back(make_notify(notify::internal_address_failure));
	} else if (child_sa && tsi && tsr) {
		std::optional<EspChoice> choice =
		    choose_esp(*child_sa, pol.esp_proposals, ChildExchange::ike_auth);
		std::vector<TrafficSelector> ts_i = narrow(tsi->selectors, peer_side(peer));
		// TSr is what the peer asks to reach through us: only local_ts of it
		// (section 2.9; without local_ts, all of it, as far as it is sane).
		std::vector<TrafficSelector> ts_r = narrow(tsr->selectors, local_side(peer));
		if (!choice) {
			counters_.no_proposal++;
			child_note =
			    "no CHILD_SA: no ESP proposal in common; it offered " + describe_offer(*child_sa);
			reply.push_back(make_notify(notify::no_proposal_chosen));
		} else if (ts_i.empty()) {
			child_note = "no CHILD_SA: its traffic selectors " + selectors_text(tsi->selectors) +
			             " are outside allowed_ips, or too many once narrowed";
			reply.push_back(make_notify(notify::ts_unacceptable));
		} else if (ts_r.empty()) {
			child_note = "no CHILD_SA: the selectors it asks to reach " +
			             selectors_text(tsr->selectors) +
			             " are outside local_ts, or too many once narrowed";
			reply.push_back(make_notify(notify::ts_unacceptable));
		} else if (std::optional<uint32_t> spi = host_.allocate_spi(); !spi) {
			refuse_sa(sa, "no CHILD_SA: the SA table is full");
			reply.push_back(make_notify(notify::no_additional_sas));
		} else if (const ChildKeys keys =
		               with_local(child_keys(sa, choice->cipher, choice->esn, *spi, choice->peer_spi,
		                                     false, sa.ni, sa.nr),
		                          ts_r);
		           !host_.install_child(peer, keys, true)) {
			refuse_sa(sa, "no CHILD_SA: the host could not install it");
			reply.push_back(make_notify(notify::no_additional_sas));
		} else {
			const uint32_t spi_in = *spi;
			choice->reply.spi = be32_bytes(spi_in);
			sa.children.push_back(child_record(keys, true, false, sa.ni, sa.nr, ts_r, ts_i,
			                                   pol.child_rekey_s, now));
			child_note =
			    "CHILD_SA up, SPIs in " + hex_spi(spi_in, 8) + " out " +
			    hex_spi(choice->peer_spi, 8) + ", " +
			    std::string(crypto::cipher_spec(choice->cipher).name) +
			    (choice->esn ? " with ESN" : "") + ", selectors " + selectors_text(ts_i) +
			    (sa.virtual_ips.empty() ? ""
			                            : ", virtual address " + addresses_text(sa.virtual_ips)) +
			    ", reaching " + selectors_text(ts_r);
			reply.push_back(SaPayload{{choice->reply}});
			reply.push_back(TsPayload{true, ts_i});
			reply.push_back(TsPayload{false, ts_r});
		}
	}
	send_response(sa, req, reply);
	established(sa, now);
	if (!child_note.empty()) host_.log("peer " + pol.name + ": " + child_note);
}

std::vector<IpAddress> Engine::offer_addresses(IkeSa& sa, const PeerPolicy& pol, bool want4, bool want6) {
	const size_t peer = *sa.peer;
	std::vector<IpAddress> out;
	for (const Family f : {Family::v4, Family::v6}) {
		if (!(f == Family::v4 ? want4 : want6)) continue;
		const size_t before = out.size();
		for (const IpAddress& a : pol.assign)
			if (a.family == f) out.push_back(a);
		if (out.size() > before) continue;
		if (std::optional<IpAddress> a = host_.lease_address(peer, f)) {
			out.push_back(*a);
			if (std::find(leased_[peer].begin(), leased_[peer].end(), *a) == leased_[peer].end())
				leased_[peer].push_back(*a);
		}
	}
	if ((want4 || want6) && out.empty())
		host_.log("peer " + pol.name + " asks for a virtual address, but has no fixed one " +
		          "in [tunnel] address_pool and the pool has none free for it");
	return out;
}

std::vector<IpPrefix> Engine::local_side(size_t peer) const {
	if (!peers_[peer].local_ts.empty()) return peers_[peer].local_ts;
	return {*parse_prefix("0.0.0.0/0"), *parse_prefix("::/0")};
}

std::vector<IpPrefix> Engine::peer_side(size_t peer) const {
	std::vector<IpPrefix> out = peers_[peer].allowed_ips;
	for (const IpAddress& a : leased_[peer])
		out.push_back({a, uint8_t(a.max_prefix())});
	return out;
}

void Engine::handle_auth_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	if (sa.eap) {
		handle_eap_response(sa, inner, now);
		return;
	}
	const PeerPolicy& pol = peers_[*sa.peer];
	if (find_notify_in(inner, notify::authentication_failed)) {
		counters_.auth_failed++;
		close(sa,
		      "authentication failed: " + endpoint_text(sa.remote) + " rejected our identity or " +
		          (pol.we_sign() ? "certificate" : "pre-shared key") + " (AUTHENTICATION_FAILED)",
		      true, now);
		return;
	}
	const IdPayload* idr = find_id(inner, false);
	const AuthPayload* auth = find_in<AuthPayload>(inner);
	if (!idr || !auth) {
		const NotifyPayload* e = first_error(inner);
		close(sa,
		      "IKE_AUTH failed: " +
		          (e ? notify_name(e->type) : std::string("the answer has no AUTH payload")),
		      true, now);
		return;
	}
	if (!same_identity(Identity{idr->type, idr->data}, pol.remote_id)) {
		counters_.auth_failed++;
		close(sa,
		      "authentication failed: the responder identifies as '" +
		          identity_text({idr->type, idr->data}) + "', expected '" +
		          identity_text(pol.remote_id) + "'",
		      true, now);
		return;
	}
	if (pol.peer_signs()) {
		const std::string why = verify_cert_auth(
		    sa, pol, pol.remote_id, inner, *auth,
		    signed_octets(sa.suite.prf, sa.init_response, sa.ni, sa.keys.sk_pr, idr->body()));
		if (!why.empty()) {
			// The responder authenticated us and holds an established IKE
			// SA: our Delete ends it (section 2.21.2), so it keeps none.
			// close() sends a Delete only from an established SA, which is
			// what this one is to the responder.
			counters_.auth_failed++;
			mark_established(sa);
			close(sa, "authentication failed: " + endpoint_text(sa.remote) + ": " + why, true,
			      now, true);
			return;
		}
	} else {
		const std::vector<uint8_t> want =
		    psk_auth(sa.suite.prf, pol.psk, sa.init_response, sa.ni, sa.keys.sk_pr, idr->body());
		if (auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
			counters_.auth_failed++;
			close(sa,
			      "authentication failed: " + endpoint_text(sa.remote) +
			          " does not prove our pre-shared key",
			      true, now);
			return;
		}
		sa.peer_auth = "psk";
	}
	finish_auth_response(sa, inner, now);
}

void Engine::finish_auth_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	const uint32_t spi_in = sa.reserved_spi;
	sa.reserved_spi = 0;
	if (pol.request_address) {
		sa.virtual_ips.clear();
		sa.dns.clear();
		if (const CpPayload* cp = find_in<CpPayload>(inner); cp && cp->type == CpType::reply)
			for (const CpAttribute& at : cp->attributes) {
				std::optional<IpAddress> a = attribute_address(at);
				if (!a) continue;
				const bool dns = at.type == cp_attr::internal_ip4_dns ||
				                 at.type == cp_attr::internal_ip6_dns;
				(dns ? sa.dns : sa.virtual_ips).push_back(*a);
			}
		if (sa.virtual_ips.empty()) {
			host_.release_spi(spi_in);
			established(sa, now);
			close(sa,
			      std::string("the gateway assigned no virtual address") +
			          (find_notify_in(inner, notify::internal_address_failure)
			               ? " (INTERNAL_ADDRESS_FAILURE: its address_pool is full or has none "
			                 "for our identity)"
			               : " (it has no address_pool for our identity)"),
			      true, now, true);
			return;
		}
	}
	established(sa, now);
	if (pol.request_address) {
		host_.log("peer " + pol.name + ": virtual address " + addresses_text(sa.virtual_ips) +
		          (sa.dns.empty() ? "" : ", DNS " + addresses_text(sa.dns)));
		host_.assigned(*sa.peer, sa.virtual_ips, sa.dns);
	}
	const SaPayload* child_sa = find_in<SaPayload>(inner);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	std::optional<EspChoice> choice;
	if (child_sa) choice = accept_esp(*child_sa, pol.esp_proposals, ChildExchange::ike_auth);
	std::string problem;
	if (const NotifyPayload* e = first_error(inner))
		problem = "the responder refused the CHILD_SA: " + notify_name(e->type);
	else if (!choice || !tsi || !tsr)
		problem = "the responder's CHILD_SA answer is not one we offered";
	else if (narrow(tsr->selectors, pol.allowed_ips) != tsr->selectors)
		problem = "the responder's traffic selectors " + selectors_text(tsr->selectors) +
		          " exceed allowed_ips";
	else if (narrow(tsi->selectors, local_side(*sa.peer)) != tsi->selectors)
		problem = "the responder's traffic selectors for our side " + selectors_text(tsi->selectors) +
		          " exceed local_ts";
	if (!problem.empty()) {
		host_.release_spi(spi_in);
		close(sa, problem, true, now, true);
		return;
	}
	const ChildKeys keys = with_local(
	    child_keys(sa, choice->cipher, choice->esn, spi_in, choice->peer_spi, true, sa.ni, sa.nr),
	    tsi->selectors);
	if (!host_.install_child(*sa.peer, keys, true)) {
		close(sa, "the host could not install the CHILD_SA", true, now, true);
		return;
	}
	sa.children.push_back(child_record(keys, true, true, sa.ni, sa.nr, tsi->selectors, tsr->selectors,
	                                   pol.child_rekey_s, now));
	host_.child_selectors(*sa.peer, tsr->selectors);
	restart_backoff_s_[*sa.peer] =
	    kRestartMinS; // a working tunnel: the next failure starts the backoff over
	host_.log("peer " + pol.name + ": CHILD_SA up, SPIs in " + hex_spi(spi_in, 8) + " out " +
	          hex_spi(choice->peer_spi, 8) + ", " +
	          std::string(crypto::cipher_spec(choice->cipher).name) + (choice->esn ? " with ESN" : "") +
	          ", selectors " + selectors_text(tsr->selectors));
}

std::vector<Payload> Engine::cert_init_payloads() const {
	// The same for every IKE_SA_INIT until a peer is added or removed.
	if (cert_init_cache_) return *cert_init_cache_;
	std::vector<uint8_t> hashes;
	bool any = false;
	for (size_t i = 0; i < peers_.size(); i++) {
		if (!active_[i] || peers_[i].template_of || !(peers_[i].we_sign() || peers_[i].peer_signs()))
			continue; // an instance has its template's CAs
		any = true;
		if (!peers_[i].peer_signs()) continue;
		const std::vector<uint8_t>& h = peers_[i].trust->ca_key_hashes();
		for (size_t off = 0; off + SHA_DIGEST_LENGTH <= h.size(); off += SHA_DIGEST_LENGTH) {
			if (hashes.size() >= kMaxCertreqCas * SHA_DIGEST_LENGTH) break;
			const auto one = std::span<const uint8_t>(h).subspan(off, SHA_DIGEST_LENGTH);
			bool seen = false;
			for (size_t k = 0; k < hashes.size() && !seen; k += SHA_DIGEST_LENGTH)
				seen = std::equal(one.begin(), one.end(), hashes.begin() + long(k));
			if (!seen) hashes.insert(hashes.end(), one.begin(), one.end());
		}
	}
	cert_init_cache_.emplace();
	if (any)
		*cert_init_cache_ = {make_notify(notify::signature_hash_algorithms, sig_hashes_notify_data()),
		                     RawPayload{PayloadType::certreq, false, cert_body(hashes)}};
	return *cert_init_cache_;
}

std::string Engine::verify_cert_auth(IkeSa& sa, const PeerPolicy& pol, const Identity& who,
                                     std::span<const Payload> inner, const AuthPayload& auth,
                                     std::span<const uint8_t> octets) {
	std::vector<std::span<const uint8_t>> certs;
	for (const Payload& p : inner)
		if (const auto* r = std::get_if<RawPayload>(&p); r && r->type == PayloadType::cert) {
			if (certs.size() > kMaxPeerCerts) break; // verify_peer() names the excess
			certs.push_back(r->body);
		}
	const PeerAuth result = verify_peer(*pol.trust, certs, who, auth, octets);
	if (!result.ok) return result.error;
	sa.peer_auth = result.method;
	sa.peer_subject = result.subject;
	sa.peer_issuer = result.issuer;
	host_.log("peer " + pol.name + ": authenticated by certificate " + result.subject + " (issuer " +
	          result.issuer + "), " + result.method);
	return {};
}

void Engine::established(IkeSa& sa, Clock::time_point now) {
	mark_established(sa);
	// What only IKE_SA_INIT and IKE_AUTH needed: the two messages AUTH
	// signs and our DH key pair (the nonces stay: an initiator derives its
	// first CHILD_SA's keys from them after this). Held for the IKE SA's
	// whole life they were a good part of what an established client
	// costs (issue 19).
	std::vector<uint8_t>().swap(sa.init_request);
	std::vector<uint8_t>().swap(sa.init_response);
	sa.dh.reset();
	sa.established_at = now;
	sa.next_keepalive = now + kKeepaliveInterval;
	if (peers_[*sa.peer].ike_rekey_s) sa.rekey_at = now + jittered(peers_[*sa.peer].ike_rekey_s);
	host_.log("peer " + peers_[*sa.peer].name + ": IKE SA established with " + endpoint_text(sa.remote) +
	          " (" + ike_suite_name(sa.suite) + ", SPIs " + hex_spi(sa.spi_i, 16) + "_i " +
	          hex_spi(sa.spi_r, 16) + "_r, " + (sa.initiator ? "we initiated" : "the peer initiated") +
	          ")");
	// One IKE SA per peer: an older one (from before a restart on either
	// side) is replaced by the one that just authenticated.
	const auto list = peer_sas_.find(*sa.peer);
	if (list == peer_sas_.end()) return;
	const std::vector<uint64_t> spis = list->second; // close() may log, never index: a copy all the same
	for (const uint64_t spi : spis) {
		const auto it = sas_.find(spi);
		if (it == sas_.end()) continue;
		IkeSa& other = *it->second;
		if (&other != &sa && other.peer == sa.peer && other.state != IkeSa::State::closed)
			close(other, "replaced by a newer IKE SA", false, now, true);
	}
}

} // namespace esptun::ike
