// `esptun-bench ike-load`: the generator (generator.hpp) against each
// responder in turn, in one run and on one pair of namespaces:
//
//   netns G (generator)                           netns R (responder)
//   10.203.0.10 .. 10.203.0.(9+S) <---- veth ----> 10.203.0.2:4500
//
// For each authentication, DH group and responder: start the responder with
// N clients configured (responders.hpp: a PSK and an identity each, or one
// CA for all), read its CPU time and RSS, run the generator, read them again
// and ask the responder how many IKE SAs it holds.
#include "apps/bench/ike_load/ike_load.hpp"

#include "apps/bench/ike_load/generator.hpp"
#include "apps/bench/ike_load/responders.hpp"
#include "apps/bench/ike_load/site.hpp"
#include "apps/bench/lab/charon.hpp"
#include "apps/bench/lab/cli.hpp"
#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/gateway_process.hpp"
#include "apps/bench/lab/netns_pair.hpp"
#include "apps/bench/lab/pki.hpp"
#include "apps/bench/lab/proc_stats.hpp"
#include "apps/bench/lab/process.hpp"
#include "apps/bench/lab/run_info.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "service/json_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <poll.h>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace esptun::bench::ike_load {
namespace {

using namespace lab;
using cli::UsageError;
using service::Json;

constexpr const char* kPrefix = "esptun-ikeload-";
constexpr unsigned kFirstSource = 10; // 10.203.0.10 upwards

/// Where the table goes: stdout, or stderr when the JSON goes to stdout.
std::FILE* g_out = stdout;

struct Options {
	std::string command;
	size_t clients = 0; // 0: 2000, or 300 with --quick
	size_t concurrency = 64;
	size_t strangers = 0;
	unsigned sources = 64;
	unsigned timeout_s = 20;
	std::vector<std::string> responders{"esptun", "strongswan"};
	std::vector<std::string> groups{"x25519", "ecp256"};
	std::vector<std::string> auths{"psk", "cert"};
	bool quick = false;
	std::string storm;            ///< "", "kill" or "stop"
	uint64_t transfer_mbit = 200; ///< the storm's transfer through a site (0: none)
	std::string json_file;
	CLI::Option* json = nullptr;
	std::string gateway;
};

// --- one run -------------------------------------------------------------------

struct Row {
	std::string responder, version, auth, group;
	LoadResult load;
	double cpu_s = 0;
	uint64_t rss_before_kib = 0, rss_after_kib = 0;
	size_t responder_sas = 0;
	Json responder_counters = Json::object();
	/// The storm: the restarted responder's CPU and own count of IKE SAs.
	double storm_cpu_s = 0;
	size_t storm_sas = 0;
	Json storm_counters = Json::object();
	/// The transfer through the site across the restart and the storm.
	std::optional<TransferFigures> transfer;
	std::string error;

