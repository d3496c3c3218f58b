// A small streaming JSON writer for the status output (no parsing needed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace esptun::service {

/**
 * JsonWriter - builds compact JSON text. Keys and values are added in
 * order; commas are inserted automatically.
 */
class JsonWriter {
public:
	JsonWriter& begin_object();
	JsonWriter& end_object();
	JsonWriter& begin_array();
	JsonWriter& end_array();
	JsonWriter& key(std::string_view k);
	JsonWriter& value(std::string_view s);
	JsonWriter& value(const char* s) { return value(std::string_view(s)); }
	JsonWriter& value(uint64_t n);
	JsonWriter& value(int64_t n);
	JsonWriter& value(unsigned n) { return value(uint64_t(n)); }
	JsonWriter& value(int n) { return value(int64_t(n)); }
	JsonWriter& value(double d);
	JsonWriter& value(bool b);
	JsonWriter& null();

	template <class T> JsonWriter& field(std::string_view k, const T& v) { return key(k).value(v); }

	const std::string& str() const noexcept { return out_; }

private:
	void separate();
	std::string out_;
	bool need_comma_ = false;
};

} // namespace esptun::service
