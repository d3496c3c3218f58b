// diff_configs(): see diff.hpp.
#include "conf/diff.hpp"

#include <algorithm>

namespace esptun::conf {
namespace {

/// Loaded from the same contents (both absent counts as the same).
template <class T> bool same_material(const std::shared_ptr<const T>& a, const std::shared_ptr<const T>& b) {
	return (!a && !b) || (a && b && a->fingerprint() == b->fingerprint());
}

bool same_ike(const IkePeerConfig& a, const IkePeerConfig& b) {
	return a.psk == b.psk && same_material(a.credentials, b.credentials) &&
	       same_material(a.trust, b.trust) && a.local_id == b.local_id && a.remote_id == b.remote_id &&
	       a.remote_pattern == b.remote_pattern && a.ike_proposals == b.ike_proposals &&
	       a.esp_proposals == b.esp_proposals && a.local_ts == b.local_ts &&
	       a.dpd_interval == b.dpd_interval && a.rekey_time == b.rekey_time &&
	       a.ike_rekey_time == b.ike_rekey_time && a.rekey_bytes == b.rekey_bytes &&
	       a.rekey_packets == b.rekey_packets && a.initiate == b.initiate &&
	       a.allow_weak == b.allow_weak && a.fragment_size == b.fragment_size && a.auth == b.auth &&
	       a.rsa_pss == b.rsa_pss && a.eap_identity == b.eap_identity &&
	       a.eap_password == b.eap_password &&
	       ((!a.users && !b.users) || (a.users && b.users && *a.users == *b.users));
}

bool same_sa(const SaConfig& a, const SaConfig& b) {
	return a.spi == b.spi && a.enc_key == b.enc_key && a.auth_key == b.auth_key;
}

/// The [tunnel] settings that differ, by their config names.
std::vector<std::string> tunnel_changes(const TunnelConfig& a, const TunnelConfig& b) {
	std::vector<std::string> out;
	auto check = [&](bool same, const char* key) {
		if (!same) out.push_back(std::string("[tunnel] ") + key);
	};
	check(a.interface == b.interface, "interface");
	check(a.addresses == b.addresses, "addresses");
	check(a.listen == b.listen, "listen");
	check(a.mtu == b.mtu, "mtu");
	check(a.tun_io == b.tun_io, "tun_io");
	check(a.direct_write_max == b.direct_write_max, "direct_write_max");
	check(a.crypto_impl == b.crypto_impl, "crypto_impl");
	check(a.udp_gso == b.udp_gso, "udp_gso");
	check(a.udp_gro == b.udp_gro, "udp_gro");
	check(a.tun_offload == b.tun_offload, "tun_offload");
	check(a.workers == b.workers, "workers");
	check(a.io_engine == b.io_engine, "io_engine");
	check(a.socket_buffer == b.socket_buffer, "socket_buffer");
	check(a.busy_poll_us == b.busy_poll_us, "busy_poll_us");
	check(a.wake_poll_us == b.wake_poll_us, "wake_poll_us");
	check(a.queue_target_us == b.queue_target_us, "queue_target_us");
	check(a.queue_interval_ms == b.queue_interval_ms, "queue_interval_ms");
	check(a.realtime_workers == b.realtime_workers, "worker_priority");
	check(a.control_socket == b.control_socket, "control_socket");
	check(a.state_dir == b.state_dir, "state_dir");
	check(a.drop_privileges == b.drop_privileges, "drop_privileges");
	check(a.user == b.user, "user");
	check(a.route_all == b.route_all, "route_all");
	check(a.kill_switch == b.kill_switch, "kill_switch");
	check(a.ike_port == b.ike_port, "ike_port");
	check(a.local_id == b.local_id, "local_id");
	check(a.address_pool == b.address_pool, "address_pool");
	check(a.dns == b.dns, "dns");
	return out;
}

const PeerConfig* find(const Config& c, const std::string& name) {
	auto it =
	    std::find_if(c.peers.begin(), c.peers.end(), [&](const PeerConfig& p) { return p.name == name; });
	return it == c.peers.end() ? nullptr : &*it;
}

/// Two templates alike but for their users (a users_file edited).
bool only_users_differ(const PeerConfig& a, const PeerConfig& b) {
	if (!a.ike || !b.ike || a.ike->remote_pattern.empty() || b.ike->remote_pattern.empty()) return false;
	PeerConfig with_old_users = b;
	with_old_users.ike->users = a.ike->users;
	return same_peer(a, with_old_users);
}

} // namespace

bool same_peer(const PeerConfig& a, const PeerConfig& b) {
	if (a.ike.has_value() != b.ike.has_value()) return false;
	if (a.ike && !same_ike(*a.ike, *b.ike)) return false;
	return a.name == b.name && a.endpoint == b.endpoint && a.allowed_ips == b.allowed_ips &&
	       a.cipher == b.cipher && a.esn == b.esn && a.replay_window == b.replay_window &&
	       same_sa(a.out, b.out) && same_sa(a.in, b.in);
}

ConfigDiff diff_configs(const Config& running, const Config& next) {
	ConfigDiff d;
	if (running.role != next.role) d.restart_only.push_back("the role (gateway or client)");
	for (std::string& s : tunnel_changes(running.tunnel, next.tunnel))
		d.restart_only.push_back(std::move(s));
	d.redirect_changed = running.redirect != next.redirect;
	for (const PeerConfig& p : running.peers)
		if (!find(next, p.name)) d.removed.push_back(p.name);
	for (const PeerConfig& p : next.peers) {
		const PeerConfig* old = find(running, p.name);
		if (!old)
			d.added.push_back(p.name);
		else if (same_peer(*old, p))
			d.unchanged.push_back(p.name);
		else if (only_users_differ(*old, p))
			d.users_changed.push_back(p.name);
		else
			d.changed.push_back(p.name);
	}
	return d;
}

} // namespace esptun::conf
