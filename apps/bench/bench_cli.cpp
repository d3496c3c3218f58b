// See bench_cli.hpp.
#include "apps/bench/bench_cli.hpp"

#include <cstdio>
#include <fstream>

namespace esptun::bench {

int run_command(const char* cmd, const char* usage, const std::function<int()>& body) {
	try {
		return body();
	} catch (const UsageError& e) {
		std::fprintf(stderr, "esptun-bench %s: %s\nusage:\n%s", cmd, e.what(), usage);
		return 2;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "esptun-bench %s: %s\n", cmd, e.what());
		return 1;
	}
}

void write_json(const std::string& text, const std::string& file) {
	if (file.empty()) {
		std::fputs(text.c_str(), stdout);
		return;
	}
	std::ofstream f(file);
	f << text;
	if (!f.flush()) throw std::runtime_error("cannot write " + file);
}

} // namespace esptun::bench
