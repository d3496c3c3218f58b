// The IKEv2 engine, part 2: INFORMATIONAL and CREATE_CHILD_SA as responder,
// and rekeys and deletes we start (see engine.hpp).
#include "ike/engine_internal.hpp"

namespace esptun::ike {

// ---- INFORMATIONAL and CREATE_CHILD_SA as responder ---------------------------

void Engine::handle_informational_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const Header req{sa.spi_i,
	                 sa.spi_r,
	                 PayloadType::sk,
	                 kVersion2,
	                 Exchange::informational,
	                 uint8_t(sa.initiator ? 0 : kFlagInitiator),
	                 sa.peer_next_id - 1,
	                 0};
	bool delete_ike = false;
	DeletePayload ours{Protocol::esp, {}};
	for (const Payload& p : inner) {
		const auto* d = std::get_if<DeletePayload>(&p);
		if (!d) continue;
		if (d->protocol == Protocol::ike) delete_ike = true;
		if (d->protocol != Protocol::esp) continue;
		for (uint32_t spi : d->spis) {
			// The peer names its inbound SPIs: our outbound ones (section 1.4.1).
			auto it = std::find_if(sa.children.begin(), sa.children.end(),
			                       [&](const ChildSa& c) { return c.spi_out == spi; });
			if (it == sa.children.end()) continue;
			if (it->successor_in) {
				// Make-before-break: the rekeyed CHILD_SA takes over sending first.
				for (ChildSa& c : sa.children) {
					if (c.spi_in != it->successor_in || c.sending) continue;
					c.sending = true;
					if (sa.peer) host_.switch_outbound(*sa.peer, c.spi_in);
				}
			}
			if (sa.peer) host_.remove_child(*sa.peer, it->spi_in, it->spi_out);
			if (!it->deleting)
				ours.spis.push_back(it->spi_in); // else our own Delete is under way
			std::erase(sa.delete_queue, it->spi_in);
			sa.children.erase(it);
		}
	}
	std::vector<Payload> reply;
	if (!ours.spis.empty() && !delete_ike) reply.push_back(ours);
	send_response(sa, req, reply);
	if (delete_ike) {
		close(sa, "deleted by the peer", true, now);
		return;
	}
	// RFC 5685 section 6: the gateway sends us elsewhere; the answer above
	// (empty) acknowledges it.
	if (const NotifyPayload* r = find_notify_in(inner, notify::redirect);
	    r && sa.state == IkeSa::State::established)
		follow_redirect(sa, *r, false, now);
}

