// The comparison's subjects: how each tunnel is configured and started.
#include "apps/bench/compare/subjects.hpp"

#include "apps/bench/compare/keys.hpp"
#include "apps/bench/compare/subject_helpers.hpp"
#include "apps/bench/lab/charon.hpp"
#include "apps/bench/lab/ping.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "base/error.hpp"
#include "crypto/esp_transform.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sched.h>
#include <set>
#include <sstream>
#include <sys/utsname.h>
#include <unistd.h>

namespace esptun::bench::compare {

using namespace lab;
namespace {

using State = Availability::State;

Availability not_installed(const std::string& why) { return {State::not_installed, why}; }

/// exists() - true when @path exists
bool exists(const std::string& path) {
	std::error_code ec;
	return std::filesystem::exists(path, ec);
}

/// wait_for_file() - poll until @path exists; throws after @timeout
void wait_for_file(const std::string& path, Millis timeout, Subject& s) {
	auto deadline = Clock::now() + timeout;
	while (!exists(path)) {
		s.check_alive();
		if (Clock::now() > deadline)
			throw std::runtime_error(path + " did not appear within " +
			                         std::to_string(timeout.count()) + " ms");
		sleep_for(Millis(20));
	}
}

/// log_to() - in a child: stdout and stderr to @log, stdin from /dev/null
void log_to(const std::string& log) {
	int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0) throw_errno("open " + log);
	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null >= 0) dup2(null, STDIN_FILENO);
}

/// spawn_logged() - start @argv in @netns, stdin from /dev/null, output to @log
Child spawn_logged(const std::string& netns, const std::vector<std::string>& argv, const std::string& log) {
	return fork_in_netns(netns, [&] {
		log_to(log);
		exec_argv(argv, false, "");
		return 127;
	});
}

/// version_word() - lab::version_word() with the run's scratch folder
std::string version_word(const std::vector<std::string>& argv, const std::string& prefix,
                         const SubjectEnv& env) {
	return lab::version_word(argv, prefix, env.scratch);
}

// --- plain veth: the ceiling ------------------------------------------------

class VethSubject : public Subject {
public:
	VethSubject() : Subject("veth", "no tunnel") {}
	Availability availability(const SubjectEnv&) const override { return {}; }
	std::string version(const SubjectEnv&) const override { return kernel_version(); }
	std::string dst() const override { return kUnderB; }
	std::string src() const override { return kUnderA; }
	bool has_tunnel() const override { return false; }

protected:
	void bring_up(const SubjectEnv&) override {}
};

// --- esptun: two esptun-gateways with static SAs ------------------------------

class EsptunSubject : public Subject {
public:
	EsptunSubject(std::string mode, int net, uint16_t port)
	    : Subject("esptun-" + mode, std::string(kEspCipher) + ", tun_io " + mode), mode_(std::move(mode)),
	      net_(net), port_(port) {}
	/// A variant of esptun-@mode named esptun-@mode-@suffix whose [tunnel]
	/// also has @line ("key = value"), so one run measures what that setting
	/// changes; only when named in --peers. @tag: its interface name letter.
	static std::unique_ptr<EsptunSubject> variant(std::string mode, const std::string& suffix,
	                                              const std::string& line, char tag, int net,
	                                              uint16_t port) {
		auto s = std::unique_ptr<EsptunSubject>(new EsptunSubject(
		    "esptun-" + mode + "-" + suffix,
		    std::string(kEspCipher) + ", tun_io " + mode + ", " + line, mode, net, port));
		s->extra_line_ = line;
		s->iface_tag_ = tag;
		return s;
	}
	std::string family() const override { return extra_line_.empty() ? "esptun" : name(); }
	bool in_default_set() const override { return extra_line_.empty(); }
	std::string dst() const override { return "10.99." + std::to_string(net_) + ".2"; }
	std::string src() const override { return "10.99." + std::to_string(net_) + ".1"; }

