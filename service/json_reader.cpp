// A recursive-descent JSON reader (RFC 8259) for the status output.
#include "service/json_reader.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace esptun::service {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
	explicit Parser(std::string_view s) : s_(s) {}

	JsonValue document() {
		JsonValue v = value(0);
		skip_ws();
		if (pos_ != s_.size()) fail("trailing characters");
		return v;
	}

private:
	[[noreturn]] void fail(const std::string& what) const {
		throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
	}

	void skip_ws() {
		while (pos_ < s_.size() &&
		       (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
			pos_++;
	}

	char peek() {
		skip_ws();
		if (pos_ >= s_.size()) fail("unexpected end");
		return s_[pos_];
	}

	void expect(char c) {
		if (peek() != c) fail(std::string("expected '") + c + "'");
		pos_++;
	}

	bool literal(std::string_view word) {
		if (s_.substr(pos_, word.size()) != word) return false;
		pos_ += word.size();
		return true;
	}

	JsonValue value(int depth) {
		if (depth > kMaxDepth) fail("nested too deeply");
		JsonValue v;
		char c = peek();
		if (c == '{') {
			object(v, depth);
		} else if (c == '[') {
			array(v, depth);
		} else if (c == '"') {
			v.kind = JsonValue::Kind::string;
			v.text = string();
		} else if (literal("true")) {
			v.kind = JsonValue::Kind::boolean;
			v.boolean = true;
		} else if (literal("false")) {
			v.kind = JsonValue::Kind::boolean;
		} else if (literal("null")) {
			v.kind = JsonValue::Kind::null;
		} else {
			number(v);
		}
		return v;
	}

	void object(JsonValue& v, int depth) {
		v.kind = JsonValue::Kind::object;
		expect('{');
		if (peek() == '}') {
			pos_++;
			return;
		}
		for (;;) {
			if (peek() != '"') fail("expected a key");
			std::string key = string();
			expect(':');
			v.members.push_back(JsonMember{std::move(key), value(depth + 1)});
			if (peek() == '}') {
				pos_++;
				return;
			}
			expect(',');
		}
	}

	void array(JsonValue& v, int depth) {
		v.kind = JsonValue::Kind::array;
		expect('[');
		if (peek() == ']') {
			pos_++;
			return;
		}
		for (;;) {
			v.items.push_back(value(depth + 1));
			if (peek() == ']') {
				pos_++;
				return;
			}
			expect(',');
		}
	}

	void number(JsonValue& v) {
		size_t start = pos_;
		while (pos_ < s_.size() &&
		       std::string_view("+-0123456789.eE").find(s_[pos_]) != std::string_view::npos)
			pos_++;
		if (pos_ == start) fail("unexpected character");
		v.kind = JsonValue::Kind::number;
		v.text = std::string(s_.substr(start, pos_ - start));
		char* end = nullptr;
		v.number = std::strtod(v.text.c_str(), &end);
		if (end != v.text.c_str() + v.text.size()) fail("bad number");
	}

	unsigned hex4() {
		if (s_.size() - pos_ < 4) fail("short \\u escape");
		unsigned cp = 0;
		auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, cp, 16);
		if (ec != std::errc() || p != s_.data() + pos_ + 4) fail("bad \\u escape");
		pos_ += 4;
		return cp;
	}

	static void put_utf8(std::string& out, unsigned cp) {
		if (cp < 0x80) {
			out += static_cast<char>(cp);
		} else if (cp < 0x800) {
			out += static_cast<char>(0xc0 | (cp >> 6));
			out += static_cast<char>(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			out += static_cast<char>(0xe0 | (cp >> 12));
			out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
			out += static_cast<char>(0x80 | (cp & 0x3f));
		} else {
			out += static_cast<char>(0xf0 | (cp >> 18));
			out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
			out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
			out += static_cast<char>(0x80 | (cp & 0x3f));
		}
	}

	void escape(std::string& out) {
		if (pos_ >= s_.size()) fail("unterminated escape");
		char e = s_[pos_++];
		switch (e) {
		case '"':
		case '\\':
		case '/':
			out += e;
			return;
		case 'b':
			out += '\b';
			return;
		case 'f':
			out += '\f';
			return;
		case 'n':
			out += '\n';
			return;
		case 'r':
			out += '\r';
			return;
		case 't':
			out += '\t';
			return;
		case 'u': {
			unsigned cp = hex4();
			// A high surrogate followed by a low one encodes one code point.
			if (cp >= 0xd800 && cp < 0xdc00 && s_.substr(pos_, 2) == "\\u") {
				pos_ += 2;
				unsigned lo = hex4();
				if (lo >= 0xdc00 && lo < 0xe000)
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			put_utf8(out, cp);
			return;
		}
		default:
			fail("bad escape");
		}
	}

	std::string string() {
		expect('"');
		std::string out;
		for (;;) {
			if (pos_ >= s_.size()) fail("unterminated string");
			char c = s_[pos_++];
			if (c == '"') return out;
			if (c == '\\')
				escape(out);
			else
				out += c;
		}
	}

	std::string_view s_;
	size_t pos_ = 0;
};

} // namespace

const JsonValue* JsonValue::get(std::string_view key) const noexcept {
	if (kind != Kind::object) return nullptr;
	for (const auto& [k, v] : members)
		if (k == key) return &v;
	return nullptr;
}

const JsonValue* JsonValue::at(std::initializer_list<std::string_view> path) const noexcept {
	const JsonValue* v = this;
	for (std::string_view key : path) {
		v = v->get(key);
		if (!v) return nullptr;
	}
	return v;
}

uint64_t JsonValue::as_u64(uint64_t fallback) const noexcept {
	if (kind != Kind::number) return fallback;
	uint64_t n = 0;
	auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
	return ec == std::errc() && p == text.data() + text.size() ? n : fallback;
}

std::string JsonValue::as_string(std::string_view fallback) const {
	return kind == Kind::string ? text : std::string(fallback);
}

JsonValue parse_json(std::string_view text) { return Parser(text).document(); }

} // namespace esptun::service
