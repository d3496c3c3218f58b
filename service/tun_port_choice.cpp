// choose_tun_io(): see tun_port_choice.hpp.
#include "service/tun_port_choice.hpp"

#include <stdexcept>

namespace esptun::service {

std::string vhost_fallback_reason(const std::exception& err) {
	return std::string("vhost-net unavailable: ") + err.what() + "; using direct tun I/O";
}

TunIoChoice choose_tun_io(conf::TunIo io, const std::string& path) {
	TunIoChoice c;
	c.mode = "direct";
	if (io == conf::TunIo::direct) {
		c.reason = "tun_io = \"direct\" in the config";
		return c;
	}
	try {
		c.vhost.emplace(platform::VhostNet::open(path));
	} catch (const SystemError& e) {
		if (io == conf::TunIo::vhost)
			throw std::runtime_error(
			    std::string("tun_io = \"vhost\": ") + e.what() +
			    " (load the vhost_net module, or use tun_io = \"auto\" to fall "
			    "back to direct tun I/O)");
		c.reason = vhost_fallback_reason(e);
		return c;
	}
	c.mode = "vhost";
	c.reason =
	    io == conf::TunIo::vhost ? "tun_io = \"vhost\" in the config" : "auto: " + path + " is usable";
	return c;
}

} // namespace esptun::service