	double rate() const { return load.seconds > 0 ? double(load.established) / load.seconds : 0; }
	double cpu_ms_per_handshake() const {
		return load.established ? 1000.0 * cpu_s / double(load.established) : 0;
	}
	double kib_per_client() const {
		return load.established && rss_after_kib > rss_before_kib
		           ? double(rss_after_kib - rss_before_kib) / double(load.established)
		           : 0;
	}
};

double percentile(std::vector<double> v, double p) {
	if (v.empty()) return 0;
	std::sort(v.begin(), v.end());
	const size_t i = std::min(v.size() - 1, size_t(std::ceil(p * double(v.size()))) - (p > 0 ? 1 : 0));
	return v[i];
}

Json row_json(const Row& r, size_t clients) {
	Json j{{"responder", r.responder},
	       {"version", r.version},
	       {"auth", r.auth},
	       {"group", r.group},
	       {"ike_proposal", ike_proposal(r.group)},
	       {"esp_proposal", kEspProposal},
	       {"clients", clients},
	       {"established", r.load.established},
	       {"failed", r.load.failed},
	       {"responder_ike_sas", r.responder_sas},
	       {"seconds", service::json_round3(r.load.seconds)},
	       {"handshakes_per_s", service::json_round3(r.rate())},
	       {"setup_ms_p50", service::json_round3(percentile(r.load.setup_ms, 0.5))},
	       {"setup_ms_p99", service::json_round3(percentile(r.load.setup_ms, 0.99))},
	       {"responder_cpu_s", service::json_round3(r.cpu_s)},
	       {"responder_cpu_ms_per_handshake", service::json_round3(r.cpu_ms_per_handshake())},
	       {"responder_rss_before_kib", r.rss_before_kib},
	       {"responder_rss_after_kib", r.rss_after_kib},
	       {"responder_kib_per_client", service::json_round3(r.kib_per_client())},
	       {"generator_cpu_s", service::json_round3(r.load.cpu_s)},
	       {"virtual_addresses", r.load.virtual_addresses},
	       {"datagrams_out", r.load.datagrams_out},
	       {"datagrams_in", r.load.datagrams_in},
	       {"failures", r.load.failures},
	       {"responder_counters", r.responder_counters}};
	if (const LoadResult* s = r.load.storm.get()) {
		const double rate = s->seconds > 0 ? double(s->established) / s->seconds : 0;
		j["storm"] = Json{{"clients", s->established + s->failed},
		                  {"established", s->established},
		                  {"failed", s->failed},
		                  {"responder_ike_sas", r.storm_sas},
		                  {"seconds", service::json_round3(s->seconds)},
		                  {"handshakes_per_s", service::json_round3(rate)},
		                  {"setup_ms_p50", service::json_round3(percentile(s->setup_ms, 0.5))},
		                  {"setup_ms_p99", service::json_round3(percentile(s->setup_ms, 0.99))},
		                  {"responder_cpu_s", service::json_round3(r.storm_cpu_s)},
		                  {"virtual_addresses", s->virtual_addresses},
		                  {"datagrams_out", s->datagrams_out},
		                  {"datagrams_in", s->datagrams_in},
		                  {"failures", s->failures},
		                  {"responder_counters", r.storm_counters}};
		if (r.transfer) j["storm"]["transfer"] = r.transfer->to_json();
	}
	if (!r.error.empty()) j["error"] = r.error;
	return j;
}

void print_row(const Row& r) {
	// A responder that failed after the load (e.g. did not stop in time)
	// still has its figures: both are shown.
	if (!r.error.empty() && r.load.established == 0) {
		std::fprintf(g_out, "  %-10s %-4s %-7s FAILED: %s\n", r.responder.c_str(), r.auth.c_str(),
		             r.group.c_str(), r.error.c_str());
		return;
	}
	std::fprintf(g_out, "  %-10s %-4s %-7s %6zu %5zu %7zu %9.0f %8.1f %8.1f %9.2f %8.1f %9.1f\n",
	             r.responder.c_str(), r.auth.c_str(), r.group.c_str(), r.load.established, r.load.failed,
	             r.responder_sas, r.rate(), percentile(r.load.setup_ms, 0.5),
	             percentile(r.load.setup_ms, 0.99), r.cpu_ms_per_handshake(),
	             double(r.rss_after_kib) / 1024, r.kib_per_client());
	if (!r.error.empty()) std::fprintf(g_out, "      FAILED: %s\n", r.error.c_str());
	for (const std::string& f : r.load.failures)
		std::fprintf(g_out, "      failed: %s\n", f.c_str());
	if (const LoadResult* s = r.load.storm.get()) {
		std::fprintf(
		    g_out,
		    "      storm: all %zu reconnected at once to the restarted responder: %zu back in "
		    "%.1f s (p50 %.0f ms, p99 %.0f ms), %zu failed, it counts %zu; its CPU %.2f s\n",
		    s->established + s->failed, s->established, s->seconds, percentile(s->setup_ms, 0.5),
		    percentile(s->setup_ms, 0.99), s->failed, r.storm_sas, r.storm_cpu_s);
		for (const std::string& f : s->failures)
			std::fprintf(g_out, "      storm failed: %s\n", f.c_str());
		if (r.transfer) std::fprintf(g_out, "      transfer: %s\n", r.transfer->text().c_str());
	}
}

/// write_all() - all of @text to @fd; false on an error
bool write_all(int fd, const std::string& text) {
	size_t done = 0;
	while (done < text.size()) {
		const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) return false;
		done += size_t(n);
	}
	return true;
}

/**
 * run_generator() - the generator in @gen_ns until it is done
 * @between: when set, a storm: run once every client is through; the
 *           clients reconnect all at once when it returns
 * Throws when the generator fails or runs past @limit.
 */
