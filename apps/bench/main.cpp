// esptun-bench: measurements and demonstrations around esptun-gateway.
// main() only dispatches: each subcommand lives in its own folder, and what
// several of them share (child processes, the namespace pair) in lab/.
#include "apps/bench/compare/compare.hpp"
#include "apps/bench/crypto_bench/crypto_bench.hpp"
#include "apps/bench/demo/demo.hpp"
#include "apps/bench/udp_engines/udp_engines.hpp"
#include "apps/bench/vhost_counts/vhost_counts.hpp"

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
	             "  help                  this text\n"
	             "  --version             print the version\n",
	             esptun::bench::demo::kDemoUsage, esptun::bench::vhost_counts::kVhostCountsUsage,
	             esptun::bench::crypto_bench::kCryptoBenchUsage, esptun::bench::compare::kCompareUsage,
	             esptun::bench::udp_engines::kUdpEnginesUsage);
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
	if (cmd == "demo") return esptun::bench::demo::run_demo(args);
	if (cmd == "crypto") return esptun::bench::crypto_bench::run_crypto_bench(args);
	if (cmd == "compare") return esptun::bench::compare::run_compare(args);
	if (cmd == "vhost-counts") return esptun::bench::vhost_counts::run_vhost_counts(args);
	if (cmd == "udp-engines") return esptun::bench::udp_engines::run_udp_engines(args);
	if (cmd == "--version") {
		std::printf("esptun-bench %s\n", ESPTUN_VERSION);
		return 0;
	}
	if (cmd == "help" || cmd == "-h" || cmd == "--help") {
		usage(stdout);
		return 0;
	}
	std::fprintf(stderr, "esptun-bench: unknown command \"%s\"\n\n", cmd.c_str());
	usage(stderr);
	return 2;
}