	Availability availability(const SubjectEnv& env) const override {
		if (access(env.gateway.c_str(), X_OK) != 0)
			return not_installed(env.gateway + " not found (build esptun-gateway)");
		if (mode_ == "vhost") {
			int fd = open("/dev/vhost-net", O_RDWR | O_CLOEXEC);
			if (fd < 0)
				return {State::skipped,
				        std::string("cannot open /dev/vhost-net: ") + std::strerror(errno)};
			close(fd);
		}
		return {};
	}
	/// version() - what `esptun-gateway --version` says ("0.1.0")
	std::string version(const SubjectEnv& env) const override {
		return version_word({env.gateway, "--version"}, "esptun-gateway ", env);
	}
	std::string program(const SubjectEnv& env) const override { return env.gateway; }

protected:
	void bring_up(const SubjectEnv& env) override {
		const crypto::CipherSpec* spec = crypto::find_cipher(kEspCipher);
		if (!spec) throw std::runtime_error(std::string("esptun has no cipher ") + kEspCipher);
		SaKeys ab = make_sa_keys(*spec), ba = make_sa_keys(*spec, ab.spi);
		const lab::NetnsPair& t = *env.topo;
		const std::string net = "10.99." + std::to_string(net_) + ".";
		struct Side {
			const std::string& ns;
			char tag;
			const char* under;
			const char* peer_under;
			const SaKeys &out, &in;
		} sides[] = {{t.a(), 'a', kUnderA, kUnderB, ab, ba}, {t.b(), 'b', kUnderB, kUnderA, ba, ab}};
		for (const Side& s : sides) {
			const std::string base = env.scratch + "/" + name() + "-" + s.tag;
			const char peer = s.tag == 'a' ? 'b' : 'a';
			std::ostringstream c;
			c << "# esptun-bench compare: " << name() << ", side " << s.tag << " (random keys)\n"
			  << "[tunnel]\n"
			  << "interface = \"ce" << (iface_tag_ ? iface_tag_ : mode_[0]) << env.run_id << s.tag
			  << "\"\n"
			  << "addresses = [\"" << net << (s.tag == 'a' ? 1 : 2) << "/24\"]\n"
			  << "listen = \"0.0.0.0:" << port_ << "\"\n"
			  << "mtu = 0\n"
			  << "tun_io = \"" << mode_ << "\"\n"
			  << (extra_line_.empty() ? "" : extra_line_ + "\n") << "control_socket = \"" << base
			  << ".sock\"\n"
			  // Sequence state in the run's scratch folder, removed with it.
			  << "state_dir = \"" << base << ".state\"\n\n"
			  << "[[peer]]\n"
			  << "name = \"side-" << peer << "\"\n"
			  << "endpoint = \"" << s.peer_under << ":" << port_ << "\"\n"
			  << "allowed_ips = [\"" << net << (s.tag == 'a' ? 2 : 1) << "/32\"]\n"
			  << "cipher = \"" << kEspCipher << "\"\n"
			  << "esn = true\n"
			  << "replay_window = 1024\n";
			for (const auto& [dir, sa] : {std::pair{"out", &s.out}, std::pair{"in", &s.in}}) {
				char spi[16];
				std::snprintf(spi, sizeof spi, "0x%08x", sa->spi);
				c << "  [peer." << dir << "]\n  spi = " << spi << "\n  key = \""
				  << hex0x(sa->enc_key) << "\"\n";
			}
			write_private_file(base + ".toml", c.str());
			keep(spawn_logged(s.ns, {env.gateway, "run", "-c", base + ".toml"}, base + ".log"),
			     base + ".log");
		}
	}

private:
	EsptunSubject(std::string name, std::string what, std::string mode, int net, uint16_t port)
	    : Subject(std::move(name), std::move(what)), mode_(std::move(mode)), net_(net), port_(port) {}

	std::string mode_;
	int net_;
	uint16_t port_;
	std::string extra_line_; ///< a variant's own [tunnel] setting; empty: the defaults
	char iface_tag_ = 0;     ///< interface name letter instead of the mode's first
};

// --- wireguard-go, configured with wg(8) --------------------------------------

/// offload_note() - whether a wireguard-go of @version batches through TUN
/// and UDP offloads: TCP segmentation/GRO on the tun came in March 2023, UDP
/// GSO/GRO in October 2023; the first tag after them is 0.0.20250515.
std::string offload_note(const std::string& version) {
	unsigned date = 0;
	if (std::sscanf(version.c_str(), "v0.0.%u", &date) != 1 || date < 20000000) return "";
	return date > 20230223 ? ", TUN/UDP offloads" : ", no offloads";
}

