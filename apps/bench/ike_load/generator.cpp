// The ike-load generator: one ike::Engine and one UDP socket per client, all
// in one epoll loop. A client is started by Engine::start() (its only peer
// has initiate = true), is done when the engine installs its first CHILD_SA,
// and fails when that has not happened within the plan's client_timeout.
#include "apps/bench/ike_load/generator.hpp"

#include "apps/bench/lab/process.hpp"
#include "base/error.hpp"
#include "ike/engine.hpp"
#include "ike/keymat.hpp"
#include "ike/proposal.hpp"
#include "platform/sockaddr.hpp"
#include "platform/unique_fd.hpp"
#include "service/json_io.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <set>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace esptun::bench::ike_load {
namespace {

using ike::Clock;
constexpr size_t kMarkerLen = 4;               // RFC 3948: IKE on the NAT-T port
constexpr size_t kMaxDatagram = 65536;         // larger ones are not IKE messages we take
constexpr std::chrono::milliseconds kTick{50}; // retransmissions of the clients in flight
constexpr size_t kReadsPerWakeup = 8;          // per socket and epoll event
constexpr size_t kFailuresKept = 5;

double ms_between(Clock::time_point a, Clock::time_point b) {
	return std::chrono::duration<double, std::milli>(b - a).count();
}

/// One initiator: the engine's host, its socket and its timeline.
class Client final : public ike::Host {
public:
	Client(size_t index, const LoadPlan& plan) : index_(index) {
		const IpAddress& src = plan.sources[index % plan.sources.size()];
		const int family = src.family == Family::v4 ? AF_INET : AF_INET6;
		fd_ = platform::UniqueFd(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
		if (!fd_) throw_errno("socket");
		sockaddr_storage ss{};
		socklen_t len = platform::to_sockaddr(Endpoint{src, 0}, family, ss);
		if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&ss), len) < 0)
			throw_errno("bind", to_string(src));
		len = sizeof ss;
		if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) < 0)
			throw_errno("getsockname");
		local_ = platform::from_sockaddr(ss, len).value_or(Endpoint{src, 0});
		family_ = family;
		std::array<uint8_t, 4> r{};
		ike::random_bytes(r);
		next_spi_ =
		    (uint32_t(r[0]) << 24 | uint32_t(r[1]) << 16 | uint32_t(r[2]) << 8 | r[3]) | 0x100;

		ike::PeerPolicy pol;
		pol.name = "gateway";
		if (plan.credentials.empty()) {
			pol.psk = secret_copy(plan.psks[index]);
			pol.local_ts = {IpPrefix{client_inner(index), 32}};
		} else {
			pol.credentials = plan.credentials[index];
			pol.trust = plan.trust;
			pol.request_address = true; // our side: the address it is given
		}
		pol.local_id = *ike::parse_identity(client_id(index));
		pol.remote_id = *ike::parse_identity(plan.responder_id);
		std::string error;
		auto ike_suite = ike::parse_ike_proposal(plan.ike_proposal, error, false);
		auto esp_suite = ike::parse_esp_proposal(plan.esp_proposal, error, false);
		if (!ike_suite || !esp_suite) throw std::invalid_argument("proposal: " + error);
		pol.ike_proposals = {*ike_suite};
		pol.esp_proposals = {*esp_suite};
		pol.allowed_ips = {*parse_prefix(kResponderNet)};
		pol.endpoint = plan.responder;
		pol.initiate = true;
		pol.dpd_interval_s = 0; // nothing of our own after the handshake
		pol.child_rekey_s = 0;
		pol.ike_rekey_s = 0;
		policy_ = pol;
		std::vector<ike::PeerPolicy> peers;
		peers.push_back(std::move(pol));
		engine_ = std::make_unique<ike::Engine>(std::move(peers), *this);
	}

	/// restart() - forget the IKE SA (as a client does whose gateway went
	/// away) and start a new one from the same socket
	void restart(Clock::time_point now) {
		engine_.reset();
		done_at_.reset();
		address_.reset();
		last_line_.clear();
		std::vector<ike::PeerPolicy> peers{policy_};
		engine_ = std::make_unique<ike::Engine>(std::move(peers), *this);
		engine_->start(now);
	}

	int fd() const noexcept { return fd_.get(); }
	size_t index() const noexcept { return index_; }
	ike::Engine& engine() noexcept { return *engine_; }
	bool done() const noexcept { return done_at_.has_value(); }
	Clock::time_point done_at() const noexcept { return *done_at_; }
	Clock::time_point started = {};
	const std::string& last_line() const noexcept { return last_line_; }
	uint64_t sent = 0;

	void send(ike::Port via, const Endpoint& to, std::span<const uint8_t> msg) override {
		std::array<uint8_t, kMaxDatagram + kMarkerLen> buf; // filled below: no need to clear 64 KiB
		const size_t off = via == ike::Port::natt ? kMarkerLen : 0;
		std::fill_n(buf.begin(), off, uint8_t(0));
		if (msg.size() + off > buf.size()) return;
		std::copy(msg.begin(), msg.end(), buf.begin() + off);
		sockaddr_storage ss{};
		const socklen_t len = platform::to_sockaddr(to, family_, ss);
		if (len && ::sendto(fd_.get(), buf.data(), msg.size() + off, MSG_DONTWAIT,
		                    reinterpret_cast<sockaddr*>(&ss), len) >= 0)
			sent++; // a lost one is retransmitted by the engine
	}
	std::optional<Endpoint> local_endpoint(ike::Port, const Endpoint&) override { return local_; }
	std::optional<uint32_t> allocate_spi() override { return next_spi_++; }
	void release_spi(uint32_t) override {}
	bool install_child(size_t, const ike::ChildKeys&, bool) override {
		if (!done_at_) done_at_ = Clock::now();
		return true;
	}
	void switch_outbound(size_t, uint32_t) override {}
	void assigned(size_t, std::span<const IpAddress> addresses, std::span<const IpAddress>) override {
		if (!addresses.empty()) address_ = addresses.front();
	}
	/// The virtual address the responder gave it (certificate clients).
	const std::optional<IpAddress>& address() const noexcept { return address_; }
	void remove_child(size_t, uint32_t, uint32_t) override {}
	std::optional<Clock::time_point> last_esp_rx(size_t) override { return std::nullopt; }
	void log(const std::string& line) override { last_line_ = line; }

