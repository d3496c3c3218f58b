// The status JSON that `status -c FILE` prints (served by control.cpp).
#include "service/json.hpp"
#include "service/seq_state.hpp"
#include "service/service.hpp"

#include "datapath/tun_port.hpp"
#include "service/ike_service.hpp"

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
void write_sa_out(JsonWriter& j, const tunnel::SaInfo& sa) {
	j.begin_object();
	j.field("spi", uint64_t(sa.spi)).field("spi_hex", spi_hex(sa.spi));
	j.field("packets", sa.packets).field("bytes", sa.bytes);
	j.field("last_seq", sa.seq);
	j.field("cipher", sa.cipher).field("esn", sa.esn);
	j.end_object();
}

/// One inbound SA ("sa_in" and the entries of "sas_in").
void write_sa_in(JsonWriter& j, const tunnel::SaInfo& sa) {
	j.begin_object();
	j.field("spi", uint64_t(sa.spi)).field("spi_hex", spi_hex(sa.spi));
	j.field("packets", sa.packets).field("bytes", sa.bytes);
	j.field("highest_seq", sa.seq);
	j.field("replay_window", sa.replay_window);
	j.field("reordered", sa.reordered);
	j.field("cipher", sa.cipher).field("esn", sa.esn);
	j.end_object();
}

/**
 * write_peer() - one entry of "peers"
 *
 * A statically keyed peer has one SA each way: "sa_out" and "sa_in" (also
 * the only entry of "sas_in"). A peer keyed at run time shows its current
 * outbound SA and its newest inbound one there (null before the first key
 * exchange), every installed inbound SA in "sas_in" (two during a rekey),
 * and "totals" over all the SAs it ever had.
 */
void write_peer(JsonWriter& j, const tunnel::SaTable& table, const tunnel::Peer& peer) {
	const tunnel::PeerSaInfo sas = table.sa_info(peer);
	j.begin_object();
	j.field("name", peer.name);
	auto ep = peer.endpoint_snapshot();
	j.key("endpoint");
	if (ep)
		j.value(to_string(*ep));
	else
		j.null();
	j.field("endpoint_source", !ep ? "none"
	                           : peer.endpoint_configured && peer.endpoint_changes.get() == 0
	                               ? "configured"
	                               : "learned");
	j.field("endpoint_changes", peer.endpoint_changes.get());
	j.field("last_rx_unix_ms", int64_t(peer.last_rx_unix_ms.load(std::memory_order_relaxed)));
	j.field("keying", peer.keyed_statically ? "static" : "dynamic");
	// The suite the peer is sent with now (a rekey may change it).
	if (sas.out) {
		j.field("cipher", sas.out->cipher);
		j.field("crypto_impl", sas.out->impl);
		j.field("esn", sas.out->esn);
	} else {
		j.key("cipher").null().key("crypto_impl").null().key("esn").null();
	}
	j.key("allowed_ips").begin_array();
	for (const IpPrefix& p : peer.allowed_ips)
		j.value(to_string(p));
	j.end_array();

	j.key("sa_out");
	if (sas.out)
		write_sa_out(j, *sas.out);
	else
		j.null();
	j.key("sa_in");
	if (!sas.in.empty())
		write_sa_in(j, sas.in.back());
	else
		j.null();
	j.key("sas_in").begin_array();
	for (const tunnel::SaInfo& sa : sas.in)
		write_sa_in(j, sa);
	j.end_array();
	j.key("totals").begin_object();
	j.field("tx_packets", sas.totals.tx_packets).field("tx_bytes", sas.totals.tx_bytes);
	j.field("rx_packets", sas.totals.rx_packets).field("rx_bytes", sas.totals.rx_bytes);
	j.end_object();
	j.field("sas_retiring", uint64_t(sas.retiring));
	// The drops this peer's packets met: every reason that can be a peer's,
	// zeros included, so a reader finds each key.
	j.key("drops").begin_object();
	for (size_t i = 0; i < kDropReasons; i++)
		if (drop_is_per_peer(Drop(i))) j.field(drop_name(Drop(i)), peer.drops[i].get());
	j.end_object();
	j.end_object();
}

