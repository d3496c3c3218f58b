// One running endpoint (gateway or client): run_service() turns a validated
// config into a tun device with routes, the workers with their underlay
// sockets, IKE and the control socket, and takes them down in reverse order.
#pragma once

#include "base/counters.hpp"
#include "conf/config.hpp"
#include "platform/udp_socket.hpp"
#include "tunnel/sa.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace esptun::datapath {
struct TunIoStats;
} // namespace esptun::datapath

namespace esptun::service {

class IkeService;

/// PeerParams for the SA table from the config's peers.
std::vector<tunnel::PeerParams> peer_params(const conf::Config& config);

/// Facts about the running endpoint that the status JSON reports.
struct ServiceInfo {
	std::string program;
	std::string interface;
	unsigned mtu = 0;
	std::string mtu_source; ///< "configured" or how it was derived
	std::string listen;
	std::string tun_io_mode;
	std::string tun_io_reason;
	unsigned direct_write_max = 0; ///< as configured (used in vhost mode only)
	unsigned busy_poll_us = 0;     ///< in effect: as configured, 0 with one CPU
	unsigned wake_poll_us = 0;     ///< in effect: as configured, 0 with one CPU
	/// The workers' scheduling as started: "realtime" (SCHED_FIFO while they
	/// leave room, datapath/precedence.hpp) or "normal", and why not realtime.
	std::string worker_priority = "normal";
	std::string worker_priority_reason;
	unsigned queue_target_us = 0; ///< the receive queue limit as configured (0: off)
	unsigned queue_interval_ms = 0;
	bool queue_timestamps = false; ///< the sockets report arrival times (the limit works)
	bool flow_queue = false;       ///< the workers send from flow queues (DataPlane::set_flow_queue())
	std::string tun_offloads;      ///< what the tun took: "csum tso4 ...", or why none
	const datapath::TunIoStats* tun_io_stats = nullptr; ///< the tun port's counters, once it exists
	std::string crypto_impl;                            ///< as configured: auto, stitched or two-pass
	std::vector<const platform::UdpSocket*> udp;        ///< the underlay sockets, one per worker
	unsigned workers = 0;                               ///< data-path threads
	std::vector<const DataPathStats*> worker_stats; ///< each worker's own counters (status "per_worker")
	std::string io_engine;                          ///< the underlay engine: "mmsg" or "uring"
	std::string io_engine_reason;                   ///< why (auto), empty when asked for by name
	platform::BufferSizes udp_buffers;              ///< its buffer sizes as the kernel set them
	const class SeqState* seq_state = nullptr;      ///< the sequence number state file
	const IkeService* ike = nullptr;                ///< IKEv2, when a peer has a psk
	std::chrono::steady_clock::time_point started;
};

/**
 * render_status() - the status JSON: endpoint facts, data-path counters,
 * and per peer its endpoint and both SAs.
 */
std::string render_status(const ServiceInfo& info, const DataPathStats& stats, const tunnel::SaTable& table);

class ConfigReader;
class DnsHelper;

/**
 * EarlyHelpers - the root helpers an endpoint keeps after it drops
 * privileges, forked before the config is read. A child gets a copy of
 * its parent's memory as it is at the fork, and keeps it for as long as
 * it lives: forked later, a helper would hold every key and PSK the
 * endpoint had loaded, and go on holding those the endpoint wipes when a
 * reload removes them.
 */
struct EarlyHelpers {
	std::unique_ptr<ConfigReader> config_reader; ///< gateway: reads the config for reloads
	std::unique_ptr<DnsHelper> dns;              ///< client: runs the DNS tools as root
	EarlyHelpers();
	EarlyHelpers(EarlyHelpers&&) noexcept;
	EarlyHelpers& operator=(EarlyHelpers&&) noexcept;
	~EarlyHelpers();
};

/**
 * start_helpers() - fork the helpers a @role endpoint may need
 * @config_path: the config file the gateway's reader will read
 *
 * Call before the config is loaded, while the process has one thread. A
 * process that is not root gets none (it has no root to keep). run_service()
 * drops those the config turns out not to need.
 * Throws SystemError when a fork fails.
 */
EarlyHelpers start_helpers(conf::Role role, const std::filesystem::path& config_path);

/**
 * run_service() - set up, forward until SIGINT/SIGTERM, tear down
 * @config:  a validated config, moved from: the service keeps the one copy
 *           (the Reloader's, which a reload replaces), not the caller
 * @program: name for logs and the status JSON
 * @helpers: from start_helpers() (none: forked here, after the config)
 *
 * Throws on set-up failure (after undoing what was already set up);
 * returns normally after a clean shutdown.
 */
void run_service(conf::Config&& config, const std::string& program, EarlyHelpers helpers = {});

} // namespace esptun::service
