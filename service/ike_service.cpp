// IkeService: see ike_service.hpp.
#include "service/ike_service.hpp"

#include "base/error.hpp"
#include "platform/netlink.hpp"
#include "platform/sockaddr.hpp"
#include "service/json_io.hpp"
#include "service/log.hpp"
#include "service/tun_setup.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace esptun::service {
namespace {

/// RFC 3948 section 2.2: IKE on the ESP port starts with four zero bytes
/// where ESP has its (never zero) SPI.
constexpr size_t kMarkerLen = 4;
constexpr std::chrono::milliseconds kTick{200};

int socket_family(int fd) {
	int family = 0;
	socklen_t len = sizeof family;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) != 0) return AF_INET;
	return family;
}

std::optional<Endpoint> bound_endpoint(int fd) {
	sockaddr_storage ss{};
	socklen_t len = sizeof ss;
	if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return std::nullopt;
	return platform::from_sockaddr(ss, len);
}

/// A UDP socket bound to @at for IKE_SA_INIT on port 500 (dual-stack on [::]).
platform::UniqueFd bind_ike_socket(const Endpoint& at) {
	const int family = at.addr.family == Family::v6 ? AF_INET6 : AF_INET;
	platform::UniqueFd fd(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (!fd) throw SystemError(errno, "socket(IKE)");
	if (family == AF_INET6) {
		int off = 0;
		setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
	}
	sockaddr_storage ss{};
	const socklen_t len = platform::to_sockaddr(at, family, ss);
	if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
		const int err = errno;
		throw std::runtime_error(
		    "cannot bind the IKE port " + to_string(at) + ": " + std::strerror(err) +
		    (err == EADDRINUSE ? " (another IKE daemon?)" : "") +
		    "; set [tunnel] ike_port to a free port, or 0 to take IKE only on the "
		    "listen port");
	}
	return fd;
}

int dup_fd(int fd) {
	const int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (d < 0) throw SystemError(errno, "dup");
	return d;
}

} // namespace

std::vector<ike::PeerPolicy> ike_policies(const conf::Config& config, const std::string& hostname) {
	std::vector<ike::PeerPolicy> out;
	for (const conf::PeerConfig& p : config.peers) {
		if (!p.ike) continue;
		ike::PeerPolicy pol;
		pol.name = p.name;
		pol.psk = p.ike->psk;
		pol.credentials = p.ike->credentials;
		pol.trust = p.ike->trust;
		pol.rsa_pss = p.ike->rsa_pss;
		// users_file: EAP-MSCHAPv2's passwords, and for a template of any
		// auth its users' fixed addresses and networks (instantiate()).
		pol.users = p.ike->users;
		if (p.ike->auth == conf::IkeAuth::eap_mschapv2 || p.ike->auth == conf::IkeAuth::eap_tls) {
			pol.eap_role =
			    config.role == conf::Role::gateway ? ike::EapRole::server : ike::EapRole::client;
			pol.eap_method = p.ike->auth == conf::IkeAuth::eap_tls ? ike::eap::type::tls
			                                                       : ike::eap::type::mschapv2;
			pol.eap_identity = p.ike->eap_identity;
			pol.eap_password = p.ike->eap_password;
		}
		const std::string local = !p.ike->local_id.empty() ? p.ike->local_id : hostname;
		pol.local_id =
		    ike::parse_identity(local).value_or(ike::Identity{ike::IdType::fqdn, {'e', 's', 'p'}});
		if (!p.ike->remote_pattern.empty())
			pol.remote_pattern = p.ike->remote_pattern;
		else
			pol.remote_id = *ike::parse_identity(p.ike->remote_id);
		pol.ike_proposals = p.ike->ike_proposals;
		pol.esp_proposals = p.ike->esp_proposals;
		pol.allowed_ips = p.allowed_ips;
		pol.local_ts = p.ike->local_ts;
		pol.endpoint = p.endpoint;
		pol.initiate = p.ike->initiate;
		pol.dpd_interval_s = p.ike->dpd_interval;
		pol.child_rekey_s = p.ike->rekey_time;
		// A client without addresses of its own asks its gateway for one; a
		// gateway gives each client the host addresses of its allowed_ips
		// that lie in the address pool, or else leases it one from the pool.
		pol.request_address = config.role == conf::Role::client && config.tunnel.addresses.empty();
		// route_all's host route keeps only the configured gateway outside
		// the tunnel: another one a redirect names would be sent into it.
		pol.follow_redirects = !(config.role == conf::Role::client && config.tunnel.route_all);
		for (const IpPrefix& a : p.allowed_ips)
			for (const IpPrefix& pool : config.tunnel.address_pool)
				if (a.len == a.addr.max_prefix() && pool.contains(a.addr))
					pol.assign.push_back(a.addr);
		pol.dns = config.tunnel.dns;
		pol.ike_rekey_s = p.ike->ike_rekey_time;
		pol.child_rekey_bytes = p.ike->rekey_bytes;
		pol.child_rekey_packets = p.ike->rekey_packets;
		pol.fragment_size = p.ike->fragment_size;
		out.push_back(std::move(pol));
	}
	return out;
}