class WireguardSubject : public Subject {
public:
	/// @index: 0 for the first build (10.99.3.0/24, port 51820), 1.. for
	/// further ones (10.99.21.0/24 and port 51821 on)
	WireguardSubject(WireguardGo build, std::string name, int index)
	    : Subject(std::move(name), "chacha20-poly1305" + offload_note(build.version)),
	      build_(std::move(build)), index_(index) {}
	~WireguardSubject() override {
		stop_processes();
		for (const auto& s : sockets_)
			unlink(s.c_str()); // wireguard-go removes it on SIGTERM; not after SIGKILL
	}
	std::string family() const override { return "wireguard-go"; }
	std::string dst() const override { return net() + "2"; }
	std::string src() const override { return net() + "1"; }

	Availability availability(const SubjectEnv&) const override {
		if (build_.path.empty())
			return not_installed("wireguard-go not found in PATH (package wireguard-go)");
		if (access(build_.path.c_str(), X_OK) != 0)
			return not_installed(build_.path + " is not an executable program");
		if (find_program("wg").empty())
			return not_installed("wg not found in PATH (package wireguard-tools)");
		return {};
	}
	std::string version(const SubjectEnv&) const override { return build_.version; }
	std::string program(const SubjectEnv&) const override { return build_.path; }

protected:
	void bring_up(const SubjectEnv& env) override {
		wg_link_pair(env, net(), std::to_string(51820 + index_), env.scratch + "/" + name(),
		             [&](const std::string& ns, char tag) {
			             // The UAPI socket lives in /var/run/wireguard, shared by all
			             // namespaces: the interface name must be unique on the machine.
			             const std::string dev =
			                 (index_ == 0 ? std::string("cwg") : "cw" + std::to_string(index_)) +
			                 env.run_id + tag;
			             const std::string log = env.scratch + "/" + name() + "-" + tag + ".log";
			             const std::string sock = "/var/run/wireguard/" + dev + ".sock";
			             keep(spawn_logged(ns, {build_.path, "-f", dev}, log), log);
			             sockets_.push_back(sock);
			             wait_for_file(sock, Millis(10000), *this);
			             return dev;
		             });
	}

private:
	/// net() - "10.99.N." of this build's inner subnet
	std::string net() const { return "10.99." + std::to_string(index_ == 0 ? 3 : 20 + index_) + "."; }

	WireguardGo build_;
	int index_;
	std::vector<std::string> sockets_;
};

// --- OpenVPN 2.6 peer-to-peer -------------------------------------------------

class OpenvpnSubject : public Subject {
public:
	/// @gcm: TLS mode with AES-256-GCM; else static key, AES-128-CBC + HMAC-SHA1
	explicit OpenvpnSubject(bool gcm)
	    : Subject(gcm ? "openvpn-gcm" : "openvpn-cbc",
	              gcm ? "aes-256-gcm, TLS p2p" : "aes-128-cbc+sha1, static key"),
	      gcm_(gcm) {}
	std::string family() const override { return "openvpn"; }
	std::string dst() const override { return gcm_ ? "10.99.4.2" : "10.99.5.2"; }
	std::string src() const override { return gcm_ ? "10.99.4.1" : "10.99.5.1"; }

