// The tun MTU, the tun device and the routes through it: see tun_setup.hpp.
#include "service/tun_setup.hpp"

#include "platform/netlink.hpp"
#include "platform/sysctl.hpp"
#include "service/log.hpp"
#include "tunnel/esp_wire.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>

namespace esptun::service {
namespace {

constexpr unsigned kFallbackUnderlayMtu = 1500;
constexpr unsigned kIpv6MinMtu = 1280; // RFC 8200 section 5

/// The suite of @p with the most overhead: an IKE peer may end up with any
/// suite it proposes, so the MTU is planned for the worst.
const crypto::CipherSpec& worst_suite(const conf::PeerConfig& p, unsigned underlay, bool outer_v6) {
	const crypto::CipherSpec* worst = &crypto::cipher_spec(p.cipher);
	if (p.ike)
		for (const ike::EspSuite& e : p.ike->esp_proposals)
			if (tunnel::esp::max_inner_mtu(crypto::cipher_spec(e.cipher), underlay, outer_v6) <
			    tunnel::esp::max_inner_mtu(*worst, underlay, outer_v6))
				worst = &crypto::cipher_spec(e.cipher);
	return *worst;
}

/**
 * derive_mtu() - the tun MTU from the underlay path MTU and the cipher
 * overhead, so that no inner packet the tun accepts becomes an outer one
 * too big for the path (dropped or fragmented there).
 * @how: set to how the winning figure came about, for the log and status
 *
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
		const crypto::CipherSpec& spec = worst_suite(p, underlay, outer_v6);
		unsigned inner = unsigned(tunnel::esp::max_inner_mtu(spec, underlay, outer_v6));
		if (inner < best) {
			best = inner;
			how = "underlay " + std::to_string(underlay) + " (" + where + ") minus " +
			      std::string(spec.name) + (outer_v6 ? " over IPv6" : " over IPv4") + " overhead";
		}
	}
	return best;
}

/// TUNSETOFFLOAD on every queue of a vnet_hdr tun and a GSO segment limit of
/// one batch; returns what the kernel took, for the log and the status JSON.
/// A refusal is not fatal: the ports then see plain packets behind zero headers.
std::string enable_offloads(const Workers& workers) {
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

/// A host route to the gateway @ep through its current path @current. A
/// client that was killed (SIGKILL, OOM) leaves this route behind: it is the
/// route just looked up, so it is taken over.
void keep_gateway_path(const IpAddress& ep, const platform::RouteInfo& current,
                       platform::NetConfigGuard& net) {
	IpPrefix host{ep, uint8_t(ep.max_prefix())};
	try {
		net.add_route(host, current.ifindex, current.gateway);
	} catch (const SystemError& e) {
		if (e.err() != EEXIST) throw;
		platform::del_route(host, current.ifindex, current.gateway);
		net.add_route(host, current.ifindex, current.gateway);
	}
}

/// Client with route_all: keep the gateway reachable through the current
/// default path, then send everything else into the tunnel. Two /1 routes
/// are more specific than any default route, which stays in place.
void route_everything(const conf::Config& config, int ifindex, platform::NetConfigGuard& net) {
	const conf::PeerConfig& gw = config.peers.front();
	const IpAddress& ep = gw.endpoint->addr;
	auto current = platform::get_route(ep);
	if (!current)
		throw std::runtime_error("route_all: no route to the gateway " + to_string(ep) +
		                         "; the underlay must reach it before the tunnel starts");
	if (current->ifindex != ifindex) keep_gateway_path(ep, *current, net);
	auto half = [](const char* text) { return *parse_prefix(text); };
	net.add_route(half("0.0.0.0/1"), ifindex);
	net.add_route(half("128.0.0.0/1"), ifindex);
	if (has_v6_address(config)) {
		net.add_route(half("::/1"), ifindex);
		net.add_route(half("8000::/1"), ifindex);
	}
}

} // namespace

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

bool has_v6_address(const conf::Config& config) {
	for (const IpPrefix& a : config.tunnel.addresses)
		if (a.addr.family == Family::v6) return true;
	return false;
}

void choose_mtu(const conf::Config& config, ServiceInfo& info) {
	if (config.tunnel.mtu) {
		info.mtu = config.tunnel.mtu;
		info.mtu_source = "configured";
	} else {
		info.mtu = derive_mtu(config, info.mtu_source);
	}
	if (has_v6_address(config) && info.mtu < kIpv6MinMtu)
		throw std::runtime_error(
		    "tun MTU " + std::to_string(info.mtu) + " (" + info.mtu_source +
		    ") is below IPv6's minimum of 1280; raise the underlay MTU or remove the "
		    "IPv6 addresses");
}

void bring_up_tun(const conf::Config& config, Workers& workers, ServiceInfo& info) {
	const conf::TunnelConfig& tc = config.tunnel;
	platform::TunDevice& tun = workers[0]->queue;
	tun = platform::open_tun(tc.interface, workers.size() > 1, tc.tun_offload);
	for (size_t w = 1; w < workers.size(); w++)
		workers[w]->queue = platform::open_tun(tun.name, true, tc.tun_offload);
	info.interface = tun.name;
	info.tun_offloads = tc.tun_offload ? enable_offloads(workers) : "none (tun_offload = false)";
	platform::set_link_mtu(tun.ifindex, info.mtu);
	if (!has_v6_address(config)) platform::set_ipv6_enabled(tun.name, false);
	for (const IpPrefix& a : tc.addresses)
		platform::add_address(tun.ifindex, a);
	platform::set_link_up(tun.ifindex);
}

// A /0 becomes routes only with route_all (route_everything()): otherwise it
// only widens which inner sources are accepted.
platform::NetConfigGuard install_routes(const conf::Config& config, int ifindex) {
	platform::NetConfigGuard net;
	for (const conf::PeerConfig& peer : config.peers)
		for (const IpPrefix& p : tun_routes(config, peer.allowed_ips))
			net.add_route(p, ifindex);
	for (const IpPrefix& p : tun_routes(config, config.tunnel.address_pool))
		net.add_route(p, ifindex);
	if (config.tunnel.route_all) route_everything(config, ifindex, net);
	return net;
}

} // namespace esptun::service
