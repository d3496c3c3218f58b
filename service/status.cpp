// The status JSON that `status -c FILE` prints (served by control.cpp).
#include "service/json_io.hpp"
#include "service/seq_state.hpp"
#include "service/service.hpp"

#include "datapath/tun_port.hpp"
#include "service/ike_service.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace esptun::service {
namespace {

std::string spi_hex(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%08x", spi);
	return buf;
}

/// "sa_out": a peer's current outbound SA.
Json sa_out_json(const tunnel::SaInfo& sa) {
	return Json{{"spi", uint64_t(sa.spi)},
	            {"spi_hex", spi_hex(sa.spi)},
	            {"packets", sa.packets},
	            {"bytes", sa.bytes},
	            {"last_seq", sa.seq},
	            {"cipher", sa.cipher},
	            {"esn", sa.esn}};
}

/// One inbound SA ("sa_in" and the entries of "sas_in").
Json sa_in_json(const tunnel::SaInfo& sa) {
	return Json{
	    {"spi", uint64_t(sa.spi)},   {"spi_hex", spi_hex(sa.spi)}, {"packets", sa.packets},
	    {"bytes", sa.bytes},         {"highest_seq", sa.seq},      {"replay_window", sa.replay_window},
	    {"reordered", sa.reordered}, {"cipher", sa.cipher},        {"esn", sa.esn}};
}

/**
 * peer_json() - one entry of "peers"
 *
 * A statically keyed peer has one SA each way: "sa_out" and "sa_in" (also
 * the only entry of "sas_in"). A peer keyed at run time shows its current
 * outbound SA and its newest inbound one there (null before the first key
 * exchange), every installed inbound SA in "sas_in" (two during a rekey),
 * and "totals" over all the SAs it ever had.
 */
Json peer_json(const tunnel::SaTable& table, const tunnel::Peer& peer) {
	const tunnel::PeerSaInfo sas = table.sa_info(peer);
	Json j = Json::object();
	j["name"] = peer.name;
	auto ep = peer.endpoint_snapshot();
	j["endpoint"] = ep ? Json(to_string(*ep)) : Json(nullptr);
	j["endpoint_source"] = !ep                                                            ? "none"
	                       : peer.endpoint_configured && peer.endpoint_changes.get() == 0 ? "configured"
	                                                                                      : "learned";
	j["endpoint_changes"] = peer.endpoint_changes.get();
	j["last_rx_unix_ms"] = int64_t(peer.last_rx_unix_ms.load(std::memory_order_relaxed));
	j["keying"] = peer.keyed_statically ? "static" : "dynamic";
	// The suite the peer is sent with now (a rekey may change it).
	j["cipher"] = sas.out ? Json(sas.out->cipher) : Json(nullptr);
	j["crypto_impl"] = sas.out ? Json(sas.out->impl) : Json(nullptr);
	j["esn"] = sas.out ? Json(sas.out->esn) : Json(nullptr);
	Json& allowed = j["allowed_ips"] = Json::array();
	for (const IpPrefix& p : peer.allowed_ips)
		allowed.push_back(to_string(p));

	j["sa_out"] = sas.out ? sa_out_json(*sas.out) : Json(nullptr);
	j["sa_in"] = !sas.in.empty() ? sa_in_json(sas.in.back()) : Json(nullptr);
	Json& in = j["sas_in"] = Json::array();
	for (const tunnel::SaInfo& sa : sas.in)
		in.push_back(sa_in_json(sa));
	j["totals"] = Json{{"tx_packets", sas.totals.tx_packets},
	                   {"tx_bytes", sas.totals.tx_bytes},
	                   {"rx_packets", sas.totals.rx_packets},
	                   {"rx_bytes", sas.totals.rx_bytes}};
	j["sas_retiring"] = uint64_t(sas.retiring);
	// The drops this peer's packets met: every reason that can be a peer's,
	// zeros included, so a reader finds each key.
	Json& drops = j["drops"] = Json::object();
	for (size_t i = 0; i < kDropReasons; i++)
		if (drop_is_per_peer(Drop(i))) drops[std::string(drop_name(Drop(i)))] = peer.drops[i].get();
	return j;
}

/// "tun_io": the mode, why, and what the tun side did (all zero in direct mode).
Json tun_io_json(const ServiceInfo& info) {
	const datapath::TunIoStats none{};
	const datapath::TunIoStats& t = info.tun_io_stats ? *info.tun_io_stats : none;
	return Json{{"mode", info.tun_io_mode},
	            {"reason", info.tun_io_reason},
	            {"direct_write_max", uint64_t(info.direct_write_max)},
	            {"offloads", info.tun_offloads},
	            {"gso_reads", t.gso_reads.get()},
	            {"gso_segments", t.gso_segments.get()},
	            {"gro_writes", t.gro_writes.get()},
	            {"gro_segments", t.gro_segments.get()},
	            {"offload_errors", t.offload_errors.get()},
	            {"rx_ring_packets", t.rx_ring_packets.get()},
	            {"tx_ring_packets", t.tx_ring_packets.get()},
	            {"direct_writes", t.direct_writes.get()},
	            {"kicks", t.rx_kicks.get() + t.tx_kicks.get()},
	            {"rx_kicks", t.rx_kicks.get()},
	            {"tx_kicks", t.tx_kicks.get()},
	            {"rx_kicks_suppressed", t.rx_kicks_suppressed.get()},
	            {"tx_kicks_suppressed", t.tx_kicks_suppressed.get()},
	            {"needless_kicks", t.needless_kicks.get()},
	            {"call_wakeups", t.call_wakeups.get()},
	            {"ring_full", t.ring_full.get()},
	            {"device_errors", t.device_errors.get()},
	            // System calls the data path made on the tun side, and its epoll_wait() calls:
	            // divided by packets, the cost the tun I/O mode is chosen for.
	            {"tun_syscalls", Json{{"read", t.tun_reads.get()},
	                                  {"write", t.tun_writes.get()},
	                                  {"kick", t.rx_kicks.get() + t.tx_kicks.get()}}},
	            {"polls", t.polls.get()},
	            {"poll_waits", t.poll_waits.get()},
	            {"busy_poll_us", uint64_t(info.busy_poll_us)},
	            {"busy_polls", t.busy_polls.get()},
	            {"busy_poll_hits", t.busy_poll_hits.get()},
	            {"wake_poll_us", uint64_t(info.wake_poll_us)},
	            {"wake_polls", t.wake_polls.get()},
	            {"wake_poll_hits", t.wake_poll_hits.get()}};
}

/// The underlay sockets: the first one's buffer sizes, what UDP GSO and GRO did.
Json udp_json(const ServiceInfo& info) {
	// Summed over the workers' sockets; GSO is off once any socket turned it off.
	platform::GsoStats g;
	g.enabled = !info.udp.empty();
	for (const platform::UdpSocket* u : info.udp) {
		const platform::GsoStats s = u->gso_stats();
		g.enabled = g.enabled && s.enabled;
		if (s.disabled_errno) g.disabled_errno = s.disabled_errno;
		g.trains += s.trains;
		g.segments += s.segments;
	}
	bool gro = !info.udp.empty();
	for (const platform::UdpSocket* u : info.udp)
		gro = gro && u->gro_on();
	return Json{{"rcvbuf", int64_t(info.udp_buffers.rcv)},
	            {"sndbuf", int64_t(info.udp_buffers.snd)},
	            {"gso", g.enabled},
	            {"gro", gro},
	            {"gso_off_reason", g.disabled_errno ? std::string(std::strerror(g.disabled_errno)) +
	                                                      " from the kernel: switched off"
	                                                : std::string(g.enabled ? "" : "udp_gso = false")},
	            {"gso_trains", g.trains},
	            {"gso_segments", g.segments}};
}

/// "queue": the receive queue limit and what the receive queues hold now.
Json queue_json(const ServiceInfo& info, const DataPathStats& stats) {
	uint64_t sojourn = 0, signalling = 0, queued = 0;
	for (const DataPathStats* w : info.worker_stats) {
		sojourn = std::max(sojourn, w->queue_sojourn_us.get());
		signalling += w->queue_signalling.get();
	}
	for (const platform::UdpSocket* u : info.udp)
		queued += u->rx_queued_bytes();
	return Json{{"limit", info.queue_target_us != 0 && info.queue_timestamps},
	            {"target_us", uint64_t(info.queue_target_us)},
	            {"interval_ms", uint64_t(info.queue_interval_ms)},
	            {"sojourn_us", sojourn},
	            {"queued_bytes", queued},
	            {"signalling_workers", signalling},
	            {"engaged", stats.queue_engaged.get()},
	            {"marks", stats.queue_marks.get()},
	            // queue_delay counts the send side's too
	            {"drops", stats.drops_of(Drop::queue_delay) - stats.tx_queue_drops.get()}};
}

/// "tx_queue": the send-side flow queue and what it holds now.
Json tx_queue_json(const ServiceInfo& info, const DataPathStats& stats) {
	uint64_t sojourn = 0, bytes = 0, packets = 0, flows = 0, signalling = 0;
	for (const DataPathStats* w : info.worker_stats) {
		sojourn = std::max(sojourn, w->tx_queue_sojourn_us.get());
		bytes += w->tx_queue_bytes.get();
		packets += w->tx_queue_packets.get();
		flows += w->tx_queue_flows.get();
		signalling += w->tx_queue_signalling.get();
	}
	return Json{{"on", info.flow_queue},
	            {"sojourn_us", sojourn},
	            {"queued_bytes", bytes},
	            {"queued_packets", packets},
	            {"flows", flows},
	            {"signalling_flows", signalling},
	            {"engaged", stats.tx_queue_engaged.get()},
	            {"marks", stats.tx_queue_marks.get()},
	            {"drops", stats.tx_queue_drops.get()},
	            {"overflow_drops", stats.drops_of(Drop::queue_overflow)}};
}

/// "worker_priority": SCHED_FIFO workers and their steps down and up.
Json worker_priority_json(const ServiceInfo& info, const DataPathStats& stats) {
	uint64_t now = 0;
	for (const DataPathStats* w : info.worker_stats)
		now += w->realtime_now.get() != 0;
	return Json{{"mode", info.worker_priority},
	            {"reason", info.worker_priority_reason},
	            {"realtime_now", now},
	            {"lowered", stats.realtime_lowered.get()},
	            {"raised", stats.realtime_raised.get()},
	            {"refused", stats.realtime_refused.get()}};
}

} // namespace

