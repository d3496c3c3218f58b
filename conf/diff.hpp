// What a reload would change: the running config against a new one.
#pragma once

#include "conf/config.hpp"

#include <string>
#include <vector>

namespace esptun::conf {

struct ConfigDiff {
	/// What only a restart can apply, as the config names it ("[tunnel]
	/// workers"): the interface, sockets, workers and every other [tunnel]
	/// setting are set up once.
	std::vector<std::string> restart_only;
	/// Peers by name, each in the order of the config that has it. A changed
	/// peer differs in anything but the line it starts on.
	std::vector<std::string> added, removed, changed, unchanged;
	/// Templates whose users file is all that changed: their connected users
	/// stay, but for those whose entry changed or went (not in changed).
	std::vector<std::string> users_changed;
	/// [redirect] differs: the IKE service takes the new policy, peers stay.
	bool redirect_changed = false;

	bool peers_differ() const noexcept {
		return !added.empty() || !removed.empty() || !changed.empty() || !users_changed.empty();
	}
	/// Whether a reload has anything to apply (restart_only aside).
	bool anything() const noexcept { return peers_differ() || redirect_changed; }
};

/// diff_configs() - what turning @running into @next means (both validated).
ConfigDiff diff_configs(const Config& running, const Config& next);

/// same_peer() - whether two peers are configured alike (the line aside).
bool same_peer(const PeerConfig& a, const PeerConfig& b);

} // namespace esptun::conf
