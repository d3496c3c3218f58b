// esptun-bench: measurements and demonstrations around esptun-gateway.
// main() only dispatches: each subcommand lives in its own folder and
// declares its options on the shared command line (apps/cli/options.hpp);
// what several of them share (child processes, the namespace pair) is in lab/.
#include "apps/bench/compare/compare.hpp"
#include "apps/bench/crypto_bench/crypto_bench.hpp"
#include "apps/bench/demo/demo.hpp"
#include "apps/bench/ike_load/ike_load.hpp"
#include "apps/bench/peers/peers.hpp"
#include "apps/bench/udp_engines/udp_engines.hpp"
#include "apps/bench/vhost_counts/vhost_counts.hpp"
#include "apps/cli/options.hpp"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
	using namespace esptun;
	const auto app =
	    cli::make_app("esptun-bench", "measurements and demonstrations around esptun-gateway");
	app->require_subcommand(1);
	std::string command_line = "esptun-bench";
	for (int i = 1; i < argc; i++)
		command_line.append(" ").append(argv[i]);
	const std::vector<cli::Verb> verbs = {
	    bench::demo::add_demo(*app),
	    bench::vhost_counts::add_vhost_counts(*app),
	    bench::crypto_bench::add_crypto_bench(*app),
	    bench::compare::add_compare(*app, command_line),
	    bench::udp_engines::add_udp_engines(*app),
	    bench::ike_load::add_ike_load(*app, command_line),
	    bench::peers::add_peers(*app, command_line),
	};
	const CLI::App* help = cli::add_verb(*app, "help", "this text");
	app->footer("'esptun-bench COMMAND --help' lists a command's options.\n");
	if (const int rc = cli::parse_command_line(*app, argc, argv); rc >= 0) return rc;
	if (help->parsed()) {
		std::fputs(app->help().c_str(), stdout);
		return 0;
	}
	for (const cli::Verb& v : verbs)
		if (v.app->parsed()) return v.run();
	return cli::kExitUsage; // parse_command_line() required one of them
}
