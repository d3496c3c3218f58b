// JSON through nlohmann's library: the document type esptun writes (the status
// JSON, control answers, benchmark results) and the bounded parse of what it
// reads back (`show`, the Prometheus export, the benchmarks). Not on any data path.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace esptun::service {

/// Json - a JSON document whose objects keep the order their keys were added in.
using Json = nlohmann::ordered_json;

/// How many arrays and objects may nest; a document past it is refused.
inline constexpr int kJsonMaxDepth = 64;

/**
 * parse_json() - parse one JSON document (surrounding whitespace allowed)
 * Integers keep their exact value (up to uint64_t / int64_t).
 * Throws std::runtime_error "JSON: ..." naming the line and column of the
 * first error, or the nesting past kJsonMaxDepth.
 */
Json parse_json(std::string_view text);

/**
 * json_text() - @doc as compact JSON text; bytes that are not UTF-8 (an
 * interface name is any bytes) become U+FFFD instead of an exception
 */
std::string json_text(const Json& doc);

/**
 * json_round3() - @v rounded to three decimals, as figures are shown (a time
 * in seconds to the millisecond), so the text stays short
 */
double json_round3(double v) noexcept;

/**
 * json_at() - follow a path of object keys, e.g. json_at(doc, {"sa_out", "packets"})
 * Return: the value, or nullptr when a step is missing or not an object
 */
const Json* json_at(const Json& doc, std::initializer_list<std::string_view> path) noexcept;

/// json_string() - the string @v, or @fallback when absent or another kind
std::string json_string(const Json* v, std::string_view fallback = "");

/// json_u64() - the non-negative integer @v (exact), or @fallback
uint64_t json_u64(const Json* v, uint64_t fallback = 0) noexcept;

/// json_number() - the number @v as a double, or @fallback when not a number
double json_number(const Json* v, double fallback = 0) noexcept;

/// json_true() - true only when @v is the boolean true
bool json_true(const Json* v) noexcept;

} // namespace esptun::service
