// The control loop's signals and timers: see control_loop.hpp.
#include "service/control_loop.hpp"

#include "service/log.hpp"

#include <chrono>
#include <pthread.h>
#include <string>

namespace esptun::service {

ControlLoop::ControlLoop()
    : stop(platform::make_eventfd()), signals(io, SIGINT, SIGTERM), hangup(io, SIGHUP) {
	signals.async_wait([this](asio::error_code ec, int sig) {
		if (!ec)
			log::info(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
			          ", shutting down");
		platform::eventfd_signal(stop.get());
		io.stop();
	});
	wait_hangup();
}

void ControlLoop::wait_hangup() {
	hangup.async_wait([this](asio::error_code ec, int) {
		if (ec) return;
		if (on_hangup)
			on_hangup();
		else
			log::warn("received SIGHUP before start-up finished: ignored");
		wait_hangup();
	});
}

BlockSignalsForThreads::BlockSignalsForThreads() {
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, &old_);
}

BlockSignalsForThreads::~BlockSignalsForThreads() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

SeqRefresh::SeqRefresh(asio::io_context& io, tunnel::SaTable& table, SeqState& seq_state)
    : timer_(io), table_(table), seq_state_(seq_state) {
	arm();
}

void SeqRefresh::arm() {
	timer_.expires_after(std::chrono::milliseconds(100));
	timer_.async_wait([this](asio::error_code ec) {
		if (ec) return;
		table_.collect(); // SAs replaced since a worker was last busy (tunnel/sa.hpp)
		const bool ok = seq_state_.refresh();
		if (!ok && !failing_)
			log::error("cannot save sequence numbers: " + seq_state_.error() +
			           "; sending stops when the current reservation runs out");
		else if (ok && failing_)
			log::info("sequence numbers saved again: " + seq_state_.path());
		failing_ = !ok;
		arm();
	});
}

} // namespace esptun::service
