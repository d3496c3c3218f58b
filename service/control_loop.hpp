// The control loop of a running endpoint: the Asio io_context that takes
// SIGINT/SIGTERM, serves the control socket, runs IKE and keeps the
// sequence number reservations ahead of the data path.
#pragma once

#include "platform/unique_fd.hpp"
#include "service/seq_state.hpp"
#include "tunnel/sa.hpp"

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <csignal>
#include <functional>

namespace esptun::service {

/**
 * ControlLoop - the io_context, and the eventfd that stops the workers
 *
 * SIGINT and SIGTERM are caught from construction on: one that arrives
 * during set-up is acted on as soon as the loop runs, after everything is
 * in place to be undone in order. It stops the loop and signals @stop.
 * SIGHUP, which would otherwise end the process without any clean-up, is
 * caught too and calls on_hangup (a reload, set once the service is up).
 */
struct ControlLoop {
	ControlLoop();
	ControlLoop(const ControlLoop&) = delete;
	ControlLoop& operator=(const ControlLoop&) = delete;

	asio::io_context io;
	platform::UniqueFd stop;
	asio::signal_set signals;
	asio::signal_set hangup;
	std::function<void()> on_hangup; ///< what SIGHUP does (run on the loop)

private:
	/// wait_hangup() - log each SIGHUP and keep running
	void wait_hangup();
};

/**
 * BlockSignalsForThreads - SIGINT, SIGTERM and SIGHUP blocked while it lives
 *
 * Signals go to the control loop; threads started meanwhile inherit the
 * mask, so a worker's epoll_wait() is never interrupted by them for nothing.
 */
class BlockSignalsForThreads {
public:
	BlockSignalsForThreads();
	~BlockSignalsForThreads();
	BlockSignalsForThreads(const BlockSignalsForThreads&) = delete;
	BlockSignalsForThreads& operator=(const BlockSignalsForThreads&) = delete;

private:
	sigset_t old_;
};

/**
 * SeqRefresh - every 100 ms on the control loop: SaTable::collect() and
 * SeqState::refresh(), logging when saving starts or stops failing
 * @table:     collects the SAs replaced since a worker was last busy
 * @seq_state: keeps the reservations ahead of the data path (seq_state.hpp)
 */
class SeqRefresh {
public:
	SeqRefresh(asio::io_context& io, tunnel::SaTable& table, SeqState& seq_state);
	SeqRefresh(const SeqRefresh&) = delete;
	SeqRefresh& operator=(const SeqRefresh&) = delete;

private:
	void arm();

	asio::steady_timer timer_;
	tunnel::SaTable& table_;
	SeqState& seq_state_;
	bool failing_ = false;
};

} // namespace esptun::service
