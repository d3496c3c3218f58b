// Outbound sequence numbers that survive a restart (static SAs).
//
// Only statically keyed peers are tracked: an SA installed at run time (IKE)
// has fresh keys, so starting its sequence numbers at 1 repeats nothing.
//
// A restarted endpoint that began again at sequence number 1 would have every
// packet dropped by the peer's replay window until the peer restarted too.
// So each outbound SA's sequence space is reserved ahead in a small state
// file: the data path may use numbers up to the reservation (OutboundSa::
// seq_limit), and a restart resumes at reservation + 1, above anything the
// previous run can have sent, even after a crash or a power cut.
//
// The reservation runs kMargin numbers ahead of the last one used and is
// extended (file written and fsync'ed first, limit raised after) when less
// than half of it is left; refresh() runs every 100 ms on the control
// thread, so up to ~20 million packets per second pass without touching the
// limit. A clean stop writes the exact last number, so it skips nothing; a
// crash skips at most kMargin numbers (for a 32-bit SA without ESN: one
// 1024th of its space per crash).
#pragma once

#include "tunnel/sa.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace esptun::service {

class SeqState {
public:
	/// How far a reservation runs ahead of the last number used.
	static constexpr uint64_t kMargin = uint64_t(1) << 22;

	/**
	 * SeqState() - resume and reserve every outbound SA of @table from @path
	 * @path:  the state file (created with mode 0600 when missing)
	 * @table: the SAs; nothing may send on them yet
	 *
	 * An SA found in the file (same peer name and outbound SPI) resumes after
	 * its reservation; others start at 1. Entries for SAs no longer configured
	 * are dropped. Throws std::runtime_error naming @path when the file is
	 * malformed or cannot be written.
	 */
	SeqState(std::string path, tunnel::SaTable& table);

	/// refresh() - extend reservations that are half used. Return: false when
	/// the file could not be written (the old limits stay; see error()).
	bool refresh();
	/// save_exact() - after the data path stopped: record the last numbers used.
	bool save_exact();

	const std::string& path() const noexcept { return path_; }
	/// The last write error ("" when the last write worked).
	const std::string& error() const noexcept { return error_; }
	/// Where the SA of @peer resumed (1 = fresh); for logs and tests.
	uint64_t resumed_at(const std::string& peer) const;

private:
	bool write(const std::map<std::pair<std::string, uint32_t>, uint64_t>& reserved);
	/// Hands reserved_ to the data path (OutboundSa::seq_limit), after write().
	void publish_limits();

	std::string path_;
	tunnel::SaTable& table_;
	std::map<std::pair<std::string, uint32_t>, uint64_t> reserved_; ///< (peer, SPI) -> limit
	std::map<std::string, uint64_t> resumed_;
	std::string error_;
};

/**
 * parse_seq_state() - the entries of a state file's text
 * Throws std::runtime_error with the line number on malformed text.
 */
std::map<std::pair<std::string, uint32_t>, uint64_t> parse_seq_state(const std::string& text);

} // namespace esptun::service
