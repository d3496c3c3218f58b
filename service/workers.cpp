// The workers: underlay sockets (step 3 of start-up), tun ports and data
// planes (step 6), and their threads; see workers.hpp.
#include "service/workers.hpp"

#include "platform/port_claim.hpp"
#include "platform/thread_priority.hpp"
#include "platform/unique_fd.hpp"
#include "service/control_loop.hpp"
#include "service/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sched.h>
#include <stdexcept>
#include <string_view>

namespace esptun::service {
namespace {

platform::IoEngineChoice io_engine_choice(conf::IoEngine e) noexcept {
	switch (e) {
	case conf::IoEngine::uring:
		return platform::IoEngineChoice::uring;
	case conf::IoEngine::mmsg:
		return platform::IoEngineChoice::mmsg;
	case conf::IoEngine::automatic:
		break;
	}
	return platform::IoEngineChoice::automatic;
}

/// UDP GRO needs the engine that reads its control message (mmsg).
bool want_gro(const conf::TunnelConfig& tc, const Worker& wk) {
	return tc.udp_gro && std::string_view(wk.engine->name()) == "mmsg";
}

/**
 * attach_vhost() - a vhost-net device and VhostTun for every worker
 *
 * The first worker takes the device step 2 opened. With "auto", a failure
 * leaves every worker without vhost and @info saying why.
 */
void attach_vhost(const conf::TunnelConfig& tc, TunIoChoice& tun_io, Workers& workers, ServiceInfo& info) {
	try {
		for (size_t w = 0; w < workers.size(); w++) {
			Worker& wk = *workers[w];
			platform::VhostNet dev =
			    w == 0 ? std::move(*tun_io.vhost) : platform::VhostNet::open();
			// UDP GRO before the port exists: it sizes the receive slots.
			const bool gro = want_gro(tc, wk) && wk.udp->enable_gro();
			wk.vhost.emplace(std::move(dev), wk.queue.fd.get(), info.mtu, tc.direct_write_max,
			                 wk.tun_stats, tc.tun_offload, gro);
		}
	} catch (const std::exception& e) {
		if (tc.tun_io == conf::TunIo::vhost)
			throw std::runtime_error(std::string("tun_io = \"vhost\": ") + e.what());
		for (auto& wk : workers)
			wk->vhost.reset();
		info.tun_io_mode = "direct";
		info.tun_io_reason = vhost_fallback_reason(e);
		log::info("tun I/O: direct (" + info.tun_io_reason + ")");
	}
	tun_io.vhost.reset();
}

} // namespace

unsigned usable_cpus() noexcept {
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
	const int n = CPU_COUNT(&set);
	return n > 0 ? unsigned(std::min(n, int(conf::kMaxWorkers))) : 1;
}

unsigned worker_count(const conf::Config& config) noexcept {
	if (config.tunnel.workers) return config.tunnel.workers;
	return std::min(usable_cpus(), unsigned(std::max<size_t>(1, config.peers.size())));
}

Workers open_workers(const conf::TunnelConfig& tc, unsigned n, ServiceInfo& info) {
	// The port is ours alone before the first socket of the SO_REUSEPORT
	// group binds (platform/port_claim.hpp: why the kernel would share it).
	const platform::PortClaim claim = platform::PortClaim::take(tc.listen);
	Workers workers;
	for (unsigned w = 0; w < n; w++) {
		auto wk = std::make_unique<Worker>();
		Endpoint at = tc.listen;
		if (w > 0)
			at.port = workers[0]->udp->local_endpoint().port; // "port 0": the one the first got
		wk->udp.emplace(platform::UdpSocket::bind(at, int(tc.socket_buffer), n > 1));
		log::debug("worker " + std::to_string(w) + ": UDP socket bound to " +
		           to_string(wk->udp->local_endpoint()) + (n > 1 ? " (SO_REUSEPORT group)" : ""));
		wk->udp->set_gso(tc.udp_gso);
		platform::OpenedEngine e =
		    platform::open_udp_engine(io_engine_choice(tc.io_engine), *wk->udp);
		wk->engine = std::move(e.engine);
		if (w == 0) {
			info.io_engine = wk->engine->name();
			info.io_engine_reason = e.reason;
			log::info(std::string("underlay engine: ") + info.io_engine +
			          (e.reason.empty() ? "" : " (" + e.reason + ")"));
		}
		info.udp.push_back(&*wk->udp);
		info.worker_stats.push_back(&wk->stats);
		workers.push_back(std::move(wk));
	}
	info.udp_buffers = workers[0]->udp->buffer_sizes();
	return workers;
}

void attach_tun_ports(const conf::TunnelConfig& tc, TunIoChoice& tun_io, Workers& workers,
                      const tunnel::SaTable& table, ServiceInfo& info) {
	// UDP GRO also needs 64 KiB receive buffers: a direct port always has
	// them, a vhost port only when built for GRO, so attach_vhost() asks first.
	if (tun_io.vhost) attach_vhost(tc, tun_io, workers, info);
	if (workers[0]->vhost) log::info("tun I/O: vhost (" + info.tun_io_reason + ")");
	for (size_t w = 0; w < workers.size(); w++) {
		Worker* wk = workers[w].get();
		if (!wk->vhost && want_gro(tc, *wk)) wk->udp->enable_gro();
		if (w == 0 && want_gro(tc, *wk) && !wk->udp->gro_on())
			log::warn("UDP GRO refused by the kernel; receiving datagram by datagram");
		if (!wk->vhost && tc.tun_offload)
			wk->offload.emplace(wk->queue.fd.get(), info.mtu, wk->tun_stats);
		else if (!wk->vhost)
			wk->direct.emplace(wk->queue.fd.get(), &wk->tun_stats);
		wk->plane =
		    std::make_unique<datapath::DataPlane>(table, wk->port(), *wk->engine, wk->stats, w);
		wk->plane->set_busy_poll(std::chrono::microseconds(info.busy_poll_us));
		wk->plane->set_wake_poll(std::chrono::microseconds(info.wake_poll_us));
		if (tc.queue_target_us) {
			const bool stamps = wk->udp->enable_rx_timestamps();
			if (w == 0) {
				info.queue_target_us = tc.queue_target_us;
				info.queue_interval_ms = tc.queue_interval_ms;
				info.queue_timestamps = stamps;
				if (!stamps)
					log::warn("the kernel refused SO_TIMESTAMPNS: no receive queue limit "
					          "(queue_target_us)");
			}
			const datapath::CodelParams limit{int64_t(tc.queue_target_us) * 1000,
			                                  int64_t(tc.queue_interval_ms) * 1000000};
			wk->plane->set_queue_limit(limit);
			const bool fq = wk->plane->set_flow_queue(limit);
			if (w == 0) info.flow_queue = fq;
		}
	}
}

WorkerThreads::WorkerThreads(Workers& workers, asio::io_context& io, int stop, bool realtime,
                             ServiceInfo& info)
    : workers_(workers), stop_(stop) {
	BlockSignalsForThreads blocked;
	// New threads inherit the policy of the one that makes them: this thread
	// takes SCHED_FIFO for as long as it starts the workers, so each runs
	// under it from its first instruction, and the refusal (if any) is known
	// here, once.
	info.worker_priority = "normal";
	info.worker_priority_reason = realtime ? "" : "worker_priority = \"normal\"";
	bool elevated = false;
	if (realtime) {
		if (const int err = platform::set_realtime(true); err == 0) {
			elevated = true;
			info.worker_priority = "realtime";
		} else {
			info.worker_priority_reason =
			    std::string("the kernel refused SCHED_FIFO: ") + std::strerror(err) +
			    (err == EPERM ? " (no CAP_SYS_NICE or RLIMIT_RTPRIO, or the service manager "
			                    "forbids it: systemd's RestrictRealtime=)"
			                  : "");
			log::warn("worker_priority: the workers run as ordinary threads (" +
			          info.worker_priority_reason + ")");
		}
	}
	// This thread is the control loop's: an ordinary thread again however
	// the loop below ends (a thread that cannot start throws).
	struct StepDown {
		bool on;
		~StepDown() {
			if (on) platform::set_realtime(false);
		}
	} step_down{elevated};
	for (auto& wk : workers_) {
		if (elevated) wk->plane->set_precedence();
		wk->thread = std::jthread([&io, stop, w = wk.get()] {
			w->err = w->plane->run(stop);
			if (w->err) io.stop(); // the gateway cannot forward: stop and say why
		});
	}
}

WorkerThreads::~WorkerThreads() { platform::eventfd_signal(stop_); }

int WorkerThreads::join() {
	platform::eventfd_signal(stop_);
	int err = 0;
	for (auto& wk : workers_) {
		wk->thread.join();
		if (wk->err) err = wk->err;
	}
	return err;
}

} // namespace esptun::service
