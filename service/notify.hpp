// Telling systemd how the endpoint is doing (sd_notify(3)) when it runs as
// a Type=notify service: ready once forwarding, reloading, stopping, and
// the watchdog's keep-alive from the control loop. Outside systemd
// (NOTIFY_SOCKET unset) every call here does nothing.
#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <string_view>

namespace esptun::service {

/**
 * notify_ready() - READY=1: the endpoint forwards (set-up done, or a
 * reload finished)
 * @status: a line for `systemctl status` (STATUS=); empty: none
 */
void notify_ready(std::string_view status = {});

/**
 * notify_reloading() - RELOADING=1: a reload (SIGHUP) has begun; systemd
 * shows the unit as reloading until the next notify_ready().
 *
 * Sends the CLOCK_MONOTONIC time with it (MONOTONIC_USEC=), which
 * sd_notify(3) asks for alongside RELOADING=1 since systemd 253.
 */
void notify_reloading();

/// notify_stopping() - STOPPING=1: the endpoint is shutting down.
void notify_stopping();

/**
 * Watchdog - WATCHDOG=1 from the control loop at half the unit's
 * WatchdogSec, while the loop runs
 *
 * Does nothing unless systemd asked for keep-alives (WATCHDOG_USEC set for
 * this process: sd_watchdog_enabled(3)). The keep-alive comes from a timer
 * on @io, so it stops when the control loop stalls, and systemd then kills
 * and (Restart=on-failure) restarts the service.
 */
class Watchdog {
public:
	explicit Watchdog(asio::io_context& io);
	Watchdog(const Watchdog&) = delete;
	Watchdog& operator=(const Watchdog&) = delete;

	/// The keep-alive interval: half of WatchdogSec; zero when off.
	std::chrono::microseconds interval() const noexcept { return interval_; }

private:
	void arm();

	asio::steady_timer timer_;
	std::chrono::microseconds interval_{0};
};

} // namespace esptun::service
