// A VhostTunPort on a test bench, shared by the vhost port tests: its rings
// and buffers in a mapping, a device model playing vhost-net on each ring
// (tests/unit/support/device_model_test_util.hpp), eventfds for kicks and
// calls, and a SOCK_SEQPACKET pair standing in for the tun fd of direct
// writes (one packet per write). The tests add the device behaviour they need.
#pragma once

#include "datapath/vhost_tun_port.hpp"
#include "platform/vhost_net.hpp"
#include "tests/unit/support/device_model_test_util.hpp"

#include <doctest/doctest.h>
#include <memory>
#include <sys/socket.h>

namespace esptun::test {

struct VhostBed {
	platform::UniqueFd tun_port_end, tun_test_end;
	platform::UniqueFd rx_kick = platform::make_eventfd(), rx_call = platform::make_eventfd(),
	                   tx_kick = platform::make_eventfd();
	datapath::TunIoStats stats;
	datapath::VhostPortParams params;
	platform::MappedRegion region;
	std::unique_ptr<datapath::VhostTunPort> port;
	std::unique_ptr<virtio::test::DeviceModel> rx_dev, tx_dev;

	/// @vnet_hdr: tun offloads (and room for a merged 64 KiB write on the pair).
	/// @gro_slots: 64 KiB receive slots, packets copied to the ring (UDP GRO).
	/// The port is not started: start() is the test's.
	VhostBed(unsigned direct_write_max, uint32_t queue_size, bool vnet_hdr, bool gro_slots = false) {
		int sv[2];
		REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
		tun_port_end.reset(sv[0]);
		tun_test_end.reset(sv[1]);
		if (vnet_hdr) {
			int big = 1 << 20;
			REQUIRE(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big) == 0);
		}
		params.queue_size = queue_size;
		params.buf_size = datapath::VhostTunPort::buffer_size(1500);
		params.direct_write_max = direct_write_max;
		params.tun_fd = tun_port_end.get();
		params.rx_kick = rx_kick.get();
		params.rx_call = rx_call.get();
		params.tx_kick = tx_kick.get();
		params.vnet_hdr = vnet_hdr;
		params.gro_slots = gro_slots;
		region =
		    platform::MappedRegion(datapath::VhostTunPort::region_bytes(queue_size, params.buf_size));
		port = std::make_unique<datapath::VhostTunPort>(region.span(), params, stats);
		rx_dev = std::make_unique<virtio::test::DeviceModel>(ring_base(platform::kVhostRxQueue),
		                                                     port->rx_queue().layout());
		tx_dev = std::make_unique<virtio::test::DeviceModel>(ring_base(platform::kVhostTxQueue),
		                                                     port->tx_queue().layout());
	}

	/// Where ring @q (its descriptor table) starts in the mapping.
	uint8_t* ring_base(unsigned q) const {
		return static_cast<uint8_t*>(const_cast<void*>(port->vring(q).desc));
	}
};

} // namespace esptun::test
