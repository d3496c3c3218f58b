// Claiming the ESP port for one endpoint before its workers' sockets join an
// SO_REUSEPORT group on it (service/workers.cpp, step 3 of start-up).
#pragma once

#include "base/inet.hpp"
#include "platform/unique_fd.hpp"

namespace esptun::platform {

/**
 * PortClaim - proof that no other socket held @listen's UDP port, on any
 * address that overlaps @listen, when the claim was taken.
 *
 * Why: the workers' sockets set SO_REUSEPORT so that they can share one
 * port. The kernel lets any socket with SO_REUSEPORT join such a group if
 * its owner has the same effective UID (udp_lib_lport_inuse() in
 * net/ipv4/udp.c). A second gateway started as root on the same port
 * therefore joins the first one's group without an error, and the kernel
 * then splits the peers' datagrams between two processes that hold
 * different keys. Dropping privileges does not help: a socket keeps the UID
 * of its creator (root), and every instance creates its sockets as root.
 *
 * How: take() first binds a probe socket to @listen *without* SO_REUSEPORT.
 * Such a bind fails with EADDRINUSE whenever any socket, with or without
 * SO_REUSEPORT, holds the port on the same, a wildcard or (for a wildcard
 * probe) any specific address of the family; a dual-stack [::] probe also
 * collides with IPv4 binds. The probe is closed right away, and the caller
 * binds its group while the claim lives. Two endpoints that start at the
 * same instant could both pass their probes before either binds, so the
 * probe and the group's binds run under a lock that every esptun process
 * in the network namespace shares: an abstract Unix socket name (unix(7)),
 * which the kernel frees when its holder exits, however it exits.
 */
class PortClaim {
public:
	/**
	 * take() - claim @listen's port; port 0 (the kernel picks one) needs no claim
	 * Throws SystemError (EADDRINUSE) naming the port and saying that
	 * another endpoint uses it, or for a failed system call.
	 */
	static PortClaim take(const Endpoint& listen);

private:
	explicit PortClaim(UniqueFd lock) : lock_(std::move(lock)) {}
	UniqueFd lock_; ///< the abstract socket that serialises claims; released with the claim
};

} // namespace esptun::platform
