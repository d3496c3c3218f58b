// drop_privileges(): see privileges.hpp.
#include "service/privileges.hpp"

#include "base/error.hpp"
#include "platform/privileges.hpp"
#include "platform/process.hpp"
#include "service/dns_helper.hpp"
#include "service/log.hpp"
#include "service/seq_state.hpp"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <unistd.h>

namespace esptun::service {

namespace {

/**
 * hand_over_state_dir() - make @dir and its state file @who's
 *
 * The sequence state is rewritten every few seconds under load as a temp
 * file renamed over esptun.seq (seq_state.cpp), which needs write access to
 * the folder itself; an fd kept from before the drop would not do. The
 * folder stays mode 0700, so only @who (and root) can read it.
 */
void hand_over_state_dir(const std::string& dir, const platform::RunAs& who) {
	// The file first: once the folder is @who's (mode 0700), root without
	// CAP_DAC_OVERRIDE (the systemd unit's set) can no longer reach into it.
	const std::string file = seq_state_file(dir);
	if (::lchown(file.c_str(), who.uid, who.gid) != 0 && errno != ENOENT) throw_errno("chown", file);
	if (::chown(dir.c_str(), who.uid, who.gid) != 0) throw_errno("chown", dir);
}

/**
 * keep_dns_tools_root() - an IKE client may be handed DNS servers, whose
 * tools need root (dns_helper.hpp): keep the helper forked before the
 * config was read (@early; else fork it now, while there is still one
 * thread and root) and route LinkDns through it. It lives as long as the
 * process, past the IKE service's restore() at exit.
 */
void keep_dns_tools_root(const conf::Config& config, std::unique_ptr<DnsHelper> early) {
	if (config.role != conf::Role::client ||
	    std::none_of(config.peers.begin(), config.peers.end(),
	                 [](const auto& p) { return p.ike.has_value(); }))
		return; // @early, if any, ends here
	static std::unique_ptr<DnsHelper> helper;
	helper = early ? std::move(early) : DnsHelper::start();
	set_dns_tool_runner(
	    [h = helper.get()](const std::vector<std::string>& argv, const std::string& input,
	                       std::chrono::milliseconds timeout) { return h->run(argv, input, timeout); });
}

} // namespace

void drop_privileges(const conf::Config& config, std::unique_ptr<DnsHelper> dns) {
	const conf::TunnelConfig& tc = config.tunnel;
	if (!tc.drop_privileges) {
		log::info("privileges: kept (drop_privileges = false): running as uid " +
		          std::to_string(::getuid()) +
		          " with all its capabilities and no system call filter");
		return;
	}
	const platform::RunAs who = platform::lookup_user(tc.user);
	if (who.uid != 0) hand_over_state_dir(tc.state_dir, who);
	keep_dns_tools_root(config, std::move(dns));
	// The workers step between SCHED_FIFO and ordinary scheduling on their
	// own (datapath/precedence.hpp): stepping up again takes CAP_SYS_NICE,
	// which the seccomp filter confines to the calling thread.
	const bool nice = platform::drop_to_user(who, tc.realtime_workers);
	const std::string caps = nice ? "cap_net_admin, cap_sys_nice" : "cap_net_admin";
	log::debug("privileges: now uid " + std::to_string(who.uid) + ", gid " + std::to_string(who.gid) +
	           ", capabilities left: " + caps);
	// The kernel makes a process dumpable again when its uids change
	// (prctl(2), PR_SET_DUMPABLE): keep keys out of core dumps after the drop too.
	platform::disable_core_dumps();
	// access(2) checks the real uid, which is now the user's: a parent folder
	// it cannot search would only show when the state is next saved.
	if (who.uid != 0 && ::access(tc.state_dir.c_str(), W_OK | X_OK) != 0) {
		const int err = errno;
		throw SystemError(err, "state_dir " + tc.state_dir,
		                  "user " + who.name +
		                      " must be able to reach and write it: give every parent "
		                      "folder search permission for others, or set [tunnel] user");
	}
	const int calls = platform::install_syscall_filter();
	log::debug("seccomp filter installed: " + std::to_string(calls) + " system calls allowed");
	log::info("privileges: dropped to user " + who.name + " (uid " + std::to_string(who.uid) + ", gid " +
	          std::to_string(who.gid) + "); capabilities left: " + caps +
	          "; no_new_privs; seccomp allows " + std::to_string(calls) +
	          " system calls, any other stops the process with SIGSYS");
}

} // namespace esptun::service
