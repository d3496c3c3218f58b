// JSON through nlohmann's library: see json_io.hpp.
#include "service/json_io.hpp"

#include <cmath>
#include <stdexcept>

namespace esptun::service {
namespace {

/// Thrown by the parser callback to stop at the first container past the limit.
struct TooDeep {};

/// without_id() - "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
std::string without_id(const char* what) {
	std::string s(what);
	if (!s.empty() && s.front() == '[') {
		const size_t end = s.find("] ");
		if (end != std::string::npos) s.erase(0, end + 2);
	}
	return s;
}

} // namespace

Json parse_json(std::string_view text) {
	// nlohmann's parser is not recursive, but it sets no limit either: the
	// callback sees each object and array open with the number of containers
	// already open around it, and stops the parse past the limit.
	auto bounded = [](int depth, Json::parse_event_t event, Json&) {
		if ((event == Json::parse_event_t::object_start ||
		     event == Json::parse_event_t::array_start) &&
		    depth >= kJsonMaxDepth)
			throw TooDeep{};
		return true;
	};
	try {
		return Json::parse(text.begin(), text.end(), bounded);
	} catch (const TooDeep&) {
		throw std::runtime_error("JSON: nested more than " + std::to_string(kJsonMaxDepth) +
		                         " levels deep");
	} catch (const Json::exception& e) {
		throw std::runtime_error("JSON: " + without_id(e.what()));
	}
}

std::string json_text(const Json& doc) { return doc.dump(-1, ' ', false, Json::error_handler_t::replace); }

double json_round3(double v) noexcept { return std::round(v * 1000) / 1000; }

const Json* json_at(const Json& doc, std::initializer_list<std::string_view> path) noexcept {
	const Json* v = &doc;
	for (std::string_view key : path) {
		if (!v->is_object()) return nullptr;
		const auto it = v->find(key);
		if (it == v->end()) return nullptr;
		v = &*it;
	}
	return v;
}

std::string json_string(const Json* v, std::string_view fallback) {
	return v && v->is_string() ? v->get_ref<const std::string&>() : std::string(fallback);
}

uint64_t json_u64(const Json* v, uint64_t fallback) noexcept {
	// Read from the integer the parser kept: a double would round counters past 2^53.
	if (v && v->is_number_unsigned()) return v->get<uint64_t>();
	if (v && v->is_number_integer() && v->get<int64_t>() >= 0) return uint64_t(v->get<int64_t>());
	return fallback;
}

double json_number(const Json* v, double fallback) noexcept {
	return v && v->is_number() ? v->get<double>() : fallback;
}

bool json_true(const Json* v) noexcept { return v && v->is_boolean() && v->get<bool>(); }

} // namespace esptun::service
