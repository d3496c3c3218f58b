// LinkDns: see dns_config.hpp.
#include "service/dns_config.hpp"

#include "platform/unique_fd.hpp"
#include "service/log.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

extern char** environ;

namespace esptun::service {
namespace {

using Clock = std::chrono::steady_clock;

/// What run_tool() keeps of a tool's output, for the warning when it fails.
constexpr size_t kOutputKept = 1024;

std::string seconds(std::chrono::milliseconds t) {
	return t.count() % 1000 == 0 ? std::to_string(t.count() / 1000) + " s"
	                             : std::to_string(t.count()) + " ms";
}

/// The last non-empty line of @text, for a one-line warning.
std::string last_line(std::string text) {
	while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
		text.pop_back();
	const size_t nl = text.rfind('\n');
	return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string describe(int status) {
	if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
	if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
	return "status " + std::to_string(status);
}

/**
 * run_tool() - run @argv (argv[0] is the tool's path) with @input on its stdin
 * @timeout: then the tool and everything it started are killed
 *
 * The child gets its own process group, so a kill at the time limit also
 * takes the commands a shell script started. Its stdout and stderr go to a
 * pipe we read while we wait, and their last line goes into the answer.
 *
 * Return: "" when it exited with status 0, else what went wrong, e.g.
 * "exit status 1: Cannot write to /run/resolvconf/lock".
 */
std::string run_tool(const std::vector<std::string>& argv, const std::string& input,
                     std::chrono::milliseconds timeout) {
	// stdin: a pipe filled before the child starts. The input (a few short
	// lines) is far below a pipe's capacity, so the write can neither block
	// nor raise SIGPIPE when the tool exits without reading it.
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
	platform::UniqueFd in_r(in[0]), in_w(in[1]);
	if (pipe2(out, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
	platform::UniqueFd out_r(out[0]), out_w(out[1]);
	if (::write(in_w.get(), input.data(), input.size()) != ssize_t(input.size()))
		return "cannot write its input to the pipe";
	in_w.reset();
	fcntl(out_r.get(), F_SETFL, O_NONBLOCK);

	std::vector<char*> args;
	for (const std::string& a : argv)
		args.push_back(const_cast<char*>(a.c_str()));
	args.push_back(nullptr);

	// The pipes become 0, 1 and 2. Nothing else of ours goes to the tool
	// (nor to a daemon it restarts): our own descriptors are close-on-exec,
	// but not every library's (asio's control socket).
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in_r.get(), 0);
	posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
	posix_spawn_file_actions_adddup2(&fa, out_w.get(), 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
	// Own process group; no signal blocked or ignored, whatever this thread has.
	posix_spawnattr_t attr;
	posix_spawnattr_init(&attr);
	sigset_t none, deflt;
	sigemptyset(&none);
	sigemptyset(&deflt);
	sigaddset(&deflt, SIGPIPE);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &deflt);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr,
	                         POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid = 0;
	const int err = posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (err != 0) return std::string("cannot start it: ") + std::strerror(err);
	in_r.reset();
	out_w.reset();

	// Wait for the exit, reading its output meanwhile: poll the pipe in
	// short steps and look with WNOHANG in between. Output past the exit is
	// not waited for (a daemon it restarted may hold the pipe open).
	std::string output;
	auto drain = [&] {
		char buf[512];
		ssize_t n;
		while (out_r && (n = ::read(out_r.get(), buf, sizeof buf)) != 0) {
			if (n < 0) {
				if (errno == EINTR) continue;
				if (errno != EAGAIN) out_r.reset();
				return;
			}
			output.append(buf, size_t(n));
			if (output.size() > kOutputKept) output.erase(0, output.size() - kOutputKept);
		}
		out_r.reset(); // end of file: poll() would report it again at once
	};
	const Clock::time_point deadline = Clock::now() + timeout;
	int status = 0;
	for (;;) {
		const pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) break;
		if (r < 0 && errno != EINTR) return std::string("waitpid: ") + std::strerror(errno);
		const auto left =
		    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
		if (left.count() <= 0) {
			kill(-pid, SIGKILL); // the group: a shell script's commands too
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
			drain();
			const std::string said = last_line(output);
			return "no answer within " + seconds(timeout) + ", killed" +
			       (said.empty() ? "" : ": " + said);
		}
		pollfd p{out_r.get(), POLLIN, 0}; // fd -1 (pipe closed): poll only sleeps
		poll(&p, 1, int(std::min<long long>(left.count(), 10)));
		if (p.revents) drain();
	}
	drain();
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
	const std::string said = last_line(output);
	return describe(status) + (said.empty() ? "" : ": " + said);
}

std::string join(const std::vector<std::string>& words) {
	std::string s;
	for (const std::string& w : words)
		s += (s.empty() ? "" : " ") + w;
	return s;
}

/// The process-wide runner set by set_dns_tool_runner(); empty: run_tool().
DnsToolRunner& tool_runner() {
	static DnsToolRunner runner;
	return runner;
}

} // namespace

std::string run_dns_tool(const std::vector<std::string>& argv, const std::string& input,
                         std::chrono::milliseconds timeout) {
	return run_tool(argv, input, timeout);
}

void set_dns_tool_runner(DnsToolRunner runner) { tool_runner() = std::move(runner); }

LinkDns::LinkDns(std::vector<std::string> tool_dirs, std::chrono::milliseconds timeout)
    : tool_dirs_(std::move(tool_dirs)), timeout_(timeout) {}

LinkDns::~LinkDns() { restore(); }

std::string LinkDns::find_tool(const char* name) const {
	for (const std::string& dir : tool_dirs_) {
		const std::string path = dir + "/" + name;
		if (::access(path.c_str(), X_OK) == 0) return path;
	}
	return "";
}

bool LinkDns::run_logged(const std::string& tool, const std::vector<std::string>& args,
                         const std::string& input) const {
	std::vector<std::string> argv{tool};
	argv.insert(argv.end(), args.begin(), args.end());
	const std::string why =
	    tool_runner() ? tool_runner()(argv, input, timeout_) : run_tool(argv, input, timeout_);
	if (why.empty()) return true;
	log::warn("DNS: " + join(argv) + " failed: " + why);
	return false;
}

std::string LinkDns::apply(const std::string& ifname, std::span<const IpAddress> servers, bool catch_all) {
	try {
		if (servers.empty()) {
			restore();
			return "";
		}
		std::vector<std::string> addrs;
		for (const IpAddress& s : servers.first(std::min(servers.size(), kMaxServers)))
			addrs.push_back(to_string(s));
		std::string list = join(addrs);
		if (servers.size() > kMaxServers)
			list += " (the first " + std::to_string(kMaxServers) + " of " +
			        std::to_string(servers.size()) + ")";
		// Both tools take the name as one argument, and resolvconf an
		// option where it starts with '-'.
		if (ifname.empty() || ifname[0] == '-' ||
		    ifname.find_first_of(" \t\n/") != std::string::npos) {
			log::warn("DNS servers from the gateway: " + list +
			          " (not applied: no usable interface name: \"" + ifname + "\")");
			restore();
			return "not applied: no usable interface name";
		}
		if (ifname != ifname_) restore(); // another tun: the old one's setting goes first

		std::string failed;
		if (const std::string resolvectl = find_tool("resolvectl"); !resolvectl.empty()) {
			std::vector<std::string> args{"dns", ifname};
			args.insert(args.end(), addrs.begin(), addrs.end());
			if (run_logged(resolvectl, args, "")) {
				if (undo_ == Undo::resolvconf) restore();
				undo_ = Undo::resolvectl;
				tool_ = resolvectl;
				ifname_ = ifname;
				std::string how;
				// "~." is a routing-only domain matching every name (systemd-resolved's
				// resolved.conf(5), Domains=): no link with a more general match is left.
				if (catch_all) {
					const bool ok =
					    run_logged(resolvectl, {"domain", ifname, "~."}, "") &&
					    run_logged(resolvectl, {"default-route", ifname, "yes"}, "");
					how = ok ? ", routing domain ~. (all queries)"
					         : " (not as the catch-all: resolvectl domain/default-route "
					           "failed)";
				}
				log::info("DNS servers " + list + " set on " + ifname + " with resolvectl" +
				          how);
				return "resolvectl";
			}
			// E.g. installed but systemd-resolved not running: resolvconf may still work.
			failed = "resolvectl";
		}
		if (const std::string resolvconf = find_tool("resolvconf"); !resolvconf.empty()) {
			if (undo_ == Undo::resolvectl) restore();
			std::string input;
			for (const std::string& a : addrs)
				input += "nameserver " + a + "\n";
			// `-a` with the same name replaces our record. Even a failed run
			// may have left it (openresolv stores it before it runs its
			// subscribers), so restore() deletes it in any case.
			undo_ = Undo::resolvconf;
			tool_ = resolvconf;
			ifname_ = ifname;
			if (run_logged(resolvconf, {"-a", ifname}, input)) {
				log::info("DNS servers " + list + " set on " + ifname + " with resolvconf");
				return "resolvconf";
			}
			failed += failed.empty() ? "resolvconf" : " and resolvconf";
		}
		if (!failed.empty()) return failed + " failed";
		log::info("DNS servers from the gateway: " + list +
		          " (not applied: neither resolvectl nor resolvconf is installed)");
		return "not applied: neither resolvectl nor resolvconf is installed";
	} catch (const std::exception& e) { // std::bad_alloc; nothing else throws here
		log::warn(std::string("DNS servers from the gateway not applied: ") + e.what());
		return "not applied: " + std::string(e.what());
	}
}

void LinkDns::restore() noexcept {
	const Undo undo = std::exchange(undo_, Undo::none);
	if (undo == Undo::none) return;
	try {
		// resolvconf keeps the record until it is deleted: /etc/resolv.conf
		// would go on naming servers only reachable through the tunnel.
		// systemd-resolved forgets a link's servers when the link goes, so at
		// shutdown the revert is not needed; but restore() also runs while the
		// tun stays (a new IKE SA without DNS servers, resolvconf taking over),
		// and then it is. On a link that still exists it is harmless.
		const std::vector<std::string> args{undo == Undo::resolvconf ? "-d" : "revert", ifname_};
		if (run_logged(tool_, args, ""))
			log::info("DNS servers of " + ifname_ + " removed with " +
			          (undo == Undo::resolvconf ? "resolvconf" : "resolvectl"));
	} catch (...) { // std::bad_alloc while shutting down: nothing better to do
	}
}

} // namespace esptun::service
