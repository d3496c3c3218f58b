// `esptun-bench udp-engines`: the underlay engines (platform/udp_engine.hpp)
// against each other on this kernel. A sender thread pushes ESP-sized
// datagrams in batches through one engine over loopback to a receiver
// thread using the same engine, for a fixed time; the engines take turns,
// round after round, so drift in the machine's load hits them alike. Per
// engine: datagrams per second delivered, thread CPU time per datagram on
// each side (getrusage(RUSAGE_THREAD)), and system calls per datagram on
// each side (the engine's own count plus the bench's poll() waits); medians
// over the rounds. docs/udp-engines.md has a run and what `auto` picks.
#pragma once

#include "apps/cli/options.hpp"

namespace esptun::bench::udp_engines {

/**
 * add_udp_engines() - the udp-engines command on @bench (esptun-bench's app)
 * and what runs it: exit status 0 measured, 1 failed (set-up, nothing
 * received), 2 usage
 */
cli::Verb add_udp_engines(CLI::App& bench);

} // namespace esptun::bench::udp_engines
