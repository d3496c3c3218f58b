// Helpers the datapath and service tests share: a scratch folder, plus the
// peer builders (peer_test_util.hpp) and the bounded wait for a readable
// descriptor (poll_test_util.hpp) those tests use with it.
#pragma once

#include "tests/unit/support/peer_test_util.hpp"
#include "tests/unit/support/poll_test_util.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <system_error>

namespace esptun::test {

/**
 * struct TempDir - a fresh folder under the system's temp dir, removed with
 * its contents when the object goes
 * @path: the folder
 *
 * mkdtemp() makes the name unique, so tests running at once never share one.
 */
struct TempDir {
	/// TempDir() - make the folder, named @tag plus a unique suffix; fails the test if it cannot
	explicit TempDir(const char* tag = "esptun-test") {
		std::string tmpl =
		    (std::filesystem::temp_directory_path() / (std::string(tag) + "-XXXXXX")).string();
		REQUIRE(mkdtemp(tmpl.data()) != nullptr);
		path = tmpl;
	}
	~TempDir() {
		std::error_code ec;
		std::filesystem::remove_all(path, ec);
	}
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;
	std::string path;
};

} // namespace esptun::test
