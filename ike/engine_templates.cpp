// The IKEv2 engine, templates: one gateway policy for many users (see
// PeerPolicy::remote_pattern). IKE_AUTH finds the template by the IDi's
// pattern and authenticates the user with the template's policy; once that
// succeeded the user gets an instance, a peer of its own made from the
// template (name "<template>/<user>", the user's fixed addresses and
// networks from the users table), so every per-peer bound, lease and
// CHILD_SA of the engine and the host applies per user. The same user
// connecting again (a new device address, a lost IKE SA) finds its instance;
// the instance ends when its last IKE SA is gone, and its slot serves the
// next user.
#include "base/vectors.hpp"
#include "ike/engine_internal.hpp"

#include <cctype>
#include <stdexcept>
#include <utility>

namespace esptun::ike {

bool pattern_matches(std::string_view pattern, std::string_view text) noexcept {
	// Greedy with one backtrack point (the last '*' seen): on a mismatch the
	// star takes one more character. At most pattern x text steps.
	auto same = [](char a, char b) {
		return std::tolower(static_cast<unsigned char>(a)) ==
		       std::tolower(static_cast<unsigned char>(b));
	};
	size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
	while (t < text.size()) {
		if (p < pattern.size() && pattern[p] == '*') {
			star = p++;
			resume = t;
		} else if (p < pattern.size() && same(pattern[p], text[t])) {
			p++;
			t++;
		} else if (star != std::string_view::npos) {
			p = star + 1;
			t = ++resume;
		} else {
			return false;
		}
	}
	while (p < pattern.size() && pattern[p] == '*')
		p++;
	return p == pattern.size();
}

void Engine::peers_changed() noexcept {
	peer_index_valid_ = false;
	cert_init_cache_.reset();
}

namespace {
/// The key of peers_by_id_: the identity's type, then its bytes.
std::string id_key(const Identity& id) {
	std::string key(1, char(id.type));
	key.append(id.data.begin(), id.data.end());
	return key;
}
} // namespace

std::optional<size_t> Engine::match_peer(const Identity& who) const {
	// An ordinary peer's exact identity wins over any pattern. Instances are
	// never matched directly: the same IDi may carry another EAP user, so
	// every login goes through its template and picks its instance after.
	// Found through an index, so a gateway with thousands of peers does not
	// compare every one of them on each IKE_AUTH; the lowest index wins, as
	// a walk in order would have found it.
	if (!peer_index_valid_) {
		peers_by_id_.clear();
		dn_peers_.clear();
		template_peers_.clear();
		for (size_t i = 0; i < peers_.size(); i++) {
			if (active_[i] && peers_[i].is_template()) template_peers_.push_back(i);
			if (!active_[i] || peers_[i].is_template() || peers_[i].template_of) continue;
			if (peers_[i].remote_id.type == IdType::der_asn1_dn)
				dn_peers_.push_back(i);
			else
				peers_by_id_.try_emplace(id_key(peers_[i].remote_id), i);
		}
		peer_index_valid_ = true;
	}
	std::optional<size_t> found;
	if (who.type == IdType::der_asn1_dn) {
		for (const size_t i : dn_peers_)
			if (same_identity(peers_[i].remote_id, who)) {
				found = i;
				break;
			}
	} else if (auto it = peers_by_id_.find(id_key(who)); it != peers_by_id_.end()) {
		found = it->second;
	}
	if (found) return found;
	// The templates in index order (a user's instance is none of them, so
	// thousands of users connected add nothing to this walk).
	const std::string text = identity_text(who);
	for (const size_t i : template_peers_)
		if (pattern_matches(peers_[i].remote_pattern, text)) return i;
	return std::nullopt;
}

std::optional<size_t> Engine::instantiate(size_t tmpl, const std::string& user, const Identity& who,
                                          std::string& why) {
	if (auto it = instances_.find(std::pair{tmpl, user}); it != instances_.end()) return it->second;
	if (instances_.size() >= kMaxInstances) {
		why = "the gateway serves " + std::to_string(kMaxInstances) +
		      " users of templates already (the most it takes)";
		return std::nullopt;
	}
	const PeerPolicy& t = peers_[tmpl];
	PeerPolicy pol = t;
	pol.name = t.name + "/" + user;
	pol.remote_pattern.clear();
	pol.remote_id = who;
	pol.template_of = tmpl;
	pol.instance_user = user;
	pol.assign.clear();
	pol.allowed_ips.clear();
	pol.initiate = false;
	pol.endpoint.reset();
	if (t.users)
		if (auto u = t.users->find(user); u != t.users->end()) {
			pol.assign = u->second.addresses;
			for (const IpAddress& a : u->second.addresses)
				pol.allowed_ips.push_back({a, uint8_t(a.max_prefix())});
			pol.allowed_ips.insert(pol.allowed_ips.end(), u->second.allowed_ips.begin(),
			                       u->second.allowed_ips.end());
		}
	pol.users.reset(); // the template's EAP reads them; an instance never runs EAP itself

	// Room first, so that nothing below but the host's answer can fail.
	const bool fresh = free_slots_.empty();
	const size_t slot = fresh ? peers_.size() : free_slots_.back();
	if (fresh) {
		reserve_room(peers_, slot + 1);
		reserve_room(active_, slot + 1);
		reserve_room(restart_at_, slot + 1);
		reserve_room(restart_backoff_s_, slot + 1);
		reserve_room(leased_, slot + 1);
	}
	reserve_room(free_slots_, peers_.size() + 1);
	auto [it, added] = instances_.emplace(std::pair{tmpl, user}, slot);
	if (fresh) {
		peers_.push_back(std::move(pol));
		active_.push_back(true);
		restart_at_.push_back({});
		restart_backoff_s_.push_back(kRestartMinS);
		leased_.emplace_back();
	} else {
		free_slots_.pop_back();
		peers_[slot] = std::move(pol);
		active_[slot] = true;
		restart_at_[slot] = {};
		restart_backoff_s_[slot] = kRestartMinS;
		leased_[slot].clear();
	}
	bool ok = false;
	try {
		ok = host_.instance_added(slot);
	} catch (...) {
		counters_.internal_errors++;
	}
	if (!ok) {
		instances_.erase(it);
		active_[slot] = false;
		peers_[slot] = PeerPolicy{};
		free_slots_.push_back(slot); // reserved above
		why = "the gateway could not set up a peer for this user";
		return std::nullopt;
	}
	// (t may be gone: peers_ grew.)
	host_.log("peer " + peers_[tmpl].name + ": user '" + user + "' connected as peer " +
	          peers_[slot].name);
	return slot;
}

void Engine::end_instances() {
	if (ending_.empty()) return;
	std::vector<size_t> ending;
	ending.swap(ending_);
	std::sort(ending.begin(), ending.end());
	ending.erase(std::unique(ending.begin(), ending.end()), ending.end());
	for (const size_t i : ending) {
		if (i >= peers_.size() || !peers_[i].template_of) continue; // ended already
		// A successor (the user's rekeyed or new IKE SA) keeps it. Its IKE
		// SAs are in peer_sas_ (a handful), not all the gateway's.
		if (const auto list = peer_sas_.find(i);
		    list != peer_sas_.end() &&
		    std::any_of(list->second.begin(), list->second.end(), [&](uint64_t key) {
			    const auto sa = sas_.find(key);
			    return sa != sas_.end() && sa->second->peer == i &&
			           sa->second->state != IkeSa::State::closed;
		    }))
			continue;
		const std::string name = peers_[i].name;
		try {
			if (!leased_[i].empty()) {
				leased_[i].clear();
				host_.release_addresses(i);
			}
			host_.instance_removed(i);
		} catch (...) {
			counters_.internal_errors++;
		}
		instances_.erase(std::pair{*peers_[i].template_of, peers_[i].instance_user});
		active_[i] = false;
		restart_at_[i] = {};
		peers_[i] = PeerPolicy{}; // its copies of the template's secrets are wiped as freed
		free_slots_.push_back(i); // room reserved when it was made
		try {
			host_.log("peer " + name + ": user disconnected (no IKE SA left)");
		} catch (...) {
			counters_.internal_errors++;
		}
	}
}

size_t Engine::update_users(size_t tmpl, std::shared_ptr<const Users> users, Clock::time_point now) {
	if (tmpl >= peers_.size() || !active_[tmpl] || !peers_[tmpl].is_template())
		throw std::invalid_argument("IKE peer index " + std::to_string(tmpl) +
		                            " is not an active template");
	const std::shared_ptr<const Users> before = std::exchange(peers_[tmpl].users, std::move(users));
	const Users* now_users = peers_[tmpl].users.get();
	// A user whose entry changed logs in again: a new password must be
	// proved, new addresses and networks take a new instance. A user no
	// longer listed is ended where the list is what admits (EAP-MSCHAPv2);
	// with certificates the list only adds data, and its absence is none.
	auto entry = [](const Users* u, const std::string& name) -> const User* {
		if (!u) return nullptr;
		auto it = u->find(name);
		return it == u->end() ? nullptr : &it->second;
	};
	std::vector<size_t> going;
	for (const auto& [key, slot] : instances_) {
		if (key.first != tmpl) continue;
		const User* old_entry = entry(before.get(), key.second);
		const User* new_entry = entry(now_users, key.second);
		const bool same =
		    (!old_entry && !new_entry) || (old_entry && new_entry && *old_entry == *new_entry);
		if (!same) going.push_back(slot);
	}
	for (const size_t i : going) {
		const std::string name = peers_[i].name;
		remove_peer(i, now);
		host_.log("peer " + name + ": ended: its entry in the users file changed or went");
	}
	return going.size();
}

} // namespace esptun::ike
