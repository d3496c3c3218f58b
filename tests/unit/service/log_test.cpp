// service/log: the journald priority prefix and when it is chosen.
#include "service/log.hpp"

#include <cstdio>
#include <doctest/doctest.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace esptun::service;

namespace {

/// "<st_dev>:<st_ino>" of @fd, as systemd writes $JOURNAL_STREAM.
std::string stream_id(int fd) {
	struct stat st {};
	REQUIRE(fstat(fd, &st) == 0);
	return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

} // namespace

TEST_CASE("JOURNAL_STREAM naming this very descriptor means the journal") {
	std::FILE* f = std::tmpfile();
	REQUIRE(f);
	const int fd = fileno(f);
	CHECK(log::stream_is_journal(stream_id(fd).c_str(), fd));
	std::fclose(f);
}

TEST_CASE("JOURNAL_STREAM of another file (stderr redirected after systemd set it) is not the journal") {
	std::FILE* a = std::tmpfile();
	std::FILE* b = std::tmpfile();
	REQUIRE(a);
	REQUIRE(b);
	CHECK_FALSE(log::stream_is_journal(stream_id(fileno(a)).c_str(), fileno(b)));
	std::fclose(a);
	std::fclose(b);
}

TEST_CASE("no JOURNAL_STREAM, or one that does not parse, is not the journal") {
	std::FILE* f = std::tmpfile();
	REQUIRE(f);
	const int fd = fileno(f);
	const std::string id = stream_id(fd);
	CHECK_FALSE(log::stream_is_journal(nullptr, fd));
	CHECK_FALSE(log::stream_is_journal("", fd));
	CHECK_FALSE(log::stream_is_journal(id.substr(0, id.find(':')).c_str(), fd));
	CHECK_FALSE(log::stream_is_journal((id + "x").c_str(), fd));
	CHECK_FALSE(log::stream_is_journal(("x" + id).c_str(), fd));
	std::fclose(f);
}

TEST_CASE("journal lines carry the sd-daemon priority and no timestamp or program of ours") {
	CHECK(log::format_line(log::Level::error, "esptun-gateway", "bind failed", true, "12:00:00.000") ==
	      "<3>bind failed\n");
	CHECK(log::format_line(log::Level::warn, "p", "m", true, "") == "<4>m\n");
	CHECK(log::format_line(log::Level::info, "p", "m", true, "") == "<6>m\n");
	CHECK(log::format_line(log::Level::debug, "p", "m", true, "") == "<7>m\n");
}

TEST_CASE("lines for a terminal or file keep the time, the program and the level in words") {
	CHECK(log::format_line(log::Level::error, "esptun-gateway", "bind failed", false, "12:00:00.000") ==
	      "12:00:00.000 esptun-gateway error: bind failed\n");
	CHECK(log::format_line(log::Level::warn, "esptun-client", "m", false, "01:02:03.004") ==
	      "01:02:03.004 esptun-client warning: m\n");
	CHECK(log::format_line(log::Level::debug, "p", "m", false, "t") == "t p debug: m\n");
}

TEST_CASE("enabled() follows the level set") {
	log::set_level(log::Level::info);
	CHECK(log::enabled(log::Level::warn));
	CHECK(log::enabled(log::Level::info));
	CHECK_FALSE(log::enabled(log::Level::debug));
	log::set_level(log::Level::debug);
	CHECK(log::enabled(log::Level::debug));
	log::set_level(log::Level::info);
}
