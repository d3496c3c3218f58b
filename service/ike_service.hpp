// IkeService - runs the IKEv2 engine (ike/engine.hpp) inside the
// service's control loop: it feeds the engine what arrives on the ESP port
// (through the workers' IkeInbox) and on the IKE port (UDP 500, its own
// socket), ticks its timers, sends what it answers, and turns negotiated
// CHILD_SAs into SAs in the SA table.
#pragma once

#include "conf/config.hpp"
#include "datapath/ike_inbox.hpp"
#include "ike/engine.hpp"
#include "platform/unique_fd.hpp"
#include "service/dns_config.hpp"
#include "service/tun_setup.hpp"
#include "tunnel/sa.hpp"

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace esptun::service {

/// The IKE policies for @config's peers that have a psk, in config order,
/// with @hostname as local identity where none is configured.
std::vector<ike::PeerPolicy> ike_policies(const conf::Config& config, const std::string& hostname);
/// The engine's redirect policy for @config's [redirect] (When::never without one).
ike::RedirectPolicy redirect_policy(const conf::Config& config);
/// redirect_text() - @policy in one line, as the log and a reload say it:
/// "redirect: when all, to 192.0.2.2; established clients move at 100/s"
std::string redirect_text(const ike::RedirectPolicy& policy);

class IkeService final : public ike::Host {
public:
	/**
	 * IkeService() - bind the IKE port and get ready; nothing is sent yet.
	 * @natt_fd: the ESP port's socket (a worker's): IKE on that port is sent from it
	 * @inbox:   where the workers put IKE messages from the ESP port
	 * @tun_ifindex: the tun, for virtual addresses a gateway assigns us
	 * Throws std::runtime_error when the IKE port cannot be bound.
	 */
	IkeService(asio::io_context& io, const conf::Config& config, tunnel::SaTable& table, int natt_fd,
	           datapath::IkeInbox& inbox, int tun_ifindex);
	~IkeService() override;

	/// Starts receiving, the timers, and the IKE SAs this side initiates.
	void start();
	/// Deletes every IKE SA (a best-effort INFORMATIONAL to each peer).
	void shutdown();
	/**
	 * remove_peers() - a reload takes these IKE peers away (or replaces
	 * them): each IKE SA gets a Delete (best effort) and its CHILD_SAs
	 * leave the SA table. Call before SaTable::commit_peers() removes them
	 * there. Names that are no IKE peer here are ignored.
	 */
	void remove_peers(std::span<const std::string> names);
	/**
	 * add_peers() - a reload's new IKE peers (those of @config named in
	 * @names that have a psk), after SaTable::commit_peers() added them to
	 * the table; initiators start connecting at once.
	 */
	void add_peers(const conf::Config& config, std::span<const std::string> names);
	/// The SA table names of the connected users of the templates among
	/// @names: a reload that removes or changes a template removes them from
	/// the table along with it (remove_peers() ends them here).
	std::vector<std::string> instance_names(std::span<const std::string> names) const;
	/**
	 * update_users() - the templates of @config named in @names take their
	 * new users (a reload that changed only their users_file); users whose
	 * entry changed or went are ended (ike::Engine::update_users()).
	 * Return: how many users were ended.
	 */
	size_t update_users(const conf::Config& config, std::span<const std::string> names);
	/**
	 * set_redirect() - the redirect policy of @config from now on (a reload
	 * that changed [redirect]). No peer and no IKE SA changes here:
	 * the engine applies it to new IKE_SA_INITs, and with when = all moves
	 * established clients over the next ticks.
	 * Return: the new policy in words (redirect_text()).
	 */
	std::string set_redirect(const conf::Config& config);
	/// The "ike" member of the status JSON.
	nlohmann::ordered_json status_json() const;
	/// route_all: the /1 routes, which follow the families of the virtual
	/// addresses the gateway assigns (null: no route_all). Outlives this.
	void set_full_tunnel(FullTunnel* full) noexcept { full_tunnel_ = full; }

	// ike::Host
	void send(ike::Port via, const Endpoint& to, std::span<const uint8_t> msg) override;
	std::optional<Endpoint> local_endpoint(ike::Port via, const Endpoint& to) override;
	std::optional<uint32_t> allocate_spi() override;
	void release_spi(uint32_t spi) override;
	bool install_child(size_t peer, const ike::ChildKeys& keys, bool replace_out) override;
	void switch_outbound(size_t peer, uint32_t spi_in) override;
	void remove_child(size_t peer, uint32_t spi_in, uint32_t spi_out) override;
	std::optional<ike::Clock::time_point> last_esp_rx(size_t peer) override;
	std::optional<ike::ChildUsage> child_usage(size_t peer, uint32_t spi_in, uint32_t spi_out) override;
	bool instance_added(size_t instance) override;
	void instance_removed(size_t instance) override;
	void log(const std::string& line) override;
	void log_at(ike::LogLevel level, const std::string& line) override;
	bool debug_enabled() const override;
	void send_keepalive(const Endpoint& to) override;
	void peer_moved(size_t peer, const Endpoint& to) override;
	void child_selectors(size_t peer, std::span<const ike::TrafficSelector> remote) override;
	std::optional<IpAddress> lease_address(size_t peer, Family family) override;
	void release_addresses(size_t peer) override;
	void assigned(size_t peer, std::span<const IpAddress> addresses,
	              std::span<const IpAddress> dns) override;

private:
	void wait_inbox();
	void wait_ike_socket();
	void arm_timer();
	void publish_spis();

	tunnel::SaTable& table_;
	std::string hostname_; ///< our identity where a peer names none
	int natt_fd_;
	int natt_family_ = 0;
	uint16_t natt_port_ = 0;
	std::optional<IpAddress> listen_addr_; ///< the listen address, when not a wildcard
	datapath::IkeInbox& inbox_;
	int tun_ifindex_ = 0;
	platform::UniqueFd ike_fd_; ///< UDP ike_port; empty when ike_port = 0
	int ike_family_ = 0;
	uint16_t ike_port_ = 0;
	asio::posix::stream_descriptor inbox_wait_, ike_wait_;
	asio::steady_timer timer_;
	std::vector<tunnel::Peer*> table_peers_; ///< by policy index (null: removed by a reload)
	std::vector<uint32_t> replay_windows_;   ///< by policy index
	crypto::CryptoImpl crypto_impl_;         ///< for the SA table peers of template users
	/// remove_peers() is under way: the reload's own SaTable change takes the
	/// ended users out of the table (instance_names()), not instance_removed().
	bool reload_removing_ = false;
	/// Outbound halves of rekeyed CHILD_SAs, installed when the old one is deleted.
	std::map<uint32_t, tunnel::ChildSaKeys> pending_out_;
	std::unique_ptr<ike::Engine> engine_;
	/// Our IKE SPIs as last published to the inbox, and the buffer the
	/// engine fills to compare with them.
	std::vector<uint64_t> published_spis_, spis_now_;
	/// engine_->sas_version() when they were: a walk only after a change.
	std::optional<uint64_t> published_version_;
	uint64_t send_errors_ = 0;
	std::vector<IpPrefix> virtual_addresses_; ///< on the tun, from the gateway
	FullTunnel* full_tunnel_ = nullptr;       ///< route_all's /1 routes, or null
	/// Client: what it needs of the config, copied at start-up (the config
	/// itself is the Reloader's, and no pointer into it may be kept): the
	/// tun's addresses, to know which prefixes get tun routes, and route_all.
	struct ClientRouting {
		std::vector<IpPrefix> tun_addresses;
		bool route_all = false;
	};
	std::optional<ClientRouting> client_;
	/// Client: the routes through the tun for the gateway's side: its
	/// allowed_ips from start-up, the negotiated selectors once a CHILD_SA is up.
	std::vector<IpPrefix> routed_;
	LinkDns dns_;             ///< the gateway's DNS servers in the resolver config, until we stop
	std::string dns_applied_; ///< how they were set, for status
};

} // namespace esptun::service
