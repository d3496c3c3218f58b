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
/// default path, so the /1 routes (FullTunnel) cannot pull the tunnel's own
/// packets into the tunnel.
void keep_gateway_reachable(const conf::Config& config, int ifindex, platform::NetConfigGuard& net) {
	const conf::PeerConfig& gw = config.peers.front();
	const IpAddress& ep = gw.endpoint->addr;
	auto current = platform::get_route(ep);
	if (!current)
		throw std::runtime_error("route_all: no route to the gateway " + to_string(ep) +
		                         "; the underlay must reach it before the tunnel starts");
	if (current->ifindex != ifindex) keep_gateway_path(ep, *current, net);
}

/// The two /1 halves of family @fi (0: IPv4, 1: IPv6). Two /1 routes are
/// more specific than any default route, which stays in place.
IpPrefix half(size_t fi, size_t i) {
	static const char* const kHalves[2][2] = {{"0.0.0.0/1", "128.0.0.0/1"}, {"::/1", "8000::/1"}};
	return *parse_prefix(kHalves[fi][i]);
}

const char* family_name(size_t fi) { return fi == 0 ? "IPv4" : "IPv6"; }

} // namespace

std::vector<IpPrefix> tun_routes(const conf::Config& config, std::span<const IpPrefix> prefixes) {
	return tun_routes(config.tunnel.addresses, prefixes);
}

