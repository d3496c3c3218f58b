// The packet loop: moves packets between the tun device and the underlay
// UDP socket through tunnel/esp.cpp. Runs on its own thread, free of Asio;
// the control plane only reads its counters and asks it to stop.
#pragma once

#include "platform/udp_socket.hpp"
#include "tunnel/counters.hpp"
#include "tunnel/esp_wire.hpp"
#include "tunnel/sa.hpp"

#include <array>
#include <memory>
#include <vector>

namespace esptun {

class DataPlane {
public:
	/// Packets handled per wake-up in each direction.
	static constexpr size_t kBatch = 32;

	/**
	 * DataPlane() - set up buffers for one worker
	 * @table:  the SAs (outlives the data plane)
	 * @tun_fd: the non-blocking tun queue
	 * @udp:    the underlay socket
	 * @stats:  counters this worker writes
	 */
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
	int tun_fd_;
	platform::UdpSocket& udp_;
	DataPathStats& stats_;
	// Preallocated buffers: the data path never allocates.
	std::vector<uint8_t> out_mem_, in_mem_;
	std::array<platform::SendSlot, kBatch> send_slots_{};
	std::array<platform::RecvSlot, kBatch> recv_slots_{};
};

} // namespace esptun
