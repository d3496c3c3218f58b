// Outbound sequence numbers that survive a restart (static SAs), kept per
// key in one file per state_dir.
//
// Only statically keyed peers are tracked: an SA installed at run time (IKE)
// has fresh keys, so starting its sequence numbers at 1 repeats nothing.
//
// A static key must never seal two packets with one sequence number: AES-GCM
// uses it as the explicit IV (crypto/aes_gcm.cpp, RFC 4106 section 3.1), so a
// repeated number repeats the nonce, which gives the authentication key
// away. It also keeps the peer's replay window happy after a restart. So
// each outbound SA's sequence space is reserved ahead in a small state file:
// the data path may use numbers up to the reservation (OutboundSa::
// seq_limit), and a restart resumes at reservation + 1, above anything the
// previous run can have sent, even after a crash or a power cut.
//
// Entries are keyed by a fingerprint of the key itself (key_fingerprint()),
// not by peer name, SPI or interface, so renaming a peer, changing its SPI
// or the interface finds the same reservation. The file is
// <state_dir>/esptun.seq, shared by every endpoint with that state_dir: each
// write locks the folder, reads the file, changes only this process's
// entries and keeps the others (other instances, keys configured earlier,
// which may come back). A reservation is never lowered under another
// process's feet: save_exact() writes the exact last number only where the
// file still holds this process's own reservation, and a process that finds
// a higher number than its own keeps it and adds one, so the owner of that
// number sees the change.
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
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace esptun::service {

/// Peer name -> fingerprint of the key its static outbound SA seals with.
using KeyFingerprints = std::map<std::string, std::string>;

/**
 * key_fingerprint() - the name of a static SA's key in the state file
 * @enc_key:  the AES key (GCM: key || salt)
 * @auth_key: the HMAC key (CBC-HMAC), empty for GCM
 *
 * HMAC-SHA256 keyed with a fixed label (so it means nothing outside this
 * file) over both keys, each behind its length. One-way: the file names a
 * key without giving it away, and the value is never a nonce or IV source.
 *
 * Return: 64 lower-case hex digits.
 */
std::string key_fingerprint(std::span<const uint8_t> enc_key, std::span<const uint8_t> auth_key);

/// key_fingerprints() - the fingerprints of the statically keyed peers in @params.
KeyFingerprints key_fingerprints(const std::vector<tunnel::PeerParams>& params);

/// seq_state_file() - the state file of @state_dir (interface-independent).
std::string seq_state_file(const std::string& state_dir);
/// legacy_seq_state_file() - where esptun kept the state before it was
/// keyed by fingerprint: <state_dir>/<interface>.seq, read once to migrate.
std::string legacy_seq_state_file(const std::string& state_dir, const std::string& interface);

class SeqState {
public:
	/// How far a reservation runs ahead of the last number used.
	static constexpr uint64_t kMargin = uint64_t(1) << 22;

	/**
	 * SeqState() - resume and reserve every outbound SA of @table from @path
	 * @path:   the state file (created with mode 0600 when missing)
	 * @table:  the SAs; nothing may send on them yet
	 * @keys:   the fingerprint of each static peer's outbound key
	 * @legacy: an old per-interface file ("<peer> <SPI> <number>" lines),
	 *          or "": its entries count as well (for the peer name and SPI
	 *          they name), and after the first write it is renamed to
	 *          @legacy.migrated so it is read once only
	 *
	 * An SA whose key is found in the file resumes after its reservation;
	 * others start at 1. Throws std::runtime_error naming @path (with what
	 * to do, never the key) when the file is damaged or cannot be written,
	 * or when two static SAs send with one key.
	 */
	SeqState(std::string path, tunnel::SaTable& table, KeyFingerprints keys,
	         const std::string& legacy = "");

	/**
	 * adopt() - start tracking a reload's new peers (built, not yet
	 * published) as the constructor does: resume each static SA above what
	 * the file holds for its key, reserve and write, set its limit.
	 * @keys:      the fingerprint of each new static peer's outbound key
	 * @replacing: names of peers these replace (a changed peer), whose old
	 *             key may reappear without counting as shared
	 * Throws std::runtime_error as the constructor does; nothing is
	 * tracked then.
	 */
	void adopt(std::span<tunnel::Peer* const> peers, const KeyFingerprints& keys,
	           std::span<const std::string> replacing);
	/// forget() - stop tracking peers a reload removed; what the file
	/// reserved for their keys stays (a key that comes back resumes above it).
	void forget(std::span<const std::string> names);
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
	/// How write() treats an entry the file already holds for one of ours.
	enum class Merge { raise, exact };
	bool write(const std::map<std::string, uint64_t>& mine, Merge how);
	/// Hands reserved_ to the data path (OutboundSa::seq_limit), after write().
	void publish_limits();

	std::string path_;
	tunnel::SaTable& table_;
	KeyFingerprints keys_;                     ///< static peer -> its key's fingerprint
	std::map<std::string, uint64_t> reserved_; ///< fingerprint -> limit
	std::map<std::string, uint64_t> resumed_;
	std::string error_;
};

/**
 * parse_seq_state() - the entries of a state file's text: fingerprint -> the
 * last number that may have been used. Throws std::runtime_error with the
 * line number on malformed text.
 */
std::map<std::string, uint64_t> parse_seq_state(const std::string& text);

/// parse_legacy_seq_state() - the same for the old "<peer> <SPI> <number>" format.
std::map<std::pair<std::string, uint32_t>, uint64_t> parse_legacy_seq_state(const std::string& text);

} // namespace esptun::service