LoadResult run_generator(const std::string& gen_ns, LoadPlan plan, Millis limit,
                         const std::function<void()>& between) {
	Pipe res = Pipe::make(), ready = Pipe::make(), go = Pipe::make();
	Child c = fork_in_netns(gen_ns, [&] {
		res.read_end.reset();
		ready.read_end.reset();
		go.write_end.reset();
		if (between) {
			plan.storm_ready_fd = ready.write_end.get();
			plan.storm_go_fd = go.read_end.get();
		}
		return write_all(res.write_end.get(), to_json(run_load(plan))) ? 0 : 1;
	});
	res.write_end.reset();
	ready.write_end.reset();
	go.read_end.reset();
	const auto deadline = Clock::now() + limit;
	if (between) {
		// One byte when the clients are through; EOF when the generator failed.
		for (;;) {
			throw_if_stopped();
			if (Clock::now() > deadline)
				throw std::runtime_error("the generator ran past its time");
			pollfd p{ready.read_end.get(), POLLIN, 0};
			if (::poll(&p, 1, 100) <= 0) continue;
			char b = 0;
			if (::read(ready.read_end.get(), &b, 1) == 1) between();
			break;
		}
		if (!write_all(go.write_end.get(), std::string(1, '\1')))
			throw std::runtime_error("the generator went away before the storm");
	}
	const std::string out = read_all(res.read_end.get(), deadline + Millis(60000));
	const int st = c.wait(Millis(10000));
	if (!exited_ok(st)) throw std::runtime_error("the generator failed (" + describe_status(st) + ")");
	return result_from_json(out);
}

/**
 * measure() - one responder against the generator; errors go into the row
 * @storm: "kill" or "stop": once every client is through, the responder is
 *         SIGKILLed or stopped, started again, and every client reconnects
 *         at once; "" for none
 */
void measure(Row& row, const std::function<std::unique_ptr<Responder>()>& make, const std::string& gen_ns,
             const LoadPlan& plan, const std::string& storm, Site* site, uint64_t transfer_mbit) {
	std::unique_ptr<Responder> resp;
	Clock::time_point killed, restarted, storm_start;
	try {
		resp = make();
		sleep_for(Millis(300)); // start-up work done before the first message
		const std::vector<pid_t> pid{resp->pid()};
		const double cpu0 = cpu_seconds(pid);
		row.rss_before_kib = rss_kib(pid[0]);
		auto after_load = [&] {
			row.cpu_s = cpu_seconds(pid) - cpu0;
			row.rss_after_kib = rss_kib(pid[0]);
			row.responder_sas = resp->established(row.responder_counters);
		};
		std::function<void()> between;
		if (!storm.empty())
			between = [&] {
				after_load();
				if (site) site->start_transfer(transfer_mbit);
				killed = Clock::now();
				if (storm == "kill") {
					resp->kill();
				} else if (const std::string stopped = resp->stop(); !stopped.empty()) {
					row.error = stopped;
				}
				resp.reset();
				resp = make();
				restarted = Clock::now();
				// The clients come back once the transfer runs again, so the
				// storm meets a data path at work (TCP's retransmission
				// timer, not the storm, decides when that is).
				if (site && !site->wait_resumed(Millis(20000)))
					row.error = "the transfer through the site did not resume within 20 "
					            "s of the restart";
				storm_start = Clock::now();
			};
		const Millis limit =
		    Millis(60000) + plan.client_timeout * (plan.clients() / plan.concurrency + 2);
		row.load = run_generator(gen_ns, plan, limit, between);
		if (site && row.load.storm)
			row.transfer = site->finish(killed, restarted, storm_start, row.load.storm->seconds);
		if (storm.empty()) {
			after_load();
		} else {
			// Its CPU from its start: the storm is all it did.
			row.storm_cpu_s = cpu_seconds({resp->pid()});
			row.storm_sas = resp->established(row.storm_counters);
		}
		const std::string stopped = resp->stop();
		if (!stopped.empty() && row.error.empty()) row.error = stopped;
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		row.error = e.what();
		if (resp) row.error += "; the end of its log:\n" + resp->log_end();
	}
}

/**
 * prepare_auth() - the clients' credentials in @plan for @clients, and what
 * the responders are configured with: a fresh PSK each, or (@cert) a
 * certificate each from the run's CA, whose strangers (@plan.known onwards)
 * get theirs from a CA the responders do not know
 */