void Engine::handle_create_child_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const Header req{sa.spi_i,
	                 sa.spi_r,
	                 PayloadType::sk,
	                 kVersion2,
	                 Exchange::create_child_sa,
	                 uint8_t(sa.initiator ? 0 : kFlagInitiator),
	                 sa.peer_next_id - 1,
	                 0};
	auto refuse = [&](uint16_t type, std::vector<uint8_t> data = {}) {
		const Payload p[] = {make_notify(type, std::move(data))};
		send_response(sa, req, p);
	};
	if (sa.state != IkeSa::State::established || !sa.peer || sa.rekeyed) {
		refuse(notify::temporary_failure);
		return;
	}
	const PeerPolicy& pol = peers_[*sa.peer];
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const KePayload* ke = find_in<KePayload>(inner);
	if (!sa_p || !nonce || sa_p->proposals.empty()) {
		counters_.malformed++;
		refuse(notify::invalid_syntax);
		return;
	}
	std::vector<uint8_t> nr = random_nonce();

	if (sa_p->proposals.front().protocol == Protocol::ike) {
		// IKE SA rekey (section 2.18): a new IKE SA that inherits the CHILD_SAs.
		// While a request of ours is out on this SA (a rekey of our own, or a
		// CHILD_SA exchange whose answer must still find this SA), the peer is
		// asked to try again later (section 2.25).
		if (sa.pending && sa.pending->kind != RequestKind::liveness) {
			refuse(notify::temporary_failure);
			return;
		}
		if (peer_ike_sas(*sa.peer) >= kMaxIkeSasPerPeer) {
			refuse_sa(sa, "IKE SA rekey refused: " + std::to_string(kMaxIkeSasPerPeer) +
			                  " IKE SAs already (rekeyed ones retire after a grace period)");
			refuse(notify::no_additional_sas);
			return;
		}
		std::optional<IkeChoice> choice = choose_ike(*sa_p, pol.ike_proposals);
		if (!choice || choice->reply.spi.size() != 8) {
			counters_.no_proposal++;
			refuse(notify::no_proposal_chosen);
			return;
		}
		if (!ke || ke->group != uint16_t(choice->suite.dh)) {
			refuse(notify::invalid_ke_payload, be16_bytes(uint16_t(choice->suite.dh)));
			return;
		}
		auto next = std::make_unique<IkeSa>();
		next->dh = std::make_unique<DhKeyPair>(choice->suite.dh);
		std::optional<SecretBytes> g_ir = next->dh->shared_secret(ke->data);
		if (!g_ir) {
			refuse(notify::invalid_syntax);
			return;
		}
		next->initiator = false;
		next->state = IkeSa::State::established;
		next->spi_i = load_be64(choice->reply.spi.data());
		do
			next->spi_r = random_spi();
		while (sas_.count(next->spi_r));
		store_be64(choice->reply.spi.data(), next->spi_r);
		next->peer = sa.peer;
		next->remote = sa.remote;
		next->via = sa.via;
		next->suite = choice->suite;
		next->ni = nonce->data;
		next->nr = nr;
		next->keys = derive_rekeyed_ike_keys(sa.suite.prf, sa.keys.sk_d, next->suite, *g_ir, next->ni,
		                                     next->nr, next->spi_i, next->spi_r);
		next->sk_in = std::make_unique<SkCipher>(next->suite, next->keys.sk_ei, next->keys.sk_ai);
		next->sk_out = std::make_unique<SkCipher>(next->suite, next->keys.sk_er, next->keys.sk_ar);
		next->children = std::move(sa.children);
		sa.children.clear();
		next->created = sa.created;
		next->established_at = now;
		next->last_heard = now;
		next->child_rekeys = sa.child_rekeys;
		next->ike_rekeys = sa.ike_rekeys + 1;
		next->delete_queue = std::move(sa.delete_queue);
		next->virtual_ips = sa.virtual_ips;
		next->dns = sa.dns;
		next->behind_nat = sa.behind_nat;
		next->redirect_supported = sa.redirect_supported;
		next->frag_peer = sa.frag_peer; // negotiated for the IKE SA, not its keys
		next->next_keepalive = sa.next_keepalive;
		if (pol.ike_rekey_s) next->rekey_at = now + jittered(pol.ike_rekey_s);
		std::vector<Payload> reply{SaPayload{{choice->reply}}, NoncePayload{nr},
		                           KePayload{uint16_t(next->suite.dh),
		                                     std::vector<uint8_t>(next->dh->public_value().begin(),
		                                                          next->dh->public_value().end())}};
		send_response(sa, req, reply);
		sa.rekeyed = true;
		sa.retire_at = now + kRekeyedIkeGrace; // in case the peer never deletes it
		host_.log("peer " + pol.name + ": IKE SA rekeyed by the peer (" +
		          ike_suite_name(next->suite) + ", SPIs " + hex_spi(next->spi_i, 16) + "_i " +
		          hex_spi(next->spi_r, 16) + "_r)");
		const uint64_t key = next->spi_r;
		sas_.emplace(key, std::move(next));
		note_added(key);
		return;
	}

	// A CHILD_SA: a rekey of one we have (REKEY_SA names the exchange
	// initiator's inbound SPI, our outbound one; section 1.3.3) or a new one.
	const NotifyPayload* rekey = find_notify_in(inner, notify::rekey_sa);
	ChildSa* old = nullptr;
	if (rekey) {
		const uint32_t spi = rekey->spi.size() == 4 ? load_be32(rekey->spi.data()) : 0;
		for (ChildSa& c : sa.children)
			if (c.spi_out == spi) old = &c;
		if (!old) {
			refuse(notify::child_sa_not_found);
			return;
		}
	}
	const std::string what = old ? "CHILD_SA rekey" : "new CHILD_SA";
	std::optional<EspChoice> choice =
	    choose_esp(*sa_p, pol.esp_proposals, ChildExchange::create_child_sa);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	if (!choice) {
		counters_.no_proposal++;
		std::string ours;
		for (const EspSuite& s : pol.esp_proposals)
			ours += (ours.empty() ? "" : ", ") + esp_suite_name(s);
		host_.log("peer " + pol.name + ": " + what +
		          " from the peer refused: no ESP proposal in common; it offered " +
		          describe_offer(*sa_p) + (ke ? " with a key exchange" : "") +
		          ", esp_proposals are " + ours +
		          " (a group such as x25519 at the end of an entry asks for PFS)");
		refuse(notify::no_proposal_chosen);
		return;
	}
	if (!tsi || !tsr) {
		refuse(notify::invalid_syntax);
		return;
	}
	// Perfect forward secrecy (section 1.3.1): the KE payload must be of the
	// chosen proposal's group, else the peer is told which group to use
	// (section 1.3, INVALID_KE_PAYLOAD) and tries again. A KE payload with a
	// proposal without a group is ignored (as strongSwan does).
	std::optional<SecretBytes> g_ir;
	std::optional<KePayload> ke_reply;
	if (choice->pfs) {
		const uint16_t group = uint16_t(*choice->pfs);
		if (!ke || ke->group != group) {
			host_.log("peer " + pol.name + ": " + what +
			          " from the peer needs a key exchange of group " +
			          std::string(dh_name(*choice->pfs)) + ", it sent " +
			          (!ke                   ? std::string("none")
			           : known_dh(ke->group) ? std::string(dh_name(DhGroup(ke->group)))
			                                 : "group " + std::to_string(ke->group)) +
			          ": answering INVALID_KE_PAYLOAD");
			refuse(notify::invalid_ke_payload, be16_bytes(group));
			return;
		}
		DhKeyPair dh(*choice->pfs);
		g_ir = dh.shared_secret(ke->data);
		if (!g_ir) {
			host_.log("peer " + pol.name + ": " + what + " from the peer refused: its " +
			          std::string(dh_name(*choice->pfs)) + " key exchange value is invalid (" +
			          std::to_string(ke->data.size()) + " bytes)");
			refuse(notify::no_proposal_chosen);
			return;
		}
		ke_reply = KePayload{
		    group, std::vector<uint8_t>(dh.public_value().begin(), dh.public_value().end())};
	}
	// The exchange initiator's selectors: TSi is its side. As responder of the
	// exchange, the peer's side is TSi when the peer initiates.
	std::vector<TrafficSelector> ts_i = narrow(tsi->selectors, peer_side(*sa.peer));
	// TSr, what the peer asks to reach through us: only local_ts of it.
	std::vector<TrafficSelector> ts_r = narrow(tsr->selectors, local_side(*sa.peer));
	if (ts_i.empty() || ts_r.empty()) {
		log_limited("peer " + pol.name + ": " + what + " from the peer refused: its selectors " +
		            selectors_text(tsi->selectors) + " to " + selectors_text(tsr->selectors) +
		            " are outside " + (ts_i.empty() ? "allowed_ips" : "local_ts") +
		            ", or too many once narrowed (TS_UNACCEPTABLE)");
		refuse(notify::ts_unacceptable);
		return;
	}
	if (peer_children(*sa.peer) >= kMaxChildSasPerPeer) {
		refuse_sa(sa,
		          what + " refused: " + std::to_string(kMaxChildSasPerPeer) + " CHILD_SAs already");
		refuse(notify::no_additional_sas);
		return;
	}
	const std::optional<uint32_t> spi = host_.allocate_spi();
	if (!spi) {
		refuse_sa(sa, what + " refused: the SA table is full");
		refuse(notify::no_additional_sas);
		return;
	}
	const uint32_t spi_in = *spi;
	choice->reply.spi = be32_bytes(spi_in);
	const ChildKeys keys =
	    with_local(child_keys(sa, choice->cipher, choice->esn, spi_in, choice->peer_spi, false,
	                          nonce->data, nr, g_ir ? *g_ir : SecretBytes{}),
	               ts_r);
	// Make-before-break: the new inbound SA is live before the answer leaves;
	// we keep sending on the old one until the peer deletes it.
	if (!host_.install_child(*sa.peer, keys, old == nullptr)) {
		refuse_sa(sa, what + " refused: the host could not install it");
		refuse(notify::no_additional_sas);
		return;
	}
	const uint32_t old_spi = old ? old->spi_in : 0;
	const bool ours_done = old && !old->rekeying &&
	                       std::any_of(sa.children.begin(), sa.children.end(), [&](const ChildSa& c) {
		                       return c.replaces == old_spi && c.created_by_us;
	                       });
	if (old) old->successor_in = spi_in;
	ChildSa rec =
	    child_record(keys, old == nullptr, false, nonce->data, nr, ts_r, ts_i, pol.child_rekey_s, now);
	rec.replaces = old_spi;
	rec.pfs = choice->pfs;
	sa.children.push_back(std::move(rec)); // may move the vector: `old` is not used after this
	if (old_spi) sa.child_rekeys++;
	// We rekeyed the same CHILD_SA and already have our answer: a collision
	// found late (section 2.8.1). With our request still out, the answer
	// settles it instead.
	if (ours_done) resolve_collision(sa, old_spi);
	std::vector<Payload> reply{SaPayload{{choice->reply}}, NoncePayload{nr}};
	if (ke_reply) reply.push_back(std::move(*ke_reply));
	reply.push_back(TsPayload{true, ts_i});
	reply.push_back(TsPayload{false, ts_r});
	send_response(sa, req, reply);
	host_.log("peer " + pol.name + ": CHILD_SA " +
	          std::string(old ? "rekeyed by the peer" : "added by the peer") + ", SPIs in " +
	          hex_spi(spi_in, 8) + " out " + hex_spi(choice->peer_spi, 8) +
	          (choice->pfs ? ", PFS " + std::string(dh_name(*choice->pfs)) : std::string()));
}

