// /dev/vhost-net set-up and tear-down: see vhost_net.hpp for the order.
#include "platform/vhost_net.hpp"

#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <linux/if_tun.h>
// <linux/vhost.h> pulls in <linux/virtio_ring.h>, whose legacy vring_init()
// is C only (void* conversions); this macro leaves it out.
#define VIRTIO_RING_NO_LEGACY
#include <linux/vhost.h>
#include <linux/virtio_config.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace esptun::platform {

// VHOST_NET_F_VIRTIO_NET_HDR: vhost adds the virtio-net header on RX and strips
// it on TX, so the tun needs no IFF_VNET_HDR (and no TUNSETVNETHDRSZ).
// VIRTIO_F_VERSION_1: the header is 12 bytes (virtio_net_hdr_mrg_rxbuf).
// VIRTIO_RING_F_EVENT_IDX: SplitQueue's notification suppression.
// <linux/virtio_ring.h> and <linux/virtio_net.h> do not compile as C++, so
// the one bit and the header size needed from them are spelled out here.
constexpr unsigned kVirtioRingFEventIdx = 29; // VIRTIO_RING_F_EVENT_IDX, virtio 1.1 section 6
const uint64_t VhostNet::kWantedFeatures =
    (1ULL << VHOST_NET_F_VIRTIO_NET_HDR) | (1ULL << VIRTIO_F_VERSION_1) | (1ULL << kVirtioRingFEventIdx);
// struct virtio_net_hdr_mrg_rxbuf is 10 bytes of virtio_net_hdr + le16 num_buffers
// (virtio 1.1 section 5.1.6); with VERSION_1 every packet carries all 12.
static_assert(kVirtioNetHdrLen == 10 + 2);

MappedRegion::MappedRegion(size_t bytes) {
	const size_t page = size_t(::sysconf(_SC_PAGESIZE));
	size_ = (bytes + page - 1) / page * page;
	// MAP_POPULATE: the vhost worker then never takes the first-touch page
	// faults on our buffers, and a short-memory system fails here, at set-up.
	void* p =
	    ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		throw_errno("mmap", std::to_string(size_) + " bytes for the vhost rings and buffers");
	data_ = static_cast<uint8_t*>(p);
}

