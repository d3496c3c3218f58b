// JsonWriter: the status output must be valid JSON whatever the names contain.
#include "service/json.hpp"

#include <doctest/doctest.h>

using esptun::service::JsonWriter;

TEST_CASE("json writer separates members and nests objects and arrays") {
	JsonWriter j;
	j.begin_object()
	    .field("a", uint64_t(1))
	    .key("b")
	    .begin_array()
	    .value(true)
	    .null()
	    .value("x")
	    .end_array();
	j.key("c").begin_object().field("d", -5).end_object().end_object();
	CHECK(j.str() == R"({"a":1,"b":[true,null,"x"],"c":{"d":-5}})");
}

TEST_CASE("json writer escapes quotes, backslashes and control characters in strings") {
	JsonWriter j;
	j.begin_array().value(std::string_view("q\"b\\n\n\x01")).end_array();
	CHECK(j.str() == R"(["q\"b\\n\n\u0001"])");
}

TEST_CASE("json writer prints non-finite doubles as null") {
	JsonWriter j;
	j.begin_array().value(1.5).value(1.0 / 0.0).end_array();
	CHECK(j.str() == "[1.500,null]");
}
