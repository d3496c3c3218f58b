// Command line for the gateway and the client: see cli.hpp.
#include "apps/cli/cli.hpp"

#include "apps/cli/keygen.hpp"
#include "apps/cli/options.hpp"
#include "apps/cli/show.hpp"
#include "platform/process.hpp"
#include "service/control.hpp"
#include "service/log.hpp"
#include "service/service.hpp"
#include "service/tun_setup.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <net/if.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace esptun::cli {
namespace {

struct Args {
	std::string verb;
	std::string config;
	std::string interface; ///< status/show/reload: -i, the socket is /run/esptun/<interface>.sock
	std::string socket;    ///< status/show/reload: -s, the socket itself
	std::string format = "json";
	std::string cipher; ///< genkey/genpair: --cipher
	bool verbose = false;
};

/// add_config() - -c FILE on a verb that reads a config (run/up, check, cleanup)
void add_config(CLI::App& verb, Args& args) {
	verb.add_option("-c,--config", args.config, "the TOML config")->type_name("FILE")->required();
}

/// add_verbose() - -v on every verb that may log
void add_verbose(CLI::App& verb, Args& args) {
	verb.add_flag("-v,--verbose", args.verbose, "log at debug level");
}

/**
 * add_which() - WHICH, the endpoint a query reads: -c, -i or -s, at most
 * one; with none, the endpoints with a socket in conf::kControlSocketDir
 */
void add_which(CLI::App& verb, Args& args) {
	const std::string dir(conf::kControlSocketDir);
	CLI::Option* c =
	    verb.add_option("-c,--config", args.config, "the endpoint's config (its control_socket)")
	        ->type_name("FILE");
	CLI::Option* i = verb.add_option("-i,--interface", args.interface,
	                                 "its interface: the socket " + dir + "/INTERFACE.sock");
	i->type_name("INTERFACE");
	i->check(CLI::Validator(
	    [](std::string& name) -> std::string {
		    return name.find('/') == std::string::npos
		               ? ""
		               : "takes an interface name, not a path (for a socket: -s)";
	    },
	    ""));
	CLI::Option* s =
	    verb.add_option("-s,--socket", args.socket, "its control socket")->type_name("SOCKET");
	c->excludes(i)->excludes(s);
	i->excludes(s);
}

/**
 * verb_first() - @argv with the verb moved to the front: options may come
 * before the verb (`-c FILE check`), as they always could, while CLI11 reads
 * a subcommand's options after its name
 */
std::vector<const char*> verb_first(int argc, char** argv) {
	std::vector<const char*> out(argv, argv + argc);
	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		if (a == "-c" || a == "--config" || a == "-i" || a == "--interface" || a == "-s" ||
		    a == "--socket" || a == "--format" || a == "-C" || a == "--cipher") {
			i++; // and its value
		} else if (a.empty() || a[0] != '-') {
			out.erase(out.begin() + i);
			out.insert(out.begin() + 1, argv[i]);
			break;
		}
	}
	return out;
}

