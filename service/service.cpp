// Set-up and tear-down of one endpoint: see service.hpp.
//
// Order (each step undone in reverse on exit or failure): build the SA table
// (checks keys before anything is touched) -> choose the tun I/O mode ->
// bind the underlay socket -> derive the MTU -> create the tun, its MTU,
// addresses, link up -> routes -> control socket -> data-plane thread ->
// wait for SIGINT/SIGTERM.
#include "service/service.hpp"

#include "crypto/gcm_vaes.hpp"
#include "datapath/data_plane.hpp"
#include "datapath/offload_tun_port.hpp"
#include "datapath/vhost_tun_port.hpp"
#include "platform/net_config_guard.hpp"
#include "platform/netlink.hpp"
#include "platform/sysctl.hpp"
#include "platform/tun.hpp"
#include "platform/udp_engine.hpp"
#include "platform/udp_socket.hpp"
#include "platform/unique_fd.hpp"
#include "service/control.hpp"
#include "service/ike_service.hpp"
#include "service/log.hpp"
#include "service/seq_state.hpp"
#include "service/tun_port_choice.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <functional>
#include <optional>
#include <pthread.h>
#include <sched.h>
#include <stdexcept>
#include <thread>

namespace esptun::service {

std::vector<tunnel::PeerParams> peer_params(const conf::Config& config) {
	std::vector<tunnel::PeerParams> out;
	for (const conf::PeerConfig& p : config.peers) {
		tunnel::PeerParams pp;
		pp.name = p.name;
		pp.endpoint = p.endpoint;
		pp.allowed_ips = p.allowed_ips;
		pp.cipher = p.cipher;
		pp.esn = p.esn;
		pp.replay_window = p.replay_window;
		pp.impl = config.tunnel.crypto_impl;
		pp.keyed_statically = !p.ike; // IKE peers get their SAs from service/ike_service
		pp.out = {p.out.spi, p.out.enc_key, p.out.auth_key};
		pp.in = {p.in.spi, p.in.enc_key, p.in.auth_key};
		out.push_back(std::move(pp));
	}
	return out;
}

std::vector<IpPrefix> tun_routes(const conf::Config& config, std::span<const IpPrefix> prefixes) {
	std::vector<IpPrefix> out;
	for (const IpPrefix& p : prefixes) {
		const bool connected =
		    std::any_of(config.tunnel.addresses.begin(), config.tunnel.addresses.end(),
		                [&](const IpPrefix& a) { return a.network() == p; });
		if (p.len != 0 && !connected) out.push_back(p);
	}
	return out;
}

namespace {

constexpr unsigned kFallbackUnderlayMtu = 1500;
constexpr unsigned kIpv6MinMtu = 1280; // RFC 8200 section 5

/**
 * derive_mtu() - the tun MTU from the underlay path MTU and the cipher
 * overhead (design notes: getting this wrong black-holes packets).
 * The smallest over all peers wins, as one tun serves them all.
 */
unsigned derive_mtu(const conf::Config& config, std::string& how) {
	unsigned best = tunnel::esp::kMaxInner;
	for (const conf::PeerConfig& p : config.peers) {
		unsigned underlay = kFallbackUnderlayMtu;
		bool outer_v6 = config.tunnel.listen.addr.family == Family::v6;
		std::string where = "no endpoint yet, assuming " + std::to_string(kFallbackUnderlayMtu);
		if (p.endpoint) {
			outer_v6 = p.endpoint->addr.family == Family::v6;
			if (auto m = platform::path_mtu(p.endpoint->addr)) {
				underlay = *m;
				where = "path to " + to_string(p.endpoint->addr);
			} else {
				where = "no route to " + to_string(p.endpoint->addr) + " yet, assuming " +
				        std::to_string(kFallbackUnderlayMtu);
			}
		}
		// An IKE peer may end up with any suite it proposes: plan for the
		// one with the most overhead.
		const crypto::CipherSpec* worst = &crypto::cipher_spec(p.cipher);
		if (p.ike)
			for (const ike::EspSuite& e : p.ike->esp_proposals)
				if (tunnel::esp::max_inner_mtu(crypto::cipher_spec(e.cipher), underlay,
				                               outer_v6) <
				    tunnel::esp::max_inner_mtu(*worst, underlay, outer_v6))
					worst = &crypto::cipher_spec(e.cipher);
		const crypto::CipherSpec& spec = *worst;
		unsigned inner = unsigned(tunnel::esp::max_inner_mtu(spec, underlay, outer_v6));
		if (inner < best) {
			best = inner;
			how = "underlay " + std::to_string(underlay) + " (" + where + ") minus " +
			      std::string(spec.name) + (outer_v6 ? " over IPv6" : " over IPv4") + " overhead";
		}
	}
	return best;
}

bool has_v6_address(const conf::Config& config) {
	for (const IpPrefix& a : config.tunnel.addresses)
		if (a.addr.family == Family::v6) return true;
	return false;
}

/// The gateway's pool of client addresses: never one of its own addresses,
/// nor one a peer's allowed_ips already claims.
tunnel::AddressPool address_pool(const conf::Config& config) {
	std::vector<IpPrefix> reserved;
	for (const IpPrefix& a : config.tunnel.addresses)
		reserved.push_back({a.addr, uint8_t(a.addr.max_prefix())});
	for (const conf::PeerConfig& peer : config.peers)
		reserved.insert(reserved.end(), peer.allowed_ips.begin(), peer.allowed_ips.end());
	return tunnel::AddressPool(config.tunnel.address_pool, reserved);
}

/// Routes for the peers' allowed_ips and the address pool through the tun. A prefix equal to an
/// interface address's subnet already has the kernel's connected route. A /0
/// becomes two /1 routes (more specific than any default route, which stays
/// in place), and only with route_all: otherwise a /0 only widens which inner
/// sources are accepted.
void install_routes(const conf::Config& config, int ifindex, platform::NetConfigGuard& net) {
	for (const conf::PeerConfig& peer : config.peers)
		for (const IpPrefix& p : tun_routes(config, peer.allowed_ips))
			net.add_route(p, ifindex);
	for (const IpPrefix& p : tun_routes(config, config.tunnel.address_pool))
		net.add_route(p, ifindex);
	if (!config.tunnel.route_all) return;

	// Client with route_all: keep the gateway reachable through the current
	// default path, then send everything else into the tunnel.
	const conf::PeerConfig& gw = config.peers.front();
	const IpAddress& ep = gw.endpoint->addr;
	auto current = platform::get_route(ep);
	if (!current)
		throw std::runtime_error("route_all: no route to the gateway " + to_string(ep) +
		                         "; the underlay must reach it before the tunnel starts");
	if (current->ifindex != ifindex) {
		IpPrefix host{ep, uint8_t(ep.max_prefix())};
		try {
			net.add_route(host, current->ifindex, current->gateway);
		} catch (const SystemError& e) {
			// A client that was killed (SIGKILL, OOM) leaves this host route
			// behind: it is the route just looked up, so take it over.
			if (e.err() != EEXIST) throw;
			platform::del_route(host, current->ifindex, current->gateway);
			net.add_route(host, current->ifindex, current->gateway);
		}
	}
	auto half = [](const char* text) { return *parse_prefix(text); };
	net.add_route(half("0.0.0.0/1"), ifindex);
	net.add_route(half("128.0.0.0/1"), ifindex);
	if (has_v6_address(config)) {
		net.add_route(half("::/1"), ifindex);
		net.add_route(half("8000::/1"), ifindex);
	}
}

/// One start-up line saying which implementation the CBC-HMAC suites use.
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

