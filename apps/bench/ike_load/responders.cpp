// esptun-gateway and charon as ike-load's responders; see responders.hpp.
#include "apps/bench/ike_load/responders.hpp"

#include "apps/bench/lab/charon.hpp"
#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/gateway_process.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/sa_keys.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

namespace esptun::bench::ike_load {

using namespace lab;
using service::Json;

std::string ike_proposal(const std::string& group) { return "aes128gcm16-prfsha256-" + group; }

namespace {

std::string psk_hex(const SecretBytes& psk) { return hex0x(declassify(psk)); }

/// rewrite_private_file() - write_private_file() over what a responder's
/// earlier start (the storm's restart) left at @path
std::string rewrite_private_file(const std::string& path, std::string_view text) {
	std::error_code ec;
	std::filesystem::remove(path, ec);
	write_private_file(path, text);
	return path;
}

// --- esptun-gateway ----------------------------------------------------------

class EsptunResponder final : public Responder {
public:
	/// @site_peer: a [[peer]] more for the config (the storm's site), or ""
	EsptunResponder(const std::string& netns, const std::string& binary, const TempDir& tmp,
	                const LoadPlan& plan, const ResponderAuth& auth, const std::string& group,
	                const std::string& site_peer)
	    : gw_("R", netns, binary, write_config(tmp, plan, auth, group, site_peer),
	          tmp.file("gateway.log"), tmp.file("gateway.sock")) {
		const auto deadline = Clock::now() + Millis(60000);
		while (!gw_.status()) {
			gw_.check_alive();
			if (Clock::now() > deadline)
				throw std::runtime_error(
				    "esptun-gateway did not answer status within 60 s: " +
				    gw_.status_error());
			sleep_for(Millis(100));
		}
	}
	pid_t pid() const override { return gw_.pid(); }
	size_t established(Json& counters) override {
		std::optional<Json> st = gw_.status(Millis(30000));
		if (!st) throw std::runtime_error("esptun-gateway status failed: " + gw_.status_error());
		size_t n = 0;
		if (const Json* c = service::json_at(*st, {"ike", "counters"})) counters = *c;
		const Json* sas = service::json_at(*st, {"ike", "sas"});
		if (sas && sas->is_array())
			for (const Json& sa : *sas)
				if (sa.value("state", "") == "established" &&
				    !sa.value("children", Json::array()).empty())
					n++;
		return n;
	}
	std::string stop() override { return gw_.stop(); }
	void kill() override { gw_.kill(); }
	std::string log_end() const override { return gw_.log_tail(); }

private:
	static std::string write_config(const TempDir& tmp, const LoadPlan& plan, const ResponderAuth& auth,
	                                const std::string& group, const std::string& site_peer) {
		std::ostringstream t;
		t << "# esptun-bench ike-load: the responder (generated; keys are random per run)\n"
		  << "[tunnel]\n"
		  << "interface = \"ikl0\"\n"
		  << "addresses = [\"10.63.0.1/24\"]\n"
		  << "listen = \"" << kResponderAddr << ":4500\"\n"
		  << "ike_port = 0\n"
		  << "local_id = \"" << kResponderId << "\"\n"
		  << "control_socket = \"" << tmp.file("gateway.sock") << "\"\n"
		  << "state_dir = \"" << tmp.file("gateway.state") << "\"\n";
		if (auth.cert) {
			// One template serves every client whose certificate the CA signed.
			const std::string ca_dir = tmp.file("esptun-ca");
			std::filesystem::create_directories(ca_dir);
			t << "address_pool = [\"" << kClientPool << "\"]\n\n[[peer]]\nname = \"clients\"\n"
			  << "remote_id = \"*.load\"\nauth = \"cert\"\n"
			  << "cert_file = \""
			  << rewrite_private_file(tmp.file("esptun-gw.pem"), auth.own.cert_pem)
			  << "\"\nprivate_key_file = \""
			  << rewrite_private_file(tmp.file("esptun-gw.key"), auth.own.key_pem) << "\"\n"
			  << "ca_dir = \"" << ca_dir << "\"\nike_proposals = [\"" << ike_proposal(group)
			  << "\"]\nesp_proposals = [\"" << kEspProposal << "\"]\n";
			rewrite_private_file(ca_dir + "/ca.pem", auth.ca_pem);
		}
		for (size_t i = 0; i < (auth.cert ? 0 : plan.known); i++)
			t << "\n[[peer]]\nname = \"c" << i << "\"\nremote_id = \"" << client_id(i)
			  << "\"\npsk = \"" << psk_hex(plan.psks[i]) << "\"\nallowed_ips = [\""
			  << to_string(client_inner(i)) << "/32\"]\nike_proposals = [\""
			  << ike_proposal(group) << "\"]\nesp_proposals = [\"" << kEspProposal << "\"]\n";
		if (!site_peer.empty()) t << "\n" << site_peer;
		return rewrite_private_file(tmp.file("gateway-" + group + ".toml"), t.str());
	}