IkeService::IkeService(asio::io_context& io, const conf::Config& config, tunnel::SaTable& table, int natt_fd,
                       datapath::IkeInbox& inbox, int tun_ifindex)
    : table_(table), natt_fd_(natt_fd), inbox_(inbox), tun_ifindex_(tun_ifindex), inbox_wait_(io),
      ike_wait_(io), timer_(io), crypto_impl_(config.tunnel.crypto_impl) {
	natt_family_ = socket_family(natt_fd);
	if (auto ep = bound_endpoint(natt_fd)) natt_port_ = ep->port;
	if (!config.tunnel.listen.addr.is_unspecified()) listen_addr_ = config.tunnel.listen.addr;
	char host[256] = {};
	if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "esptun");
	hostname_ = host;
	std::vector<ike::PeerPolicy> policies = ike_policies(config, hostname_);
	for (const conf::PeerConfig& p : config.peers) {
		if (!p.ike) continue;
		tunnel::Peer* found = nullptr;
		for (const auto& tp : table.peers())
			if (tp->name == p.name) found = tp.get();
		if (!found) throw std::logic_error("IKE peer " + p.name + " is not in the SA table");
		table_peers_.push_back(found);
		replay_windows_.push_back(p.replay_window);
	}
	if (config.tunnel.ike_port != 0 && config.tunnel.ike_port != natt_port_) {
		Endpoint at = config.tunnel.listen;
		at.port = config.tunnel.ike_port;
		ike_fd_ = bind_ike_socket(at);
		ike_family_ = at.addr.family == Family::v6 ? AF_INET6 : AF_INET;
		ike_port_ = config.tunnel.ike_port;
		log::debug("IKE: UDP socket bound to " + to_string(at));
	}
	if (config.role == conf::Role::client && !config.peers.empty()) {
		client_ = ClientRouting{config.tunnel.addresses, config.tunnel.route_all};
		routed_ = tun_routes(config, config.peers.front().allowed_ips);
	}
	engine_ = std::make_unique<ike::Engine>(std::move(policies), *this);
	// Before start(): the first IKE_SA_INIT that arrives already meets it.
	engine_->set_redirect(redirect_policy(config));
	if (config.redirect.when != conf::RedirectWhen::never)
		log::info(redirect_text(engine_->redirect_policy()));
	log::debug("IKE: engine ready for " + std::to_string(table_peers_.size()) +
	           " peer(s); messages on the ESP port " + std::to_string(natt_port_) +
	           " come from the workers");
}

IkeService::~IkeService() = default;

void IkeService::start() {
	inbox_wait_.assign(dup_fd(inbox_.fd()));
	wait_inbox();
	if (ike_fd_) {
		ike_wait_.assign(dup_fd(ike_fd_.get()));
		wait_ike_socket();
	}
	engine_->start(ike::Clock::now());
	publish_spis();
	arm_timer();
}

void IkeService::shutdown() {
	engine_->shutdown();
	dns_.restore(); // the tun still exists; the destructor would do it too
	timer_.cancel();
	inbox_wait_.cancel();
	if (ike_wait_.is_open()) ike_wait_.cancel(); // not open with ike_port = 0
}

