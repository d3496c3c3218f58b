// platform/vhost_net: what can be checked on a host without /dev/vhost-net
// (this one): clean ENOENT errors, the mapping, TUNSETSNDBUF's error path.
// The device itself is exercised in the VM (tests/vm/scenarios/vhost.sh).
#include "platform/vhost_net.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

using namespace esptun::platform;
using esptun::SystemError;

TEST_CASE("opening a missing vhost-net node throws SystemError with ENOENT naming the path") {
	try {
		(void)VhostNet::open("/nonexistent/vhost-net");
		FAIL("open() succeeded");
	} catch (const SystemError& e) {
		CHECK(e.err() == ENOENT);
		CHECK(std::string(e.what()) == "/nonexistent/vhost-net: No such file or directory");
	}
}

TEST_CASE("on this machine /dev/vhost-net either opens with the needed features or fails with ENOENT") {
	if (::access(kVhostNetPath, F_OK) != 0) {
		// The host of the test suite: no vhost_net module.
		try {
			(void)VhostNet::open();
			FAIL("open() succeeded without the device node");
		} catch (const SystemError& e) {
			CHECK(e.err() == ENOENT);
			CHECK(std::string(e.what()).find("/dev/vhost-net") == 0);
		}
	} else {
		VhostNet v = VhostNet::open();
		CHECK((v.offered_features() & VhostNet::kWantedFeatures) == VhostNet::kWantedFeatures);
		for (unsigned q = 0; q < 2; q++) {
			CHECK(v.kick_fd(q) >= 0);
			CHECK(v.call_fd(q) >= 0);
		}
	}
}

TEST_CASE("the wanted features are VIRTIO_NET_HDR, VERSION_1 and EVENT_IDX, never ACCESS_PLATFORM") {
	CHECK(VhostNet::kWantedFeatures == ((1ULL << 27) | (1ULL << 32) | (1ULL << 29)));
	CHECK((VhostNet::kWantedFeatures & (1ULL << 33)) == 0);
}

TEST_CASE("a mapped region is page-rounded, zeroed, writable and moves its ownership") {
	const size_t page = size_t(::sysconf(_SC_PAGESIZE));
	MappedRegion r(page + 1);
	REQUIRE(r.span().size() == 2 * page);
	CHECK(reinterpret_cast<uintptr_t>(r.span().data()) % page == 0);
	for (uint8_t b : r.span())
		REQUIRE(b == 0);
	r.span()[2 * page - 1] = 7;
	MappedRegion moved(std::move(r));
	CHECK(r.span().empty());
	CHECK(moved.span()[2 * page - 1] == 7);
	MappedRegion other;
	other = std::move(moved);
	CHECK(other.span().size() == 2 * page);
}

TEST_CASE("TUNSETSNDBUF on something that is not a tun fails with the ioctl named") {
	UniqueFd efd = make_eventfd();
	try {
		set_tun_sndbuf(efd.get(), 1 << 20);
		FAIL("TUNSETSNDBUF on an eventfd succeeded");
	} catch (const SystemError& e) {
		CHECK(std::string(e.what()).find("TUNSETSNDBUF") == 0);
	}
}