	GatewayProcess gw_;
};

// --- strongSwan charon ---------------------------------------------------------

class CharonResponder final : public Responder {
public:
	CharonResponder(const std::string& netns, const TempDir& tmp, const LoadPlan& plan,
	                const ResponderAuth& auth, const std::string& group)
	    : netns_(netns), scratch_(tmp.path()), files_(tmp.file("charon-" + group)),
	      // kernel-libipsec routes each CHILD_SA through its TUN with a source
	      // address from our traffic selector: one must be on an interface.
	      address_(netns, "10.63.0.1/32") {
		// strongSwan's defaults, except the IKE SA table: one bucket by
		// default, which its documentation says to enlarge for many SAs.
		// install_routes = no spares charon a route per CHILD_SA (esptun's
		// routes to the clients' addresses are set up before the run).
		child_ = start_charon(netns, files_,
		                      charon_conf(files_,
		                                  "install_routes = no\n"
		                                  "ikesa_table_size = 4096\n"
		                                  "ikesa_table_segments = 16",
		                                  0));
		std::ostringstream sw;
		sw << "connections {\n  load {\n    version = 2\n    local_addrs = " << kResponderAddr
		   << "\n    proposals = " << ike_proposal(group) << "\n    mobike = no\n";
		if (auth.cert) {
			// swanctl --load-all reads the credentials beside swanctl.conf.
			for (const char* sub : {"/x509ca", "/x509", "/ecdsa"})
				std::filesystem::create_directories(files_.dir + sub);
			rewrite_private_file(files_.dir + "/x509ca/ca.pem", auth.ca_pem);
			rewrite_private_file(files_.dir + "/x509/gw.pem", auth.own.cert_pem);
			rewrite_private_file(files_.dir + "/ecdsa/gw.key", auth.own.key_pem);
			sw << "    pools = clients\n    send_cert = always\n"
			   << "    local {\n      auth = pubkey\n      certs = gw.pem\n"
			   << "      id = " << kResponderId << "\n    }\n"
			   << "    remote {\n      auth = pubkey\n      id = %any\n      cacerts = ca.pem\n  "
			      "  }\n";
		} else {
			sw << "    local {\n      auth = psk\n      id = " << kResponderId << "\n    }\n"
			   << "    remote {\n      auth = psk\n      id = %any\n    }\n";
		}
		// Without remote_ts the clients' side is the virtual address (dynamic).
		sw << "    children {\n      net {\n        mode = tunnel\n        local_ts = "
		   << kResponderNet << (auth.cert ? "" : "\n        remote_ts = 10.64.0.0/14")
		   << "\n        esp_proposals = " << kEspProposal
		   << "\n        start_action = none\n      }\n    }\n  }\n}\n";
		if (auth.cert) sw << "pools {\n  clients {\n    addrs = " << kClientPool << "\n  }\n}\n";
		sw << "secrets {\n";
		for (size_t i = 0; i < (auth.cert ? 0 : plan.known); i++)
			sw << "  ike-" << i << " {\n    id = " << client_id(i)
			   << "\n    secret = " << psk_hex(plan.psks[i]) << "\n  }\n";
		sw << "}\n";
		rewrite_private_file(files_.swanctl, sw.str());
		load_swanctl(netns, files_, scratch_, Millis(120000));
	}
	pid_t pid() const override { return child_.pid(); }
	size_t established(Json&) override {
		const std::string out =
		    run_in(netns_, {"swanctl", "--stats", "--uri", files_.uri()}, scratch_);
		std::smatch m;
		if (!std::regex_search(out, m, std::regex(R"(IKE_SAs: (\d+) total)")))
			throw std::runtime_error("swanctl --stats printed no IKE_SAs line: " +
			                         out.substr(0, 300));
		return std::stoul(m[1].str());
	}
	std::string stop() override {
		// It deletes every IKE SA on the way out: with 10,000 that took
		// charon more than 5 s here with PSKs, and more than 60 s with
		// certificates and a pool.
		const int st = child_.stop(Millis(180000));
		return exited_ok(st)
		           ? ""
		           : "charon did not exit within 180 s of SIGTERM (" + describe_status(st) + ")";
	}
	void kill() override {
		if (child_.running()) ::kill(child_.pid(), SIGKILL);
		child_.stop(Millis(5000));
		// What a killed charon leaves: its VICI socket file (nothing
		// listens on it; the next charon binds its own) and its PID file.
		std::error_code ec;
		std::filesystem::remove(files_.vici, ec);
		std::filesystem::remove(files_.dir + "/run/charon.pid", ec);
	}
	std::string log_end() const override {
		std::ifstream in(files_.log);
		std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
		return text.size() > 1500 ? text.substr(text.size() - 1500) : text;
	}

private:
	/// An address on lo for as long as the responder runs.
	struct LoAddress {
		LoAddress(const std::string& ns, std::string prefix) : ns_(ns), prefix_(std::move(prefix)) {
			run_command({"ip", "-n", ns_, "addr", "add", prefix_, "dev", "lo"});
		}
		~LoAddress() {
			try {
				run_command({"ip", "-n", ns_, "addr", "del", prefix_, "dev", "lo"}, false);
			} catch (const std::exception&) {
				// the namespace goes at the end of the run, and the address with it
			}
		}
		std::string ns_, prefix_;
	};

	std::string netns_, scratch_;
	CharonFiles files_;
	LoAddress address_;
	Child child_; // after address_: charon stops before the address goes
};

} // namespace

std::unique_ptr<Responder> start_esptun(const std::string& netns, const std::string& binary,
                                        const TempDir& tmp, const LoadPlan& plan, const ResponderAuth& auth,
                                        const std::string& group, const std::string& site_peer) {
	return std::make_unique<EsptunResponder>(netns, binary, tmp, plan, auth, group, site_peer);
}

std::unique_ptr<Responder> start_strongswan(const std::string& netns, const TempDir& tmp,
                                            const LoadPlan& plan, const ResponderAuth& auth,
                                            const std::string& group) {
	return std::make_unique<CharonResponder>(netns, tmp, plan, auth, group);
}

} // namespace esptun::bench::ike_load