private:
	size_t index_;
	platform::UniqueFd fd_;
	int family_ = AF_INET;
	Endpoint local_;
	uint32_t next_spi_ = 0;
	std::optional<Clock::time_point> done_at_;
	std::optional<IpAddress> address_;
	std::string last_line_;
	ike::PeerPolicy policy_;              // for restart()
	std::unique_ptr<ike::Engine> engine_; // last: destroyed first, while its host still stands
};

/// raise_fd_limit() - room for one socket per client (root may raise the hard limit)
void raise_fd_limit(size_t clients) {
	rlimit rl{};
	if (::getrlimit(RLIMIT_NOFILE, &rl) < 0) throw_errno("getrlimit");
	const rlim_t want = rlim_t(clients) + 64;
	if (rl.rlim_cur >= want) return;
	rl.rlim_cur = want;
	if (rl.rlim_max < want) rl.rlim_max = want;
	if (::setrlimit(RLIMIT_NOFILE, &rl) < 0)
		throw_errno("setrlimit(RLIMIT_NOFILE) to " + std::to_string(want));
}

double cpu_seconds_self() {
	rusage ru{};
	::getrusage(RUSAGE_SELF, &ru);
	return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

} // namespace

std::string client_id(size_t i) { return "c" + std::to_string(i) + ".load"; }

IpAddress client_inner(size_t i) {
	if (i >= kMaxClients) throw std::out_of_range("client index " + std::to_string(i));
	// 10.64.0.1 onwards; the /16s after 10.64 hold the rest (100,000 < 4 * 65,536).
	return IpAddress::v4((uint32_t(10) << 24 | uint32_t(64) << 16) + uint32_t(i) + 1);
}

namespace {

/// The clients and the loop that drives them, phase after phase.
class Generator {
public:
	explicit Generator(const LoadPlan& plan) : plan_(plan), clients_(plan.clients()) {
		raise_fd_limit(plan.clients());
		ep_ = platform::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
		if (!ep_) throw_errno("epoll_create1");
	}

