// Security associations, peers and the table that finds them: by inner
// destination on the way out, by SPI on the way in. Built once at start-up;
// the data path only reads the structure and updates counters and state.
#pragma once

#include "crypto/esp_transform.hpp"
#include "tunnel/allowed_ips.hpp"
#include "tunnel/counters.hpp"
#include "tunnel/inet.hpp"
#include "tunnel/replay_window.hpp"

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

struct OutboundSa {
	uint32_t spi = 0;
	bool esn = true;
	std::unique_ptr<crypto::EspTransform> transform;
	uint64_t next_seq = 1;             ///< data path only (set before it starts)
	std::atomic<uint64_t> last_seq{0}; ///< published copy for status
	/// The highest sequence number the data path may use: what the state file
	/// has reserved (apps/common/seq_state.hpp); no limit without one.
	std::atomic<uint64_t> seq_limit{UINT64_MAX};
	Counter packets, bytes; ///< bytes: inner packet bytes
};

struct InboundSa {
	uint32_t spi = 0;
	std::unique_ptr<crypto::EspTransform> transform;
	ReplayWindow replay;
	std::atomic<uint64_t> highest_seq{0}; ///< published copy for status
	Counter packets, bytes;
	Peer* peer = nullptr;

	InboundSa(uint32_t window, bool esn) : replay(window, esn) {}
};

/**
 * Peer - the other end of a tunnel.
 *
 * The endpoint is written only by the data path (when an authenticated
 * packet arrives from a new address: NAT rebinding) and read there without a
 * lock; the mutex orders those rare writes against the control plane's reads.
 */
struct Peer {
	std::string name;
	std::vector<IpPrefix> allowed_ips;
	const crypto::CipherSpec* spec = nullptr;
	bool endpoint_configured = false;
	OutboundSa out;
	std::unique_ptr<InboundSa> in;
	std::atomic<int64_t> last_rx_unix_ms{0}; ///< wall clock of the last authenticated packet
	Counter endpoint_changes;

	/// Data path: the current endpoint, if any (no lock: the data path is the only writer).
	const std::optional<Endpoint>& endpoint() const noexcept { return endpoint_; }
	/// Data path: move to a new endpoint.
	void set_endpoint(const Endpoint& ep) noexcept;
	/// Control plane: a consistent copy of the endpoint.
	std::optional<Endpoint> endpoint_snapshot() const;

private:
	friend class SaTable;
	std::optional<Endpoint> endpoint_;
	mutable std::mutex endpoint_mutex_;
};

class SaTable {
public:
	/// Builds SAs and transforms; throws std::invalid_argument on keys that
	/// do not fit the cipher, duplicate SPIs or overlapping allowed_ips.
	explicit SaTable(const std::vector<PeerParams>& peers);

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
