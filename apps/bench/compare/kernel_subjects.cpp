// The comparison's kernel subjects: the kernel's own WireGuard and XFRM ESP,
// configured with wg(8) and ip-xfrm(8); no process of theirs to start.
#include "apps/bench/compare/keys.hpp"
#include "apps/bench/compare/subject_helpers.hpp"
#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "crypto/esp_transform.hpp"

#include <cstdio>
#include <stdexcept>

namespace esptun::bench::compare {

using namespace lab;
namespace {

using State = Availability::State;

// --- the kernel's own tunnels: WireGuard and XFRM ESP -------------------------
//
// No process does their work: it runs in softirq and kernel threads shared
// with everything else, so they have no CPU/GB figure. Whether the running
// kernel has them is found out by trying, in the run's namespace A.

/// first_error() - the first line of a failed command's stderr (or its status)
std::string first_error(const CmdResult& r) {
	std::string line = first_line_of(r.err);
	return line.empty() ? describe_status(r.status) : line;
}

class KernelWireguardSubject : public Subject {
public:
	KernelWireguardSubject() : Subject("kernel-wireguard", "chacha20-poly1305, kernel module") {}
	std::string family() const override { return "kernel"; }
	std::string dst() const override { return "10.99.9.2"; }
	std::string src() const override { return "10.99.9.1"; }
	bool counts_cpu() const override { return false; }

	Availability availability(const SubjectEnv& env) const override {
		if (find_program("wg").empty())
			return {State::not_installed, "wg not found in PATH (package wireguard-tools)"};
		const std::string probe = "kwp" + env.run_id;
		CmdResult r =
		    capture("", {"ip", "-n", env.topo->a(), "link", "add", probe, "type", "wireguard"},
		            Millis(5000), env.scratch);
		if (!r.ok())
			return {State::skipped, "kernel has no WireGuard (ip link add type wireguard: " +
			                            first_error(r) + ")"};
		capture("", {"ip", "-n", env.topo->a(), "link", "del", probe}, Millis(5000), env.scratch);
		return {};
	}
	std::string version(const SubjectEnv&) const override { return kernel_version(); }

protected:
	void bring_up(const SubjectEnv& env) override {
		wg_link_pair(env, "10.99.9.", "51830", env.scratch + "/kernel-wireguard",
		             [&](const std::string& ns, char tag) {
			             const std::string dev = "ckw" + env.run_id + tag;
			             ip_in(env, ns, {"link", "add", dev, "type", "wireguard"});
			             return dev;
		             });
	}
};

/**
 * KernelEspSubject - the kernel's XFRM with esp4: plain ESP (protocol 50) in
 * tunnel mode, esptun's suite (AES-256-GCM, RFC 4106 key || salt, ESN,
 * replay window 1024), SAs and policies set with ip-xfrm(8) as a key
 * exchange daemon would. Plain ESP, not UDP 4500: UDP encapsulation needs a
 * socket with the UDP_ENCAP option open on the port, which only a daemon
 * keeps.
 */
class KernelEspSubject : public Subject {
public:
	KernelEspSubject() : Subject("kernel-esp", "aes256-gcm, kernel XFRM, plain ESP") {}
	std::string family() const override { return "kernel"; }
	std::string dst() const override { return "10.99.10.2"; }
	std::string src() const override { return "10.99.10.1"; }
	bool counts_cpu() const override { return false; }

