// The command-line helpers of the bench commands: see cli.hpp.
#include "apps/bench/lab/cli.hpp"

#include "service/json_io.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>

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

} // namespace esptun::bench::lab
