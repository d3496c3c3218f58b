// strongSwan's charon as a child of the bench: one daemon per namespace,
// each with its own strongswan.conf, VICI socket, log and /run (charon's PID
// file path is fixed), ESP in userspace by kernel-libipsec (the test
// machines' kernel may have no ESP). Used by compare and ike-load.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <string>

namespace esptun::bench::lab {

inline constexpr const char* kCharon = "/usr/lib/ipsec/charon";

/// charon_missing() - what is missing to run charon here (the package to
/// install), or "" when everything is
std::string charon_missing();

/// The files of one charon: all under one private folder.
struct CharonFiles {
	explicit CharonFiles(const std::string& folder)
	    : dir(folder), conf(folder + "/strongswan.conf"), vici(folder + "/charon.vici"),
	      swanctl(folder + "/swanctl.conf"), log(folder + "/charon.log") {}
	std::string dir, conf, vici, swanctl, log;
	std::string uri() const { return "unix://" + vici; }
};

/**
 * charon_conf() - strongswan.conf for @files: the plugins a PSK or
 * certificate tunnel with GCM, CBC, X25519 and ECP needs (kernel-libipsec
 * before kernel-netlink: libipsec does IPsec, netlink still does addresses
 * and routes), the VICI socket, stderr logging at @log_level for every
 * subsystem, no journal
 * @settings: more lines inside charon { } (e.g. "install_routes = yes")
 */
std::string charon_conf(const CharonFiles& files, const std::string& settings, int log_level);

/**
 * start_charon() - write @conf to files.conf and start charon in @netns,
 * with a private mount namespace whose /run is files.dir/run, output to
 * files.log; returns once the VICI socket exists (throws after @timeout,
 * or at once when charon exits, quoting its log's end)
 */
Child start_charon(const std::string& netns, const CharonFiles& files, const std::string& conf,
                   Millis timeout = Millis(10000));

/// load_swanctl() - `swanctl --load-all` of files.swanctl through its VICI socket; throws
void load_swanctl(const std::string& netns, const CharonFiles& files, const std::string& scratch,
                  Millis timeout = Millis(15000));

} // namespace esptun::bench::lab
