// A small JSON reader for the status output (the counterpart of json.hpp):
// what `show`, the Prometheus export and the benchmarks read. Not on any data path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::service {

struct JsonMember;

/// JsonValue - one parsed JSON value (objects keep their key order).
struct JsonValue {
	enum class Kind : uint8_t { null, boolean, number, string, array, object };
	Kind kind = Kind::null;
	bool boolean = false;
	double number = 0;
	std::string text; ///< string contents, or a number's literal text
	std::vector<JsonValue> items;
	std::vector<JsonMember> members; ///< JsonMember: JsonValue is incomplete here

	/// get() - member @key of an object; nullptr when absent or not an object
	const JsonValue* get(std::string_view key) const noexcept;

	/**
	 * at() - follow a path of object keys, e.g. at({"sa_out", "packets"})
	 * Return: the value, or nullptr when a step is missing
	 */
	const JsonValue* at(std::initializer_list<std::string_view> path) const noexcept;

	/// as_u64() - a non-negative integer literal as uint64_t (exact), else @fallback
	uint64_t as_u64(uint64_t fallback = 0) const noexcept;
	/// as_string() - the string, or @fallback for any other kind
	std::string as_string(std::string_view fallback = "") const;
};

/// JsonMember - one "key": value pair of an object.
struct JsonMember {
	std::string key;
	JsonValue value;
};

/**
 * parse_json() - parse one JSON document (surrounding whitespace allowed)
 * Throws std::runtime_error naming the byte offset of the first error.
 * Nesting is limited to 64 levels.
 */
JsonValue parse_json(std::string_view text);

} // namespace esptun::service