// ---- rekeying and deleting, as the exchange initiator --------------------------

/**
 * note_child_volume() - mark the CHILD_SAs of @sa that are due by volume
 * @sa: an established IKE SA with no request of ours out
 * @now: the tick's time
 *
 * A CHILD_SA is due once either direction carried child_rekey_bytes or
 * child_rekey_packets, or, without ESN, once a sequence number passed
 * kSeqRekeyAt (RFC 4303 section 3.3.3: a 32-bit counter must not wrap).
 * Its rekey then starts as a timed one would (rekey_at = now), once: a
 * refused rekey is retried on the refusal's own schedule. Only CHILD_SAs
 * that can be due are asked about, so the host is not asked at all for
 * ESN CHILD_SAs of a peer without volume limits.
 */
void Engine::note_child_volume(IkeSa& sa, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	for (ChildSa& c : sa.children) {
		if (c.over_volume || !c.sending || c.successor_in || c.deleting || c.rekeying) continue;
		if (c.esn && !pol.child_rekey_bytes && !pol.child_rekey_packets) continue;
		const std::optional<ChildUsage> u = host_.child_usage(*sa.peer, c.spi_in, c.spi_out);
		if (!u) continue;
		const auto past = [](uint64_t limit, uint64_t a, uint64_t b) {
			return limit && std::max(a, b) >= limit;
		};
		std::string why;
		if (!c.esn && std::max(u->out_seq, u->in_seq) >= kSeqRekeyAt)
			why = "its 32-bit sequence numbers near their end (no ESN)";
		else if (past(pol.child_rekey_bytes, u->out_bytes, u->in_bytes))
			why = "rekey_bytes reached";
		else if (past(pol.child_rekey_packets, u->out_packets, u->in_packets))
			why = "rekey_packets reached";
		if (why.empty()) continue;
		c.over_volume = true;
		c.rekey_at = now;
		host_.log("peer " + pol.name + ": CHILD_SA " + hex_spi(c.spi_in, 8) +
		          " is due for a rekey: " + why);
	}
}

