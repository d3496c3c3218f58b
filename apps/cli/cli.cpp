// Command line for the gateway and the client: see cli.hpp.
#include "apps/cli/cli.hpp"

#include "platform/process.hpp"
#include "service/control.hpp"
#include "service/log.hpp"
#include "service/service.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

namespace esptun::cli {
namespace {

struct Args {
	std::string verb;
	std::string config;
	bool verbose = false;
};

void usage(FILE* out, const char* program, conf::Role role) {
	const char* verb = role == conf::Role::gateway ? "run" : "up";
	const char* what = role == conf::Role::gateway ? "site-to-site gateway" : "VPN client";
	std::fprintf(out,
	             "usage: %s %s -c FILE [-v]   start the %s in the foreground\n"
	             "       %s check -c FILE      validate FILE without touching any device\n"
	             "       %s status -c FILE     print the running endpoint's counters as JSON\n"
	             "FILE is a TOML config; see docs/examples/ and README.md.\n",
	             program, verb, what, program, program);
}

/// Returns false (after printing why) when the arguments make no sense.
bool parse_args(int argc, char** argv, conf::Role role, Args& args) {
	const char* run_verb = role == conf::Role::gateway ? "run" : "up";
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (a == "-c" || a == "--config") {
			if (i + 1 >= argc) {
				std::fprintf(stderr, "%s: %s needs a file name\n", argv[0], a.c_str());
				return false;
			}
			args.config = argv[++i];
		} else if (a == "-v" || a == "--verbose") {
			args.verbose = true;
		} else if (args.verb.empty() && a[0] != '-') {
			args.verb = a;
		} else {
			std::fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], a.c_str());
			return false;
		}
	}
	if (args.verb != run_verb && args.verb != "check" && args.verb != "status") {
		if (args.verb.empty())
			std::fprintf(stderr, "%s: no command given\n", argv[0]);
		else
			std::fprintf(
			    stderr, "%s: unknown command '%s' (this program's commands: %s, check, status)\n",
			    argv[0], args.verb.c_str(), run_verb);
		return false;
	}
	if (args.config.empty()) {
		std::fprintf(stderr, "%s %s: which config? pass -c FILE\n", argv[0], args.verb.c_str());
		return false;
	}
	return true;
}

int check(const conf::Config& config) {
	// Building the SA table also runs the key material through the crypto
	// library, exactly as `run` would.
	tunnel::SaTable table(service::peer_params(config));
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
	}
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
		conf::Config config = conf::load_config(args.config, role);
		if (args.verb == "check") return check(config);
		if (args.verb == "status") {
			std::fputs(service::query_control(config.tunnel.control_socket).c_str(), stdout);
			return 0;
		}
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
