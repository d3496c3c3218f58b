// `esptun-bench crypto`: what one ESP seal and open cost per packet, for
// every suite and implementation (two-pass, stitched, GCM), next to
// OpenSSL's own EVP ciphers measured in the same process as the ceiling.
// Times only EspTransform::seal()/open() on packets that
// tunnel/esp.cpp's encapsulate() laid out, on one pinned CPU.
#pragma once

#include <string>
#include <vector>

namespace esptun::bench::crypto_bench {

/// Usage lines of the crypto command (for the top-level usage text).
extern const char* const kCryptoBenchUsage;

/**
 * run_crypto_bench() - the crypto command
 * @args: the arguments after "crypto"
 * Return: the process exit status: 0 when the measurement ran (whether or
 * not the goals were met), 1 when something failed (an open() that did not
 * verify, an OpenSSL set-up error), 2 for a usage error.
 */
int run_crypto_bench(const std::vector<std::string>& args);

} // namespace esptun::bench::crypto_bench