bool Engine::start_child_rekey(IkeSa& sa, size_t child, Clock::time_point now, std::optional<DhGroup> group) {
	const PeerPolicy& pol = peers_[*sa.peer];
	ChildSa& c = sa.children[child];
	const std::optional<uint32_t> spi = host_.allocate_spi();
	if (!spi) {
		// The SA table is full: the old CHILD_SA serves on; try again later.
		log_limited("peer " + pol.name + ": CHILD_SA rekey postponed: the SA table is full");
		c.rekey_at = now + seconds(60);
		return false;
	}
	const uint32_t new_in = *spi;
	std::vector<uint8_t> ni = random_nonce();
	// Section 1.3.3: REKEY_SA names the SPI we receive the old CHILD_SA with.
	NotifyPayload rekey = make_notify(notify::rekey_sa);
	rekey.protocol = Protocol::esp;
	rekey.spi = be32_bytes(c.spi_in);
	// PFS (section 1.3.1): a fresh key pair of the group the old CHILD_SA
	// used, or of our first proposal with one; @group after INVALID_KE_PAYLOAD.
	if (!group) group = rekey_group(pol.esp_proposals, c.pfs);
	std::shared_ptr<DhKeyPair> dh;
	std::vector<Payload> payloads{
	    rekey, esp_offer(pol.esp_proposals, new_in, ChildExchange::create_child_sa), NoncePayload{ni}};
	if (group) {
		dh = std::make_shared<DhKeyPair>(*group);
		payloads.push_back(
		    KePayload{uint16_t(*group),
		              std::vector<uint8_t>(dh->public_value().begin(), dh->public_value().end())});
	}
	payloads.push_back(TsPayload{true, c.ts_local});
	payloads.push_back(TsPayload{false, c.ts_remote});
	c.rekeying = true;
	const uint32_t old_in = c.spi_in;
	send_request(sa, Exchange::create_child_sa, payloads, now);
	sa.pending->kind = RequestKind::rekey_child;
	sa.pending->old_spi_in = old_in;
	sa.pending->new_spi_in = new_in;
	sa.pending->nonce = std::move(ni);
	sa.pending->dh = std::move(dh);
	return true;
}

