// The IKEv2 engine, part 3: timers (retransmission, liveness checks, NAT
// keepalives, rekey deadlines, restarts) and teardown (see engine.hpp).
#include "ike/engine_internal.hpp"

namespace esptun::ike {

// ---- timers and teardown -------------------------------------------------------

void Engine::tick(Clock::time_point now) {
	try {
		rotate_cookie_secret(now);
	} catch (...) {
		counters_.internal_errors++; // no randomness now: the old secrets stay a while longer
	}
	// Each IKE SA's timers on their own: one that throws closes only itself.
	for (auto& [spi, owned] : sas_) {
		IkeSa& sa = *owned;
		if (sa.state == IkeSa::State::closed) continue;
		std::string what;
		try {
			tick_sa(sa, now);
		} catch (const std::exception& e) {
			what = e.what();
		} catch (...) {
			what = "unknown exception";
		}
		if (what.empty()) continue;
		counters_.internal_errors++;
		try {
			log_limited(peer_label(sa) + ": timer ended by an internal error: " + what);
			close(sa, "internal error: " + what, true, now);
		} catch (...) {
			mark_closed(sa); // sweep() removes what it holds
		}
	}
	try {
		// All of them, not only those noted: the safety net for an SA whose
		// sweep an exception cut short.
		sweep_all();
	} catch (...) {
		counters_.internal_errors++; // what is left is swept again on the next tick
	}
	for (size_t i = 0; i < peers_.size(); i++) {
		if (!active_[i] || restart_at_[i] == Clock::time_point{} || now < restart_at_[i]) continue;
		const bool active = std::any_of(sas_.begin(), sas_.end(), [&](const auto& kv) {
			return kv.second->peer == i && kv.second->state != IkeSa::State::closed;
		});
		restart_at_[i] = {};
		if (active) continue;
		try {
			initiate(i, now);
		} catch (const std::exception& e) {
			counters_.internal_errors++;
			log_limited("peer " + peers_[i].name + ": cannot initiate: " + e.what());
			restart_at_[i] = now + seconds(restart_backoff_s_[i]);
		}
	}
}

/**
 * tick_sa() - the timers of one IKE SA
 * @sa:  not closed
 * @now: the time
 *
 * Retires an IKE SA the peer rekeyed once its grace is over, then at most
 * one of: retransmission, NAT keepalive, a queued delete, a rekey, a
 * liveness check. May throw; tick() then closes @sa alone.
 */
void Engine::tick_sa(IkeSa& sa, Clock::time_point now) {
	expire_reassembly(sa, now);
	if (sa.rekeyed && sa.retire_at != Clock::time_point{} && now >= sa.retire_at) {
		// Section 2.18 leaves deleting the old IKE SA to the peer that rekeyed
		// it; one that never does must not keep it (and its keys) forever.
		close(sa, "rekeyed by the peer, which did not delete it", false, now, true);
		return;
	}
	if (sa.state == IkeSa::State::responder_init && now - sa.created >= kHalfOpenTimeout) {
		mark_closed(sa); // never authenticated: nothing to tell anyone
		return;
	}
	if (sa.pending && now >= sa.pending->next) {
		PendingRequest& p = *sa.pending;
		if (p.tries >= (p.kind == RequestKind::liveness ? kLivenessRetransmits : kMaxRetransmits)) {
			const bool liveness = p.kind == RequestKind::liveness;
			std::string why = liveness ? "the peer is dead: no answer to liveness checks"
			                           : "no answer from " + endpoint_text(sa.remote);
			if (p.kind == RequestKind::init && sa.init_error) {
				// Section 2.21.1: the error was unauthenticated, so we waited
				// for a real answer; none came, and it is what we have.
				if (sa.init_error == notify::no_proposal_chosen) counters_.no_proposal++;
				why += " but an unauthenticated " + notify_name(sa.init_error);
				if (sa.init_error == notify::no_proposal_chosen && sa.peer)
					why += " (we offered " + suites_text(peers_[*sa.peer].ike_proposals) +
					       ")";
			}
			close(sa, why, p.kind != RequestKind::del_ike, now);
			return;
		}
		p.tries++;
		if (p.kind != RequestKind::liveness) p.interval *= 2; // liveness checks keep their pace
		p.next = now + p.interval;
		counters_.retransmits++;
		transmit(sa, p.datagrams, {},
		         p.tries == 1 ? "sent again (no answer yet)" : "sent again (still no answer)");
		return;
	}
	if (sa.state == IkeSa::State::established && sa.behind_nat && !sa.rekeyed &&
	    now >= sa.next_keepalive) {
		// Behind a NAT: keep its mapping open for the peer's packets, also
		// when we have nothing to send (RFC 3948 section 2.3).
		host_.send_keepalive(sa.remote);
		sa.next_keepalive = now + kKeepaliveInterval;
	}
	if (sa.state == IkeSa::State::established && !sa.pending && sa.peer && !sa.rekeyed) {
		if (move_established(sa, now)) return;
		if (!sa.delete_queue.empty()) {
			send_child_deletes(sa, now);
			return;
		}
		if (sa.rekey_at != Clock::time_point{} && now >= sa.rekey_at) {
			start_ike_rekey(sa, now);
			return;
		}
		note_child_volume(sa, now);
		bool rekeying = false;
		for (size_t i = 0; i < sa.children.size() && !rekeying; i++) {
			const ChildSa& c = sa.children[i];
			if (c.sending && !c.successor_in && !c.deleting &&
			    c.rekey_at != Clock::time_point{} && now >= c.rekey_at)
				rekeying = start_child_rekey(sa, i, now);
		}
		if (rekeying) return;
		const uint32_t dpd = peers_[*sa.peer].dpd_interval_s;
		if (dpd == 0) return;
		Clock::time_point last = sa.last_heard;
		if (auto esp = host_.last_esp_rx(*sa.peer); esp && *esp > last) last = *esp;
		if (now - last < seconds(dpd)) return;
		// Liveness check (section 2.4): an empty INFORMATIONAL request,
		// retransmitted at a quarter of the interval so a dead peer is
		// noticed within about two intervals.
		send_request(sa, Exchange::informational, {}, now);
		sa.pending->kind = RequestKind::liveness;
		sa.pending->interval = seconds(std::max<uint32_t>(1, dpd / 4));
		sa.pending->next = now + sa.pending->interval;
	}
}

void Engine::remove_children(IkeSa& sa) {
	if (sa.peer)
		for (const ChildSa& c : sa.children)
			host_.remove_child(*sa.peer, c.spi_in, c.spi_out);
	sa.children.clear();
	sa.delete_queue.clear();
	if (sa.pending && sa.pending->kind == RequestKind::rekey_child && sa.pending->new_spi_in) {
		host_.release_spi(sa.pending->new_spi_in);
		sa.pending->new_spi_in = 0;
	}
	if (sa.reserved_spi) {
		host_.release_spi(sa.reserved_spi);
		sa.reserved_spi = 0;
	}
}

void Engine::close(IkeSa& sa, const std::string& why, bool restart, Clock::time_point now, bool tell_peer) {
	if (sa.state == IkeSa::State::closed) return;
	if (tell_peer) send_ike_delete(sa, now);
	remove_children(sa);
	mark_closed(sa);
	if (!sa.peer) return;
	const size_t peer = *sa.peer;
	if (!sa.rekeyed) host_.log(peer_label(sa) + ": IKE SA closed: " + why);
	// Pool addresses stay with the peer while any IKE SA of it lives (a
	// rekeyed or replaced SA has a successor), so a rekey keeps the address.
	if (!leased_[peer].empty() && std::none_of(sas_.begin(), sas_.end(), [&](const auto& other) {
		    return other.second.get() != &sa && other.second->peer == sa.peer &&
		           other.second->state != IkeSa::State::closed;
	    })) {
		leased_[peer].clear();
		host_.release_addresses(peer);
	}
	const PeerPolicy& pol = peers_[peer];
	if (restart && !sa.rekeyed && active_[peer] && pol.initiate && pol.endpoint) {
		restart_at_[peer] = now + seconds(restart_backoff_s_[peer]);
		restart_backoff_s_[peer] = std::min(kRestartMaxS, restart_backoff_s_[peer] * 2);
	}
}

void Engine::mark_closed(IkeSa& sa) {
	sa.state = IkeSa::State::closed;
	to_sweep_.push_back(sa.initiator ? sa.spi_i : sa.spi_r);
}

void Engine::mark_established(IkeSa& sa) {
	sa.state = IkeSa::State::established;
	if (sa.half_open_cost) to_sweep_.push_back(sa.initiator ? sa.spi_i : sa.spi_r);
}

/*
 * sweep_entry() - what sweep() does for one IKE SA: the half-open index
 * follows every way out of responder_init (authenticated, failed, expired,
 * evicted), and a closed SA goes with its CHILD_SAs.
 * Return: the entry after @it.
 */
Engine::SaMap::iterator Engine::sweep_entry(SaMap::iterator it) {
	IkeSa& sa = *it->second;
	if (sa.half_open_cost && sa.state != IkeSa::State::responder_init) half_open_forget(sa);
	if (sa.state != IkeSa::State::closed) return std::next(it);
	remove_children(sa);
	// An instance may have lost its last IKE SA: end_instances() checks.
	if (const std::optional<size_t> peer = sa.peer; peer && peers_[*peer].template_of)
		ending_.push_back(*peer);
	sas_version_++;
	if (auto s = std::lower_bound(spis_sorted_.begin(), spis_sorted_.end(), it->first);
	    s != spis_sorted_.end() && *s == it->first)
		spis_sorted_.erase(s);
	unindex_peer(sa, it->first);
	return sas_.erase(it);
}

void Engine::note_added(uint64_t key) {
	sas_version_++;
	spis_sorted_.insert(std::lower_bound(spis_sorted_.begin(), spis_sorted_.end(), key), key);
	if (auto it = sas_.find(key); it != sas_.end()) index_peer(*it->second, key);
}

void Engine::unindex_peer(IkeSa& sa, uint64_t key) {
	if (!sa.indexed_peer) return;
	if (auto list = peer_sas_.find(*sa.indexed_peer); list != peer_sas_.end()) {
		std::erase(list->second, key);
		if (list->second.empty()) peer_sas_.erase(list);
	}
	sa.indexed_peer.reset();
}

void Engine::index_peer(IkeSa& sa, uint64_t key) {
	if (sa.indexed_peer == sa.peer) return;
	unindex_peer(sa, key);
	if (sa.peer) {
		peer_sas_[*sa.peer].push_back(key);
		sa.indexed_peer = sa.peer;
	}
}

void Engine::sweep() {
	// Only the IKE SAs that closed or authenticated since the last sweep
	// (mark_closed(), mark_established()): every message handled ends here,
	// so a walk of all of them would cost each message O(IKE SAs).
	std::vector<uint64_t> spis;
	spis.swap(to_sweep_);
	for (uint64_t spi : spis)
		if (auto it = sas_.find(spi); it != sas_.end()) sweep_entry(it);
	end_instances();
}

void Engine::sweep_all() {
	to_sweep_.clear();
	for (auto it = sas_.begin(); it != sas_.end();)
		it = sweep_entry(it);
	end_instances();
}

/**
 * send_ike_delete() - a best-effort INFORMATIONAL Delete of @sa's IKE SA
 * @sa:  the IKE SA; only an established one is deleted on the wire
 * @now: the time
 *
 * The peer may or may not get it (section 1.4.1), and nobody waits for an
 * answer: the request that was out is dropped (a CHILD_SA rekey's reserved
 * SPI released with it). A host that cannot send loses only the Delete.
 */
void Engine::send_ike_delete(IkeSa& sa, Clock::time_point now) {
	if (sa.state != IkeSa::State::established || !sa.sk_out) return;
	try {
		if (sa.pending && sa.pending->kind == RequestKind::rekey_child && sa.pending->new_spi_in) {
			host_.release_spi(sa.pending->new_spi_in);
			sa.pending->new_spi_in = 0;
		}
		const Payload p[] = {DeletePayload{Protocol::ike, {}}};
		send_request(sa, Exchange::informational, p, now);
	} catch (...) {
		counters_.internal_errors++;
	}
	sa.pending.reset();
}

void Engine::shutdown() {
	const Clock::time_point now = Clock::now();
	for (auto& [spi, sa] : sas_) {
		if (sa->state != IkeSa::State::established) continue;
		send_ike_delete(*sa, now);
		remove_children(*sa);
		mark_closed(*sa);
	}
	sweep();
}
} // namespace esptun::ike