MappedRegion::MappedRegion(MappedRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedRegion& MappedRegion::operator=(MappedRegion&& o) noexcept {
	if (this != &o) {
		if (data_) ::munmap(data_, size_);
		data_ = std::exchange(o.data_, nullptr);
		size_ = std::exchange(o.size_, 0);
	}
	return *this;
}

MappedRegion::~MappedRegion() {
	if (data_) ::munmap(data_, size_);
}

namespace {

std::string hex64(uint64_t v) {
	char buf[24];
	std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
	return buf;
}

uint64_t user_addr(const void* p) noexcept { return reinterpret_cast<uintptr_t>(p); }

} // namespace

VhostNet VhostNet::open(const std::string& path) {
	VhostNet v;
	v.fd_.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
	if (!v.fd_) throw_errno(path, {}, privilege_hint(errno));
	if (::ioctl(v.fd_.get(), VHOST_SET_OWNER, nullptr) < 0) throw_errno("VHOST_SET_OWNER", path);
	if (::ioctl(v.fd_.get(), VHOST_GET_FEATURES, &v.offered_) < 0)
		throw_errno("VHOST_GET_FEATURES", path);
	if ((v.offered_ & kWantedFeatures) != kWantedFeatures)
		throw SystemError(EOPNOTSUPP, "VHOST_GET_FEATURES " + path,
		                  "the kernel offers " + hex64(v.offered_) + ", esptun needs " +
		                      hex64(kWantedFeatures) + ": VIRTIO_NET_HDR, VERSION_1 and EVENT_IDX");
	uint64_t want = kWantedFeatures;
	if (::ioctl(v.fd_.get(), VHOST_SET_FEATURES, &want) < 0) throw_errno("VHOST_SET_FEATURES", path);
	v.acked_ = want;
	for (unsigned q = 0; q < 2; q++) {
		v.kick_[q] = make_eventfd();
		v.call_[q] = make_eventfd();
	}
	return v;
}

void VhostNet::use_tun_vnet_hdr() {
	// VIRTIO_NET_F_MRG_RXBUF (15, virtio 1.1 section 5.1.3): with VERSION_1 the
	// header is 12 bytes either way; this bit lets vhost spread one packet over
	// several RX buffers (get_rx_bufs() takes up to UIO_MAXIOV heads) and write
	// their count into num_buffers. Without it a packet longer than one buffer
	// is dropped by vhost ("Discarded rx packet"), so every RX buffer would
	// need room for a 64 KiB super-packet.
	constexpr unsigned kVirtioNetFMrgRxbuf = 15;
	uint64_t want =
	    (1ULL << VIRTIO_F_VERSION_1) | (1ULL << kVirtioRingFEventIdx) | (1ULL << kVirtioNetFMrgRxbuf);
	if ((offered_ & want) != want)
		throw SystemError(EOPNOTSUPP, "VHOST_GET_FEATURES",
		                  "the kernel offers " + hex64(offered_) + ", a vnet_hdr tun needs " +
		                      hex64(want) + ": VERSION_1, EVENT_IDX and MRG_RXBUF");
	// Setting features again is allowed until the rings run (vhost_net_set_features()).
	if (::ioctl(fd_.get(), VHOST_SET_FEATURES, &want) < 0)
		throw_errno("VHOST_SET_FEATURES", "VERSION_1, EVENT_IDX and MRG_RXBUF");
	acked_ = want;
}

void VhostNet::set_mem_table(std::span<const uint8_t> region) {
	// struct vhost_memory ends in a flexible array: build it in a byte buffer.
	// The header is spelled out here: a vhost_memory variable would make clang
	// warn about its zero-length array.
	struct MemoryHeader {
		uint32_t nregions;
		uint32_t padding;
	} head{1, 0};
	static_assert(sizeof(MemoryHeader) == offsetof(vhost_memory, regions));
	alignas(
	    vhost_memory_region) unsigned char buf[sizeof(MemoryHeader) + sizeof(vhost_memory_region)] = {};
	vhost_memory_region r{};
	// Identity map: the "guest physical" addresses in the rings are our own
	// virtual addresses, so a descriptor holds a plain pointer.
	r.guest_phys_addr = user_addr(region.data());
	r.memory_size = region.size();
	r.userspace_addr = user_addr(region.data());
	std::memcpy(buf, &head, sizeof head);
	std::memcpy(buf + sizeof head, &r, sizeof r);
	if (::ioctl(fd_.get(), VHOST_SET_MEM_TABLE, buf) < 0)
		throw_errno("VHOST_SET_MEM_TABLE", std::to_string(region.size()) + " bytes");
}

void VhostNet::setup_queue(unsigned index, const VringAddrs& a) {
	const std::string which = index == kVhostRxQueue ? "RX (0)" : "TX (1)";
	vhost_vring_state num{index, a.num};
	if (::ioctl(fd_.get(), VHOST_SET_VRING_NUM, &num) < 0) throw_errno("VHOST_SET_VRING_NUM", which);
	// Base 0: SplitQueue starts both indices at 0; vhost reads used->idx from
	// the ring when the backend is attached.
	vhost_vring_state base{index, 0};
	if (::ioctl(fd_.get(), VHOST_SET_VRING_BASE, &base) < 0) throw_errno("VHOST_SET_VRING_BASE", which);
	vhost_vring_addr addr{};
	addr.index = index;
	addr.desc_user_addr = user_addr(a.desc);
	addr.avail_user_addr = user_addr(a.avail);
	addr.used_user_addr = user_addr(a.used);
	if (::ioctl(fd_.get(), VHOST_SET_VRING_ADDR, &addr) < 0) throw_errno("VHOST_SET_VRING_ADDR", which);
	vhost_vring_file kick{index, kick_[index].get()};
	if (::ioctl(fd_.get(), VHOST_SET_VRING_KICK, &kick) < 0) throw_errno("VHOST_SET_VRING_KICK", which);
	vhost_vring_file call{index, call_[index].get()};
	if (::ioctl(fd_.get(), VHOST_SET_VRING_CALL, &call) < 0) throw_errno("VHOST_SET_VRING_CALL", which);
}

void VhostNet::attach(int tun_fd) {
	for (unsigned q = 0; q < 2; q++) {
		vhost_vring_file be{q, tun_fd};
		if (::ioctl(fd_.get(), VHOST_NET_SET_BACKEND, &be) < 0) {
			const int err = errno;
			detach();
			throw SystemError(err, "VHOST_NET_SET_BACKEND queue " + std::to_string(q),
			                  "the tun must be an IFF_TUN queue");
		}
		attached_ = true;
	}
}

void VhostNet::detach() noexcept {
	if (!attached_ || !fd_) return;
	// The worker stops touching the rings and buffers before they are unmapped.
	for (unsigned q = 0; q < 2; q++) {
		vhost_vring_file be{q, -1};
		(void)::ioctl(fd_.get(), VHOST_NET_SET_BACKEND, &be);
	}
	attached_ = false;
}

void set_tun_sndbuf(int tun_fd, int bytes) {
	if (::ioctl(tun_fd, TUNSETSNDBUF, &bytes) < 0) throw_errno("TUNSETSNDBUF", std::to_string(bytes));
}

} // namespace esptun::platform
