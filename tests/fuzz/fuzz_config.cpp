// libFuzzer target for the config loader: arbitrary bytes go to parse_config()
// as a gateway and as a client config. A ConfigError is the expected outcome
// for bad input; any other exception, a crash or a sanitizer report is a bug.
// Seeds: tests/fuzz/corpus/config/.
#include "conf/config.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	std::string_view text(reinterpret_cast<const char*>(data), size);
	// Relative *_file paths resolve into a folder that does not exist, so the
	// fuzzer exercises the key-file errors without reading the working tree.
	for (auto role : {esptun::conf::Role::gateway, esptun::conf::Role::client}) {
		try {
			esptun::conf::parse_config(text, "fuzz.toml", role, "/nonexistent/esptun-fuzz");
		} catch (const esptun::conf::ConfigError&) {}
	}
	return 0;
}