std::string render_status(const ServiceInfo& info, const DataPathStats& stats, const tunnel::SaTable& table) {
	Json j = Json::object();
	j["program"] = info.program;
	j["interface"] = info.interface;
	j["mtu"] = info.mtu;
	j["mtu_source"] = info.mtu_source;
	j["listen"] = info.listen;
	j["tun_io"] = tun_io_json(info);
	j["workers"] = uint64_t(info.workers);
	Json& per_worker = j["per_worker"] = Json::array();
	for (const DataPathStats* w : info.worker_stats)
		per_worker.push_back(Json{{"tun_rx_packets", w->tun_rx_packets.get()},
		                          {"tun_tx_packets", w->tun_tx_packets.get()},
		                          {"udp_rx_packets", w->udp_rx_packets.get()},
		                          {"udp_tx_packets", w->udp_tx_packets.get()},
		                          {"realtime", w->realtime_now.get() != 0},
		                          {"load_pct", w->load_pct.get()},
		                          {"run_wait_us", w->run_wait_us.get()}});
	j["worker_priority"] = worker_priority_json(info, stats);
	j["io_engine"] = Json{{"name", info.io_engine}, {"reason", info.io_engine_reason}};
	j["udp"] = udp_json(info);
	j["queue"] = queue_json(info, stats);
	j["tx_queue"] = tx_queue_json(info, stats);
	if (info.seq_state)
		j["seq_state"] = Json{{"file", info.seq_state->path()}, {"error", info.seq_state->error()}};
	j["crypto"] = Json{{"impl", info.crypto_impl},
	                   {"stitched_supported", crypto::stitched_supported()},
	                   {"stitched_variant", crypto::stitched_variant()}};
	const double up =
	    std::chrono::duration<double>(std::chrono::steady_clock::now() - info.started).count();
	j["uptime_s"] = json_round3(up);

	j["counters"] = Json{{"tun_rx_packets", stats.tun_rx_packets.get()},
	                     {"tun_tx_packets", stats.tun_tx_packets.get()},
	                     {"udp_rx_packets", stats.udp_rx_packets.get()},
	                     {"udp_tx_packets", stats.udp_tx_packets.get()},
	                     {"udp_gro_buffers", stats.udp_gro_buffers.get()}};

	Json& drops = j["drops"] = Json::object();
	for (size_t i = 0; i < kDropReasons; i++)
		drops[std::string(drop_name(Drop(i)))] = stats.drops[i].get();
	Json& ignored = j["ignored"] = Json::object();
	for (size_t i = 0; i < kIgnoreKinds; i++)
		ignored[std::string(ignore_name(Ignore(i)))] = stats.ignored[i].get();

	Json& peers = j["peers"] = Json::array();
	for (const auto& peer : table.peers())
		peers.push_back(peer_json(table, *peer));
	if (info.ike) j["ike"] = info.ike->status_json();
	return json_text(j) + "\n";
}

} // namespace esptun::service