/// "tun_io": the mode, why, and what the tun side did (all zero in direct mode).
void write_tun_io(JsonWriter& j, const ServiceInfo& info) {
	const datapath::TunIoStats none{};
	const datapath::TunIoStats& t = info.tun_io_stats ? *info.tun_io_stats : none;
	j.key("tun_io").begin_object();
	j.field("mode", info.tun_io_mode).field("reason", info.tun_io_reason);
	j.field("direct_write_max", uint64_t(info.direct_write_max));
	j.field("offloads", info.tun_offloads);
	j.field("gso_reads", t.gso_reads.get()).field("gso_segments", t.gso_segments.get());
	j.field("gro_writes", t.gro_writes.get()).field("gro_segments", t.gro_segments.get());
	j.field("offload_errors", t.offload_errors.get());
	j.field("rx_ring_packets", t.rx_ring_packets.get()).field("tx_ring_packets", t.tx_ring_packets.get());
	j.field("direct_writes", t.direct_writes.get());
	j.field("kicks", t.rx_kicks.get() + t.tx_kicks.get());
	j.field("rx_kicks", t.rx_kicks.get()).field("tx_kicks", t.tx_kicks.get());
	j.field("rx_kicks_suppressed", t.rx_kicks_suppressed.get())
	    .field("tx_kicks_suppressed", t.tx_kicks_suppressed.get());
	j.field("needless_kicks", t.needless_kicks.get());
	j.field("call_wakeups", t.call_wakeups.get()).field("ring_full", t.ring_full.get());
	j.field("device_errors", t.device_errors.get());
	// System calls the data path made on the tun side, and its epoll_wait() calls:
	// divided by packets, the cost the tun I/O mode is chosen for.
	j.key("tun_syscalls").begin_object();
	j.field("read", t.tun_reads.get()).field("write", t.tun_writes.get());
	j.field("kick", t.rx_kicks.get() + t.tx_kicks.get());
	j.end_object();
	j.field("polls", t.polls.get()).field("poll_waits", t.poll_waits.get());
	j.field("busy_poll_us", uint64_t(info.busy_poll_us));
	j.field("busy_polls", t.busy_polls.get()).field("busy_poll_hits", t.busy_poll_hits.get());
	j.field("wake_poll_us", uint64_t(info.wake_poll_us));
	j.field("wake_polls", t.wake_polls.get()).field("wake_poll_hits", t.wake_poll_hits.get());
	j.end_object();
}

/// The underlay sockets: the first one's buffer sizes, what UDP GSO and GRO did.
void write_udp(JsonWriter& j, const ServiceInfo& info) {
	j.key("udp").begin_object();
	j.field("rcvbuf", int64_t(info.udp_buffers.rcv)).field("sndbuf", int64_t(info.udp_buffers.snd));
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
	j.field("gso", g.enabled);
	bool gro = !info.udp.empty();
	for (const platform::UdpSocket* u : info.udp)
		gro = gro && u->gro_on();
	j.field("gro", gro);
	j.field("gso_off_reason", g.disabled_errno ? std::string(std::strerror(g.disabled_errno)) +
	                                                 " from the kernel: switched off"
	                                           : std::string(g.enabled ? "" : "udp_gso = false"));
	j.field("gso_trains", g.trains).field("gso_segments", g.segments);
	j.end_object();
}

} // namespace

std::string render_status(const ServiceInfo& info, const DataPathStats& stats, const tunnel::SaTable& table) {
	JsonWriter j;
	j.begin_object();
	j.field("program", info.program).field("interface", info.interface);
	j.field("mtu", info.mtu).field("mtu_source", info.mtu_source).field("listen", info.listen);
	write_tun_io(j, info);
	j.field("workers", uint64_t(info.workers));
	j.key("per_worker").begin_array();
	for (const DataPathStats* w : info.worker_stats)
		j.begin_object()
		    .field("tun_rx_packets", w->tun_rx_packets.get())
		    .field("tun_tx_packets", w->tun_tx_packets.get())
		    .field("udp_rx_packets", w->udp_rx_packets.get())
		    .field("udp_tx_packets", w->udp_tx_packets.get())
		    .end_object();
	j.end_array();
	j.key("io_engine").begin_object();
	j.field("name", info.io_engine).field("reason", info.io_engine_reason);
	j.end_object();
	write_udp(j, info);
	if (info.seq_state)
		j.key("seq_state")
		    .begin_object()
		    .field("file", info.seq_state->path())
		    .field("error", info.seq_state->error())
		    .end_object();
	j.key("crypto").begin_object();
	j.field("impl", info.crypto_impl).field("stitched_supported", crypto::stitched_supported());
	j.field("stitched_variant", crypto::stitched_variant()).end_object();
	double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - info.started).count();
	j.field("uptime_s", up);

	j.key("counters").begin_object();
	j.field("tun_rx_packets", stats.tun_rx_packets.get())
	    .field("tun_tx_packets", stats.tun_tx_packets.get());
	j.field("udp_rx_packets", stats.udp_rx_packets.get())
	    .field("udp_tx_packets", stats.udp_tx_packets.get());
	j.field("udp_gro_buffers", stats.udp_gro_buffers.get());
	j.end_object();

	j.key("drops").begin_object();
	for (size_t i = 0; i < kDropReasons; i++)
		j.field(drop_name(Drop(i)), stats.drops[i].get());
	j.end_object();
	j.key("ignored").begin_object();
	for (size_t i = 0; i < kIgnoreKinds; i++)
		j.field(ignore_name(Ignore(i)), stats.ignored[i].get());
	j.end_object();

	j.key("peers").begin_array();
	for (const auto& peer : table.peers())
		write_peer(j, table, *peer);
	j.end_array();
	if (info.ike) info.ike->write_status(j);
	j.end_object();
	return j.str() + "\n";
}

} // namespace esptun::service
