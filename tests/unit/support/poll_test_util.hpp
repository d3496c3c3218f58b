// A bounded wait for a descriptor to become readable, for tests that send
// on one socket (or ring) and must not hang if nothing arrives on the other.
#pragma once

#include <poll.h>

namespace esptun::test {

/**
 * wait_readable() - wait until @fd has input, at most @ms milliseconds
 * @fd: a socket, tun end, eventfd or any other pollable descriptor
 * @ms: the longest wait; two seconds by default, long enough for a loaded CI
 *      machine and short enough that a lost packet fails the test quickly
 *
 * Only POLLIN counts: an error or hang-up with no data to read is not
 * "readable", so a caller never goes on to read from a dead descriptor.
 * Return: true when @fd is readable before the time runs out.
 */
inline bool wait_readable(int fd, int ms = 2000) {
	pollfd p{fd, POLLIN, 0};
	return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

} // namespace esptun::test
