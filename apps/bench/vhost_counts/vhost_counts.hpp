// `esptun-bench vhost-counts`: what the tun side of two running gateways cost
// per packet during a phase (one ping in flight, bulk TCP), from the exact
// counters in their status JSON ("tun_io"). Counts, not times: under qemu TCG
// seconds mean nothing, system calls, kicks and wake-ups do.
//
// Three steps, so the phases can be driven by anything (a shell script in the
// VM, a person at a prompt):
//   snapshot SOCKET...        both gateways' status, as one JSON array
//   row --phase NAME A B      the counter deltas between snapshots A and B
//   table [--json] [--check]  the per-packet table of the rows; --check
//                             holds the rows to issue 3's goals
#pragma once

#include "apps/cli/options.hpp"
#include "service/json_io.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace esptun::bench::vhost_counts {

/**
 * PhaseCounts - counter deltas of one phase, summed over the gateways.
 * "to tun" is the inbound direction (decrypted packets handed to the tun:
 * TX ring or direct write), "from tun" the outbound one (RX ring or read()).
 */
struct PhaseCounts {
	std::string mode;  ///< "direct", "vhost dwm=4", "vhost dwm=0" (both gateways alike)
	std::string phase; ///< e.g. "one-in-flight", "bulk"
	uint64_t to_tun = 0, from_tun = 0;
	uint64_t tx_ring = 0, direct_writes = 0, rx_ring = 0, ring_full = 0;
	uint64_t tun_reads = 0, tun_writes = 0, rx_kicks = 0, tx_kicks = 0;
	// Ring publishes the busy device needed no kick for; kicks it had not
	// asked for (0 unless the kick logic is broken).
	uint64_t rx_kicks_suppressed = 0, tx_kicks_suppressed = 0, needless_kicks = 0;
	uint64_t polls = 0, poll_waits = 0;
	// Timed figures (row --ping-log / --bytes --elapsed-ms), 0 when not measured.
	// Only meaningful where the VM is not emulated (accel != "tcg").
	std::string accel;                     ///< how the VM ran: "tcg", "kvm"; "" = not timed
	double rtt_p50_ms = 0, rtt_p99_ms = 0; ///< one-in-flight: ping round trips
	double mbit_s = 0;                     ///< bulk: transfer payload bits / elapsed time

	/// to_tun_syscalls() - write()s on the tun fd plus TX kicks
	uint64_t to_tun_syscalls() const noexcept { return tun_writes + tx_kicks; }
	/// from_tun_syscalls() - read()s on the tun fd and RX kicks (the call
	/// eventfd is never read: the data plane watches it edge-triggered)
	uint64_t from_tun_syscalls() const noexcept { return tun_reads + rx_kicks; }
	uint64_t kicks() const noexcept { return rx_kicks + tx_kicks; }
	/// tx_batches() - TX ring publishes: each needed a kick or found the device busy
	uint64_t tx_batches() const noexcept { return tx_kicks + tx_kicks_suppressed; }
	uint64_t packets() const noexcept { return to_tun + from_tun; }
};

/**
 * phase_counts() - the deltas between two snapshots (JSON arrays of status
 * objects, the same gateways in the same order)
 * Throws std::runtime_error when the snapshots do not match or lack counters.
 */
PhaseCounts phase_counts(const service::Json& before, const service::Json& after, const std::string& phase);

/// Goal - one of issue 3's goals applied to one row.
struct Goal {
	std::string what; ///< e.g. "vhost dwm=4 bulk: kicks/packet <= 1/32"
	bool met = false;
	std::string measured;
	/// Reported next to the goals but never failing --check: the figure
	/// depends on timing that TCG does not reproduce (ring-only bulk ratios).
	bool figure_only = false;
};

/**
 * goals_for() - issue 3's goals for @row (none for direct mode)
 *
 * Every vhost row: no needless kick (a property of the kick logic, true at
 * any timing). vhost with direct writes (dwm > 0, the default): the
 * one-in-flight goals (direct writes, no TX kick) and the bulk ratios (kicks
 * and system calls per packet), all held strictly. Ring only (dwm = 0): one
 * in flight, no direct write; bulk, the TX ring was kicked (so the needless
 * check had kicks to judge), and the bulk ratios as figures only: they
 * follow the emulated CPU's pace (docs/vhost-counts.md, "The goals").
 */
std::vector<Goal> goals_for(const PhaseCounts& row);

/**
 * ping_rtts_ms() - the round trips ping(8) printed ("... time=0.123 ms" lines)
 * @text: ping's output
 * Return: the times in ms, in the order printed (empty when there are none)
 */
std::vector<double> ping_rtts_ms(std::string_view text);

/// percentile() - nearest-rank percentile @p (0..100) of @v; 0 when empty
double percentile(std::vector<double> v, double p);

/**
 * add_vhost_counts() - the vhost-counts command and its steps (snapshot,
 * row, table) on @bench (esptun-bench's app) and what runs them: exit
 * status 0 ok, 1 failed (or a goal missed with --check), 2 usage
 */
cli::Verb add_vhost_counts(CLI::App& bench);

} // namespace esptun::bench::vhost_counts
