// UniqueFd: the owner of every file descriptor the project opens (tun, UDP,
// netlink, eventfd). The only place in the tree that calls close().
#pragma once

#include <unistd.h>
#include <utility>

#include "base/error.hpp"

namespace esptun::platform {

/// A move-only file descriptor; closes it on destruction. -1 means empty.
class UniqueFd {
public:
	UniqueFd() noexcept = default;
	/// UniqueFd() - take ownership of @fd (may be -1)
	explicit UniqueFd(int fd) noexcept : fd_(fd) {}
	UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
	UniqueFd& operator=(UniqueFd&& other) noexcept {
		if (this != &other) reset(other.release());
		return *this;
	}
	UniqueFd(const UniqueFd&) = delete;
	UniqueFd& operator=(const UniqueFd&) = delete;
	~UniqueFd() { reset(); }

	/// get() - the descriptor, still owned; -1 when empty
	int get() const noexcept { return fd_; }
	explicit operator bool() const noexcept { return fd_ >= 0; }

	/// release() - give up ownership without closing
	/// Return: the descriptor, which the caller now owns
	int release() noexcept { return std::exchange(fd_, -1); }

	/**
	 * reset() - close the owned descriptor and take @fd instead
	 * @fd: new descriptor, -1 for none
	 *
	 * close() errors are ignored on purpose: Linux releases the descriptor
	 * even when close() fails (also on EINTR), so retrying could close a
	 * descriptor another thread has just been given.
	 */
	void reset(int fd = -1) noexcept {
		if (fd_ >= 0) ::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

/**
 * make_eventfd() - a non-blocking, close-on-exec eventfd (counter mode)
 * @initval: initial counter value
 *
 * Used for wake-ups between threads and as vhost kick/call descriptors.
 * Return: the eventfd. Throws SystemError.
 */
UniqueFd make_eventfd(unsigned initval = 0);

/**
 * eventfd_signal() - add 1 to an eventfd counter, waking its pollers
 * @fd: the eventfd
 *
 * Return: 0, or the errno of write() (EAGAIN only if the counter would overflow)
 */
int eventfd_signal(int fd) noexcept;

/**
 * eventfd_drain() - read and reset an eventfd counter
 * @fd: the (non-blocking) eventfd
 *
 * Return: the counter value in n, or n == -1 with errno (EAGAIN: was zero)
 */
IoResult eventfd_drain(int fd) noexcept;

} // namespace esptun::platform