void IkeService::remove_peers(std::span<const std::string> names) {
	const ike::Clock::time_point now = ike::Clock::now();
	const std::vector<ike::PeerPolicy>& policies = engine_->peers();
	reload_removing_ = true;
	for (size_t i = 0; i < policies.size(); i++) {
		if (!table_peers_[i] || !engine_->peer_active(i) || policies[i].template_of) continue;
		if (std::find(names.begin(), names.end(), policies[i].name) == names.end()) continue;
		engine_->remove_peer(i, now); // a template's users first (instance_removed())
		table_peers_[i] = nullptr;
	}
	reload_removing_ = false;
	publish_spis();
}

std::vector<std::string> IkeService::instance_names(std::span<const std::string> names) const {
	std::vector<std::string> out;
	const std::vector<ike::PeerPolicy>& policies = engine_->peers();
	for (size_t i = 0; i < policies.size(); i++) {
		const ike::PeerPolicy& p = policies[i];
		if (!p.template_of || !engine_->peer_active(i) || !table_peers_[i]) continue;
		if (std::find(names.begin(), names.end(), policies[*p.template_of].name) != names.end())
			out.push_back(table_peers_[i]->name);
	}
	return out;
}

size_t IkeService::update_users(const conf::Config& config, std::span<const std::string> names) {
	const ike::Clock::time_point now = ike::Clock::now();
	size_t ended = 0;
	for (const std::string& name : names) {
		const auto p = std::find_if(config.peers.begin(), config.peers.end(),
		                            [&](const conf::PeerConfig& c) { return c.name == name; });
		if (p == config.peers.end() || !p->ike) continue;
		const std::vector<ike::PeerPolicy>& policies = engine_->peers();
		for (size_t i = 0; i < policies.size(); i++)
			if (engine_->peer_active(i) && policies[i].is_template() &&
			    policies[i].name == name) {
				ended += engine_->update_users(i, p->ike->users, now);
				break;
			}
	}
	publish_spis();
	return ended;
}

std::string IkeService::set_redirect(const conf::Config& config) {
	engine_->set_redirect(redirect_policy(config));
	// Not logged here: the reload logs its outcome, which says this.
	return redirect_text(engine_->redirect_policy());
}

bool IkeService::instance_added(size_t instance) {
	// A template's user: a peer of its own in the SA table, so its CHILD_SAs,
	// lease, endpoint and counters are its own. Its fixed addresses and
	// networks (allowed_ips) come from the users file; an address from the
	// pool routes through the pool. Index slots are reused by the engine.
	const ike::PeerPolicy& pol = engine_->peers()[instance];
	try {
		if (!pol.template_of || *pol.template_of >= table_peers_.size())
			throw std::logic_error("not an instance of a known template");
		if (instance >= table_peers_.size()) {
			table_peers_.resize(instance + 1, nullptr);
			replay_windows_.resize(instance + 1, 0);
		}
		tunnel::PeerParams params;
		params.name = pol.name;
		params.allowed_ips = pol.allowed_ips;
		params.keyed_statically = false;
		params.impl = crypto_impl_;
		tunnel::PeerChange change = table_.prepare_peers({}, {params});
		tunnel::Peer* peer = change.added().front();
		table_.commit_peers(std::move(change));
		table_peers_[instance] = peer;
		replay_windows_[instance] = replay_windows_[*pol.template_of];
		return true;
	} catch (const std::exception& e) {
		log::error("peer " + pol.name + ": cannot add it to the SA table: " + e.what());
		return false;
	}
}

void IkeService::instance_removed(size_t instance) {
	if (instance >= table_peers_.size() || !table_peers_[instance]) return;
	tunnel::Peer* peer = table_peers_[instance];
	table_peers_[instance] = nullptr;
	if (reload_removing_) return; // the reload's own change removes it from the table
	try {
		const std::string going[1] = {peer->name};
		table_.commit_peers(table_.prepare_peers(going, {}));
	} catch (const std::exception& e) {
		log::error("peer " + peer->name + ": cannot remove it from the SA table: " + e.what());
	}
}

