// The data-path workers of a running endpoint: each one's underlay socket
// and engine, its tun port over its tun queue, its DataPlane and its thread.
#pragma once

#include "base/counters.hpp"
#include "conf/config.hpp"
#include "datapath/data_plane.hpp"
#include "datapath/offload_tun_port.hpp"
#include "datapath/vhost_tun_port.hpp"
#include "platform/tun.hpp"
#include "platform/udp_engine.hpp"
#include "platform/udp_socket.hpp"
#include "service/service.hpp"
#include "service/tun_port_choice.hpp"
#include "tunnel/sa.hpp"

#include <asio/io_context.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace esptun::service {

/**
 * Worker - one data-path thread with everything it owns: a tun queue, an
 * underlay socket and its engine, the tun port and the counters. Declared
 * so that the port goes before the queue it uses and the engine before its
 * socket.
 */
struct Worker {
	platform::TunDevice queue;
	std::optional<platform::UdpSocket> udp;
	std::unique_ptr<platform::UdpEngine> engine;
	DataPathStats stats;
	datapath::TunIoStats tun_stats;
	std::optional<datapath::VhostTun> vhost;
	std::optional<datapath::DirectTunPort> direct;
	std::optional<datapath::OffloadTunPort> offload;
	std::unique_ptr<datapath::DataPlane> plane;
	std::jthread thread;
	int err = 0;

	/// port() - the tun port the data plane uses (vhost, offload or direct)
	datapath::TunPort& port() noexcept {
		if (vhost) return vhost->port();
		if (offload) return *offload;
		return *direct;
	}
};

/// Workers - by index; the first one's socket and tun queue stand for all
/// where only one is needed (the port number, the interface, IKE on the ESP port).
using Workers = std::vector<std::unique_ptr<Worker>>;

/**
 * worker_count() - how many workers @config asks for
 *
 * workers = N is taken as given. workers = 0 (auto) is one per CPU but not
 * more than there are peers: the kernel hashes a peer's datagrams to one
 * socket and steers its outbound flows to the queue that wrote their inbound,
 * so one peer runs on one worker anyway, and an idle extra worker only adds
 * cross-CPU wake-ups (in esptun-bench compare runs, ping p50 ~30 us higher
 * with one peer and two workers).
 */
unsigned worker_count(const conf::Config& config) noexcept;

/// usable_cpus() - the CPUs this process may run on, at most kMaxWorkers
unsigned usable_cpus() noexcept;

/**
 * open_workers() - step 3: a worker per @n with its underlay socket
 * @tc:   the config's [tunnel]
 * @n:    how many workers
 * @info: gets the engine, the sockets, the counters and the buffer sizes
 *
 * All sockets are on the same port (SO_REUSEPORT when @n > 1), bound before
 * the tun exists so that a busy port fails early. Throws on a bind failure.
 */
Workers open_workers(const conf::TunnelConfig& tc, unsigned n, ServiceInfo& info);

/**
 * attach_tun_ports() - step 6: a tun port and a DataPlane for each worker
 * @tc:     the config's [tunnel]
 * @tun_io: step 2's choice; its vhost-net device is used up here
 * @table:  the SAs the data planes serve
 * @info:   gets the tun I/O mode and reason that finally hold
 *
 * A vhost failure is fatal with tun_io = "vhost" and a fall-back to direct
 * I/O for every worker with "auto", as in step 2.
 */
void attach_tun_ports(const conf::TunnelConfig& tc, TunIoChoice& tun_io, Workers& workers,
                      const tunnel::SaTable& table, ServiceInfo& info);

/**
 * WorkerThreads - the workers' threads, running from construction on
 * @io:   stopped when a worker's packet loop fails, so run_service() ends
 * @stop: the eventfd that tells every worker to stop
 *
 * The destructor signals @stop, so however the control loop ends (signal or
 * exception) the workers are told to stop before their threads are joined
 * (by join() or when the Workers go).
 */
class WorkerThreads {
public:
	/**
	 * WorkerThreads() - start a thread per worker
	 * @realtime: start them under SCHED_FIFO and let each step down while it
	 *            uses most of a CPU (DataPlane::set_precedence()); when the
	 *            kernel refuses, they start as ordinary threads and
	 *            @info.worker_priority says why
	 */
	WorkerThreads(Workers& workers, asio::io_context& io, int stop, bool realtime, ServiceInfo& info);
	~WorkerThreads();
	WorkerThreads(const WorkerThreads&) = delete;
	WorkerThreads& operator=(const WorkerThreads&) = delete;

	/// join() - signal stop, wait for every thread; returns a failed worker's errno or 0
	int join();

private:
	Workers& workers_;
	int stop_;
};

} // namespace esptun::service
