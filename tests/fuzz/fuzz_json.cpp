// libFuzzer target for the JSON reader (service/json_io.hpp): arbitrary bytes
// go to parse_json(), as a status answer or a benchmark file would. A
// std::runtime_error is the expected outcome for bad input; any other
// exception, a crash or a sanitizer report is a bug. What parses must come
// back unchanged through json_text(), and the readers must not throw on any
// shape. Seeds: tests/fuzz/corpus/json/.
#include "service/json_io.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

using esptun::service::Json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	const std::string_view text(reinterpret_cast<const char*>(data), size);
	Json doc;
	try {
		doc = esptun::service::parse_json(text);
	} catch (const std::runtime_error&) {
		return 0;
	}
	if (esptun::service::parse_json(esptun::service::json_text(doc)) != doc) __builtin_trap();
	const Json* v = esptun::service::json_at(doc, {"peers"});
	(void)esptun::service::json_u64(esptun::service::json_at(doc, {"counters", "tun_rx_packets"}));
	(void)esptun::service::json_string(v);
	(void)esptun::service::json_number(v);
	(void)esptun::service::json_true(v);
	return 0;
}