	Availability availability(const SubjectEnv& env) const override {
		std::string bin = find_program("openvpn");
		if (bin.empty()) return not_installed("openvpn not found in PATH (package openvpn)");
		CmdResult r = capture("", {bin, "--version"}, Millis(5000), env.scratch);
		int major = 0, minor = 0;
		auto at = r.out.find("OpenVPN ");
		if (at == std::string::npos ||
		    std::sscanf(r.out.c_str() + at, "OpenVPN %d.%d", &major, &minor) != 2)
			return {State::skipped, "cannot read the version from openvpn --version"};
		if (major < 2 || (major == 2 && minor < 6))
			return {State::skipped, "OpenVPN " + std::to_string(major) + "." +
			                            std::to_string(minor) + " found; 2.6 or later needed"};
		return {};
	}
	/// version() - from `openvpn --version` ("2.6.14")
	std::string version(const SubjectEnv& env) const override {
		return version_word({"openvpn", "--version"}, "OpenVPN ", env);
	}
	std::string program(const SubjectEnv&) const override { return find_program("openvpn"); }

protected:
	void bring_up(const SubjectEnv& env) override {
		const lab::NetnsPair& t = *env.topo;
		const std::string base = env.scratch + "/" + name();
		const std::string net = gcm_ ? "10.99.4." : "10.99.5.";
		const std::string port = gcm_ ? "1194" : "1195";
		std::string fp_a, fp_b;
		if (gcm_) {
			fp_a = make_self_signed("a", base + "-a.crt", base + "-a.key");
			fp_b = make_self_signed("b", base + "-b.crt", base + "-b.key");
		} else {
			write_private_file(base + ".static", openvpn_static_key());
		}
		for (char tag : {'a', 'b'}) {
			const bool a = tag == 'a';
			std::ostringstream c;
			c << "# esptun-bench compare: " << name() << ", side " << tag << "\n"
			  << "dev co" << (gcm_ ? 'g' : 'c') << env.run_id << tag << "\n"
			  << "dev-type tun\nproto udp\ndisable-dco\nverb 3\n"
			  << "ifconfig " << net << (a ? 1 : 2) << " " << net << (a ? 2 : 1) << "\n";
			if (a) c << "remote " << kUnderB << " " << port << "\n";
			c << "lport " << port << "\nrport " << port << "\nfloat\n";
			if (gcm_) {
				c << (a ? "tls-client\n" : "tls-server\ndh none\n") << "cert " << base << "-"
				  << tag << ".crt\nkey " << base << "-" << tag << ".key\n"
				  << "peer-fingerprint " << (a ? fp_b : fp_a) << "\n"
				  << "data-ciphers AES-256-GCM\n";
			} else {
				c << "secret " << base << ".static " << (a ? 0 : 1) << "\n"
				  << "cipher AES-128-CBC\nauth SHA1\n";
			}
			const std::string cfg = base + "-" + tag + ".conf", log = base + "-" + tag + ".log";
			write_private_file(cfg, c.str());
			keep(spawn_logged(a ? t.a() : t.b(), {find_program("openvpn"), "--config", cfg}, log),
			     log);
		}
	}

private:
	bool gcm_;
};

// --- strongSwan charon with kernel-libipsec (userspace ESP) -------------------

class StrongswanSubject : public Subject {
public:
	StrongswanSubject() : Subject("strongswan", "aes256gcm16, charon + kernel-libipsec") {}
	std::string dst() const override { return "10.99.6.2"; }
	std::string src() const override { return "10.99.6.1"; }

