// The certificate files the unit-conf tests point their configs at.
#pragma once

#include "tests/unit/conf/conf_test_util.hpp"
#include "tests/unit/ike/cert_test_util.hpp"

#include <filesystem>
#include <string>

namespace esptun::conf::test {

/**
 * write_pki() - @chain's certificate as NAME.pem (0644) and its key as
 * NAME.key (0600) in @dir, and, with @ca, its root as ca/root.pem (the
 * folder ca_dir names)
 */
inline void write_pki(const TempDir& dir, const ike::test::Chain& chain, const std::string& name = "gw",
                      bool ca = true) {
	dir.write(name + ".pem", chain.ee.pem(), 0644);
	dir.write(name + ".key", chain.ee.key.pem(), 0600);
	if (!ca) return;
	std::filesystem::create_directories(dir.path() / "ca");
	dir.write("ca/root.pem", chain.root.pem(), 0644);
}

} // namespace esptun::conf::test