	/**
	 * phase() - start the clients @todo (at most @concurrency in flight)
	 * and drive them until each is established or has failed
	 * @fresh: create each client (first phase); else the client restarts
	 *         its engine on its own socket (a reconnection)
	 */
	LoadResult phase(const std::vector<size_t>& todo, size_t concurrency, bool fresh) {
		LoadResult r;
		flight_.clear();
		size_t next = 0;
		const double cpu0 = cpu_seconds_self();
		const uint64_t in0 = datagrams_in_;
		Clock::time_point first_start{}, last_done{}, next_tick = Clock::now();
		std::set<std::string> addresses; // distinct virtual addresses
		while (r.established + r.failed < todo.size()) {
			lab::throw_if_stopped();
			while (flight_.size() < concurrency && next < todo.size()) {
				const size_t i = todo[next];
				if (fresh) {
					auto c = std::make_unique<Client>(i, plan_);
					epoll_event ev{};
					ev.events = EPOLLIN;
					ev.data.u64 = i;
					if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c->fd(), &ev) < 0)
						throw_errno("epoll_ctl");
					clients_[i] = std::move(c);
				}
				Client& c = *clients_[i];
				c.started = Clock::now();
				if (next == 0) first_start = c.started;
				if (fresh)
					c.engine().start(c.started);
				else
					c.restart(c.started);
				flight_.push_back(i);
				next++;
			}
			poll_once();
			const Clock::time_point now = Clock::now();
			for (size_t pos = flight_.size(); pos-- > 0;) {
				Client& c = *clients_[flight_[pos]];
				if (c.done()) {
					r.established++;
					if (c.address()) addresses.insert(to_string(*c.address()));
					r.setup_ms.push_back(ms_between(c.started, c.done_at()));
					last_done = std::max(last_done, c.done_at());
				} else if (now - c.started > plan_.client_timeout) {
					r.failed++;
					if (r.failures.size() < kFailuresKept)
						r.failures.push_back(
						    client_id(c.index()) + ": " +
						    (c.last_line().empty() ? "no answer" : c.last_line()));
					sent_by_gone_ += c.sent;
					clients_[c.index()]
					    .reset(); // its socket closes: nothing more arrives for it
				} else {
					if (now >= next_tick) c.engine().tick(now);
					continue;
				}
				flight_[pos] = flight_.back();
				flight_.pop_back();
			}
			if (now >= next_tick) next_tick = now + kTick;
		}
		r.seconds =
		    r.established ? std::chrono::duration<double>(last_done - first_start).count() : 0;
		r.cpu_s = cpu_seconds_self() - cpu0;
		r.virtual_addresses = addresses.size();
		r.datagrams_in = datagrams_in_ - in0;
		r.datagrams_out = sent_total() - sent_before_;
		sent_before_ = sent_total();
		return r;
	}

	/// The clients that are established now.
	std::vector<size_t> established() const {
		std::vector<size_t> out;
		for (size_t i = 0; i < clients_.size(); i++)
			if (clients_[i] && clients_[i]->done()) out.push_back(i);
		return out;
	}

	/// poll_once() - one epoll wait: what arrived goes to the clients' engines
	void poll_once(std::chrono::milliseconds wait = kTick) {
		std::array<epoll_event, 64> evs;
		const int n = ::epoll_wait(ep_.get(), evs.data(), int(evs.size()), int(wait.count()));
		if (n < 0 && errno != EINTR) throw_errno("epoll_wait");
		for (int e = 0; e < n; e++) {
			Client* c = clients_[size_t(evs[size_t(e)].data.u64)].get();
			if (!c) continue;
			for (size_t k = 0; k < kReadsPerWakeup; k++) {
				sockaddr_storage ss{};
				socklen_t len = sizeof ss;
				const ssize_t got = ::recvfrom(c->fd(), buf_.data(), buf_.size(), MSG_TRUNC,
				                               reinterpret_cast<sockaddr*>(&ss), &len);
				if (got < 0) break;
				datagrams_in_++;
				std::optional<Endpoint> from = platform::from_sockaddr(ss, len);
				// IKE carries the zero marker; anything else (keepalives, ESP) is not ours to
				// read.
				if (!from || got <= ssize_t(kMarkerLen) || size_t(got) > buf_.size() ||
				    std::any_of(buf_.begin(), buf_.begin() + kMarkerLen,
				                [](uint8_t b) { return b; }))
					continue;
				c->engine().receive(ike::Port::natt, *from,
				                    std::span<const uint8_t>(buf_.data() + kMarkerLen,
				                                             size_t(got) - kMarkerLen),
				                    Clock::now());
			}
		}
	}