void Engine::handle_rekey_child_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
                                         Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	auto find_child = [&](uint32_t spi_in) -> ChildSa* {
		for (ChildSa& c : sa.children)
			if (c.spi_in == spi_in) return &c;
		return nullptr;
	};
	if (ChildSa* old = find_child(req.old_spi_in)) old->rekeying = false;
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	const KePayload* ke = find_in<KePayload>(inner);
	std::optional<EspChoice> choice;
	if (sa_p) choice = accept_esp(*sa_p, pol.esp_proposals, ChildExchange::create_child_sa);
	const NotifyPayload* err = first_error(inner);
	// With PFS the answer's KE payload must be of the group we sent and
	// agreed on; its g^ir goes into the keys (section 2.17).
	std::optional<SecretBytes> g_ir;
	std::string answer_problem;
	if (!err && choice && choice->pfs) {
		if (!req.dh || req.dh->group() != *choice->pfs)
			answer_problem = "the answer chose group " + std::string(dh_name(*choice->pfs)) +
			                 ", not the one we sent";
		else if (!ke || ke->group != uint16_t(*choice->pfs))
			answer_problem =
			    "the answer has no key exchange of group " + std::string(dh_name(*choice->pfs));
		else if (!(g_ir = req.dh->shared_secret(ke->data)))
			answer_problem = "the answer's key exchange value is invalid";
	}
	// Our side may only be narrowed by the answer, never widened past local_ts.
	if (!err && choice && tsi && answer_problem.empty() &&
	    narrow(tsi->selectors, local_side(*sa.peer)) != tsi->selectors)
		answer_problem = "the answer's selectors for our side " + selectors_text(tsi->selectors) +
		                 " exceed local_ts";
	if (err || !choice || !nonce || !tsi || !tsr || !answer_problem.empty()) {
		host_.release_spi(req.new_spi_in);
		ChildSa* old = find_child(req.old_spi_in);
		if (!answer_problem.empty()) {
			// The peer has installed its half: ask it to delete that again.
			sa.delete_queue.push_back(req.new_spi_in);
		}
		if (err && err->type == notify::invalid_ke_payload && old && !req.ke_retried &&
		    !old->successor_in && !old->deleting) {
			// Section 1.3: the peer wants another group; if we offered it, try
			// again now (unless the peer has rekeyed or is deleting it meanwhile).
			const uint16_t want = err->data.size() == 2 ? load_be16(err->data.data()) : 0;
			const auto it = std::find_if(
			    pol.esp_proposals.begin(), pol.esp_proposals.end(),
			    [&](const EspSuite& s) { return s.pfs && uint16_t(*s.pfs) == want; });
			if (it != pol.esp_proposals.end() && (!req.dh || uint16_t(req.dh->group()) != want)) {
				host_.log("peer " + pol.name + ": the peer wants group " +
				          std::string(dh_name(*it->pfs)) +
				          " for the CHILD_SA rekey; trying again");
				if (start_child_rekey(sa, size_t(old - sa.children.data()), now, it->pfs))
					sa.pending->ke_retried = true;
				return;
			}
		}
		if (err && err->type == notify::temporary_failure) {
			// Section 2.25: the peer is busy (often with its own rekey); retry soon.
			if (old)
				old->rekey_at =
				    now + std::chrono::milliseconds(2000) + jittered(8) - seconds(7);
			return;
		}
		if (err && err->type == notify::child_sa_not_found) return; // the peer deleted it meanwhile
		host_.log("peer " + pol.name + ": CHILD_SA rekey refused: " +
		          (err                       ? notify_name(err->type)
		           : !answer_problem.empty() ? answer_problem
		                                     : std::string("the answer is not one we offered")) +
		          "; trying again in a minute");
		if (old) old->rekey_at = now + seconds(60);
		return;
	}
	ChildSa* old = find_child(req.old_spi_in);
	// The peer rekeyed the same CHILD_SA while our request was out (it
	// answered us, and we answered it): section 2.8.1 decides which stays.
	const bool collision = old && old->successor_in != 0;
	const ChildKeys keys =
	    with_local(child_keys(sa, choice->cipher, choice->esn, req.new_spi_in, choice->peer_spi, true,
	                          req.nonce, nonce->data, g_ir ? *g_ir : SecretBytes{}),
	               tsi->selectors);
	if (!host_.install_child(*sa.peer, keys, !collision)) {
		// The peer has installed its half: ask it to delete that, keep the old one.
		sa.delete_queue.push_back(req.new_spi_in);
		if (old) old->rekey_at = now + seconds(60);
		return;
	}
	ChildSa rec = child_record(keys, !collision, true, req.nonce, nonce->data, tsi->selectors,
	                           tsr->selectors, pol.child_rekey_s, now);
	rec.replaces = old ? req.old_spi_in : 0;
	rec.pfs = choice->pfs;
	if (old && !collision) {
		// Make-before-break: the peer has had the new SA since it answered;
		// we send on it from now on and delete the old one.
		old->sending = false;
		old->deleting = true;
		sa.delete_queue.push_back(old->spi_in);
	}
	sa.children.push_back(std::move(rec));
	sa.child_rekeys++;
	host_.log("peer " + pol.name + ": CHILD_SA rekeyed, SPIs in " + hex_spi(req.new_spi_in, 8) + " out " +
	          hex_spi(choice->peer_spi, 8) + " (replacing in " + hex_spi(req.old_spi_in, 8) + ")" +
	          (choice->pfs ? ", PFS " + std::string(dh_name(*choice->pfs)) : std::string()));
	if (collision) resolve_collision(sa, req.old_spi_in);
}

