// esptun-client: the VPN client (one peer, optional route_all), and
// `cleanup -c FILE`, which gives the network back after a killed client.
#include "apps/cli/cli.hpp"
#include "conf/config.hpp"
#include "service/log.hpp"
#include "service/tun_setup.hpp"

#include <cstdio>
#include <cstring>
#include <net/if.h>
#include <string>

namespace {

/**
 * cleanup() - `esptun-client cleanup -c FILE`: remove the routes a client
 * with this config left when it was killed (README.md, "Client: route_all
 * and kill_switch"); refused while its tun exists (the client runs).
 * Return: the exit status: 0 done, 1 failure, 2 usage error.
 */
int cleanup(int argc, char** argv) {
	if (argc != 4 || std::strcmp(argv[2], "-c") != 0) {
		std::fprintf(stderr, "usage: %s cleanup -c FILE\n", argv[0]);
		return 2;
	}
	try {
		const esptun::conf::Config config =
		    esptun::conf::load_config(argv[3], esptun::conf::Role::client);
		if (::if_nametoindex(config.tunnel.interface.c_str()) != 0) {
			std::fprintf(stderr,
			             "%s cleanup: interface %s exists, so the client is running; stop it "
			             "with SIGTERM instead (it removes its routes itself)\n",
			             argv[0], config.tunnel.interface.c_str());
			return 1;
		}
		const auto removed = esptun::service::remove_leftovers(config);
		for (const std::string& r : removed)
			std::printf("removed route %s\n", r.c_str());
		if (removed.empty()) std::printf("nothing to remove\n");
		return 0;
	} catch (const esptun::conf::ConfigError& e) {
		std::fprintf(stderr, "%s\n", e.what());
		return 1;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "%s cleanup: %s\n", argv[0], e.what());
		return 1;
	}
}

} // namespace

int main(int argc, char** argv) {
	if (argc >= 2 && std::strcmp(argv[1], "cleanup") == 0) return cleanup(argc, argv);
	return esptun::cli::cli_main(esptun::conf::Role::client, argc, argv);
}
