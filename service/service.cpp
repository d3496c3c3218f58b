// run_service(): the start-up of one endpoint as a list of named steps, and
// the steps about the SAs, the tun I/O mode, IKE, status and stopping. The
// workers' steps are in workers.cpp, the tun's in tun_setup.cpp.
//
// Each step is undone in reverse, on a clean stop and on a failure alike:
// what a step makes is a local of run_service() (RAII), declared in step
// order, so it goes before whatever was made ahead of it.
#include "service/service.hpp"

#include "crypto/gcm_vaes.hpp"
#include "datapath/ike_inbox.hpp"
#include "platform/net_config_guard.hpp"
#include "service/config_reader.hpp"
#include "service/control.hpp"
#include "service/control_loop.hpp"
#include "service/dns_helper.hpp"
#include "service/ike_service.hpp"
#include "service/json_io.hpp"
#include "service/log.hpp"
#include "service/notify.hpp"
#include "service/privileges.hpp"
#include "service/reload.hpp"
#include "service/seq_state.hpp"
#include "service/tun_port_choice.hpp"
#include "service/tun_setup.hpp"
#include "service/workers.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <unistd.h>

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

namespace {

/// The gateway's pool of client addresses: never one of its own addresses,
/// nor one a peer's allowed_ips (or a template's user) already claims.
tunnel::AddressPool address_pool(const conf::Config& config) {
	return tunnel::AddressPool(config.tunnel.address_pool, pool_reserved(config));
}

/// One start-up line each for the implementation the AES-GCM suites use and
/// the one the CBC-HMAC suites use, when a peer sends with such a suite.
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

/// The sequence state file in [tunnel] state_dir (made 0700 if missing),
/// resumed and reserved; logs where each resumed SA continues. Throws runtime_error.
SeqState open_seq_state(const conf::Config& config, tunnel::SaTable& table) {
	const conf::TunnelConfig& tc = config.tunnel;
	std::error_code ec;
	if (std::filesystem::create_directories(tc.state_dir, ec))
		std::filesystem::permissions(tc.state_dir, std::filesystem::perms::owner_all, ec);
	if (ec)
		throw std::runtime_error("state_dir " + tc.state_dir + ": " + ec.message() +
		                         " (make it writable for the service; pointing state_dir at "
		                         "another folder starts static keys at sequence number 1 again "
		                         "unless esptun.seq moves with it)");
	// One file per state_dir, keyed by the keys themselves: the interface
	// name no longer decides which reservations a key finds.
	SeqState st(seq_state_file(tc.state_dir), table, key_fingerprints(peer_params(config)),
	            legacy_seq_state_file(tc.state_dir, tc.interface));
	for (const auto& peer : table.peers())
		if (st.resumed_at(peer->name) > 1)
			log::info("peer " + peer->name + ": outbound sequence numbers resume at " +
			          std::to_string(st.resumed_at(peer->name)) + " (" + st.path() + ")");
	return st;
}

/// The facts the status JSON has before any step ran.
ServiceInfo first_facts(const conf::Config& config, const std::string& program) {
	ServiceInfo info;
	info.program = program;
	info.started = std::chrono::steady_clock::now();
	info.listen = to_string(config.tunnel.listen);
	info.workers = worker_count(config);
	return info;
}

/**
 * prepare_sas() - step 1, after the SA table checked the keys: the address
 * pool, the crypto log lines and the sequence state of the static SAs
 * Return: the sequence state; throws when its file cannot be used.
 */
SeqState prepare_sas(const conf::Config& config, tunnel::SaTable& table, ServiceInfo& info) {
	table.set_address_pool(address_pool(config));
	info.crypto_impl = crypto::crypto_impl_name(config.tunnel.crypto_impl);
	log_crypto_choice(config, table);
	return open_seq_state(config, table);
}

/// Busy and wake polling only pay when someone else can run meanwhile: with
/// one CPU the packet the worker waits for cannot arrive while it spins.
void choose_polling(const conf::TunnelConfig& tc, ServiceInfo& info) {
	const bool may_poll = usable_cpus() > 1;
	info.busy_poll_us = may_poll ? tc.busy_poll_us : 0;
	info.wake_poll_us = may_poll ? tc.wake_poll_us : 0;
	if ((tc.busy_poll_us || tc.wake_poll_us) && !may_poll)
		log::info("busy_poll_us, wake_poll_us: off (this process may use one CPU only)");
}

/**
 * choose_tun_side() - step 2: the tun I/O mode and the workers' polling
 *
 * /dev/vhost-net is opened now, so "vhost" fails before any interface exists
 * and "auto" knows early that it will fall back to direct I/O.
 */
TunIoChoice choose_tun_side(const conf::TunnelConfig& tc, ServiceInfo& info) {
	TunIoChoice tun_io = choose_tun_io(tc.tun_io);
	info.tun_io_mode = tun_io.mode;
	info.tun_io_reason = tun_io.reason;
	info.direct_write_max = tc.direct_write_max;
	choose_polling(tc, info);
	if (tc.tun_io == conf::TunIo::automatic && !tun_io.vhost)
		log::info("tun I/O: direct (" + info.tun_io_reason + ")");
	return tun_io;
}

/**
 * open_ike() - step 7: IKEv2, when a peer has a psk; nothing is sent yet
 *
 * Its own port (UDP 500) is bound here, so a busy port fails before the data
 * path starts. IKE on the ESP port reaches it from the workers via @inbox.
 * Return: the service, or null when no peer uses IKE.
 */
std::unique_ptr<IkeService> open_ike(asio::io_context& io, const conf::Config& config, tunnel::SaTable& table,
                                     Workers& workers, datapath::IkeInbox& inbox, ServiceInfo& info) {
	if (std::none_of(config.peers.begin(), config.peers.end(),
	                 [](const auto& p) { return p.ike.has_value(); }))
		return nullptr;
	auto ike = std::make_unique<IkeService>(io, config, table, workers[0]->udp->fd(), inbox,
	                                        workers[0]->queue.ifindex);
	for (const std::string& w : conf::weak_peer_warnings(config))
		log::warn(w);
	for (auto& wk : workers)
		wk->plane->set_ike_inbox(&inbox);
	info.ike = ike.get();
	return ike;
}

/// The control socket's answer: @info with the workers' counters summed.
std::function<std::string()> status_source(const ServiceInfo& info, const Workers& workers,
                                           const tunnel::SaTable& table) {
	return [&info, &workers, &table] {
		DataPathStats stats;
		datapath::TunIoStats tun_stats;
		for (const auto& wk : workers) {
			stats.add(wk->stats);
			tun_stats.add(wk->tun_stats);
		}
		ServiceInfo view = info;
		view.tun_io_stats = &tun_stats;
		return render_status(view, stats, table);
	};
}

/// open_config_reader() - how a reload reads the config: through the root
/// helper (@early, forked before the config was read; else now) when the
/// gateway drops privileges, directly otherwise; none for a client, which
/// does not reload. An @early it does not use ends here.
std::unique_ptr<ConfigReader> open_config_reader(const conf::Config& config,
                                                 std::unique_ptr<ConfigReader> early) {
	if (config.role != conf::Role::gateway) return nullptr;
	if (!config.tunnel.drop_privileges) return ConfigReader::direct(config.source, config.role);
	return early ? std::move(early) : ConfigReader::start(config.source, config.role);
}

/// reload_answer() - run a reload for @who ("SIGHUP", "control socket"),
/// log its outcome and return it as the control socket's JSON answer.
std::string reload_answer(Reloader& reloader, const std::string& who) {
	Json j = Json::object();
	// systemd (Type=notify) learns a reload runs and when it ended: systemctl
	// reload returns only then (sd_notify(3), RELOADING=1 ... READY=1).
	notify_reloading();
	struct Ready {
		~Ready() { notify_ready(); }
	} ready_again;
	try {
		const std::string what = reloader.reload();
		log::info("reload (" + who + "): " + what);
		j["ok"] = true;
		j["message"] = what;
	} catch (const std::exception& e) {
		log::error("reload (" + who + ") refused: " + e.what());
		j["ok"] = false;
		j["error"] = e.what();
	}
	return json_text(j) + "\n";
}

/// enable_reload() - a gateway reloads on "reload" and SIGHUP; a client
/// says it does not.
void enable_reload(const conf::Config& config, ControlLoop& loop, ControlServer& control,
                   Reloader& reloader) {
	if (config.role != conf::Role::gateway) {
		loop.on_hangup = [] {
			log::warn("received SIGHUP: a client does not reload its config; restart it");
		};
		return;
	}
	control.set_reload([&reloader] { return reload_answer(reloader, "control socket"); });
	loop.on_hangup = [&reloader] { (void)reload_answer(reloader, "SIGHUP"); };
}

void log_up(const conf::Config& config, const ServiceInfo& info) {
	log::info(info.interface + " up: mtu " + std::to_string(info.mtu) + " (" + info.mtu_source +
	          "), listening on " + info.listen + ", " + std::to_string(info.workers) + " worker(s), " +
	          std::to_string(config.peers.size()) + " peer(s), control socket " +
	          config.tunnel.control_socket);
}

/**
 * shut_down() - step 11, once the control loop has ended: IKE says goodbye,
 * the workers stop, and the sequence numbers are saved exactly
 *
 * Throws SystemError when a worker's packet loop failed. The rest goes as
 * run_service()'s locals do.
 */
void shut_down(IkeService* ike, WorkerThreads& threads, SeqState& seq_state, const ServiceInfo& info) {
	if (ike) ike->shutdown(); // tell the peers (best effort) before the SAs go
	const int worker_err = threads.join();
	if (!seq_state.save_exact())
		log::error("cannot save the last sequence numbers: " + seq_state.error() +
		           " (the next start skips ahead instead)");
	if (worker_err) throw SystemError(worker_err, "data path: epoll");
	log::info("stopped; removing " + info.interface + " and its routes");
}

} // namespace

