// `esptun-bench crypto`: what one ESP seal and open cost per packet, for
// every suite and implementation (two-pass, stitched, GCM), next to
// OpenSSL's own EVP ciphers measured in the same process as the ceiling.
// Times only EspTransform::seal()/open() on packets that
// tunnel/esp.cpp's encapsulate() laid out, on one pinned CPU.
#pragma once

#include "apps/cli/options.hpp"

namespace esptun::bench::crypto_bench {

/**
 * add_crypto_bench() - the crypto command on @bench (esptun-bench's app) and
 * what runs it: exit status 0 when the measurement ran (whether or not the
 * goals were met), 1 when something failed (an open() that did not verify,
 * an OpenSSL set-up error), 2 for a usage error
 */
cli::Verb add_crypto_bench(CLI::App& bench);

} // namespace esptun::bench::crypto_bench
