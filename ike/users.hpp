// The users a gateway knows by name (a users_file): what each may have of
// its own. One table serves a [[peer]] with EAP-MSCHAPv2 (the password's NT
// hash) and a template peer (fixed addresses and networks per user); conf/
// builds it, the engine only reads it.
#pragma once

#include "base/inet.hpp"
#include "base/secret.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace esptun::ike {

struct User {
	/// EAP-MSCHAPv2: MD4 of the UTF-16LE password (RFC 2759 section 8.3);
	/// empty for other methods. Wiped when freed.
	SecretBytes nt_hash;
	/// Fixed virtual addresses (at most one per family) handed out instead of
	/// a lease from the pool.
	std::vector<IpAddress> addresses;
	/// Networks behind the user, routed to it while it is connected.
	std::vector<IpPrefix> allowed_ips;
	friend bool operator==(const User&, const User&) = default;
};

/// By name: the EAP-MSCHAPv2 user name, the EAP-TLS certificate's subject
/// (as identity_text() writes a DN), or, with certificates, the peer's IKE
/// identity. Compared as a whole by a live reload.
using Users = std::map<std::string, User, std::less<>>;

} // namespace esptun::ike