ResponderAuth prepare_auth(LoadPlan& plan, bool cert, size_t clients) {
	plan.psks.clear();
	plan.credentials.clear();
	plan.trust.reset();
	ResponderAuth auth;
	if (!cert) {
		for (size_t i = 0; i < clients; i++)
			plan.psks.push_back(secret_copy(random_bytes(32)));
		return auth;
	}
	const CertAuthority ca("esptun-bench ike-load CA"), stranger_ca("esptun-bench stranger CA");
	auth.cert = true;
	auth.ca_pem = ca.cert_pem();
	auth.own = ca.issue(kResponderId, KeyPem::traditional); // charon's ecdsa/ folder wants SEC1
	std::string err;
	const std::string_view ca_pem = ca.cert_pem();
	plan.trust = ike::TrustStore::load(std::span(&ca_pem, 1), {}, err);
	if (!plan.trust) throw std::runtime_error("ike-load: the run's CA: " + err);
	plan.credentials.reserve(clients);
	for (size_t i = 0; i < clients; i++) {
		const Issued c = (i < plan.known ? ca : stranger_ca).issue(client_id(i));
		auto cred = ike::Credentials::load(c.cert_pem, c.key_pem, "", err);
		if (!cred) throw std::runtime_error("ike-load: certificate of " + client_id(i) + ": " + err);
		plan.credentials.push_back(std::move(cred));
	}
	return auth;
}

/// print_ratios() - the ratios the issue's goals are stated in, when both responders ran
void print_ratios(const std::vector<Row>& rows, const std::string& auth, const std::string& group) {
	const Row* e = nullptr;
	const Row* s = nullptr;
	for (const Row& r : rows)
		if (r.auth == auth && r.group == group && r.error.empty())
			(r.responder == "esptun" ? e : s) = &r;
	if (e && s && s->rate() > 0 && e->cpu_ms_per_handshake() > 0)
		std::fprintf(
		    g_out,
		    "  %s %s: esptun/strongSwan handshakes/s %.2fx, responder CPU per handshake %.2fx "
		    "less, p99 setup %.1f vs %.1f ms\n",
		    auth.c_str(), group.c_str(), e->rate() / s->rate(),
		    s->cpu_ms_per_handshake() / e->cpu_ms_per_handshake(), percentile(e->load.setup_ms, 0.99),
		    percentile(s->load.setup_ms, 0.99));
}

