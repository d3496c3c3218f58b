// One esptun-gateway process inside its namespace (the demo's two, ike-load's responder): start,
// readiness via `esptun-gateway status`, status JSON, clean stop.
#pragma once

#include "apps/bench/lab/process.hpp"
#include "service/json_io.hpp"

#include <optional>
#include <string>

namespace esptun::bench::lab {

class GatewayProcess {
public:
	/**
	 * GatewayProcess() - start `@binary run -c @config` inside @netns
	 * @label: short name for messages ("A", "B")
	 * @log:   file for the gateway's stdout and stderr
	 * @control_socket: when set, status() finds the gateway by it (`-s`)
	 *         instead of loading @config (which takes long with many peers)
	 */
	GatewayProcess(std::string label, std::string netns, std::string binary, std::string config,
	               std::string log, std::string control_socket = {});

	/**
	 * status() - run `@binary status -c @config` (or `-s SOCKET`) and parse its JSON
	 * Return: the status, or nullopt when the command failed (not running yet)
	 */
	std::optional<service::Json> status(Millis timeout = Millis(3000)) const;

	/**
	 * check_alive() - throw std::runtime_error, with the end of the gateway's
	 * log, when the process has exited
	 */
	void check_alive();

	/**
	 * stop() - SIGTERM and wait; the gateway removes its tun and routes
	 * Return: empty when it exited with status 0, else what went wrong
	 */
	std::string stop();

	/// kill() - SIGKILL, as a crash would end it (nothing cleaned up), and reap it
	void kill() noexcept;

	/// log_tail() - the last @lines lines of the gateway's log
	std::string log_tail(size_t lines = 15) const;
	/// status_error() - what the last failed `status` command printed on stderr
	std::string status_error() const;
	const std::string& label() const noexcept { return label_; }
	pid_t pid() const noexcept { return child_.pid(); }

private:
	std::string label_, netns_, binary_, config_, log_, control_socket_;
	Child child_;
};

/**
 * wait_until_ready() - poll both gateways' status until each answers
 * @timeout: give up then (throws, with the gateways' logs)
 */
void wait_until_ready(GatewayProcess& a, GatewayProcess& b, Millis timeout);

} // namespace esptun::bench::lab