EarlyHelpers::EarlyHelpers() = default;
EarlyHelpers::EarlyHelpers(EarlyHelpers&&) noexcept = default;
EarlyHelpers& EarlyHelpers::operator=(EarlyHelpers&&) noexcept = default;
EarlyHelpers::~EarlyHelpers() = default;

EarlyHelpers start_helpers(conf::Role role, const std::filesystem::path& config_path) {
	EarlyHelpers h;
	if (::geteuid() != 0) return h;
	if (role == conf::Role::gateway)
		h.config_reader = ConfigReader::start(config_path, role);
	else
		h.dns = DnsHelper::start();
	return h;
}

void run_service(conf::Config&& config, const std::string& program, EarlyHelpers helpers) {
	const conf::TunnelConfig& tc = config.tunnel;
	ControlLoop loop; // catches SIGINT/SIGTERM from here on
	ServiceInfo info = first_facts(config, program);

	// 1. Keys and SAs, one transform per worker: a bad key fails before any device exists.
	tunnel::SaTable table(peer_params(config), info.workers);
	SeqState seq_state = prepare_sas(config, table, info);
	info.seq_state = &seq_state;
	// 2. The tun I/O mode.
	TunIoChoice tun_io = choose_tun_side(tc, info);
	// 3. The workers' underlay sockets.
	Workers workers = open_workers(tc, info.workers, info);
	// 4. The tun MTU; 5. the tun device, its addresses, link up, and routes.
	choose_mtu(config, info);
	bring_up_tun(config, workers, info);
	platform::NetConfigGuard routes = install_routes(config, workers[0]->queue.ifindex);
	std::unique_ptr<FullTunnel> full_tunnel = route_everything(config, workers[0]->queue.ifindex);
	// 6. The tun ports and data planes.
	attach_tun_ports(tc, tun_io, workers, table, info);
	// 7. IKE.
	datapath::IkeInbox ike_inbox;
	std::unique_ptr<IkeService> ike = open_ike(loop.io, config, table, workers, ike_inbox, info);
	if (ike) ike->set_full_tunnel(full_tunnel.get());
	// 8. The control socket, and reloads through it and SIGHUP (gateway).
	ControlServer control(loop.io, tc.control_socket, status_source(info, workers, table));
	// A gateway reads its config again after the privilege drop through a
	// helper that stays root (service/config_reader.hpp), forked before the
	// config was read (EarlyHelpers says why).
	std::unique_ptr<ConfigReader> config_reader =
	    open_config_reader(config, std::move(helpers.config_reader));
	// The config moves into the reloader, the one copy kept from here on
	// (a reload replaces it); @config is left empty. The steps above kept
	// copies of what they need later, never a reference into it.
	Reloader reloader(std::move(config), {table, seq_state, ike.get(), routes, workers[0]->queue.ifindex},
	                  [&config_reader] { return config_reader->load(); });
	const conf::Config& running = reloader.config();
	enable_reload(running, loop, control, reloader);
	// 8b. Give up root: CAP_NET_ADMIN, no_new_privs, seccomp (before any thread starts).
	drop_privileges(running, std::move(helpers.dns));
	// 9. The data-path threads, and the control loop's timers.
	WorkerThreads threads(workers, loop.io, loop.stop.get(), running.tunnel.realtime_workers, info);
	SeqRefresh seq_refresh(loop.io, table, seq_state);
	if (ike) ike->start();
	Watchdog watchdog(loop.io); // systemd's WatchdogSec, if set
	log_up(running, info);
	notify_ready(info.interface + " up, listening on " + info.listen + ", " +
	             std::to_string(running.peers.size()) + " peer(s)");
	// 10. Forward until a signal or a failed worker stops the loop.
	loop.io.run();
	notify_stopping();
	shut_down(ike.get(), threads, seq_state, info);
}

} // namespace esptun::service