int run(const Options& opt) {
	if (int n = remove_stale_leftovers(kPrefix))
		std::fprintf(g_out, "removed %d leftover(s) of an earlier ike-load run that was killed\n", n);
	g_out = opt.json->count() && opt.json_file.empty() ? stderr : stdout;
	const size_t clients = opt.clients ? opt.clients : opt.quick ? 300 : 2000;
	const bool want_esptun =
	    std::find(opt.responders.begin(), opt.responders.end(), "esptun") != opt.responders.end();
	const bool want_charon =
	    std::find(opt.responders.begin(), opt.responders.end(), "strongswan") != opt.responders.end();
	const std::string gateway = want_esptun ? gateway_binary(opt.gateway) : "";
	if (want_charon)
		if (const std::string missing = charon_missing(); !missing.empty())
			throw std::runtime_error("strongswan: " + missing);

	const std::string run_id = std::to_string(getpid());
	TempDir tmp("/tmp/" + std::string(kPrefix) + run_id + "-");
	LoadPlan plan;
	plan.responder = Endpoint{*parse_ip(kResponderAddr), 4500};
	plan.responder_id = kResponderId;
	plan.esp_proposal = kEspProposal;
	plan.concurrency = opt.concurrency;
	plan.client_timeout = std::chrono::seconds(opt.timeout_s);
	if (opt.strangers > clients) throw UsageError("--strangers is more than --clients");
	plan.known = clients - opt.strangers;

	const std::string esptun_version =
	    want_esptun ? version_word({gateway, "--version"}, "esptun-gateway ", tmp.path()) : "";
	const std::string charon_version =
	    want_charon ? version_word({"swanctl", "--version"}, "strongSwan ", tmp.path()) : "";

	std::fprintf(g_out,
	             "esptun-bench ike-load%s: %zu clients, %zu of them unknown to the responders, %zu in "
	             "flight, from %u addresses; %s\n",
	             opt.quick ? " --quick" : "", clients, opt.strangers, opt.concurrency, opt.sources,
	             host_text().c_str());
	NetnsPair topo({std::string(kPrefix) + run_id + "-g", std::string(kPrefix) + run_id + "-r", "ikl-g",
	                "ikl-r", "10.203.0.1", kResponderAddr});
	for (unsigned k = 0; k < opt.sources; k++) {
		const std::string a = "10.203.0." + std::to_string(kFirstSource + k);
		run_command({"ip", "-n", topo.a(), "addr", "add", a + "/24", "dev", "ikl-g"});
		plan.sources.push_back(*parse_ip(a));
	}
	// The storm's bystander, for esptun-gateway (charon has no static keys
	// on this host: its data path is kernel-libipsec's, driven by IKE).
	std::unique_ptr<Site> site;
	if (want_esptun && !opt.storm.empty() && opt.transfer_mbit)
		site = std::make_unique<Site>(std::string(kPrefix) + run_id + "-t", topo.b(), kResponderAddr,
		                              gateway, tmp);

	std::fprintf(g_out, "  %-10s %-4s %-7s %6s %5s %7s %9s %8s %8s %9s %8s %9s\n", "responder", "auth",
	             "group", "ok", "fail", "its SAs", "hs/s", "p50 ms", "p99 ms", "CPU ms/hs", "RSS MiB",
	             "KiB/clnt");
	std::vector<Row> rows;
	for (const std::string& auth_name : opt.auths) {
		const ResponderAuth auth = prepare_auth(plan, auth_name == "cert", clients);
		for (const std::string& group : opt.groups) {
			plan.ike_proposal = ike_proposal(group);
			for (const std::string& name : opt.responders) {
				Row& row = rows.emplace_back();
				row.responder = name;
				row.auth = auth_name;
				row.group = group;
				if (name == "esptun") {
					row.version = esptun_version;
					measure(
					    row,
					    [&] {
						    return start_esptun(topo.b(), gateway, tmp, plan, auth,
						                        group,
						                        site ? site->responder_peer() : "");
					    },
					    topo.a(), plan, opt.storm, site.get(), opt.transfer_mbit);
				} else {
					row.version = charon_version;
					measure(
					    row,
					    [&] {
						    return start_strongswan(topo.b(), tmp, plan, auth, group);
					    },
					    topo.a(), plan, opt.storm, nullptr, 0);
				}
				print_row(row);
			}
			print_ratios(rows, auth_name, group);
		}
	}

	bool ok = true;
	Json doc{{"command", opt.command}, {"started", utc_now()},       {"host", host_text()},
	         {"clients", clients},     {"strangers", opt.strangers}, {"concurrency", opt.concurrency},
	         {"sources", opt.sources}, {"rows", Json::array()}};
	for (const Row& r : rows) {
		doc["rows"].push_back(row_json(r, clients));
		if (!r.error.empty() || r.load.established != clients || r.responder_sas != clients)
			ok = false;
		if (!opt.storm.empty() &&
		    (!r.load.storm || r.load.storm->failed || r.storm_sas != r.load.storm->established))
			ok = false;
		if (r.transfer && !r.transfer->ok()) ok = false;
		// Each certificate client was given an address of its own.
		if (r.auth == "cert" &&
		    (r.load.virtual_addresses != r.load.established ||
		     (r.load.storm && r.load.storm->virtual_addresses != r.load.storm->established)))
			ok = false;
	}
	if (opt.json->count()) write_json(doc, opt.json_file);
	return ok ? 0 : 1;
}

int run_ike_load(const CLI::App& verb, Options& opt) {
	for (const std::string& r : opt.responders)
		if (r != "esptun" && r != "strongswan")
			return cli::report_usage_error(verb, "unknown responder \"" + r +
			                                         "\" (esptun, strongswan)");
	for (const std::string& g : opt.groups)
		if (g != "x25519" && g != "ecp256")
			return cli::report_usage_error(verb, "unknown group \"" + g + "\" (x25519, ecp256)");
	for (const std::string& a : opt.auths)
		if (a != "psk" && a != "cert")
			return cli::report_usage_error(verb,
			                               "unknown authentication \"" + a + "\" (psk, cert)");
	if (opt.clients > kMaxCertClients &&
	    std::find(opt.auths.begin(), opt.auths.end(), "cert") != opt.auths.end())
		return cli::report_usage_error(
		    verb, "--auth cert takes at most " + std::to_string(kMaxCertClients) +
		              " clients (their virtual addresses come from one /16)");
	return run_as_root(verb, "responders", [&] { return run(opt); });
}

} // namespace

