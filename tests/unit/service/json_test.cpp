// The JSON esptun writes and reads back (service/json_io.hpp over nlohmann's
// library): the status output survives a round trip field by field whatever
// the names contain, counters stay exact, and what is read is bounded input.
#include "crypto/aes_gcm.hpp"
#include "service/json_io.hpp"
#include "service/service.hpp"

#include "tests/unit/support/runtime_test_util.hpp"

#include <doctest/doctest.h>
#include <stdexcept>
#include <string>

using namespace esptun;
using service::Json;
using service::json_at;
using service::parse_json;

namespace {

/// error_of() - the message parse_json() throws for @text, "" when it parses
std::string error_of(std::string_view text) {
	try {
		(void)parse_json(text);
	} catch (const std::runtime_error& e) {
		return e.what();
	}
	return "";
}

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

} // namespace

TEST_CASE("status JSON round trip: render_status() parsed back gives every field it was given") {
	const std::vector<uint8_t> k(20, 7);
	tunnel::SaTable table({test::gcm_peer("site-b", *parse_endpoint("10.0.0.2:4500"), "10.99.0.2/32",
	                                      0x1001, 0x2001, k, k)});
	service::ServiceInfo info;
	info.program = "esptun-gateway";
	info.interface = "esp0";
	info.mtu = 1420;
	info.workers = 2;
	DataPathStats stats;
	// Past 2^53 a double cannot hold every integer: the counter must come back exact.
	const uint64_t big = (uint64_t(1) << 53) + 1;
	stats.tun_rx_packets.add(big);
	stats.udp_tx_packets.add(UINT64_MAX);
	stats.drop(Drop::no_sa);
	table.peers()[0]->drops[size_t(Drop::replay)].add(3);

	const std::string text = service::render_status(info, stats, table);
	CHECK(text.back() == '\n');
	CHECK(text.find('\n') == text.size() - 1); // one line
	const Json s = parse_json(text);
	CHECK(service::json_string(json_at(s, {"program"})) == "esptun-gateway");
	CHECK(service::json_string(json_at(s, {"interface"})) == "esp0");
	CHECK(service::json_u64(json_at(s, {"mtu"})) == 1420);
	CHECK(service::json_u64(json_at(s, {"workers"})) == 2);
	CHECK(service::json_u64(json_at(s, {"counters", "tun_rx_packets"})) == big);
	CHECK(service::json_u64(json_at(s, {"counters", "udp_tx_packets"})) == UINT64_MAX);
	CHECK(service::json_u64(json_at(s, {"drops", "no_sa"})) == 1);
	CHECK(json_at(s, {"uptime_s"})->is_number_float());
	// Key order is the writer's, as the hand-written writer had it.
	std::vector<std::string> keys;
	for (const auto& [key, value] : s.items())
		keys.push_back(key);
	REQUIRE(keys.size() >= 6);
	CHECK(keys[0] == "program");
	CHECK(keys[1] == "interface");
	CHECK(keys[2] == "mtu");

	const Json* peers = json_at(s, {"peers"});
	REQUIRE(peers);
	REQUIRE(peers->size() == 1);
	const Json& p = (*peers)[0];
	CHECK(service::json_string(json_at(p, {"name"})) == "site-b");
	CHECK(service::json_string(json_at(p, {"endpoint"})) == "10.0.0.2:4500");
	CHECK(service::json_string(json_at(p, {"keying"})) == "static");
	CHECK(service::json_string(json_at(p, {"cipher"})) == "aes128-gcm");
	CHECK(service::json_true(json_at(p, {"esn"})));
	CHECK(service::json_u64(json_at(p, {"sa_out", "spi"})) == 0x1001);
	CHECK(service::json_string(json_at(p, {"sa_in", "spi_hex"})) == "0x00002001");
	CHECK(service::json_u64(json_at(p, {"sa_in", "replay_window"})) == 1024);
	CHECK(service::json_u64(json_at(p, {"drops", "replay"})) == 3);
	REQUIRE(json_at(p, {"allowed_ips"}));
	CHECK(*json_at(p, {"allowed_ips"}) == Json::array({"10.99.0.2/32"}));
	CHECK(json_at(s, {"ike"}) == nullptr); // no IKE service: no "ike" member
}

TEST_CASE("status JSON: odd interface and peer names are escaped and read back unchanged") {
	const std::vector<uint8_t> k(20, 7);
	const std::string odd_peer = "q\"uote\\back\nnew\ttab\x01\x1f end";
	tunnel::SaTable table({test::gcm_peer(odd_peer.c_str(), *parse_endpoint("10.0.0.2:4500"),
	                                      "10.99.0.2/32", 0x1001, 0x2001, k, k)});
	service::ServiceInfo info;
	info.interface = "e\"s\\p\x02";
	DataPathStats stats;
	const std::string text = service::render_status(info, stats, table);
	CHECK(text.find("\"e\\\"s\\\\p\\u0002\"") != std::string::npos);
	CHECK(text.find('\x01') == std::string::npos); // control characters never raw
	CHECK(text.find("\nnew") == std::string::npos);
	const Json s = parse_json(text);
	CHECK(service::json_string(json_at(s, {"interface"})) == info.interface);
	const Json* peers = json_at(s, {"peers"});
	REQUIRE(peers);
	REQUIRE(peers->size() == 1);
	CHECK(service::json_string(json_at((*peers)[0], {"name"})) == odd_peer);
}