void IkeService::add_peers(const conf::Config& config, std::span<const std::string> names) {
	const ike::Clock::time_point now = ike::Clock::now();
	std::vector<ike::PeerPolicy> policies = ike_policies(config, hostname_);
	for (ike::PeerPolicy& pol : policies) {
		if (std::find(names.begin(), names.end(), pol.name) == names.end()) continue;
		tunnel::Peer* peer = table_.find_peer(pol.name);
		if (!peer) throw std::logic_error("IKE peer " + pol.name + " is not in the SA table");
		const auto conf_peer =
		    std::find_if(config.peers.begin(), config.peers.end(),
		                 [&](const conf::PeerConfig& p) { return p.name == pol.name; });
		// Its index is the next one: the host's tables are ready before
		// the engine may call back (it initiates at once).
		table_peers_.push_back(peer);
		replay_windows_.push_back(conf_peer->replay_window);
		size_t index = 0;
		try {
			index = engine_->add_peer(std::move(pol), now);
		} catch (...) {
			table_peers_.pop_back();
			replay_windows_.pop_back();
			throw;
		}
		if (index != table_peers_.size() - 1)
			throw std::logic_error("IKE engine gave peer " + peer->name + " an unexpected index");
	}
	publish_spis();
}

void IkeService::wait_inbox() {
	inbox_wait_.async_wait(asio::posix::stream_descriptor::wait_read, [this](asio::error_code ec) {
		if (ec) return;
		// One bounded batch per wake-up (IkeInbox::kDrainBatch). When more is
		// queued the inbox signals its eventfd again, so this handler runs
		// again only after the timers and sockets already due: a flood on
		// port 4500 cannot stall DPD, retransmissions or the sequence-number
		// refresh (issue 16, item 4).
		inbox_.drain([this](std::span<const uint8_t> msg, const Endpoint& from) {
			engine_->receive(ike::Port::natt, from, msg, ike::Clock::now());
		});
		publish_spis();
		wait_inbox();
	});
}

void IkeService::wait_ike_socket() {
	ike_wait_.async_wait(asio::posix::stream_descriptor::wait_read, [this](asio::error_code ec) {
		if (ec) return;
		// A bounded number per wake-up, as for the inbox, so a flood cannot
		// starve the rest of the loop; the socket stays readable for the rest.
		std::array<uint8_t, datapath::IkeInbox::kMaxMessage> buf;
		for (size_t i = 0; i < datapath::IkeInbox::kDrainBatch; i++) {
			sockaddr_storage ss{};
			socklen_t len = sizeof ss;
			const ssize_t n = ::recvfrom(ike_fd_.get(), buf.data(), buf.size(), MSG_TRUNC,
			                             reinterpret_cast<sockaddr*>(&ss), &len);
			if (n < 0) break;
			std::optional<Endpoint> from = platform::from_sockaddr(ss, len);
			if (!from || size_t(n) > buf.size()) continue; // too big for any IKE message we take
			engine_->receive(ike::Port::ike, *from,
			                 std::span<const uint8_t>(buf.data(), size_t(n)), ike::Clock::now());
		}
		publish_spis();
		wait_ike_socket();
	});
}

void IkeService::arm_timer() {
	timer_.expires_after(kTick);
	timer_.async_wait([this](asio::error_code ec) {
		if (ec) return;
		engine_->tick(ike::Clock::now());
		publish_spis();
		arm_timer();
	});
}

/*
 * publish_spis() - tells the workers' inbox the SPIs of our IKE SAs, after
 * anything that may have made or removed one (a received message, a tick).
 * Only a changed set is published, so the workers' lock is taken rarely.
 */
void IkeService::publish_spis() {
	// Unchanged set: nothing to walk. With thousands of IKE SAs the walk
	// after every message was most of an IKE_SA_INIT's cost.
	if (engine_->sas_version() == published_version_) return;
	published_version_ = engine_->sas_version();
	engine_->our_spis(spis_now_);
	if (spis_now_ == published_spis_) return;
	published_spis_ = spis_now_;
	inbox_.publish_spis(spis_now_);
}

