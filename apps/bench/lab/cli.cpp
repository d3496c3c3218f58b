// The command-line helpers of the bench commands: see cli.hpp.
#include "apps/bench/lab/cli.hpp"

#include "service/json_io.hpp"

#include <cstdio>
#include <fstream>

namespace esptun::bench::lab {

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

unsigned long parse_number(const std::string& opt, const std::string& text, unsigned long lo,
                           unsigned long hi) {
	size_t used = 0;
	unsigned long v = 0;
	try {
		if (!text.empty() && text[0] != '-') v = std::stoul(text, &used);
	} catch (const std::exception&) {
		used = 0;
	}
	if (used == 0 || used != text.size() || v < lo || v > hi)
		throw UsageError(opt + " wants a whole number from " + std::to_string(lo) + " to " +
		                 std::to_string(hi) + ", not \"" + text + "\"");
	return v;
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