TEST_CASE("json_text(): bytes that are not UTF-8 become U+FFFD instead of an exception") {
	// An interface name is any bytes; the status must still be served.
	const Json doc{{"interface", std::string("tun\xff\xfe")}, {"ok", true}};
	std::string text;
	CHECK_NOTHROW(text = service::json_text(doc));
	CHECK(text == "{\"interface\":\"tun\xef\xbf\xbd\xef\xbf\xbd\",\"ok\":true}");
	CHECK(service::json_string(json_at(parse_json(text), {"interface"})) ==
	      "tun\xef\xbf\xbd\xef\xbf\xbd");
	// Valid UTF-8 passes through as it is.
	CHECK(service::json_text(Json{{"n", "caf\xc3\xa9"}}) == "{\"n\":\"caf\xc3\xa9\"}");
}

TEST_CASE("json_text(): compact, in the order the keys were added, non-finite numbers as null") {
	Json j{{"b", 1}, {"a", Json::array({true, nullptr, "x"})}};
	j["c"] = Json{{"d", -5}};
	j["inf"] = 1.0 / 0.0;
	j["t"] = service::json_round3(0.1 + 0.2);
	CHECK(service::json_text(j) == R"({"b":1,"a":[true,null,"x"],"c":{"d":-5},"inf":null,"t":0.3})");
}

TEST_CASE("parse_json(): nesting past kJsonMaxDepth is refused, however deep, without a crash") {
	CHECK_NOTHROW(parse_json(nested_arrays(service::kJsonMaxDepth)));
	CHECK(error_of(nested_arrays(service::kJsonMaxDepth + 1)).find("nested more than 64") !=
	      std::string::npos);
	// Objects count as arrays do, and the limit stops the parse before the
	// document's end is seen.
	CHECK(error_of(R"({"a":)" + std::string(service::kJsonMaxDepth, '[')).find("nested") !=
	      std::string::npos);
	// Deep enough to overflow the stack of a recursive parser or destructor.
	CHECK(error_of(nested_arrays(1'000'000)).find("nested more than 64") != std::string::npos);
	CHECK(error_of(std::string(1'000'000, '[')).find("nested") != std::string::npos);
}

TEST_CASE("parse_json(): malformed input gives a clear error naming where") {
	for (std::string_view bad : {"", "{", R"({"a":1)", R"({"a" 1})", R"({"a":1,})", "[1,2", "nul",
	                             R"("unterminated)", R"({"a":1} x)", R"(["\x"])", "{'a':1}", "\x01"}) {
		CAPTURE(bad);
		const std::string e = error_of(bad);
		CHECK(e.rfind("JSON: ", 0) == 0);
		CHECK(e.find("line 1, column") != std::string::npos);
		CHECK(e.find("[json.exception") == std::string::npos); // the library's id is cut off
	}
	CHECK(error_of("{\n\"a\": tru}").find("line 2") != std::string::npos);
	// A number past a double's range is refused, not read as infinity.
	CHECK(error_of("[1e99999]") == "JSON: number overflow parsing '1e99999'");
	CHECK(error_of(" {\"a\": [1, 2.5, -3, \"\\u00e9\\ud83d\\ude00\"]} \n").empty());
}

TEST_CASE("json_u64() reads only non-negative integers, exactly; the other readers fall back") {
	const Json j = parse_json(
	    R"({"max":18446744073709551615,"big":9007199254740993,"neg":-1,"f":1.5,"s":"7","t":true})");
	CHECK(service::json_u64(json_at(j, {"max"})) == UINT64_MAX);
	CHECK(service::json_u64(json_at(j, {"big"})) == 9007199254740993ull);
	CHECK(service::json_u64(json_at(j, {"neg"}), 42) == 42);
	CHECK(service::json_u64(json_at(j, {"f"}), 42) == 42);
	CHECK(service::json_u64(json_at(j, {"s"}), 42) == 42);
	CHECK(service::json_u64(nullptr, 42) == 42);
	CHECK(service::json_number(json_at(j, {"f"})) == 1.5);
	CHECK(service::json_number(json_at(j, {"s"}), -1) == -1);
	CHECK(service::json_string(json_at(j, {"s"})) == "7");
	CHECK(service::json_string(json_at(j, {"f"}), "none") == "none");
	CHECK(service::json_true(json_at(j, {"t"})));
	CHECK_FALSE(service::json_true(json_at(j, {"s"})));
	CHECK(json_at(j, {"max", "below"}) == nullptr); // a path through a number
	CHECK(json_at(j, {"absent"}) == nullptr);
}
