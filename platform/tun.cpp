// open_tun() and the tun read/write wrappers.
#include "platform/tun.hpp"

#include <cstring>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

namespace esptun::platform {

namespace {

constexpr const char* kTunPath = "/dev/net/tun";

/**
 * open_clone_device() - open /dev/net/tun with a helpful error
 *
 * Return: the descriptor. Throws SystemError.
 */
UniqueFd open_clone_device() {
	UniqueFd fd(::open(kTunPath, O_RDWR | O_NONBLOCK | O_CLOEXEC));
	if (fd) return fd;
	const int err = errno;
	std::string_view hint;
	if (err == ENOENT || err == ENODEV || err == ENXIO)
		hint = "load the tun module (modprobe tun) or create the node: mknod /dev/net/tun c 10 200";
	else
		hint = privilege_hint(err);
	throw SystemError(err, std::string("open ") + kTunPath, hint);
}

} // namespace

TunDevice open_tun(std::string_view name, bool multi_queue, bool vnet_hdr) {
	// IFNAMSIZ counts the terminating NUL; the kernel would silently use a
	// truncated name, which then fails if_nametoindex() with a puzzling error.
	if (name.size() >= IFNAMSIZ)
		throw SystemError(ENAMETOOLONG, "tun name \"" + std::string(name) + "\"",
		                  "at most 15 characters");

	TunDevice dev;
	dev.fd = open_clone_device();

	ifreq ifr{};
	std::memcpy(ifr.ifr_name, name.data(), name.size());
	// No IFF_PERSIST (and no TUNSETPERSIST): the interface lives only as
	// long as a queue fd is open, so a crash cannot leave it behind.
	ifr.ifr_flags = static_cast<short>(IFF_TUN | IFF_NO_PI | (multi_queue ? IFF_MULTI_QUEUE : 0) |
	                                   (vnet_hdr ? IFF_VNET_HDR : 0));
	if (::ioctl(dev.fd.get(), TUNSETIFF, &ifr) < 0) {
		// EINVAL: invalid name, or the name belongs to a non-tun interface;
		// EBUSY: a tun of that name exists with other flags or is attached.
		const int err = errno;
		const std::string_view hint = err == EINVAL ? "invalid name or not a tun interface"
		                              : err == EBUSY
		                                  ? "a tun of that name is open, or has other flags"
		                                  : privilege_hint(err);
		throw SystemError(err, "TUNSETIFF " + std::string(name.empty() ? "(any)" : name), hint);
	}
	dev.name.assign(ifr.ifr_name, ::strnlen(ifr.ifr_name, IFNAMSIZ));
	if (vnet_hdr) {
		int size = int(kTunVnetHdrLen);
		if (::ioctl(dev.fd.get(), TUNSETVNETHDRSZ, &size) < 0)
			throw_errno("TUNSETVNETHDRSZ", dev.name);
	}

	const unsigned index = ::if_nametoindex(dev.name.c_str());
	if (index == 0) throw_errno("if_nametoindex", dev.name);
	dev.ifindex = static_cast<int>(index);
	return dev;
}

// linux/if_tun.h gained these in Linux 6.2; Debian 12's headers are 6.1.
#ifndef TUN_F_USO4
#define TUN_F_USO4 0x20
#endif
#ifndef TUN_F_USO6
#define TUN_F_USO6 0x40
#endif

TunOffloads enable_tun_offloads(int fd) {
	const unsigned base = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
	TunOffloads got{true, true, true, true, true};
	if (::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(base | TUN_F_USO4 | TUN_F_USO6)) == 0)
		return got;
	if (errno != EINVAL) throw_errno("TUNSETOFFLOAD", "checksum, TSO and USO");
	got.uso4 = got.uso6 = false;
	if (::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(base)) == 0) return got;
	throw_errno("TUNSETOFFLOAD", "checksum and TSO");
}

IoResult tun_writev(int fd, std::span<const iovec> iov) noexcept {
	ssize_t n;
	do
		n = ::writev(fd, iov.data(), int(iov.size()));
	while (n < 0 && errno == EINTR);
	return n < 0 ? IoResult{-1, errno} : IoResult{n, 0};
}

IoResult tun_read(int fd, std::span<uint8_t> buf) noexcept {
	ssize_t n;
	do
		n = ::read(fd, buf.data(), buf.size());
	while (n < 0 && errno == EINTR);
	return n < 0 ? IoResult{-1, errno} : IoResult{n, 0};
}

IoResult tun_write(int fd, std::span<const uint8_t> pkt) noexcept {
	ssize_t n;
	do
		n = ::write(fd, pkt.data(), pkt.size());
	while (n < 0 && errno == EINTR);
	return n < 0 ? IoResult{-1, errno} : IoResult{n, 0};
}

} // namespace esptun::platform
