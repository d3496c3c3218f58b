// The command-line helpers of the bench commands: see cli.hpp.
#include "apps/bench/lab/cli.hpp"

#include "apps/bench/lab/process.hpp"
#include "service/json_io.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

namespace esptun::bench::lab {

CLI::Option* add_json_option(CLI::App& verb, std::string& file) {
	return verb.add_option("--json", file, "write JSON to FILE, or to stdout without one")
	    ->type_name("[FILE]")
	    ->expected(0, 1);
}

void write_json(const nlohmann::ordered_json& doc, const std::string& file) {
	const std::string text = service::json_text(doc) + "\n";
	if (file.empty()) {
		std::fputs(text.c_str(), stdout);
		return;
	}
	std::ofstream f(file);
	f << text;
	if (!f.flush()) throw std::runtime_error("cannot write " + file);
}

int run_as_root(const CLI::App& verb, const std::string& what, const std::function<int()>& body) {
	const std::string name = cli::full_name(verb);
	if (geteuid() != 0) {
		std::fprintf(stderr, "%s: needs root (it creates network namespaces and tun devices)\n",
		             name.c_str());
		return 1;
	}
	install_stop_handlers();
	const std::string cleaned = what + " stopped, namespaces and temp files removed";
	try {
		return body();
	} catch (const cli::UsageError& e) {
		return cli::report_usage_error(verb, e.what());
	} catch (const Interrupted&) {
		std::fprintf(stderr, "\n%s: interrupted; %s\n", name.c_str(), cleaned.c_str());
		return 130;
	} catch (const std::exception& e) {
		std::fprintf(stderr, "%s: %s\n(%s)\n", name.c_str(), e.what(), cleaned.c_str());
		return 1;
	}
}

} // namespace esptun::bench::lab
