// systemd notifications through libsystemd: see notify.hpp.
//
// sd_notify() opens an AF_UNIX datagram socket, sends and closes it on each
// call: socket, get/setsockopt (its send buffer), sendmsg and close, all on
// the seccomp allow-list (platform/privileges.cpp), so it works after the
// privilege drop. systemd's own socket (/run/systemd/notify) is writable by
// every user, so the unprivileged user may send to it too.
#include "service/notify.hpp"

#include "service/log.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <string>
#include <systemd/sd-daemon.h>

namespace esptun::service {

namespace {

/**
 * send() - one notification; a failure is logged once per process, since
 * the watchdog would otherwise repeat it every few seconds
 */
void send(const std::string& state) {
	static std::atomic<bool> warned{false};
	const int rc = sd_notify(0, state.c_str());
	if (rc >= 0 || warned.exchange(true)) return;
	std::string first = state.substr(0, state.find('\n'));
	log::warn("cannot notify systemd (" + first + "): " + std::strerror(-rc) +
	          "; further failures are not logged");
}

} // namespace

void notify_ready(std::string_view status) {
	std::string state = "READY=1";
	if (!status.empty()) state += "\nSTATUS=" + std::string(status);
	send(state);
}

void notify_reloading() {
	timespec now{};
	::clock_gettime(CLOCK_MONOTONIC, &now);
	const long long usec = static_cast<long long>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
	send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

void notify_stopping() { send("STOPPING=1"); }

Watchdog::Watchdog(asio::io_context& io) : timer_(io) {
	uint64_t usec = 0;
	// > 0: WATCHDOG_USEC is set and WATCHDOG_PID (when set) is this process.
	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
	// At least 1 ms apart: a WatchdogSec below 2 ms must not make this spin.
	interval_ = std::chrono::microseconds(std::max<uint64_t>(usec / 2, 1000));
	log::info("systemd watchdog: keep-alive every " + std::to_string(interval_.count() / 1000) + " ms");
	arm();
}

void Watchdog::arm() {
	timer_.expires_after(interval_);
	timer_.async_wait([this](asio::error_code ec) {
		if (ec) return;
		send("WATCHDOG=1");
		arm();
	});
}

} // namespace esptun::service
