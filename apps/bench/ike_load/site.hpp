// The storm's bystander: a site gateway with static keys to the responder,
// and a TCP transfer through it that runs across the responder's restart
// and the reconnection storm that follows.
//
//   netns T (site)                  netns R (responder)
//   esptun-gateway 10.205.0.1 <-- veth --> 10.205.0.2 (and 10.203.0.2:4500)
//   tun 10.62.0.1: TCP sender       tun 10.63.0.1: TCP receiver
//
// Static keys, because the question is whether the storm stalls the data
// path of the peers that are already there: an IKE peer would itself be
// one of the reconnecting clients. The responder keeps its outbound
// sequence numbers across the SIGKILL (state_dir), so the site's replay
// window takes its packets at once.
#pragma once

#include "apps/bench/lab/gateway_process.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/tcp_transfer.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "platform/netns.hpp"
#include "service/json_io.hpp"

#include <memory>
#include <string>

namespace esptun::bench::ike_load {

/// What the transfer did across one restart and storm.
struct TransferFigures {
	double pace_mbit = 0;     ///< the sender's pacing (Mbit/s)
	uint64_t bytes = 0;       ///< sent, and counted by the receiver
	bool hash_ok = false;     ///< the receiver's count and hash are the sender's
	double resumed_s = -1;    ///< from the SIGKILL to the first data after the restart (-1: none)
	double storm_s = 0;       ///< the storm: its first start to its last CHILD_SA
	uint64_t storm_bytes = 0; ///< arrived during the storm
	double storm_gap_s = 0;   ///< the longest time in the storm with nothing arriving
	std::string error;

	double storm_mbit() const { return storm_s > 0 ? double(storm_bytes) * 8 / storm_s / 1e6 : 0; }
	/// ok() - it went on: the bytes arrived intact and moved again after the restart
	bool ok() const { return error.empty() && hash_ok && resumed_s >= 0; }
	service::Json to_json() const;
	/// text() - one line for the table
	std::string text() const;
};

class Site {
public:
	/**
	 * Site() - namespace @name joined to @responder_ns, and its gateway
	 * (@binary) running with static keys to the responder at @responder_addr
	 */
	Site(const std::string& name, const std::string& responder_ns, const std::string& responder_addr,
	     const std::string& binary, const lab::TempDir& tmp);
	~Site();
	Site(const Site&) = delete;
	Site& operator=(const Site&) = delete;

	/// responder_peer() - the [[peer]] the responder's config lists for the site
	const std::string& responder_peer() const noexcept { return responder_peer_; }

	/**
	 * start_transfer() - a receiver on the responder's tunnel address, then
	 * the sender here, paced at @mbit; returns once data arrives. Throws.
	 */
	void start_transfer(uint64_t mbit);
	/**
	 * wait_resumed() - after the responder was started again: wait until
	 * the site's gateway receives from it (the receiver's ACKs), at most
	 * @limit. Return: false when it did not.
	 */
	bool wait_resumed(lab::Millis limit);
	/**
	 * finish() - stop the sender, collect both ends and judge them
	 * @killed:    when the responder was SIGKILLed
	 * @restarted: when its successor answered status
	 * @storm_start, @storm_s: the storm's first start and its length
	 */
	TransferFigures finish(lab::Clock::time_point killed, lab::Clock::time_point restarted,
	                       lab::Clock::time_point storm_start, double storm_s);

private:
	/// rx_packets() - what the site's gateway has received from the responder
	uint64_t rx_packets();

	std::string responder_ns_;
	platform::NetnsGuard ns_;
	std::string responder_peer_;
	std::unique_ptr<lab::GatewayProcess> gw_;
	uint64_t pace_mbit_ = 0;
	std::unique_ptr<lab::TcpReceiver> rx_;
	std::unique_ptr<lab::TcpSender> tx_;
};

} // namespace esptun::bench::ike_load
