// The IKEv2 engine, peers added and removed at run time (a live reload of
// the gateway's config, see engine.hpp): an added peer comes up, a removed
// one is deleted on the wire and forgotten, and every other peer's IKE SAs
// and CHILD_SAs are left exactly as they were.
#include "base/vectors.hpp"
#include "ike/engine_internal.hpp"

#include <stdexcept>

namespace esptun::ike {

/// The IKE suites IKE_SA_INIT accepts: every active peer's, each once, in
/// the order the peers list them (before IKE_AUTH, the peer is unknown).
std::vector<IkeSuite> Engine::active_suites() const {
	std::vector<IkeSuite> out;
	for (size_t i = 0; i < peers_.size(); i++) {
		if (!active_[i] || peers_[i].template_of) continue; // an instance has its template's
		for (const IkeSuite& s : peers_[i].ike_proposals)
			if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
	}
	return out;
}

size_t Engine::add_peer(PeerPolicy policy, Clock::time_point now) {
	for (size_t i = 0; i < peers_.size(); i++) {
		if (!active_[i]) continue;
		if (peers_[i].name == policy.name)
			throw std::invalid_argument("IKE peer '" + policy.name + "' is already configured");
		if (!peers_[i].is_template() && !peers_[i].template_of && !policy.is_template() &&
		    peers_[i].remote_id == policy.remote_id)
			throw std::invalid_argument("IKE peer '" + policy.name + "': identity '" +
			                            identity_text(policy.remote_id) +
			                            "' is already that of peer '" + peers_[i].name + "'");
	}
	// Everything that can fail to allocate does so before anything changes:
	// with room reserved, the appends below cannot throw.
	std::vector<IkeSuite> suites = responder_suites_;
	for (const IkeSuite& s : policy.ike_proposals)
		if (std::find(suites.begin(), suites.end(), s) == suites.end()) suites.push_back(s);
	const size_t peer = peers_.size();
	reserve_room(peers_, peer + 1);
	reserve_room(active_, peer + 1);
	reserve_room(restart_at_, peer + 1);
	reserve_room(restart_backoff_s_, peer + 1);
	reserve_room(leased_, peer + 1);
	peers_.push_back(std::move(policy));
	active_.push_back(true);
	peers_changed();
	restart_at_.push_back({});
	restart_backoff_s_.push_back(kRestartMinS);
	leased_.emplace_back();
	responder_suites_.swap(suites);

	const PeerPolicy& pol = peers_[peer];
	if (started_ && pol.initiate && pol.endpoint) {
		// As tick() does for a restart: a failure to initiate is retried
		// later, it does not undo the peer.
		try {
			initiate(peer, now);
		} catch (const std::exception& e) {
			counters_.internal_errors++;
			log_limited("peer " + pol.name + ": cannot initiate: " + e.what());
			restart_at_[peer] = now + seconds(restart_backoff_s_[peer]);
		}
	}
	return peer;
}

void Engine::remove_peer(size_t peer, Clock::time_point now) {
	if (peer >= peers_.size())
		throw std::out_of_range("IKE peer index " + std::to_string(peer) + " was never added");
	if (!active_[peer]) return;
	peers_changed();
	if (peers_[peer].is_template()) {
		// Its users go with it, each told by a Delete.
		std::vector<size_t> users;
		for (const auto& [key, slot] : instances_)
			if (key.first == peer) users.push_back(slot);
		for (const size_t i : users)
			remove_peer(i, now);
	}
	// An instance (a template's user) adds no suites of its own, and ends
	// in sweep() below once its IKE SAs are closed.
	const bool instance = peers_[peer].template_of.has_value();
	if (instance) reserve_room(ending_, ending_.size() + 1);
	// The suites of the peers that stay, first: that may fail to allocate,
	// and then nothing has changed. From there on nothing throws.
	active_[peer] = false;
	std::vector<IkeSuite> suites;
	try {
		if (!instance) suites = active_suites();
	} catch (...) {
		active_[peer] = true;
		throw;
	}
	// Inactive now: not matched in IKE_AUTH, not initiated or restarted.
	if (!instance) responder_suites_.swap(suites);
	if (instance) ending_.push_back(peer); // reserved above
	restart_at_[peer] = {};
	restart_backoff_s_[peer] = kRestartMinS;

	PeerPolicy& pol = peers_[peer];
	for (auto& [spi, owned] : sas_) {
		IkeSa& sa = *owned;
		if (sa.peer != peer || sa.state == IkeSa::State::closed) continue;
		// An established IKE SA hears of it (a Delete); one still being set
		// up as initiator is dropped with what it reserved. close() releases
		// the peer's pool addresses along with its last IKE SA.
		try {
			close(sa, "the peer was removed from the configuration", false, now, true);
		} catch (...) {
			counters_.internal_errors++;
			mark_closed(sa); // sweep() removes what it holds
		}
	}
	try {
		sweep();
	} catch (...) {
		counters_.internal_errors++; // what is left is swept again on the next tick
	}
	if (instance) return; // sweep() ended it, logged, and gave its addresses back
	try {
		if (!leased_[peer].empty()) { // a close() above ended early
			leased_[peer].clear();
			host_.release_addresses(peer);
		}
	} catch (...) {
		counters_.internal_errors++;
	}
	try {
		host_.log("peer " + pol.name + ": removed from the configuration");
	} catch (...) {
		counters_.internal_errors++;
	}
	// The secret goes now, not when the engine does: a swapped-out buffer is
	// wiped as it is freed (SecretBytes).
	SecretBytes().swap(pol.psk);
}

} // namespace esptun::ike