private:
	uint64_t sent_total() const {
		uint64_t n = sent_by_gone_;
		for (const auto& c : clients_)
			if (c) n += c->sent;
		return n;
	}

	const LoadPlan& plan_;
	platform::UniqueFd ep_;
	std::vector<std::unique_ptr<Client>> clients_;
	std::vector<size_t> flight_;
	uint64_t datagrams_in_ = 0, sent_by_gone_ = 0, sent_before_ = 0;
	std::array<uint8_t, kMaxDatagram> buf_;
};

/// wait_byte() - read one byte from @fd, answering the clients meanwhile
/// (a responder may still talk to them); throws when @fd closes
void wait_byte(int fd, Generator& g) {
	for (;;) {
		lab::throw_if_stopped();
		pollfd p{fd, POLLIN, 0};
		if (::poll(&p, 1, 0) > 0) {
			char b = 0;
			if (::read(fd, &b, 1) == 1) return;
			throw std::runtime_error("ike-load: the bench went away during the storm");
		}
		g.poll_once(std::chrono::milliseconds(20));
	}
}

} // namespace

LoadResult run_load(const LoadPlan& plan) {
	if (plan.clients() == 0 || plan.sources.empty() || plan.concurrency == 0)
		throw std::invalid_argument("ike-load: nothing to run");
	std::vector<size_t> all(plan.clients());
	for (size_t i = 0; i < all.size(); i++)
		all[i] = i;
	Generator g(plan);
	LoadResult r = g.phase(all, plan.concurrency, true);
	if (plan.storm_ready_fd < 0) return r;
	// The storm: tell the bench, which restarts the responder, and when it
	// says go, every established client starts over at once.
	const char one = 1;
	if (::write(plan.storm_ready_fd, &one, 1) != 1) throw_errno("ike-load: storm pipe");
	wait_byte(plan.storm_go_fd, g);
	const std::vector<size_t> back = g.established();
	r.storm = std::make_shared<LoadResult>(g.phase(back, back.size(), false));
	return r;
}

std::string to_json(const LoadResult& r) {
	service::Json j;
	j["established"] = r.established;
	j["failed"] = r.failed;
	j["seconds"] = r.seconds;
	j["setup_ms"] = r.setup_ms;
	j["failures"] = r.failures;
	j["cpu_s"] = r.cpu_s;
	j["virtual_addresses"] = r.virtual_addresses;
	j["datagrams_in"] = r.datagrams_in;
	j["datagrams_out"] = r.datagrams_out;
	if (r.storm) j["storm"] = service::parse_json(to_json(*r.storm));
	return j.dump();
}

LoadResult result_from_json(const std::string& text) {
	const service::Json j = service::parse_json(text);
	LoadResult r;
	r.established = j.at("established").get<size_t>();
	r.failed = j.at("failed").get<size_t>();
	r.seconds = j.at("seconds").get<double>();
	r.setup_ms = j.at("setup_ms").get<std::vector<double>>();
	r.failures = j.at("failures").get<std::vector<std::string>>();
	r.cpu_s = j.at("cpu_s").get<double>();
	r.virtual_addresses = j.at("virtual_addresses").get<size_t>();
	r.datagrams_in = j.at("datagrams_in").get<uint64_t>();
	r.datagrams_out = j.at("datagrams_out").get<uint64_t>();
	if (j.contains("storm"))
		r.storm = std::make_shared<LoadResult>(result_from_json(j.at("storm").dump()));
	return r;
}

} // namespace esptun::bench::ike_load