/// make_command_line() - the verbs of @role's program and their options, into @args
std::unique_ptr<CLI::App> make_command_line(conf::Role role, const std::string& program, Args& args) {
	const bool gw = role == conf::Role::gateway;
	auto app = make_app(program, gw ? "esptun site-to-site gateway (userspace IPsec ESP over UDP)"
	                                : "esptun VPN client (userspace IPsec ESP over UDP)");
	app->require_subcommand(1);
	CLI::App* run = add_verb(*app, gw ? "run" : "up",
	                         std::string("start the ") + (gw ? "site-to-site gateway" : "VPN client") +
	                             " in the foreground (-c FILE)");
	add_config(*run, args);
	add_verbose(*run, args);
	CLI::App* check = add_verb(*app, "check", "validate FILE (-c) without touching any device");
	add_config(*check, args);
	add_verbose(*check, args);
	CLI::App* status =
	    add_verb(*app, "status", "print the counters of WHICH (--format json, prometheus)");
	add_which(*status, args);
	status->add_option("--format", args.format, "json (one endpoint) or prometheus (all of them)")
	    ->type_name("F")
	    ->check(CLI::IsMember({"json", "prometheus"}));
	add_verbose(*status, args);
	CLI::App* show = add_verb(*app, "show", "print peers, SAs, transfer, drops of WHICH for people");
	add_which(*show, args);
	add_verbose(*show, args);
	if (gw) {
		CLI::App* reload =
		    add_verb(*app, "reload", "re-read the running gateway's config, apply its peers");
		add_which(*reload, args);
		add_verbose(*reload, args);
	} else {
		CLI::App* cleanup =
		    add_verb(*app, "cleanup", "remove the routes a killed client left (-c FILE)");
		add_config(*cleanup, args);
		add_verbose(*cleanup, args);
	}
	for (const KeygenCommand& k : keygen_commands()) {
		CLI::App* verb = add_verb(*app, k.name, k.what);
		if (k.takes_cipher)
			verb->add_option("-C,--cipher", args.cipher, "the suite")
			    ->type_name("C")
			    ->required()
			    ->check(CLI::IsMember(cipher_names()));
	}
	const std::string dir(conf::kControlSocketDir);
	app->footer("FILE is a TOML config; see docs/examples/ and README.md.\n"
	            "WHICH is -i INTERFACE (its socket is " +
	            dir +
	            "/INTERFACE.sock), -s SOCKET or -c FILE;\n"
	            "without one: every endpoint with a socket in " +
	            dir + " (status: the only one).\n" + "'" + program +
	            " COMMAND --help' lists a command's options.");
	return app;
}

/**
 * sockets_of() - the control sockets @args names: -s, -i, -c's config, or
 * else every endpoint running with a socket in /run/esptun
 * @one: the caller reads one endpoint only (JSON status): more is an error
 * Throws std::runtime_error saying what to pass when none or several are found.
 */
std::vector<std::string> sockets_of(const Args& args, conf::Role role, bool one) {
	if (!args.socket.empty()) return {args.socket};
	if (!args.interface.empty()) return {conf::default_control_socket(args.interface)};
	if (!args.config.empty()) return {conf::load_config(args.config, role).tunnel.control_socket};
	std::vector<std::string> found = running_sockets();
	const std::string dir(conf::kControlSocketDir);
	if (found.empty())
		throw std::runtime_error("no running endpoint has a control socket in " + dir +
		                         "; for one with its own control_socket pass -s SOCKET or -c FILE");
	if (one && found.size() > 1) {
		std::string names;
		for (const std::string& f : found)
			names += " " + f;
		throw std::runtime_error("several endpoints are running (" + names.substr(1) +
		                         "); pick one with -i INTERFACE or -s SOCKET");
	}
	return found;
}

/// status_of() - query one socket and parse its JSON
EndpointStatus status_of(const std::string& socket) {
	EndpointStatus e{socket, {}};
	const std::string text = service::query_control(socket);
	try {
		e.json = service::parse_json(text);
	} catch (const std::exception& ex) {
		throw std::runtime_error(socket +
		                         " answered something that is not status JSON: " + ex.what());
	}
	return e;
}

/// query() - status or show; the exit status
int query(const Args& args, conf::Role role) {
	const bool raw_json = args.verb == "status" && args.format == "json";
	const std::vector<std::string> sockets = sockets_of(args, role, raw_json);
	if (raw_json) {
		std::fputs(service::query_control(sockets.front()).c_str(), stdout);
		return 0;
	}
	std::vector<EndpointStatus> all;
	for (const std::string& s : sockets)
		all.push_back(status_of(s));
	if (args.verb == "status") {
		std::fputs(render_prometheus(all).c_str(), stdout);
		return 0;
	}
	// Colour as `wg show` does: only on a terminal, and never with NO_COLOR set.
	const bool colour = ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
	const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
	                           std::chrono::system_clock::now().time_since_epoch())
	                           .count();
	for (size_t i = 0; i < all.size(); i++)
		std::fputs(((i ? "\n" : "") + render_show(all[i].json, colour, now_ms)).c_str(), stdout);
	return 0;
}

/**
 * reload() - `esptun-gateway reload`: ask the running gateway to re-read its
 * config and print what it did or why it refused. Return: the exit status.
 */