	datapath::TunPort& port() noexcept {
		if (vhost) return vhost->port();
		if (offload) return *offload;
		return *direct;
	}
};

/// The CPUs this process may run on (workers = 0).
unsigned usable_cpus() noexcept {
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
	const int n = CPU_COUNT(&set);
	return n > 0 ? unsigned(std::min(n, int(conf::kMaxWorkers))) : 1;
}

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

/// TUNSETOFFLOAD on every queue of a vnet_hdr tun and a GSO segment limit of
/// one batch; returns what the kernel took, for the log and the status JSON.
/// A refusal is not fatal: the ports then see plain packets behind zero headers.
std::string enable_offloads(const std::vector<std::unique_ptr<Worker>>& workers) {
	try {
		platform::TunOffloads o;
		for (const auto& wk : workers)
			o = platform::enable_tun_offloads(wk->queue.fd.get());
		platform::set_link_gso_max_segs(workers[0]->queue.ifindex, unsigned(datapath::kTunBatch));
		std::string s = "csum tso4 tso6";
		if (o.uso4) s += " uso4";
		if (o.uso6) s += " uso6";
		log::info("tun offloads: " + s);
		return s;
	} catch (const std::exception& e) {
		log::warn(std::string("tun offloads unavailable (") + e.what() +
		          "); one packet per read and write");
		return std::string("none (") + e.what() + ")";
	}
}

/// The sequence state file in tc.state_dir (made 0700 if missing), resumed
/// and reserved; logs where each resumed SA continues. Throws runtime_error.
SeqState open_seq_state(const conf::TunnelConfig& tc, tunnel::SaTable& table) {
	std::error_code ec;
	if (std::filesystem::create_directories(tc.state_dir, ec))
		std::filesystem::permissions(tc.state_dir, std::filesystem::perms::owner_all, ec);
	if (ec)
		throw std::runtime_error("state_dir " + tc.state_dir + ": " + ec.message() +
		                         " (set [tunnel] state_dir to a writable folder)");
	SeqState st(tc.state_dir + "/" + tc.interface + ".seq", table);
	for (const auto& peer : table.peers())
		if (st.resumed_at(peer->name) > 1)
			log::info("peer " + peer->name + ": outbound sequence numbers resume at " +
			          std::to_string(st.resumed_at(peer->name)) + " (" + st.path() + ")");
	return st;
}

void log_crypto_choice(const conf::Config& config, const tunnel::SaTable& table) {
	bool gcm_said = false;
	for (const auto& peer : table.peers()) {
		const tunnel::OutboundSa* sa = peer->outbound();
		if (!sa || !sa->spec->aead || gcm_said) continue;
		gcm_said = true;
		log::info(std::string("crypto: AES-GCM suites use the ") +
		          std::string(sa->transforms[0]->impl_name()) + " implementation (" +
		          (crypto::vaes::supported() ? "AVX-512 VAES and VPCLMULQDQ"
		                                     : "OpenSSL's AES-NI code: this CPU lacks VAES/AVX-512") +
		          ")");
	}
	for (const auto& peer : table.peers()) {
		const tunnel::OutboundSa* sa = peer->outbound();
		if (!sa || sa->spec->aead) continue;
		std::string impl(sa->transforms[0]->impl_name());
		std::string why = impl == "stitched"
		                      ? std::string("CPU path ") + std::string(crypto::stitched_variant())
		                  : config.tunnel.crypto_impl == crypto::CryptoImpl::two_pass
		                      ? std::string("crypto_impl = \"two-pass\"")
		                      : std::string("this CPU lacks what the stitched routines need");
		log::info("crypto: CBC-HMAC suites use the " + impl + " implementation (" + why + ")");
		return;
	}
}

/// Signals go to the control plane (Asio); the data-path thread must not
/// take them, or its poll() would be interrupted for nothing.
class BlockSignalsForThreads {
public:
	BlockSignalsForThreads() {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &set, &old_);
	}
	~BlockSignalsForThreads() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

private:
	sigset_t old_;
};

} // namespace

