// Live reload of a running gateway: `esptun-gateway reload` (over the
// control socket) and SIGHUP read the config again and apply the peers'
// difference while the data path keeps forwarding.
//
// A reload either applies completely or changes nothing. Everything that
// can fail comes first: loading and validating the new config, refusing
// what only a restart can apply, building the new peers and their static
// SAs (SaTable::prepare_peers()), the address pool's reservations, the
// sequence number state of new static keys, the routes of new allowed_ips.
// Then the commit, which does not fail: IKE deletes the removed and
// changed peers' IKE SAs (telling the peer), the SA table publishes the new
// peers in one store, IKE adds the new ones (initiators connect at once),
// and routes nothing needs any more go. Peers that did not change keep
// their SAs, counters and sequence numbers; their packets never wait. A
// changed [redirect] is handed to the IKE engine as it is: it cannot fail
// and touches no peer.
#pragma once

#include "conf/config.hpp"
#include "platform/net_config_guard.hpp"
#include "tunnel/sa.hpp"

#include <functional>
#include <stdexcept>
#include <string>

namespace esptun::service {

class IkeService;
class SeqState;

/// A reload that was refused; what() says why, and that nothing changed.
class ReloadRefused : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

class Reloader {
public:
	/// What the running service is made of, as far as a reload changes it.
	struct Parts {
		tunnel::SaTable& table;
		SeqState& seq_state;
		IkeService* ike;                  ///< null: no IKE peer at start-up
		platform::NetConfigGuard& routes; ///< the tun's routes (install_routes())
		int tun_ifindex;
	};

	/**
	 * Reloader() - reloads of a service started with @running
	 * @running: moved in, not copied: this is the one copy of the config
	 *           the service holds (config())
	 * @load:    reads and validates the config again (conf::load_config() or
	 *           the root helper's copy of it after a privilege drop); throws
	 *           conf::ConfigError
	 */
	Reloader(conf::Config&& running, Parts parts, std::function<conf::Config()> load);

	/**
	 * reload() - load the config and apply the difference
	 * Return: what was done, one line. Throws ReloadRefused with the reason
	 * (invalid config, a change that needs a restart, a new peer that does
	 * not fit); the service then runs on unchanged.
	 */
	std::string reload();

	/// The config in effect (the last one applied). A reload replaces its
	/// contents: keep a copy of what you need, not a pointer into it.
	const conf::Config& config() const noexcept { return running_; }

private:
	conf::Config running_;
	Parts parts_;
	std::function<conf::Config()> load_;
};

} // namespace esptun::service