void IkeService::send(ike::Port via, const Endpoint& to, std::span<const uint8_t> msg) {
	std::array<uint8_t, datapath::IkeInbox::kMaxMessage + kMarkerLen> buf{};
	size_t len = 0;
	int fd = natt_fd_, family = natt_family_;
	if (via == ike::Port::natt || !ike_fd_) {
		if (msg.size() > datapath::IkeInbox::kMaxMessage) return;
		std::copy(msg.begin(), msg.end(), buf.begin() + kMarkerLen); // marker: the zeros in front
		len = msg.size() + kMarkerLen;
	} else {
		if (msg.size() > buf.size()) return;
		std::copy(msg.begin(), msg.end(), buf.begin());
		len = msg.size();
		fd = ike_fd_.get();
		family = ike_family_;
	}
	sockaddr_storage ss{};
	const socklen_t slen = platform::to_sockaddr(to, family, ss);
	if (slen == 0 ||
	    ::sendto(fd, buf.data(), len, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&ss), slen) < 0)
		send_errors_++; // the engine retransmits requests; a lost answer is asked for again
}

void IkeService::peer_moved(size_t peer, const Endpoint& to) {
	tunnel::Peer& p = *table_peers_[peer];
	if (p.endpoint() == to) return; // ESP already followed it
	p.set_endpoint(to);
	log::info("peer " + p.name + ": moved to " + to_string(to) + " (authenticated IKE message)");
}

void IkeService::child_selectors(size_t peer, std::span<const ike::TrafficSelector> remote) {
	// The client routes what the gateway agreed to carry (RFC 7296 section
	// 2.9: it may narrow our allowed_ips). A /0 stays with route_all, which
	// keeps sending everything into the tunnel even when the gateway
	// narrows: a VPN that is told to carry all traffic must not start
	// leaking the rest in the clear.
	if (!client_) return;
	std::vector<IpPrefix> offered;
	for (const ike::TrafficSelector& ts : remote)
		for (const IpPrefix& p : ike::selector_prefixes(ts))
			if (std::find(offered.begin(), offered.end(), p) == offered.end())
				offered.push_back(p);
	std::vector<IpPrefix> want = tun_routes(client_->tun_addresses, offered);
	const std::string name = table_peers_[peer]->name;
	const bool everything =
	    std::any_of(offered.begin(), offered.end(), [](const IpPrefix& p) { return p.len == 0; });
	if (client_->route_all && !everything)
		log::warn("peer " + name +
		          ": the gateway narrowed the traffic selectors, but route_all keeps sending "
		          "all traffic into the tunnel; it drops what lies outside them");
	for (const IpPrefix& p : routed_)
		if (std::find(want.begin(), want.end(), p) == want.end()) {
			try {
				platform::del_route(p, tun_ifindex_);
			} catch (const std::exception& e) {
				log::warn("peer " + name + ": cannot remove the route to " + to_string(p) +
				          ": " + e.what());
			}
		}
	std::string added;
	for (const IpPrefix& p : want)
		if (std::find(routed_.begin(), routed_.end(), p) == routed_.end()) {
			try {
				platform::add_route(p, tun_ifindex_);
				added += " " + to_string(p);
			} catch (const std::exception& e) {
				log::error("peer " + name + ": cannot route " + to_string(p) +
				           " through the tunnel: " + e.what());
			}
		}
	if (want != routed_) {
		std::string list;
		for (const IpPrefix& p : want)
			list += " " + to_string(p);
		log::info("peer " + name + ": routes through the tunnel now follow the negotiated " +
		          "selectors:" + (list.empty() ? " (none)" : list));
	}
	routed_ = std::move(want);
}

std::optional<IpAddress> IkeService::lease_address(size_t peer, Family family) {
	tunnel::Peer& p = *table_peers_[peer];
	const std::vector<IpAddress> before = table_.address_pool().leases(p);
	std::optional<IpAddress> a = table_.address_pool().lease(p, family);
	if (a && std::find(before.begin(), before.end(), *a) == before.end())
		log::info("peer " + p.name + ": leased " + to_string(*a) + " from the address pool");
	return a;
}

void IkeService::release_addresses(size_t peer) {
	tunnel::Peer& p = *table_peers_[peer];
	std::string list;
	for (const IpAddress& a : table_.address_pool().leases(p))
		list += " " + to_string(a);
	table_.address_pool().release(p);
	if (!list.empty()) log::info("peer " + p.name + ": address pool lease ended:" + list);
}

void IkeService::send_keepalive(const Endpoint& to) {
	const uint8_t ff = 0xff;
	sockaddr_storage ss{};
	const socklen_t slen = platform::to_sockaddr(to, natt_family_, ss);
	if (slen == 0 ||
	    ::sendto(natt_fd_, &ff, 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&ss), slen) < 0)
		send_errors_++;
}