std::vector<IpPrefix> tun_routes(std::span<const IpPrefix> tun_addresses,
                                 std::span<const IpPrefix> prefixes) {
	std::vector<IpPrefix> out;
	for (const IpPrefix& p : prefixes) {
		const bool connected = std::any_of(tun_addresses.begin(), tun_addresses.end(),
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
	log::debug("tun " + tun.name + " opened (ifindex " + std::to_string(tun.ifindex) + ", " +
	           std::to_string(workers.size()) + " queue(s))");
	info.tun_offloads = tc.tun_offload ? enable_offloads(workers) : "none (tun_offload = false)";
	platform::set_link_mtu(tun.ifindex, info.mtu);
	// A client that asks its gateway for addresses may get an IPv6 one
	// (RFC 7296 section 3.15.1), which a tun without IPv6 could not take.
	const bool may_get_v6 = config.role == conf::Role::client && tc.addresses.empty();
	if (!has_v6_address(config) && !may_get_v6) platform::set_ipv6_enabled(tun.name, false);
	for (const IpPrefix& a : tc.addresses) {
		platform::add_address(tun.ifindex, a);
		log::debug("tun " + tun.name + ": address " + to_string(a) + " added");
	}
	platform::set_link_up(tun.ifindex);
	log::debug("tun " + tun.name + ": link up, mtu " + std::to_string(info.mtu));
}

std::vector<IpPrefix> peer_prefixes(const conf::PeerConfig& peer) {
	std::vector<IpPrefix> out = peer.allowed_ips;
	if (peer.ike && !peer.ike->remote_pattern.empty() && peer.ike->users)
		for (const auto& [name, user] : *peer.ike->users) {
			for (const IpAddress& a : user.addresses)
				out.push_back({a, uint8_t(a.max_prefix())});
			out.insert(out.end(), user.allowed_ips.begin(), user.allowed_ips.end());
		}
	return out;
}

std::vector<IpPrefix> pool_reserved(const conf::Config& config) {
	std::vector<IpPrefix> reserved;
	for (const IpPrefix& a : config.tunnel.addresses)
		reserved.push_back({a.addr, uint8_t(a.addr.max_prefix())});
	for (const conf::PeerConfig& peer : config.peers)
		for (const IpPrefix& p : peer_prefixes(peer))
			reserved.push_back(p);
	return reserved;
}

// A /0 becomes routes only with route_all (route_everything()): otherwise it
// only widens which inner sources are accepted.
platform::NetConfigGuard install_routes(const conf::Config& config, int ifindex) {
	platform::NetConfigGuard net;
	// All in one batched request stream: 10,000 peers' routes in well
	// under a second (one netlink round trip each took seconds).
	std::vector<IpPrefix> routes;
	std::vector<std::string> owners;
	for (const conf::PeerConfig& peer : config.peers)
		for (const IpPrefix& p : tun_routes(config, peer_prefixes(peer))) {
			routes.push_back(p);
			owners.push_back("peer " + peer.name);
		}
	for (const IpPrefix& p : tun_routes(config, config.tunnel.address_pool)) {
		routes.push_back(p);
		owners.push_back("address_pool");
	}
	net.add_routes(routes, ifindex);
	if (log::enabled(log::Level::debug))
		for (size_t i = 0; i < routes.size(); i++)
			log::debug("route " + to_string(routes[i]) + " added into the tunnel (" + owners[i] +
			           ")");
	if (config.tunnel.route_all) keep_gateway_reachable(config, ifindex, net);
	return net;
}

FullTunnel::FullTunnel(const conf::Config& config, int ifindex)
    : ifindex_(ifindex), kill_switch_(config.tunnel.kill_switch), static_(config.tunnel.addresses) {
	try {
		for (size_t fi = 0; fi < 2; fi++)
			apply(fi, std::any_of(static_.begin(), static_.end(), [&](const IpPrefix& a) {
				      return family_index(a.addr.family) == fi;
			      }));
	} catch (...) {
		remove_all();
		throw;
	}
}

FullTunnel::~FullTunnel() { remove_all(); }

void FullTunnel::apply(size_t fi, bool has_address) {
	const bool want_tun = has_address;
	const bool want_block = kill_switch_ || !has_address;
	// Make before break: what is wanted is added first, so no packet finds
	// neither route and takes the underlay's default instead.
	if (want_block && !block_[fi]) {
		for (size_t i = 0; i < 2; i++) {
			try {
				platform::add_unreachable_route(half(fi, i), kBlockMetric);
			} catch (const SystemError& e) {
				// A kernel without IPv6 (ipv6.disable=1) has no IPv6 to leak.
				if (fi == 1 && e.err() == EAFNOSUPPORT) {
					log::info("route_all: this kernel has no IPv6, so none to block");
					return;
				}
				// A killed run's route (same prefix, same metric): ours now.
				if (e.err() != EEXIST) throw;
				log::info("route_all: taking over the route unreachable " +
				          to_string(half(fi, i)) + " metric " + std::to_string(kBlockMetric) +
				          " left by an earlier run");
			}
			block_owned_[fi][i] = true;
		}
		block_[fi] = true;
	}
	if (want_tun && !tun_[fi]) {
		for (size_t i = 0; i < 2; i++) {
			platform::add_route(half(fi, i), ifindex_);
			tun_owned_[fi][i] = true;
		}
		tun_[fi] = true;
	}
	if (!want_tun && tun_[fi]) {
		for (size_t i = 0; i < 2; i++) {
			platform::del_route(half(fi, i), ifindex_);
			tun_owned_[fi][i] = false;
		}
		tun_[fi] = false;
	}
	if (!want_block && block_[fi]) {
		for (size_t i = 0; i < 2; i++) {
			platform::del_unreachable_route(half(fi, i), kBlockMetric);
			block_owned_[fi][i] = false;
		}
		block_[fi] = false;
	}
	if (tun_[fi])
		log::info(std::string("route_all: ") + family_name(fi) + " goes into the tunnel" +
		          (kill_switch_ ? " (kill switch underneath)" : ""));
	else
		log::info(std::string("route_all: ") + family_name(fi) +
		          " is blocked (unreachable): the tun has no " + family_name(fi) + " address");
}

void FullTunnel::set_addresses(std::span<const IpPrefix> assigned) noexcept {
	for (size_t fi = 0; fi < 2; fi++) {
		auto of_family = [&](const IpPrefix& a) { return family_index(a.addr.family) == fi; };
		const bool has = std::any_of(static_.begin(), static_.end(), of_family) ||
		                 std::any_of(assigned.begin(), assigned.end(), of_family);
		if (has == tun_[fi] && block_[fi] == (kill_switch_ || !has)) continue;
		try {
			apply(fi, has);
		} catch (const std::exception& e) {
			log::error(std::string("route_all: cannot change the ") + family_name(fi) +
			           " routes: " + e.what());
		}
	}
}

void FullTunnel::remove_all() noexcept {
	for (size_t fi = 0; fi < 2; fi++)
		for (size_t i = 0; i < 2; i++) {
			try {
				if (tun_owned_[fi][i]) platform::del_route(half(fi, i), ifindex_);
			} catch (...) { // gone with the tun already
			}
			try {
				if (block_owned_[fi][i])
					platform::del_unreachable_route(half(fi, i), kBlockMetric);
			} catch (...) { // removed by hand meanwhile: nothing left to do
			}
			tun_owned_[fi][i] = block_owned_[fi][i] = false;
		}
	tun_ = {};
	block_ = {};
}

std::vector<std::string> remove_leftovers(const conf::Config& config) {
	std::vector<std::string> removed;
	// ESRCH: not there; EAFNOSUPPORT: a kernel without IPv6.
	auto gone = [](const SystemError& e) { return e.err() == ESRCH || e.err() == EAFNOSUPPORT; };
	for (size_t fi = 0; fi < 2; fi++)
		for (size_t i = 0; i < 2; i++) {
			try {
				platform::del_unreachable_route(half(fi, i), kBlockMetric);
				removed.push_back("unreachable " + to_string(half(fi, i)) + " metric " +
				                  std::to_string(kBlockMetric));
			} catch (const SystemError& e) {
				if (!gone(e)) throw;
			}
		}
	// The host route that kept the gateway on the underlay (keep_gateway_path());
	// ifindex 0 matches it on whichever interface it went.
	if (!config.peers.empty() && config.peers.front().endpoint) {
		const IpAddress& ep = config.peers.front().endpoint->addr;
		const IpPrefix host{ep, uint8_t(ep.max_prefix())};
		try {
			platform::del_route(host, 0);
			removed.push_back(to_string(host) + " (the host route to the gateway)");
		} catch (const SystemError& e) {
			if (!gone(e)) throw;
		}
	}
	return removed;
}

std::unique_ptr<FullTunnel> route_everything(const conf::Config& config, int ifindex) {
	if (!config.tunnel.route_all) return nullptr;
	return std::make_unique<FullTunnel>(config, ifindex);
}

} // namespace esptun::service
