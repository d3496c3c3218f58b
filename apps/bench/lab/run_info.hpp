// What the measurement commands record about a run and where they find the
// programs built beside esptun-bench.
#pragma once

#include <string>

namespace esptun::bench::lab {

/// self_dir() - the folder of /proc/self/exe (esptun-gateway is built beside it); throws
std::string self_dir();

/**
 * gateway_binary() - @given, or esptun-gateway in self_dir() when empty;
 * throws naming what to do when that is not an executable
 */
std::string gateway_binary(const std::string& given = {});

/// utc_now() - the time as "2026-12-02T10:00:00Z"
std::string utc_now();

/// host_text() - "2 cores, kernel 6.1.0-...": the machine a report was made on
std::string host_text();

} // namespace esptun::bench::lab