cli::Verb add_ike_load(CLI::App& bench, const std::string& command_line) {
	auto opt = std::make_shared<Options>();
	opt->command = command_line;
	CLI::App* verb = cli::add_verb(
	    bench, "ike-load", "IKEv2 handshakes per second against esptun-gateway and strongSwan (root)",
	    "N IKEv2 clients (the project's own IKE engine, an identity each) connect from\n"
	    "up to 200 addresses of one namespace to a responder in another: IKE_SA_INIT,\n"
	    "IKE_AUTH and the first CHILD_SA, --concurrency at a time. With --auth psk each\n"
	    "client has a PSK and an inner address, configured as a peer of its own; with\n"
	    "cert each has an ECDSA P-256 certificate from the run's CA and asks for a\n"
	    "virtual address, and one template connection with an address pool serves\n"
	    "all. Each responder (esptun-gateway, strongSwan's charon with kernel-libipsec)\n"
	    "is configured with the same N clients and proposals (aes128gcm16-prfsha256\n"
	    "with each --groups group; ESP aes128gcm16) and measured in turn: handshakes/s from\n"
	    "the first start to the last CHILD_SA, p50/p99 setup time, failures, the\n"
	    "responder's own count of IKE SAs, its CPU time per handshake and its RSS\n"
	    "before and after (KiB per client). --storm: then the responder is SIGKILLed\n"
	    "or stopped and started again, and every client reconnects at once; with\n"
	    "esptun-gateway a TCP transfer through a site with static keys runs across\n"
	    "the restart and the storm (--transfer). Exit status 1 unless every client of\n"
	    "every responder got its CHILD_SA (and came back), every certificate client\n"
	    "an address of its own, and the transfer arrived intact and moved again\n"
	    "after the restart. Needs root.");
	verb->add_flag("--quick", opt->quick, "300 clients (default 2000)");
	verb->add_option("--clients", opt->clients, "clients per responder and group")
	    ->type_name("N")
	    ->check(cli::between(1, kMaxClients))
	    ->default_str("2000");
	verb->add_option("--strangers", opt->strangers,
	                 "of the clients, this many are unknown to the responders (refused; exit 1)")
	    ->type_name("N")
	    ->check(cli::between(0, kMaxClients))
	    ->default_str("0");
	verb->add_option("--concurrency", opt->concurrency, "clients in flight at once")
	    ->type_name("C")
	    ->check(cli::between(1, 4096))
	    ->default_str("64");
	verb->add_option("--sources", opt->sources, "the generator's source addresses")
	    ->type_name("S")
	    ->check(cli::between(1, 200))
	    ->default_str("64");
	verb->add_option("--timeout", opt->timeout_s, "seconds a client may take before it counts as failed")
	    ->type_name("S")
	    ->check(cli::between(1, 600))
	    ->default_str("20");
	verb->add_option("--responders", opt->responders, "esptun, strongswan")
	    ->type_name("a,b")
	    ->delimiter(',')
	    ->default_str("esptun,strongswan");
	verb->add_option("--groups", opt->groups, "x25519, ecp256")
	    ->type_name("a,b")
	    ->delimiter(',')
	    ->default_str("x25519,ecp256");
	verb->add_option("--auth", opt->auths, "psk, cert (certificates and an address pool)")
	    ->type_name("a,b")
	    ->delimiter(',')
	    ->default_str("psk,cert");
	verb->add_option("--storm", opt->storm,
	                 "once all are through, SIGKILL (kill) or stop (stop) the responder, start it "
	                 "again and reconnect every client at once")
	    ->type_name("kill|stop")
	    ->check(CLI::IsMember({"kill", "stop"}));
	verb->add_option("--transfer", opt->transfer_mbit,
	                 "with --storm: pace the TCP transfer through esptun-gateway's site at MBIT "
	                 "Mbit/s; 0: no transfer")
	    ->type_name("MBIT")
	    ->check(cli::between(0, 100000))
	    ->default_str("200");
	verb->add_option("--gateway", opt->gateway, "the esptun-gateway program")->type_name("PATH");
	opt->json = add_json_option(*verb, opt->json_file);
	return {verb, [verb, opt] { return run_ike_load(*verb, *opt); }};
}

} // namespace esptun::bench::ike_load
