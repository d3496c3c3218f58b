// Helpers for the IKE keymat unit tests: the reader for the vector files in
// tests/data/ike/ (crypto_vectors.txt is written by gen_crypto_vectors.py).
#pragma once

#include "ike/keymat.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::ike::crypto_test {

// Bytes, hex(), to_hex() and ascii() are every test's (support/bytes_test_util.hpp).
using ::esptun::test::ascii;
using ::esptun::test::Bytes;
using ::esptun::test::hex;
using ::esptun::test::to_hex;

/// Record - one "[kind]" block of the vector file.
struct Record {
	std::string kind;
	std::map<std::string, std::string> fields;
	size_t line = 0; ///< where it starts, for failure messages

	const std::string& str(const std::string& name) const {
		auto it = fields.find(name);
		if (it == fields.end())
			throw std::runtime_error("vector line " + std::to_string(line) + ": no " + name);
		return it->second;
	}
	Bytes bytes(const std::string& name) const { return hex(str(name)); }
	uint64_t num(const std::string& name, int base = 10) const {
		return std::stoull(str(name), nullptr, base);
	}
	bool has(const std::string& name) const { return fields.count(name) != 0; }
};

/// read_vectors() - every record of tests/data/ike/@file; fails the test if
/// the file is missing or empty (a vector test that reads nothing proves nothing).
inline std::vector<Record> read_vectors(const std::string& file) {
	const std::string path = std::string(ESPTUN_TEST_DATA_DIR) + "/ike/" + file;
	std::ifstream in(path);
	REQUIRE_MESSAGE(in.good(), "cannot open ", path);
	std::vector<Record> out;
	std::string line;
	size_t n = 0;
	while (std::getline(in, line)) {
		n++;
		if (line.empty() || line[0] == '#') continue;
		if (line.front() == '[' && line.back() == ']') {
			out.push_back({line.substr(1, line.size() - 2), {}, n});
			continue;
		}
		// An empty value is written "name = " (the separator is still there).
		const size_t eq = line.find(" = ");
		REQUIRE_MESSAGE((eq != std::string::npos && !out.empty()), path, ":", n, ": bad line");
		out.back().fields[line.substr(0, eq)] = line.substr(eq + 3);
	}
	REQUIRE_MESSAGE(!out.empty(), path, " has no records");
	return out;
}

/// of_kind() - the records of one kind; requires at least one.
inline std::vector<Record> of_kind(const std::vector<Record>& all, std::string_view kind) {
	std::vector<Record> out;
	for (const auto& r : all)
		if (r.kind == kind) out.push_back(r);
	REQUIRE_MESSAGE(!out.empty(), "no [", std::string(kind), "] vectors");
	return out;
}

/// suite_of() - the IkeSuite a record's encr/key_bits/integ/prf/dh fields name.
inline IkeSuite suite_of(const Record& r) {
	IkeSuite s;
	s.encr = EncrId(r.num("encr"));
	s.key_bits = uint16_t(r.num("key_bits"));
	s.integ = IntegId(r.num("integ"));
	s.prf = r.has("prf") ? PrfId(r.num("prf")) : PrfId::hmac_sha256;
	s.dh = r.has("dh") ? DhGroup(r.num("dh")) : DhGroup::curve25519;
	return s;
}

/// check_keys() - the seven IKE SA keys of @k equal @r's sk_* fields (hex).
inline void check_keys(const IkeKeys& k, const Record& r) {
	CHECK(to_hex(k.sk_d) == r.str("sk_d"));
	CHECK(to_hex(k.sk_ai) == r.str("sk_ai"));
	CHECK(to_hex(k.sk_ar) == r.str("sk_ar"));
	CHECK(to_hex(k.sk_ei) == r.str("sk_ei"));
	CHECK(to_hex(k.sk_er) == r.str("sk_er"));
	CHECK(to_hex(k.sk_pi) == r.str("sk_pi"));
	CHECK(to_hex(k.sk_pr) == r.str("sk_pr"));
}

} // namespace esptun::ike::crypto_test
