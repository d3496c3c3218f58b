// The oracle the IKE fuzzers that hold no valid credential share: after
// every message the engine has met no internal error, and nothing the
// fuzzer sent has logged it in.
#pragma once

#include "tests/unit/ike/engine_test_util.hpp"

#include <cstdio>
#include <cstdlib>

namespace esptun::fuzz {

/**
 * check_no_bypass() - abort unless @gw counted no internal error, holds no
 * established IKE SA and had @host install no CHILD_SA
 * @how: what the fuzzer lacks, for the message ("without the certificate's key")
 */
inline void check_no_bypass(const ike::Engine& gw, const ike::test::FakeHost& host,
                            ike::Clock::time_point now, const char* how) {
	if (gw.counters().internal_errors != 0) {
		std::fprintf(stderr, "internal_errors = %llu\n",
		             static_cast<unsigned long long>(gw.counters().internal_errors));
		std::abort();
	}
	for (const ike::IkeSaStatus& s : gw.status(now))
		if (s.state == "established") {
			std::fprintf(stderr, "an IKE SA came up %s\n", how);
			std::abort();
		}
	if (!host.installed.empty()) {
		std::fprintf(stderr, "a CHILD_SA was installed %s\n", how);
		std::abort();
	}
}

} // namespace esptun::fuzz
