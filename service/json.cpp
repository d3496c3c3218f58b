// JSON writer: see json.hpp.
#include "service/json.hpp"

#include <cmath>
#include <cstdio>

namespace esptun::service {

void JsonWriter::separate() {
	if (need_comma_) out_ += ',';
	need_comma_ = true;
}

JsonWriter& JsonWriter::begin_object() {
	separate();
	out_ += '{';
	need_comma_ = false;
	return *this;
}

JsonWriter& JsonWriter::end_object() {
	out_ += '}';
	need_comma_ = true;
	return *this;
}

JsonWriter& JsonWriter::begin_array() {
	separate();
	out_ += '[';
	need_comma_ = false;
	return *this;
}

JsonWriter& JsonWriter::end_array() {
	out_ += ']';
	need_comma_ = true;
	return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
	value(k);
	out_ += ':';
	need_comma_ = false;
	return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
	separate();
	out_ += '"';
	for (char c : s) {
		switch (c) {
		case '"':
			out_ += "\\\"";
			break;
		case '\\':
			out_ += "\\\\";
			break;
		case '\n':
			out_ += "\\n";
			break;
		case '\t':
			out_ += "\\t";
			break;
		default:
			if (static_cast<unsigned char>(c) < 0x20) {
				char esc[8];
				std::snprintf(esc, sizeof esc, "\\u%04x",
				              unsigned(static_cast<unsigned char>(c)));
				out_ += esc;
			} else {
				out_ += c;
			}
		}
	}
	out_ += '"';
	return *this;
}

JsonWriter& JsonWriter::value(uint64_t n) {
	separate();
	out_ += std::to_string(n);
	return *this;
}

JsonWriter& JsonWriter::value(int64_t n) {
	separate();
	out_ += std::to_string(n);
	return *this;
}

JsonWriter& JsonWriter::value(double d) {
	if (!std::isfinite(d)) return null();
	separate();
	char buf[32];
	std::snprintf(buf, sizeof buf, "%.3f", d);
	out_ += buf;
	return *this;
}

JsonWriter& JsonWriter::value(bool b) {
	separate();
	out_ += b ? "true" : "false";
	return *this;
}

JsonWriter& JsonWriter::null() {
	separate();
	out_ += "null";
	return *this;
}

} // namespace esptun::service