	Availability availability(const SubjectEnv& env) const override {
		// The SA this subject needs, once; then, if that fails, one with a
		// suite every ESP-capable kernel has, to tell "no ESP" from "no GCM".
		const std::string& ns = env.topo->a();
		auto try_sa = [&](const std::vector<std::string>& algo) {
			std::vector<std::string> argv = {"ip",  "-n",    ns,     "xfrm",  "state", "add",
			                                 "src", kUnderA, "dst",  kUnderB, "proto", "esp",
			                                 "spi", "0x101", "mode", "tunnel"};
			argv.insert(argv.end(), algo.begin(), algo.end());
			CmdResult r = capture("", argv, Millis(5000), env.scratch);
			if (r.ok())
				capture("",
				        {"ip", "-n", ns, "xfrm", "state", "delete", "src", kUnderA, "dst",
				         kUnderB, "proto", "esp", "spi", "0x101"},
				        Millis(5000), env.scratch);
			return r;
		};
		CmdResult gcm = try_sa({"aead", "rfc4106(gcm(aes))", "0x" + std::string(72, '1'), "128"});
		if (gcm.ok()) return {};
		CmdResult cbc = try_sa({"enc", "cbc(aes)", "0x" + std::string(32, '1'), "auth-trunc",
		                        "hmac(sha1)", "0x" + std::string(40, '1'), "96"});
		if (cbc.ok())
			return {State::skipped,
			        "kernel crypto has no rfc4106(gcm(aes)) (ip xfrm state add: " +
			            first_error(gcm) + ")"};
		return {State::skipped,
		        "kernel has no ESP for XFRM, no esp4 (ip xfrm state add: " + first_error(cbc) + ")"};
	}
	std::string version(const SubjectEnv&) const override { return kernel_version(); }

protected:
	void bring_up(const SubjectEnv& env) override {
		const crypto::CipherSpec* spec = crypto::find_cipher(kEspCipher);
		if (!spec) throw std::runtime_error(std::string("esptun has no cipher ") + kEspCipher);
		SaKeys ab = make_sa_keys(*spec), ba = make_sa_keys(*spec, ab.spi);
		const lab::NetnsPair& t = *env.topo;
		auto sa = [](const char* from, const char* to, const SaKeys& k) {
			char spi[16];
			std::snprintf(spi, sizeof spi, "0x%08x", k.spi);
			return std::vector<std::string>{"xfrm",
			                                "state",
			                                "add",
			                                "src",
			                                from,
			                                "dst",
			                                to,
			                                "proto",
			                                "esp",
			                                "spi",
			                                spi,
			                                "mode",
			                                "tunnel",
			                                "replay-window",
			                                "1024",
			                                "flag",
			                                "esn",
			                                "aead",
			                                "rfc4106(gcm(aes))",
			                                hex0x(k.enc_key),
			                                "128"};
		};
		auto policy = [](const char* from_in, const char* to_in, const char* dir, const char* from,
		                 const char* to) {
			return std::vector<std::string>{"xfrm", "policy", "add",   "src",  from_in, "dst",
			                                to_in,  "dir",    dir,     "tmpl", "src",   from,
			                                "dst",  to,       "proto", "esp",  "mode",  "tunnel"};
		};
		struct Side {
			const std::string& ns;
			const std::string& link;
			const char *self_in, *peer_in, *self_under, *peer_under;
		} sides[] = {{t.a(), t.layout().veth_a, "10.99.10.1", "10.99.10.2", kUnderA, kUnderB},
		             {t.b(), t.layout().veth_b, "10.99.10.2", "10.99.10.1", kUnderB, kUnderA}};
		for (const Side& s : sides) {
			const std::string self = std::string(s.self_in) + "/32",
			                  peer = std::string(s.peer_in) + "/32";
			// Both ends hold both SAs: A->B is A's outbound and B's inbound.
			ip_in(env, s.ns, sa(kUnderA, kUnderB, ab));
			ip_in(env, s.ns, sa(kUnderB, kUnderA, ba));
			ip_in(env, s.ns,
			      policy(self.c_str(), peer.c_str(), "out", s.self_under, s.peer_under));
			ip_in(env, s.ns,
			      policy(peer.c_str(), self.c_str(), "in", s.peer_under, s.self_under));
			ip_in(env, s.ns, {"addr", "add", self, "dev", "lo"});
			ip_in(env, s.ns, {"route", "add", peer, "dev", s.link, "src", s.self_in});
		}
	}
};

} // namespace

std::unique_ptr<Subject> make_kernel_wireguard() { return std::make_unique<KernelWireguardSubject>(); }

std::unique_ptr<Subject> make_kernel_esp() { return std::make_unique<KernelEspSubject>(); }

} // namespace esptun::bench::compare
