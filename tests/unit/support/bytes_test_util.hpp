// Byte strings for tests and fuzz targets: the Bytes type, hex in and out,
// and text as bytes. No doctest here, so fuzz targets can include it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::test {

/// Bytes - an owned byte string: packets, keys and vectors in tests.
using Bytes = std::vector<uint8_t>;

/**
 * hex() - decode hex digits into bytes
 * @s: digits in either case; spaces, tabs and newlines are skipped, so
 *     vectors can be pasted in the groups the RFCs print them in
 *
 * Throws std::invalid_argument on any other character or an odd digit count,
 * so a mistyped vector fails loudly instead of testing the wrong bytes.
 * Return: the decoded bytes.
 */
inline Bytes hex(std::string_view s) {
	Bytes out;
	int hi = -1;
	for (char ch : s) {
		int v;
		if (ch >= '0' && ch <= '9')
			v = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			v = ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			v = ch - 'A' + 10;
		else if (ch == ' ' || ch == '\n' || ch == '\t')
			continue;
		else
			throw std::invalid_argument("bad hex digit");
		if (hi < 0) {
			hi = v;
		} else {
			out.push_back(uint8_t(hi << 4 | v));
			hi = -1;
		}
	}
	if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
	return out;
}

/**
 * to_hex() - lower-case hex of @n bytes at @p, two digits a byte
 * @p: the first byte
 * @n: how many bytes
 *
 * Comparing hex strings rather than byte vectors makes a failed CHECK print
 * values a reader can compare with the vector file.
 * Return: 2 * @n digits, no separators.
 */
inline std::string to_hex(const uint8_t* p, size_t n) {
	static constexpr char kDigits[] = "0123456789abcdef";
	std::string s;
	s.reserve(2 * n);
	for (size_t i = 0; i < n; i++) {
		s += kDigits[p[i] >> 4];
		s += kDigits[p[i] & 15];
	}
	return s;
}

/**
 * to_hex() - lower-case hex of every byte of @b
 * @b: the bytes (a Bytes, an array or a span converts)
 *
 * Return: 2 * @b.size() digits, no separators.
 */
inline std::string to_hex(std::span<const uint8_t> b) { return to_hex(b.data(), b.size()); }

/**
 * ascii() - the characters of @s as bytes, for vectors given as text
 * @s: the text; no terminating NUL is added
 *
 * Return: one byte per character.
 */
inline Bytes ascii(std::string_view s) { return Bytes(s.begin(), s.end()); }

} // namespace esptun::test