void run_service(const conf::Config& config, const std::string& program) {
	const conf::TunnelConfig& tc = config.tunnel;
	// Signals are caught from the start: one arriving during set-up is acted
	// on as soon as the control loop runs, after everything is in place to be
	// undone in order.
	asio::io_context io;
	platform::UniqueFd stop = platform::make_eventfd();
	asio::signal_set signals(io, SIGINT, SIGTERM);
	signals.async_wait([&](asio::error_code ec, int sig) {
		if (!ec)
			log::info(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
			          ", shutting down");
		platform::eventfd_signal(stop.get());
		io.stop();
	});

	ServiceInfo info;
	info.program = program;
	info.started = std::chrono::steady_clock::now();
	info.listen = to_string(tc.listen);

	// 1. Keys and SAs first: a bad key must fail before any device exists.
	// Each SA gets one transform per worker.
	// auto: one per CPU, but not more than there are peers: one peer's
	// traffic runs on one worker anyway (docs/architecture.md, "How work
	// spreads"), and an idle extra worker only adds cross-CPU wake-ups
	// (measured: ~30 us more ping latency with one peer and two workers).
	const unsigned n_workers =
	    tc.workers ? tc.workers
	               : std::min(usable_cpus(), unsigned(std::max<size_t>(1, config.peers.size())));
	info.workers = n_workers;
	tunnel::SaTable table(peer_params(config), n_workers);
	table.set_address_pool(address_pool(config));
	info.crypto_impl = crypto::crypto_impl_name(tc.crypto_impl);
	log_crypto_choice(config, table);
	SeqState seq_state = open_seq_state(tc, table);
	info.seq_state = &seq_state;

	// 2. Tun I/O mode: open /dev/vhost-net now, so "vhost" fails before any
	// interface exists and "auto" knows early that it will fall back.
	TunIoChoice tun_io = choose_tun_io(tc.tun_io);
	info.tun_io_mode = tun_io.mode;
	info.tun_io_reason = tun_io.reason;
	info.direct_write_max = tc.direct_write_max;
	// Polling only pays when someone else can run meanwhile: with one CPU
	// the packet the worker waits for cannot arrive while it spins.
	const bool may_poll = usable_cpus() > 1;
	info.busy_poll_us = may_poll ? tc.busy_poll_us : 0;
	info.wake_poll_us = may_poll ? tc.wake_poll_us : 0;
	if ((tc.busy_poll_us || tc.wake_poll_us) && !may_poll)
		log::info("busy_poll_us, wake_poll_us: off (this process may use one CPU only)");
	if (tc.tun_io == conf::TunIo::automatic && !tun_io.vhost)
		log::info("tun I/O: direct (" + info.tun_io_reason + ")");

	// 3. Underlay sockets before the tun, so a busy port fails early: one
	// per worker on the same port (SO_REUSEPORT), each behind its engine.
	std::vector<std::unique_ptr<Worker>> workers;
	for (unsigned w = 0; w < n_workers; w++) {
		auto wk = std::make_unique<Worker>();
		Endpoint at = tc.listen;
		if (w > 0)
			at.port = workers[0]->udp->local_endpoint().port; // "port 0": the one the first got
		wk->udp.emplace(platform::UdpSocket::bind(at, int(tc.socket_buffer), n_workers > 1));
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

	// 4. MTU.
	if (tc.mtu) {
		info.mtu = tc.mtu;
		info.mtu_source = "configured";
	} else {
		info.mtu = derive_mtu(config, info.mtu_source);
	}
	if (has_v6_address(config) && info.mtu < kIpv6MinMtu)
		throw std::runtime_error(
		    "tun MTU " + std::to_string(info.mtu) + " (" + info.mtu_source +
		    ") is below IPv6's minimum of 1280; raise the underlay MTU or remove the "
		    "IPv6 addresses");

	// 5. The tun device (a queue per worker), its addresses and routes.
	// Offloads in both I/O modes: with vhost the tun's virtio-net header
	// passes through the rings (VhostNet::use_tun_vnet_hdr()).
	const bool offload = tc.tun_offload;
	const bool multi_queue = n_workers > 1;
	platform::TunDevice& tun = workers[0]->queue;
	tun = platform::open_tun(tc.interface, multi_queue, offload);
	for (unsigned w = 1; w < n_workers; w++)
		workers[w]->queue = platform::open_tun(tun.name, true, offload);
	info.interface = tun.name;
	info.tun_offloads = offload ? enable_offloads(workers) : "none (tun_offload = false)";
	platform::set_link_mtu(tun.ifindex, info.mtu);
	if (!has_v6_address(config)) platform::set_ipv6_enabled(tun.name, false);
	for (const IpPrefix& a : tc.addresses)
		platform::add_address(tun.ifindex, a);
	platform::set_link_up(tun.ifindex);
	platform::NetConfigGuard net; // undone in reverse order on every exit path
	install_routes(config, tun.ifindex, net);

	// 6. The tun ports: vhost rings (a vhost-net device per worker) or the
	// tun queue itself. A vhost failure is fatal for "vhost" and a fall-back
	// to direct I/O for every worker with "auto", like one in step 2.
	//
	// UDP GRO needs the engine that reads its control message (mmsg) and
	// 64 KiB receive buffers: the direct ports always have them, a vhost port
	// only when built for GRO, so a vhost worker's socket gets GRO first.
	auto want_gro = [&](const Worker& wk) {
		return tc.udp_gro && std::string_view(wk.engine->name()) == "mmsg";
	};
	if (tun_io.vhost) {
		try {
			for (unsigned w = 0; w < n_workers; w++) {
				Worker& wk = *workers[w];
				platform::VhostNet dev =
				    w == 0 ? std::move(*tun_io.vhost) : platform::VhostNet::open();
				// UDP GRO before the port exists: it sizes the receive slots.
				const bool gro = want_gro(wk) && wk.udp->enable_gro();
				wk.vhost.emplace(std::move(dev), wk.queue.fd.get(), info.mtu,
				                 tc.direct_write_max, wk.tun_stats, offload, gro);
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
	if (workers[0]->vhost) log::info("tun I/O: vhost (" + info.tun_io_reason + ")");
	for (size_t w = 0; w < workers.size(); w++) {
		Worker* wk = workers[w].get();
		if (!wk->vhost && want_gro(*wk)) wk->udp->enable_gro();
		if (w == 0 && want_gro(*wk) && !wk->udp->gro_on())
			log::warn("UDP GRO refused by the kernel; receiving datagram by datagram");
		if (!wk->vhost && offload)
			wk->offload.emplace(wk->queue.fd.get(), info.mtu, wk->tun_stats);
		else if (!wk->vhost)
			wk->direct.emplace(wk->queue.fd.get(), &wk->tun_stats);
		wk->plane =
		    std::make_unique<datapath::DataPlane>(table, wk->port(), *wk->engine, wk->stats, w);
		wk->plane->set_busy_poll(std::chrono::microseconds(info.busy_poll_us));
		wk->plane->set_wake_poll(std::chrono::microseconds(info.wake_poll_us));
	}

	// 6b. IKEv2 for peers with a psk: its port (UDP 500) is bound here, so a
	// busy port fails before the data path starts. IKE on the ESP port comes
	// from the workers through the inbox.
	datapath::IkeInbox ike_inbox;
	std::unique_ptr<IkeService> ike;
	if (std::any_of(config.peers.begin(), config.peers.end(),
	                [](const auto& p) { return p.ike.has_value(); })) {
		ike = std::make_unique<IkeService>(io, config, table, workers[0]->udp->fd(), ike_inbox,
		                                   tun.ifindex);
		for (auto& wk : workers)
			wk->plane->set_ike_inbox(&ike_inbox);
		info.ike = ike.get();
	}

	// 7. Data-path threads; the control plane (signals, status socket) here.
	ControlServer control(io, tc.control_socket, [&] {
		// Sum the workers' counters into one view.
		DataPathStats stats;
		datapath::TunIoStats tun_stats;
		for (const auto& wk : workers) {
			stats.add(wk->stats);
			tun_stats.add(wk->tun_stats);
		}
		ServiceInfo view = info;
		view.tun_io_stats = &tun_stats;
		return render_status(view, stats, table);
	});
	{
		BlockSignalsForThreads blocked;
		for (auto& wk : workers)
			wk->thread = std::jthread([&io, &stop, w = wk.get()] {
				w->err = w->plane->run(stop.get());
				if (w->err) io.stop(); // the gateway cannot forward: stop and say why
			});
	}
	// However the control loop ends (signal or exception), the workers are
	// told to stop before they are joined.
	struct StopWorkers {
		int fd;
		~StopWorkers() { platform::eventfd_signal(fd); }
	} stop_workers{stop.get()};
	// Keep the sequence reservations ahead of the data path (seq_state.hpp).
	asio::steady_timer seq_timer(io);
	bool seq_failing = false;
	std::function<void()> arm_seq_timer = [&] {
		seq_timer.expires_after(std::chrono::milliseconds(100));
		seq_timer.async_wait([&](asio::error_code ec) {
			if (ec) return;
			table.collect(); // SAs replaced since a worker was last busy (tunnel/sa.hpp)
			const bool ok = seq_state.refresh();
			if (!ok && !seq_failing)
				log::error("cannot save sequence numbers: " + seq_state.error() +
				           "; sending stops when the current reservation runs out");
			else if (ok && seq_failing)
				log::info("sequence numbers saved again: " + seq_state.path());
			seq_failing = !ok;
			arm_seq_timer();
		});
	};
	arm_seq_timer();
	if (ike) ike->start();
	log::info(tun.name + " up: mtu " + std::to_string(info.mtu) + " (" + info.mtu_source +
	          "), listening on " + info.listen + ", " + std::to_string(n_workers) + " worker(s), " +
	          std::to_string(config.peers.size()) + " peer(s), control socket " + tc.control_socket);
	io.run();
	if (ike) ike->shutdown(); // tell the peers (best effort) before the SAs go
	platform::eventfd_signal(stop.get());
	int worker_err = 0;
	for (auto& wk : workers) {
		wk->thread.join();
		if (wk->err) worker_err = wk->err;
	}
	if (!seq_state.save_exact())
		log::error("cannot save the last sequence numbers: " + seq_state.error() +
		           " (the next start skips ahead instead)");
	if (worker_err) throw SystemError(worker_err, "data path: epoll");
	log::info("stopped; removing " + tun.name + " and its routes");
}

} // namespace esptun::service