std::optional<Endpoint> IkeService::local_endpoint(ike::Port via, const Endpoint& to) {
	Endpoint local;
	local.port = via == ike::Port::ike && ike_fd_ ? ike_port_ : natt_port_;
	if (listen_addr_) {
		local.addr = *listen_addr_;
		return local;
	}
	// The source address the kernel would pick for @to: connect a scratch
	// UDP socket (no packet is sent) and ask it.
	const int family = to.addr.family == Family::v6 ? AF_INET6 : AF_INET;
	platform::UniqueFd fd(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	if (!fd) return std::nullopt;
	sockaddr_storage ss{};
	const socklen_t len = platform::to_sockaddr(to, family, ss);
	if (len == 0 || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0)
		return std::nullopt;
	std::optional<Endpoint> bound = bound_endpoint(fd.get());
	if (!bound) return std::nullopt;
	local.addr = bound->addr;
	return local;
}

// The engine refuses the exchange (and logs it, rate-limited) when this is nullopt.
std::optional<uint32_t> IkeService::allocate_spi() { return table_.try_allocate_spi(); }

void IkeService::release_spi(uint32_t spi) { table_.release_spi(spi); }

bool IkeService::install_child(size_t peer, const ike::ChildKeys& keys, bool replace_out) {
	tunnel::Peer& p = *table_peers_[peer];
	// Inbound packets must be addressed to our side of the CHILD_SA.
	std::vector<tunnel::AddressRange> local;
	for (const ike::TrafficSelector& ts : keys.local_ts)
		local.push_back({ts.start, ts.end});
	tunnel::ChildSaKeys in{keys.spi_in, keys.cipher,           keys.enc_in,     keys.auth_in,
	                       keys.esn,    replay_windows_[peer], std::move(local)};
	tunnel::ChildSaKeys out{keys.spi_out, keys.cipher, keys.enc_out, keys.auth_out, keys.esn, 0, {}};
	// Called from inside the engine: nothing may escape into io.run(). A
	// half-done install is undone, so the engine's refusal leaves no slot taken.
	bool inbound = false;
	try {
		table_.install_inbound(p, in);
		inbound = true;
		p.set_endpoint(keys.remote);
		if (replace_out)
			table_.install_outbound(p, out);
		else
			pending_out_[keys.spi_in] = std::move(out);
		return true;
	} catch (const std::exception& e) {
		log::error("peer " + p.name + ": cannot install the CHILD_SA: " + e.what());
	}
	try {
		pending_out_.erase(keys.spi_in);
		if (inbound)
			table_.remove_inbound(keys.spi_in);
		else
			table_.release_spi(keys.spi_in);
	} catch (const std::exception& e) {
		log::error("peer " + p.name + ": cannot undo the failed CHILD_SA install: " + e.what());
	}
	return false;
}

void IkeService::switch_outbound(size_t peer, uint32_t spi_in) {
	auto it = pending_out_.find(spi_in);
	if (it == pending_out_.end()) return;
	try {
		table_.install_outbound(*table_peers_[peer], it->second);
	} catch (const std::exception& e) {
		log::error("peer " + table_peers_[peer]->name +
		           ": cannot switch to the rekeyed CHILD_SA: " + e.what());
	}
	pending_out_.erase(it);
}

std::optional<ike::ChildUsage> IkeService::child_usage(size_t peer, uint32_t spi_in, uint32_t spi_out) {
	// The SA table's own counters: the outbound half only while it is the
	// one the peer's packets are sent with (else it sends nothing).
	const tunnel::PeerSaInfo info = table_.sa_info(*table_peers_[peer]);
	ike::ChildUsage u;
	bool found = false;
	if (info.out && info.out->spi == spi_out) {
		u.out_bytes = info.out->bytes;
		u.out_packets = info.out->packets;
		u.out_seq = info.out->seq;
		found = true;
	}
	for (const tunnel::SaInfo& in : info.in)
		if (in.spi == spi_in) {
			u.in_bytes = in.bytes;
			u.in_packets = in.packets;
			u.in_seq = in.seq;
			found = true;
		}
	if (!found) return std::nullopt;
	return u;
}

void IkeService::remove_child(size_t peer, uint32_t spi_in, uint32_t spi_out) {
	tunnel::Peer& p = *table_peers_[peer];
	pending_out_.erase(spi_in);
	table_.remove_inbound(spi_in);
	if (const tunnel::OutboundSa* out = p.outbound(); out && out->spi == spi_out)
		table_.remove_outbound(p);
}

std::optional<ike::Clock::time_point> IkeService::last_esp_rx(size_t peer) {
	const int64_t last_ms = table_peers_[peer]->last_rx_unix_ms.load(std::memory_order_relaxed);
	if (last_ms == 0) return std::nullopt;
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	const int64_t now_ms = int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
	return ike::Clock::now() - std::chrono::milliseconds(std::max<int64_t>(0, now_ms - last_ms));
}

void IkeService::log(const std::string& line) { log::info(line); }

void IkeService::log_at(ike::LogLevel level, const std::string& line) {
	switch (level) {
	case ike::LogLevel::error:
		return log::error(line);
	case ike::LogLevel::warning:
		return log::warn(line);
	case ike::LogLevel::info:
		return log::info(line);
	case ike::LogLevel::debug:
		return log::debug(line);
	}
}

bool IkeService::debug_enabled() const { return log::enabled(log::Level::debug); }

void IkeService::assigned(size_t peer, std::span<const IpAddress> addresses, std::span<const IpAddress> dns) {
	// The tun takes the virtual addresses as host addresses; the routes for
	// the peer's allowed_ips are in place since start-up. A new IKE SA may
	// bring other addresses: the old ones go.
	for (const IpPrefix& old : virtual_addresses_)
		if (std::find(addresses.begin(), addresses.end(), old.addr) == addresses.end()) {
			try {
				platform::del_address(tun_ifindex_, old);
			} catch (const std::exception& e) {
				log::warn(std::string("cannot remove the old virtual address: ") + e.what());
			}
		}
	std::vector<IpPrefix> now;
	for (const IpAddress& a : addresses) {
		const IpPrefix p{a, uint8_t(a.max_prefix())};
		if (std::find(virtual_addresses_.begin(), virtual_addresses_.end(), p) !=
		    virtual_addresses_.end()) {
			now.push_back(p);
			continue;
		}
		try {
			platform::add_address(tun_ifindex_, p);
			now.push_back(p); // only what the tun took: route_all routes by it
		} catch (const std::exception& e) {
			log::error("peer " + table_peers_[peer]->name + ": cannot add the virtual address " +
			           to_string(a) + ": " + e.what());
		}
	}
	virtual_addresses_ = std::move(now);
	// route_all: a family with an address now goes into the tunnel, one
	// without is blocked, so it cannot leave in the clear by the underlay's
	// default route (issue 16, item 7).
	if (full_tunnel_) full_tunnel_->set_addresses(virtual_addresses_);
	// A new IKE SA without DNS servers takes back the earlier ones. With
	// route_all every query goes to them (a catch-all routing domain).
	const bool catch_all = client_ && client_->route_all;
	dns_applied_ = dns_.apply(platform::link_name(tun_ifindex_), dns, catch_all);
}

Json IkeService::status_json() const {
	const ike::IkeCounters& c = engine_->counters();
	Json j = Json::object();
	j["port"] = unsigned(ike_port_);
	if (!dns_applied_.empty()) j["dns_applied"] = dns_applied_;
	j["counters"] = Json{{"received", c.received},
	                     {"sent", c.sent},
	                     {"malformed", c.malformed},
	                     {"unknown_sa", c.unknown_sa},
	                     {"bad_icv", c.bad_icv},
	                     {"auth_failed", c.auth_failed},
	                     {"no_proposal", c.no_proposal},
	                     {"cookies_sent", c.cookies_sent},
	                     {"retransmits", c.retransmits},
	                     {"half_open_dropped", c.half_open_dropped},
	                     {"half_open_source_dropped", c.half_open_source_dropped},
	                     {"half_open_evicted", c.half_open_evicted},
	                     {"cookies_rejected", c.cookies_rejected},
	                     {"groups_steered", c.groups_steered},
	                     {"init_errors_ignored", c.init_errors_ignored},
	                     {"fragments_sent", c.fragments_sent},
	                     {"fragments_received", c.fragments_received},
	                     {"fragments_dropped", c.fragments_dropped},
	                     {"reassembly_abandoned", c.reassembly_abandoned},
	                     {"logs_suppressed", c.logs_suppressed},
	                     {"sa_refused", c.sa_refused},
	                     {"internal_errors", c.internal_errors},
	                     {"redirects_sent", c.redirects_sent},
	                     {"redirects_established", c.redirects_established},
	                     {"redirects_followed", c.redirects_followed},
	                     {"redirects_ignored", c.redirects_ignored},
	                     {"inbox_dropped", inbox_.dropped()},
	                     {"inbox_dropped_known", inbox_.dropped_known()},
	                     {"inbox_dropped_stranger", inbox_.dropped_stranger()},
	                     {"inbox_dropped_source", inbox_.dropped_source()},
	                     {"inbox_too_big", inbox_.too_big()},
	                     {"inbox_too_short", inbox_.too_short()},
	                     {"send_errors", send_errors_}};
	// The policy in effect, with only the numbers its `when` uses.
	const ike::RedirectPolicy& r = engine_->redirect_policy();
	Json& redirect = j["redirect"] = Json{{"when", std::string(ike::redirect_when_name(r.when))}};
	Json& to = redirect["to"] = Json::array();
	for (const ike::RedirectTarget& t : r.to)
		to.push_back(ike::redirect_target_text(t));
	if (r.when == ike::RedirectPolicy::When::capacity) redirect["capacity"] = uint64_t(r.capacity);
	if (r.when == ike::RedirectPolicy::When::share) redirect["share"] = r.share_percent;
	if (r.when == ike::RedirectPolicy::When::all) redirect["move_rate"] = r.move_rate;
	Json& pool = j["address_pool"] = Json::array();
	for (const tunnel::AddressPool::Usage& u : table_.address_pool().usage())
		pool.push_back(Json{{"prefix", to_string(u.prefix)},
		                    {"usable", uint64_t(u.usable)},
		                    {"leased", uint64_t(u.leased)}});
	auto hex = [](uint64_t v, int digits) {
		char buf[24];
		std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
		return std::string(buf);
	};
	Json& sas = j["sas"] = Json::array();
	for (const ike::IkeSaStatus& s : engine_->status(ike::Clock::now())) {
		Json sa = Json{{"peer", s.peer},
		               {"state", s.state},
		               {"initiator", s.initiator},
		               {"spi_i", hex(s.spi_i, 16)},
		               {"spi_r", hex(s.spi_r, 16)},
		               {"suite", s.suite},
		               {"remote", s.remote},
		               {"age_s", s.age_s},
		               {"child_rekeys", s.child_rekeys},
		               {"ike_rekeys", s.ike_rekeys},
		               {"behind_nat", s.behind_nat},
		               {"rekey_in_s", s.rekey_in_s},
		               {"virtual_ips", s.virtual_ips},
		               {"dns", s.dns}};
		// How the peer proved itself: "psk", or its key and signature scheme
		// with its certificate's subject and issuer; absent before IKE_AUTH.
		if (!s.peer_auth.empty()) sa["peer_auth"] = s.peer_auth;
		if (!s.eap_identity.empty()) sa["eap_identity"] = s.eap_identity;
		if (!s.peer_subject.empty()) {
			sa["peer_subject"] = s.peer_subject;
			sa["peer_issuer"] = s.peer_issuer;
		}
		Json& children = sa["children"] = Json::array();
		for (const ike::ChildStatus& ch : s.children) {
			Json child = Json::object();
			child["spi_in"] = hex(ch.spi_in, 8);
			child["spi_out"] = hex(ch.spi_out, 8);
			child["cipher"] = ch.cipher;
			if (!ch.pfs.empty()) child["pfs"] = ch.pfs;
			child["esn"] = ch.esn;
			child["age_s"] = ch.age_s;
			child["sending"] = ch.sending;
			child["rekey_in_s"] = ch.rekey_in_s;
			child["local_ts"] = ch.local_ts;
			child["remote_ts"] = ch.remote_ts;
			children.push_back(std::move(child));
		}
		sas.push_back(std::move(sa));
	}
	return j;
}

} // namespace esptun::service
