// Reloader: see reload.hpp.
#include "service/reload.hpp"

#include "conf/diff.hpp"
#include "service/ike_service.hpp"
#include "service/log.hpp"
#include "service/seq_state.hpp"
#include "service/service.hpp"
#include "service/tun_setup.hpp"

#include <algorithm>

namespace esptun::service {
namespace {

std::string joined(const std::vector<std::string>& names) {
	std::string out;
	for (const std::string& n : names)
		out += (out.empty() ? "" : ", ") + n;
	return out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
	return std::find(names.begin(), names.end(), name) != names.end();
}

/// The routes through the tun that @config asks for (install_routes() minus
/// route_all's host route, which only a client has).
std::vector<IpPrefix> wanted_routes(const conf::Config& config) {
	std::vector<IpPrefix> out;
	auto add = [&](const std::vector<IpPrefix>& prefixes) {
		for (const IpPrefix& p : tun_routes(config, prefixes))
			if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
	};
	for (const conf::PeerConfig& peer : config.peers)
		add(peer_prefixes(peer));
	add(config.tunnel.address_pool);
	return out;
}

bool holds(const std::vector<IpPrefix>& set, const IpPrefix& p) {
	return std::find(set.begin(), set.end(), p) != set.end();
}

bool has_ike(const conf::Config& config, const std::vector<std::string>& names) {
	return std::any_of(config.peers.begin(), config.peers.end(),
	                   [&](const conf::PeerConfig& p) { return p.ike && contains(names, p.name); });
}

} // namespace

Reloader::Reloader(conf::Config&& running, Parts parts, std::function<conf::Config()> load)
    : running_(std::move(running)), parts_(parts), load_(std::move(load)) {}

std::string Reloader::reload() {
	if (running_.role != conf::Role::gateway)
		throw ReloadRefused("a client does not reload its config; restart it");
	conf::Config next;
	try {
		next = load_();
	} catch (const std::exception& e) {
		throw ReloadRefused(std::string("the new config is invalid, nothing changed: ") + e.what());
	}
	const conf::ConfigDiff d = conf::diff_configs(running_, next);
	if (!d.restart_only.empty())
		throw ReloadRefused("only a restart can apply a change of " + joined(d.restart_only) +
		                    "; nothing changed (put it back, or restart)");
	// Weak algorithms by a peer's allow_weak are warned of at every reload
	// the new config passed, changed peers or not.
	auto warn_weak = [](const conf::Config& config) {
		for (const std::string& w : conf::weak_peer_warnings(config))
			log::warn("reload: " + w);
	};
	if (d.redirect_changed && !parts_.ike)
		throw ReloadRefused("[redirect] needs a restart: it works through IKE, which starts with "
		                    "the first IKE peer; nothing changed");
	if (!d.anything()) {
		warn_weak(next);
		return "nothing to change: " + std::to_string(d.unchanged.size()) + " peer(s) as before";
	}
	if (!d.peers_differ()) {
		// A new [redirect] alone: the engine takes it, every peer and SA stays.
		std::string said = parts_.ike->set_redirect(next);
		running_ = std::move(next);
		warn_weak(running_);
		return said + "; " + std::to_string(d.unchanged.size()) + " peer(s) unchanged";
	}

	std::vector<std::string> going = d.removed, coming = d.added;
	going.insert(going.end(), d.changed.begin(), d.changed.end());
	coming.insert(coming.end(), d.changed.begin(), d.changed.end());
	if (!parts_.ike && has_ike(next, coming))
		throw ReloadRefused("the first IKE peer needs a restart: the IKE port is bound at "
		                    "start-up, before privileges are dropped; nothing changed");

	// 1. The new peers and their static SAs, checked against those that stay.
	std::vector<tunnel::PeerParams> params;
	for (tunnel::PeerParams& p : peer_params(next))
		if (contains(coming, p.name)) params.push_back(std::move(p));
	// A template that goes takes its connected users (peers of their own in
	// the SA table) with it; remove_peers() below ends them in IKE.
	std::vector<std::string> going_table = going;
	if (parts_.ike)
		for (std::string& name : parts_.ike->instance_names(going))
			going_table.push_back(std::move(name));
	tunnel::PeerChange change;
	try {
		change = parts_.table.prepare_peers(going_table, params);
	} catch (const std::invalid_argument& e) {
		throw ReloadRefused(std::string(e.what()) + "; nothing changed");
	}
	// 2. The address pool's reservations (a leased address may stand in the way).
	tunnel::AddressPool& pool = parts_.table.address_pool();
	if (std::string why = pool.set_reserved(pool_reserved(next)); !why.empty())
		throw ReloadRefused("the new peers' allowed_ips: " + why + "; nothing changed");
	// 3. New routes (those that go wait until the peers have gone).
	const std::vector<IpPrefix> had = wanted_routes(running_), want = wanted_routes(next);
	std::vector<IpPrefix> added_routes;
	try {
		for (const IpPrefix& p : want)
			if (!holds(had, p)) {
				parts_.routes.add_route(p, parts_.tun_ifindex);
				added_routes.push_back(p);
			}
		// 4. Sequence numbers of new static keys (resumed from the state file).
		const std::vector<tunnel::Peer*> fresh = change.added();
		parts_.seq_state.adopt(fresh, key_fingerprints(params), d.changed);
	} catch (const std::exception& e) {
		for (const IpPrefix& p : added_routes) {
			try {
				parts_.routes.remove_route(p, parts_.tun_ifindex);
			} catch (const std::exception&) {
				// Leaves a route to no peer, dropped as no_route; removed at exit.
			}
		}
		(void)pool.set_reserved(pool_reserved(running_)); // what held a moment ago holds again
		throw ReloadRefused(std::string(e.what()) + "; nothing changed");
	}

	// Commit: nothing below refuses.
	if (parts_.ike) parts_.ike->remove_peers(going);
	parts_.table.commit_peers(std::move(change));
	size_t users_ended = 0;
	if (parts_.ike) {
		try {
			parts_.ike->add_peers(next, coming);
			// After the commit: ending a user changes the SA table itself.
			users_ended = parts_.ike->update_users(next, d.users_changed);
		} catch (const std::exception& e) {
			// Only a bug gets here (names were checked above): say so, keep running.
			log::error("reload: IKE could not take the new peers: " + std::string(e.what()));
		}
	}
	std::string redirect_said;
	if (d.redirect_changed) redirect_said = parts_.ike->set_redirect(next);
	parts_.seq_state.forget(d.removed);
	for (const IpPrefix& p : had)
		if (!holds(want, p)) {
			try {
				parts_.routes.remove_route(p, parts_.tun_ifindex);
			} catch (const std::exception& e) {
				log::warn("reload: cannot remove the route " + to_string(p) + ": " +
				          e.what());
			}
		}
	running_ = std::move(next);
	warn_weak(running_);

	std::string what;
	auto say = [&](const char* how, const std::vector<std::string>& names) {
		if (names.empty()) return;
		what += (what.empty() ? "" : "; ") + std::string(how) + " " + joined(names);
	};
	say("added", d.added);
	say("removed", d.removed);
	say("re-established", d.changed);
	if (!d.users_changed.empty())
		what += (what.empty() ? "" : "; ") + std::string("new users file for ") +
		        joined(d.users_changed) + " (" + std::to_string(users_ended) +
		        " connected user(s) ended)";
	if (!redirect_said.empty()) what += "; " + redirect_said;
	return what + "; " + std::to_string(d.unchanged.size()) + " peer(s) unchanged";
}

} // namespace esptun::service