void Engine::resolve_collision(IkeSa& sa, uint32_t old_spi_in) {
	// Both sides rekeyed the CHILD_SA old_spi_in. Section 2.8.1: the new SA
	// made by the exchange with the lowest of the four nonces is redundant,
	// and the side that started that exchange deletes it; the other side's
	// new SA replaces the old one, and its maker deletes the old one.
	ChildSa *ours = nullptr, *theirs = nullptr, *old = nullptr;
	for (ChildSa& c : sa.children) {
		if (c.spi_in == old_spi_in) old = &c;
		if (c.replaces != old_spi_in || c.deleting) continue;
		(c.created_by_us ? ours : theirs) = &c;
	}
	if (!ours || !theirs) return;
	auto lowest = [](const ChildSa& c) { return nonce_less(c.ni, c.nr) ? c.ni : c.nr; };
	const bool ours_redundant = nonce_less(lowest(*ours), lowest(*theirs));
	ChildSa& winner = ours_redundant ? *theirs : *ours;
	if (ours_redundant) {
		// The peer's SA stays. We answered its request, so (as after any
		// rekey the peer starts) we move to it when the peer deletes the old
		// one, which it has had to do as the winner. Only if we already send
		// on our own redundant SA (its answer came before the peer's request)
		// do we move right away.
		if (ours->sending && sa.peer) {
			host_.switch_outbound(*sa.peer, theirs->spi_in);
			theirs->sending = true;
		}
		ours->sending = false;
		ours->deleting = true;
		sa.delete_queue.push_back(ours->spi_in);
	} else {
		// Ours stays: the peer installed it before it answered us, so we send
		// on it now, and delete the old one; the peer deletes its own new SA.
		if (!ours->sending && sa.peer) host_.switch_outbound(*sa.peer, ours->spi_in);
		ours->sending = true;
		theirs->sending = false;
		if (old) {
			old->sending = false;
			old->successor_in = 0;
			if (!old->deleting) {
				old->deleting = true;
				sa.delete_queue.push_back(old->spi_in);
			}
		}
	}
	host_.log("peer " + (sa.peer ? peers_[*sa.peer].name : std::string("?")) +
	          ": CHILD_SA rekey collision resolved, keeping SPI in " + hex_spi(winner.spi_in, 8));
}

