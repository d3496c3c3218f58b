// Command line for the gateway and the client: see cli.hpp.
#include "apps/cli/cli.hpp"

#include "apps/cli/keygen.hpp"
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
	std::string interface; ///< status/show: -i, the socket is /run/esptun/<interface>.sock
	std::string socket;    ///< status/show: -s, the socket itself
	std::string format = "json";
	bool verbose = false;
};

/// The options that take a value, and where it goes.
std::string* option_target(Args& args, const std::string& a) {
	if (a == "-c" || a == "--config") return &args.config;
	if (a == "-i" || a == "--interface") return &args.interface;
	if (a == "-s" || a == "--socket") return &args.socket;
	if (a == "--format") return &args.format;
	return nullptr;
}

void usage(FILE* out, const char* program, conf::Role role) {
	const bool gw = role == conf::Role::gateway;
	const std::string run = std::string(gw ? "run" : "up") + " -c FILE [-v]";
	const std::string start =
	    std::string("start the ") + (gw ? "site-to-site gateway" : "VPN client") + " in the foreground";
	struct Line {
		std::string cmd, what;
	};
	std::vector<Line> lines{
	    {run, start},
	    {"check -c FILE", "validate FILE without touching any device"},
	    {"status [WHICH] [--format F]", "print the counters (F: json, prometheus)"},
	    {"show [WHICH]", "print peers, SAs, transfer, drops for people"},
	};
	if (gw) lines.push_back({"reload [WHICH]", "re-read the running gateway's config, apply its peers"});
	if (!gw) lines.push_back({"cleanup -c FILE", "remove the routes a killed client left"});
	for (const KeygenCommand& k : keygen_commands())
		lines.push_back({k.usage, k.what});
	lines.push_back({"--version", "print the version"});
	for (size_t i = 0; i < lines.size(); i++)
		std::fprintf(out, "%s %s %-28s %s\n", i ? "      " : "usage:", program, lines[i].cmd.c_str(),
		             lines[i].what.c_str());
	const std::string dir(conf::kControlSocketDir);
	std::fprintf(out,
	             "FILE is a TOML config; see docs/examples/ and README.md.\n"
	             "WHICH is -i INTERFACE (its socket is %s/INTERFACE.sock), -s SOCKET or -c FILE;\n"
	             "without one: every endpoint with a socket in %s (status: the only one).\n",
	             dir.c_str(), dir.c_str());
}

/// Returns false (after printing why) when the arguments make no sense.
bool parse_args(int argc, char** argv, conf::Role role, Args& args) {
	const char* run_verb = role == conf::Role::gateway ? "run" : "up";
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (std::string* target = option_target(args, a)) {
			if (i + 1 >= argc) {
				std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
				return false;
			}
			*target = argv[++i];
		} else if (a == "-v" || a == "--verbose") {
			args.verbose = true;
		} else if (args.verb.empty() && a[0] != '-') {
			args.verb = a;
		} else {
			std::fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], a.c_str());
			return false;
		}
	}
	const bool reload = role == conf::Role::gateway && args.verb == "reload";
	const bool query = args.verb == "status" || args.verb == "show" || reload;
	const bool cleanup = role == conf::Role::client && args.verb == "cleanup";
	if (args.verb != run_verb && args.verb != "check" && !query && !cleanup) {
		if (args.verb.empty())
			std::fprintf(stderr, "%s: no command given\n", argv[0]);
		else
			std::fprintf(
			    stderr,
			    "%s: unknown command '%s' (this program's commands: %s, check, status, show, "
			    "%sgenkey, genpair, genpsk)\n",
			    argv[0], args.verb.c_str(), run_verb,
			    role == conf::Role::gateway ? "reload, " : "cleanup, ");
		return false;
	}
	const int which = !args.config.empty() + !args.interface.empty() + !args.socket.empty();
	if (query && which > 1) {
		std::fprintf(stderr, "%s %s: give one of -c, -i and -s\n", argv[0], args.verb.c_str());
		return false;
	}
	if (!query && (!args.interface.empty() || !args.socket.empty())) {
		std::fprintf(stderr, "%s %s: -i and -s are for status and show; pass -c FILE\n", argv[0],
		             args.verb.c_str());
		return false;
	}
	if (args.interface.find('/') != std::string::npos) {
		std::fprintf(stderr, "%s: -i takes an interface name, not a path (for a socket: -s)\n",
		             argv[0]);
		return false;
	}
	if (args.format != "json" && args.format != "prometheus") {
		std::fprintf(stderr, "%s: --format is json or prometheus, not '%s'\n", argv[0],
		             args.format.c_str());
		return false;
	}
	if (args.format != "json" && args.verb != "status") {
		std::fprintf(stderr, "%s %s: --format is for status\n", argv[0], args.verb.c_str());
		return false;
	}
	if (!query && args.config.empty()) {
		std::fprintf(stderr, "%s %s: which config? pass -c FILE\n", argv[0], args.verb.c_str());
		return false;
	}
	return true;
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
	service::JsonValue answer;
	try {
		answer = service::parse_json(text);
	} catch (const std::exception&) {
		throw std::runtime_error(socket + " answered something that is not a reload answer");
	}
	const service::JsonValue* ok = answer.get("ok");
	if (ok && ok->kind == service::JsonValue::Kind::boolean && ok->boolean) {
		std::printf("%s\n", answer.at({"message"}) ? answer.at({"message"})->as_string().c_str()
		                                           : "reloaded");
		return 0;
	}
	std::fprintf(stderr, "%s reload: %s\n", program,
	             answer.get("error") ? answer.get("error")->as_string().c_str() : "refused");
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
	for (int i = 1; i < argc; i++) {
		if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
			usage(stdout, program, role);
			return 0;
		}
		if (!std::strcmp(argv[i], "--version")) {
			std::printf("%s %s\n", program, ESPTUN_VERSION);
			return 0;
		}
	}
	// Key generation needs no config and touches nothing: its own arguments.
	if (argc >= 2 && (!std::strcmp(argv[1], "genkey") || !std::strcmp(argv[1], "genpsk") ||
	                  !std::strcmp(argv[1], "genpair")))
		return keygen_main(argv[1], std::vector<std::string>(argv + 2, argv + argc), program);
	Args args;
	if (!parse_args(argc, argv, role, args)) {
		usage(stderr, program, role);
		return 2;
	}
	service::log::set_program(program);
	if (args.verbose) service::log::set_level(service::log::Level::debug);
	try {
		// Before the config (and its keys) is read: no core dump may hold a
		// key (issue 16; why not MADV_DONTDUMP: platform/process.hpp).
		platform::disable_core_dumps();
		if (args.verb == "reload") return reload(args, role, program);
		if (args.verb == "status" || args.verb == "show") return query(args, role);
		conf::Config config = conf::load_config(args.config, role);
		if (args.verb == "check") return check(config);
		if (args.verb == "cleanup") return cleanup(config, program);
		service::run_service(config, program);
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