int reload(const Args& args, conf::Role role, const char* program) {
	const std::string socket = sockets_of(args, role, true).front();
	const std::string text = service::query_control(socket, "reload");
	service::Json answer;
	try {
		answer = service::parse_json(text);
	} catch (const std::exception& e) {
		throw std::runtime_error(socket +
		                         " answered something that is not a reload answer: " + e.what());
	}
	if (service::json_true(service::json_at(answer, {"ok"}))) {
		std::printf("%s\n",
		            service::json_string(service::json_at(answer, {"message"}), "reloaded").c_str());
		return 0;
	}
	std::fprintf(stderr, "%s reload: %s\n", program,
	             service::json_string(service::json_at(answer, {"error"}), "refused").c_str());
	return 1;
}

/**
 * cleanup() - `esptun-client cleanup -c FILE`: remove the routes a client
 * with this config left when it was killed (README.md, "Client: route_all
 * and kill_switch"); refused while its tun exists (the client runs).
 * Return: the exit status.
 */
int cleanup(const conf::Config& config, const char* program) {
	if (::if_nametoindex(config.tunnel.interface.c_str()) != 0) {
		std::fprintf(stderr,
		             "%s cleanup: interface %s exists, so the client is running; stop it with "
		             "SIGTERM instead (it removes its routes itself)\n",
		             program, config.tunnel.interface.c_str());
		return 1;
	}
	const auto removed = service::remove_leftovers(config);
	for (const std::string& r : removed)
		std::printf("removed route %s\n", r.c_str());
	if (removed.empty()) std::printf("nothing to remove\n");
	return 0;
}

int check(const conf::Config& config) {
	// Building the SA table also runs the key material through the crypto
	// library, exactly as `run` would.
	tunnel::SaTable table(service::peer_params(config));
	for (const std::string& w : conf::weak_peer_warnings(config))
		std::fprintf(stderr, "%s: warning: %s\n", config.source.c_str(), w.c_str());
	std::printf("%s: OK (%zu peer%s, interface %s)\n", config.source.c_str(), config.peers.size(),
	            config.peers.size() == 1 ? "" : "s", config.tunnel.interface.c_str());
	return 0;
}

} // namespace

int cli_main(conf::Role role, int argc, char** argv) {
	const char* base = std::strrchr(argv[0], '/');
	const char* program = base ? base + 1 : argv[0];
	Args args;
	const std::unique_ptr<CLI::App> app = make_command_line(role, program, args);
	const std::vector<const char*> words = verb_first(argc, argv);
	if (const int rc = parse_command_line(*app, int(words.size()), words.data()); rc >= 0) return rc;
	const CLI::App& verb = *app->get_subcommands().front();
	args.verb = verb.get_name();
	// Key generation needs no config and touches nothing.
	if (is_keygen_verb(args.verb)) return run_verb(verb, [&] { return keygen(args.verb, args.cipher); });
	service::log::set_program(program);
	if (args.verbose) service::log::set_level(service::log::Level::debug);
	try {
		// Before the config (and its keys) is read: no core dump may hold a
		// key (issue 16; why not MADV_DONTDUMP: platform/process.hpp).
		platform::disable_core_dumps();
		if (args.verb == "reload") return reload(args, role, program);
		if (args.verb == "status" || args.verb == "show") return query(args, role);
		// The root helpers a running endpoint keeps, before the config's keys
		// are in memory (service.hpp, EarlyHelpers, says why).
		service::EarlyHelpers helpers;
		if (args.verb == "run" || args.verb == "up")
			helpers = service::start_helpers(role, args.config);
		conf::Config config = conf::load_config(args.config, role);
		if (args.verb == "check") return check(config);
		if (args.verb == "cleanup") return cleanup(config, program);
		// The service keeps the config (for reloads); this copy would be a second one.
		service::run_service(std::move(config), program, std::move(helpers));
		return 0;
	} catch (const conf::ConfigError& e) {
		std::fprintf(stderr, "%s\n", e.what());
		return 1;
	} catch (const std::exception& e) {
		service::log::error(e.what());
		return 1;
	}
}

} // namespace esptun::cli