void Engine::start_ike_rekey(IkeSa& sa, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	uint64_t new_spi;
	do
		new_spi = random_spi();
	while (sas_.count(new_spi));
	auto dh = std::make_shared<DhKeyPair>(sa.suite.dh);
	std::vector<uint8_t> ni = random_nonce();
	std::vector<IkeSuite> order;
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh == dh->group()) order.push_back(s);
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh != dh->group()) order.push_back(s);
	uint8_t spi[8];
	store_be64(spi, new_spi);
	const std::vector<Payload> payloads{
	    ike_offer(order, spi), NoncePayload{ni},
	    KePayload{uint16_t(dh->group()),
	              std::vector<uint8_t>(dh->public_value().begin(), dh->public_value().end())}};
	send_request(sa, Exchange::create_child_sa, payloads, now);
	sa.pending->kind = RequestKind::rekey_ike;
	sa.pending->new_ike_spi = new_spi;
	sa.pending->nonce = std::move(ni);
	sa.pending->dh = std::move(dh);
}

void Engine::handle_rekey_ike_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
                                       Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const KePayload* ke = find_in<KePayload>(inner);
	const NotifyPayload* err = first_error(inner);
	std::optional<IkeSuite> suite;
	if (sa_p) suite = accept_ike(*sa_p, pol.ike_proposals);
	std::optional<SecretBytes> g_ir;
	if (!err && suite && nonce && ke && suite->dh == req.dh->group() &&
	    ke->group == uint16_t(suite->dh) && sa_p->proposals[0].spi.size() == 8)
		g_ir = req.dh->shared_secret(ke->data);
	if (!g_ir) {
		if (err && err->type == notify::temporary_failure) {
			sa.rekey_at = now + seconds(2) + jittered(8) - seconds(7);
			return;
		}
		host_.log("peer " + pol.name + ": IKE SA rekey refused: " +
		          (err ? notify_name(err->type) : std::string("the answer is not one we offered")) +
		          "; trying again in a minute");
		sa.rekey_at = now + seconds(60);
		return;
	}
	auto next = std::make_unique<IkeSa>();
	next->initiator = true; // section 2.18: who rekeys becomes the new SA's initiator
	next->state = IkeSa::State::established;
	next->spi_i = req.new_ike_spi;
	next->spi_r = load_be64(sa_p->proposals[0].spi.data());
	next->peer = sa.peer;
	next->remote = sa.remote;
	next->via = sa.via;
	next->suite = *suite;
	next->ni = req.nonce;
	next->nr = nonce->data;
	next->keys = derive_rekeyed_ike_keys(sa.suite.prf, sa.keys.sk_d, next->suite, *g_ir, next->ni,
	                                     next->nr, next->spi_i, next->spi_r);
	next->sk_in = std::make_unique<SkCipher>(next->suite, next->keys.sk_er, next->keys.sk_ar);
	next->sk_out = std::make_unique<SkCipher>(next->suite, next->keys.sk_ei, next->keys.sk_ai);
	next->children = std::move(sa.children);
	sa.children.clear();
	next->delete_queue = std::move(sa.delete_queue);
	sa.delete_queue.clear();
	next->virtual_ips = sa.virtual_ips;
	next->dns = sa.dns;
	next->behind_nat = sa.behind_nat;
	next->redirect_supported = sa.redirect_supported;
	next->frag_peer = sa.frag_peer; // negotiated for the IKE SA, not its keys
	next->next_keepalive = sa.next_keepalive;
	next->created = sa.created;
	next->established_at = now;
	next->last_heard = now;
	next->child_rekeys = sa.child_rekeys;
	next->ike_rekeys = sa.ike_rekeys + 1;
	if (pol.ike_rekey_s) next->rekey_at = now + jittered(pol.ike_rekey_s);
	host_.log("peer " + pol.name + ": IKE SA rekeyed (" + ike_suite_name(next->suite) + ", SPIs " +
	          hex_spi(next->spi_i, 16) + "_i " + hex_spi(next->spi_r, 16) + "_r)");
	const uint64_t key = next->spi_i;
	sas_.emplace(key, std::move(next));
	note_added(key);
	// The old IKE SA goes; its CHILD_SAs live on under the new one.
	sa.rekeyed = true;
	const Payload del[] = {DeletePayload{Protocol::ike, {}}};
	send_request(sa, Exchange::informational, del, now);
	sa.pending->kind = RequestKind::del_ike;
}

void Engine::send_child_deletes(IkeSa& sa, Clock::time_point now) {
	if (sa.pending || sa.delete_queue.empty() || sa.state != IkeSa::State::established) return;
	std::vector<uint32_t> spis = std::move(sa.delete_queue);
	sa.delete_queue.clear();
	const Payload p[] = {DeletePayload{Protocol::esp, spis}};
	send_request(sa, Exchange::informational, p, now);
	sa.pending->kind = RequestKind::del_child;
	sa.pending->spis = std::move(spis);
}

void Engine::handle_delete_child_response(IkeSa& sa, PendingRequest& req) {
	// The answer lists the peer's halves; ours go now whatever it says.
	for (uint32_t spi : req.spis) {
		auto it = std::find_if(sa.children.begin(), sa.children.end(),
		                       [&](const ChildSa& c) { return c.spi_in == spi; });
		if (it == sa.children.end()) continue;
		if (sa.peer) host_.remove_child(*sa.peer, it->spi_in, it->spi_out);
		sa.children.erase(it);
	}
}
} // namespace esptun::ike