	Availability availability(const SubjectEnv&) const override {
		const std::string missing = charon_missing();
		if (!missing.empty()) return not_installed(missing);
		return {};
	}
	/// version() - strongSwan's release as `swanctl --version` prints it
	/// ("5.9.8"); charon itself has no version option
	std::string version(const SubjectEnv& env) const override {
		return version_word({"swanctl", "--version"}, "strongSwan ", env);
	}
	std::string program(const SubjectEnv&) const override { return kCharon; }

protected:
	void bring_up(const SubjectEnv& env) override {
		const lab::NetnsPair& t = *env.topo;
		const std::string psk = random_hex(32);
		std::vector<CharonFiles> files;
		for (int i = 0; i < 2; i++) {
			const bool a = i == 0;
			const std::string& ns = a ? t.a() : t.b();
			const CharonFiles& f =
			    files.emplace_back(env.scratch + "/strongswan-" + (a ? "a" : "b"));
			std::filesystem::create_directories(f.dir);
			ip_in(env, ns, {"addr", "add", a ? "10.99.6.1/32" : "10.99.6.2/32", "dev", "lo"});
			std::ostringstream sw;
			sw << "connections {\n  ab {\n    version = 2\n"
			   << "    local_addrs = " << (a ? kUnderA : kUnderB) << "\n"
			   << "    remote_addrs = " << (a ? kUnderB : kUnderA) << "\n"
			   << "    proposals = aes256-sha256-x25519\n    encap = yes\n    mobike = no\n"
			   << "    local {\n      auth = psk\n      id = " << (a ? "a" : "b")
			   << ".cmp\n    }\n"
			   << "    remote {\n      auth = psk\n      id = " << (a ? "b" : "a")
			   << ".cmp\n    }\n"
			   << "    children {\n      net {\n        mode = tunnel\n"
			   << "        local_ts = " << (a ? "10.99.6.1/32" : "10.99.6.2/32") << "\n"
			   << "        remote_ts = " << (a ? "10.99.6.2/32" : "10.99.6.1/32") << "\n"
			   << "        esp_proposals = aes256gcm16\n        start_action = none\n"
			   << "      }\n    }\n  }\n}\n"
			   << "secrets {\n  ike-ab {\n    id-a = a.cmp\n    id-b = b.cmp\n    secret = 0x"
			   << psk << "\n  }\n}\n";
			write_private_file(f.swanctl, sw.str());
			keep(start_charon(ns, f, charon_conf(f, "install_routes = yes", 1)), f.log);
		}
		for (int i = 0; i < 2; i++)
			load_swanctl(i == 0 ? t.a() : t.b(), files[size_t(i)], env.scratch);
		run_in(
		    t.a(),
		    {"swanctl", "--initiate", "--child", "net", "--timeout", "20", "--uri", files[0].uri()},
		    env.scratch, Millis(25000));
	}
};

} // namespace

void ip_in(const SubjectEnv& env, const std::string& ns, std::vector<std::string> args) {
	args.insert(args.begin(), {"ip", "-n", ns});
	run_in("", args, env.scratch);
}

void wg_link_pair(const SubjectEnv& env, const std::string& net, const std::string& port,
                  const std::string& key_base,
                  const std::function<std::string(const std::string& ns, char tag)>& make_device) {
	const lab::NetnsPair& t = *env.topo;
	const WgKeyPair ka = make_wg_keys(), kb = make_wg_keys();
	struct Side {
		const std::string& ns;
		char tag;
		const WgKeyPair &self, &peer;
		const char* peer_under;
	} sides[] = {{t.a(), 'a', ka, kb, kUnderB}, {t.b(), 'b', kb, ka, kUnderA}};
	for (const Side& s : sides) {
		const std::string dev = make_device(s.ns, s.tag);
		const std::string key = key_base + "-" + s.tag + ".key";
		write_private_file(key, s.self.private_b64 + "\n");
		run_in(s.ns,
		       {"wg", "set", dev, "listen-port", port, "private-key", key, "peer", s.peer.public_b64,
		        "allowed-ips", net + (s.tag == 'a' ? "2/32" : "1/32"), "endpoint",
		        std::string(s.peer_under) + ":" + port},
		       env.scratch);
		ip_in(env, s.ns, {"addr", "add", net + (s.tag == 'a' ? "1/24" : "2/24"), "dev", dev});
		ip_in(env, s.ns, {"link", "set", dev, "mtu", "1420", "up"});
	}
}

std::string kernel_version() {
	utsname u{};
	uname(&u);
	return std::string("linux ") + u.release;
}

std::string first_line_of(const std::string& s) {
	std::string line = s.substr(0, s.find('\n'));
	if (!line.empty() && line.back() == '\r') line.pop_back();
	return line;
}

std::string wireguard_go_version(const std::string& path, const std::string& scratch) {
	return lab::version_word({path, "--version"}, "wireguard-go ", scratch);
}

void Subject::start(const SubjectEnv& env) {
	try {
		bring_up(env);
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		throw std::runtime_error(std::string(e.what()) + "\n" + logs_tail());
	}
	// Up means: a ping from A reaches this subject's address in B. Until the
	// tunnel has configured its interface the route may not exist yet.
	auto deadline = Clock::now() + Millis(30000);
	std::string last = "no reply";
	for (;;) {
		check_alive();
		try {
			std::string text = run_collect(
			    env.topo->a(),
			    [&] {
				    try {
					    return ping(dst(), 1, Millis(0), Millis(300)).to_text();
				    } catch (const std::exception&) { // e.g. no route yet: not up
					    PingResult none;
					    none.sent = 1;
					    return none.to_text();
				    }
			    },
			    Millis(5000));
			if (PingResult::from_text(text).received() > 0) return;
		} catch (const Interrupted&) {
			throw;
		} catch (const std::exception& e) {
			last = e.what();
		}
		if (Clock::now() > deadline)
			throw std::runtime_error("no ping reply from " + dst() + " within 30 s of start (" +
			                         last + ")\n" + logs_tail());
		sleep_for(Millis(100));
	}
}

