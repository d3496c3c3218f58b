// Security associations, peers and the table that finds them: by inner
// destination on the way out, by SPI on the way in. Built once at start-up;
// the data path only reads the structure and updates counters and state.
#pragma once

#include "crypto/esp_transform.hpp"
#include "tunnel/allowed_ips.hpp"
#include "tunnel/counters.hpp"
#include "tunnel/inet.hpp"
#include "tunnel/replay_window.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace esptun {

/// Everything needed to build one SA direction.
struct SaParams {
	uint32_t spi = 0;
	std::vector<uint8_t> enc_key;
	std::vector<uint8_t> auth_key;
};

/// Everything needed to build one peer and its pair of SAs.
struct PeerParams {
	std::string name;
	std::optional<Endpoint> endpoint;
	std::vector<IpPrefix> allowed_ips;
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = true;
	uint32_t replay_window = 1024;
	crypto::CryptoImpl impl = crypto::CryptoImpl::automatic;
	SaParams out, in;
};

/**
 * OutboundSa - the SA we send with. Every data-path worker may send on it
 * (the tun spreads flows over its queues), so the sequence number is taken
 * with compare-and-swap: unique across workers, never reused.
 */
struct OutboundSa {
	uint32_t spi = 0;
	bool esn = true;
	/// One transform per data-path worker: a transform holds OpenSSL
	/// contexts and IV state that one thread at a time may use.
	std::vector<std::unique_ptr<crypto::EspTransform>> transforms;
	std::atomic<uint64_t> next_seq{1}; ///< the next number to take
	std::atomic<uint64_t> last_seq{0}; ///< the highest number taken and sealed so far
	/// The highest sequence number the data path may use: what the state file
	/// has reserved (apps/common/seq_state.hpp); no limit without one.
	std::atomic<uint64_t> seq_limit{UINT64_MAX};
	SharedCounter packets, bytes; ///< bytes: inner packet bytes

	/// note_sent() - raise last_seq to @seq (workers finish out of order)
	void note_sent(uint64_t seq) noexcept {
		uint64_t cur = last_seq.load(std::memory_order_relaxed);
		while (cur < seq && !last_seq.compare_exchange_weak(cur, seq, std::memory_order_relaxed))
			;
	}
};

/**
 * SpinLock - for the replay window: held for a few dozen instructions, and
 * uncontended as long as one peer's packets arrive on one worker's socket
 * (SO_REUSEPORT hashes the 4-tuple), which is the normal case.
 */
class SpinLock {
public:
	void lock() noexcept {
		while (flag_.test_and_set(std::memory_order_acquire))
			while (flag_.test(std::memory_order_relaxed))
				;
	}
	void unlock() noexcept { flag_.clear(std::memory_order_release); }

private:
	std::atomic_flag flag_;
};

struct InboundSa {
	uint32_t spi = 0;
	std::vector<std::unique_ptr<crypto::EspTransform>> transforms; ///< one per worker, as OutboundSa's
	ReplayWindow replay; ///< under replay_lock (check, then commit after the ICV)
	mutable SpinLock replay_lock;
	std::atomic<uint64_t> highest_seq{0}; ///< published copy for status
	SharedCounter packets, bytes;
	/// Authenticated packets accepted although a higher sequence number had
	/// already arrived (reordered on the way, inside the replay window)
	SharedCounter reordered;
	Peer* peer = nullptr;

	InboundSa(uint32_t window, bool esn) : replay(window, esn) {}
};

/**
 * Peer - the other end of a tunnel.
 *
 * The endpoint is written by the data path (when an authenticated packet
 * arrives from a new address: NAT rebinding) and read by every worker for
 * every packet it sends: a sequence lock over three atomic words, so a read
 * takes no lock and never sees half of an update; the rare writers take a
 * mutex among themselves.
 */
struct Peer {
	std::string name;
	std::vector<IpPrefix> allowed_ips;
	const crypto::CipherSpec* spec = nullptr;
	bool endpoint_configured = false;
	OutboundSa out;
	std::unique_ptr<InboundSa> in;
	std::atomic<int64_t> last_rx_unix_ms{0}; ///< wall clock of the last authenticated packet
	SharedCounter endpoint_changes;

	/// The current endpoint, if any: a consistent copy, from any thread.
	std::optional<Endpoint> endpoint() const noexcept;
	/// Data path: move to a new endpoint.
	void set_endpoint(const Endpoint& ep) noexcept;
	/// Same as endpoint() (the control plane's name for it).
	std::optional<Endpoint> endpoint_snapshot() const { return endpoint(); }

private:
	friend class SaTable;
	void store_endpoint(const std::optional<Endpoint>& ep) noexcept;

	std::mutex endpoint_write_;                             ///< writers among themselves
	std::atomic<uint32_t> endpoint_seq_;                    ///< odd while a write is in progress
	std::array<std::atomic<uint64_t>, 3> endpoint_words_{}; ///< address, then has|family|port
};

class SaTable {
public:
	/// Builds SAs and transforms; throws std::invalid_argument on keys that
	/// do not fit the cipher, duplicate SPIs or overlapping allowed_ips.
	/// @workers: data-path threads; each SA gets a transform for each.
	explicit SaTable(const std::vector<PeerParams>& peers, size_t workers = 1);

	/// Outbound: the peer whose allowed_ips best match @dst.
	Peer* route(const IpAddress& dst) const noexcept { return allowed_.lookup(dst); }
	/// Inbound: the SA receiving with @spi.
	InboundSa* find_inbound(uint32_t spi) const noexcept {
		auto it = by_spi_.find(spi);
		return it == by_spi_.end() ? nullptr : it->second;
	}
	const std::vector<std::unique_ptr<Peer>>& peers() const noexcept { return peers_; }

private:
	std::vector<std::unique_ptr<Peer>> peers_;
	std::unordered_map<uint32_t, InboundSa*> by_spi_;
	AllowedIps allowed_;
};

} // namespace esptun
