// eventfd helpers; UniqueFd itself is header-only.
#include "platform/unique_fd.hpp"

#include <cstdint>
#include <limits>
#include <sys/eventfd.h>

namespace esptun::platform {

UniqueFd make_eventfd(unsigned initval) {
	int fd = ::eventfd(initval, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0) throw_errno("eventfd");
	return UniqueFd(fd);
}

int eventfd_signal(int fd) noexcept {
	const uint64_t one = 1;
	ssize_t n;
	do
		n = ::write(fd, &one, sizeof one);
	while (n < 0 && errno == EINTR);
	return n < 0 ? errno : 0;
}

IoResult eventfd_drain(int fd) noexcept {
	uint64_t value = 0;
	ssize_t n;
	do
		n = ::read(fd, &value, sizeof value);
	while (n < 0 && errno == EINTR);
	if (n < 0) return {-1, errno};
	// The counter can reach 2^64 - 2; clamp so n never reads as an error.
	constexpr auto max = static_cast<uint64_t>(std::numeric_limits<ssize_t>::max());
	return {static_cast<ssize_t>(value < max ? value : max), 0};
}

} // namespace esptun::platform