std::vector<pid_t> Subject::tunnel_pids() const {
	std::vector<pid_t> pids;
	for (const auto& c : procs_)
		if (c.running()) pids.push_back(c.pid());
	return pids;
}

lab::NetnsPair::Layout underlay_layout(const std::string& run_id) {
	return {kPrefix + run_id + "-a",
	        kPrefix + run_id + "-b",
	        "cu" + run_id + "a",
	        "cu" + run_id + "b",
	        kUnderA,
	        kUnderB};
}

void Subject::check_alive() {
	for (size_t i = 0; i < procs_.size(); i++)
		if (auto st = procs_[i].poll())
			throw std::runtime_error(name() + ": a tunnel process exited (" +
			                         describe_status(*st) + ")\n" + logs_tail());
}

std::string Subject::logs_tail(size_t lines) const {
	std::string s;
	for (const auto& log : logs_) {
		std::ifstream in(log);
		std::deque<std::string> tail;
		for (std::string line; std::getline(in, line);) {
			tail.push_back("    | " + line);
			if (tail.size() > lines) tail.pop_front();
		}
		s += "  log " + std::filesystem::path(log).filename().string() + ":\n";
		for (const auto& l : tail)
			s += l + "\n";
	}
	return s;
}

void Subject::stop_processes() noexcept {
	while (!procs_.empty())
		procs_.pop_back(); // Child's destructor: SIGTERM, grace, SIGKILL
}

void Subject::keep(Child c, const std::string& log) {
	procs_.push_back(std::move(c));
	logs_.push_back(log);
}

std::vector<std::unique_ptr<Subject>> make_subjects(const SubjectOptions& opt) {
	std::vector<std::unique_ptr<Subject>> v;
	v.push_back(std::make_unique<VethSubject>());
	v.push_back(std::make_unique<EsptunSubject>("direct", 1, 4501));
	v.push_back(std::make_unique<EsptunSubject>("vhost", 2, 4502));
	v.push_back(EsptunSubject::variant("direct", "busypoll", "busy_poll_us = 50", 'p', 7, 4507));
	v.push_back(EsptunSubject::variant("direct", "nowakepoll", "wake_poll_us = 0", 'n', 8, 4508));
	v.push_back(EsptunSubject::variant("direct", "nolimit", "queue_target_us = 0", 'q', 11, 4511));
	v.push_back(
	    EsptunSubject::variant("direct", "realtime", "worker_priority = \"realtime\"", 'o', 12, 4512));
	const std::vector<WireguardGo> wgs =
	    opt.wireguard_go.empty() ? std::vector<WireguardGo>{{find_program("wireguard-go"), ""}}
	                             : opt.wireguard_go;
	std::set<std::string> wg_names;
	for (size_t i = 0; i < wgs.size(); i++) {
		std::string name = "wireguard-go";
		if (wgs.size() > 1) {
			std::string tag = wgs[i].version;
			if (!tag.empty() && tag[0] == 'v') tag.erase(0, 1);
			name += "-" + (tag.empty() || wg_names.count(name + "-" + tag) ? std::to_string(i + 1)
			                                                               : tag);
		}
		wg_names.insert(name);
		v.push_back(std::make_unique<WireguardSubject>(wgs[i], name, static_cast<int>(i)));
	}
	v.push_back(std::make_unique<OpenvpnSubject>(true));
	v.push_back(std::make_unique<OpenvpnSubject>(false));
	v.push_back(std::make_unique<StrongswanSubject>());
	v.push_back(make_kernel_wireguard());
	v.push_back(make_kernel_esp());
	return v;
}

} // namespace esptun::bench::compare
