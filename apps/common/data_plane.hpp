// The packet loop: moves packets between the tun device and the underlay
// UDP socket through tunnel/esp.cpp. Runs on its own thread, free of Asio;
// the control plane only reads its counters and asks it to stop. The tun side
// is a TunPort (tun_port.hpp): direct read()/write() or vhost-net rings.
#pragma once

#include "apps/common/tun_port.hpp"
#include "platform/udp_socket.hpp"
#include "tunnel/counters.hpp"
#include "tunnel/esp_wire.hpp"
#include "tunnel/sa.hpp"

#include <array>
#include <memory>

namespace esptun {

class DataPlane {
public:
	/// Packets handled per wake-up in each direction.
	static constexpr size_t kBatch = kTunBatch;

	/**
	 * DataPlane() - set up one worker over a tun port
	 * @table: the SAs (outlives the data plane)
	 * @tun:   the tun side (outlives the data plane)
	 * @udp:   the underlay socket
	 * @stats: counters this worker writes
	 */
	DataPlane(const SaTable& table, TunPort& tun, platform::UdpSocket& udp, DataPathStats& stats);

	/// DataPlane() - the same with direct read()/write() on @tun_fd (non-blocking)
	DataPlane(const SaTable& table, int tun_fd, platform::UdpSocket& udp, DataPathStats& stats);

	/**
	 * run() - forward packets until @stop_fd (an eventfd) becomes readable
	 *
	 * Sleeps in poll() when there is nothing to do. Never throws, never
	 * logs per packet; every drop is counted by reason.
	 */
	void run(int stop_fd) noexcept;

	/// One pass over each direction: what run() does per wake-up. Public for tests.
	void outbound_batch() noexcept;
	void inbound_batch() noexcept;

private:
	void send_all(size_t n) noexcept;

	const SaTable& table_;
	std::unique_ptr<TunPort> owned_tun_; ///< only with the tun_fd constructor
	TunPort& tun_;
	platform::UdpSocket& udp_;
	DataPathStats& stats_;
	std::array<TunPacket, kBatch> tun_packets_{};
	std::array<platform::SendSlot, kBatch> send_slots_{};
	std::array<TunWrite, kBatch> tun_writes_{};
};

} // namespace esptun
