// esptun-bench: measurements and demonstrations around esptun-gateway.
// main() only dispatches to a subcommand; each lives in its own file.
#include "apps/bench/compare.hpp"
#include "apps/bench/crypto_bench.hpp"
#include "apps/bench/demo.hpp"
#include "apps/bench/udp_engines.hpp"
#include "apps/bench/vhost_counts.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

void usage(std::FILE* to) {
	std::fprintf(to,
	             "usage: esptun-bench COMMAND [OPTIONS]\n"
	             "\n"
	             "commands:\n"
	             "%s"
	             "%s"
	             "%s"
	             "%s"
	             "%s"
	             "  help                  this text\n",
	             esptun::bench::kDemoUsage, esptun::bench::kVhostCountsUsage,
	             esptun::bench::kCryptoBenchUsage, esptun::bench::kCompareUsage,
	             esptun::bench::kUdpEnginesUsage);
}

} // namespace

int main(int argc, char** argv) {
	std::vector<std::string> args(argv + 1, argv + argc);
	if (args.empty()) {
		usage(stderr);
		return 2;
	}
	const std::string cmd = args.front();
	args.erase(args.begin());
	if (cmd == "demo") return esptun::bench::run_demo(args);
	if (cmd == "crypto") return esptun::bench::run_crypto_bench(args);
	if (cmd == "compare") return esptun::bench::run_compare(args);
	if (cmd == "vhost-counts") return esptun::bench::run_vhost_counts(args);
	if (cmd == "udp-engines") return esptun::bench::run_udp_engines(args);
	if (cmd == "help" || cmd == "-h" || cmd == "--help") {
		usage(stdout);
		return 0;
	}
	std::fprintf(stderr, "esptun-bench: unknown command \"%s\"\n\n", cmd.c_str());
	usage(stderr);
	return 2;
}
