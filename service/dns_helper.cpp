// DnsHelper: see dns_helper.hpp. One request, one answer, each a single
// SOCK_SEQPACKET message (unix(7)), so neither side has to frame a stream.
//
// Request: "<timeout ms>\0<stdin text>\0<argv[0]>\0<argv[1]>..." (the
// fields hold no NUL: dns_tool_allowed() and the input check make sure).
// Answer: "=" followed by run_dns_tool()'s text ("=" alone = success): never
// empty, as an empty datagram reads like the end of the connection.
#include "service/dns_helper.hpp"

#include "platform/process.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <string_view>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

namespace esptun::service {

namespace {

/// The largest request or answer; DNS server lists are a few hundred bytes.
constexpr size_t kMaxMessage = 16384;
/// The helper's own descriptor for its end of the pair.
constexpr int kHelperFd = 3;

/// The helper ignores SIGINT/SIGTERM meant for the endpoint (a Ctrl-C reaches
/// the whole process group): it must still be there for the endpoint's
/// restore() at exit. A handler rather than SIG_IGN: exec resets handlers but
/// would pass SIG_IGN on to the tools.
void ignore_signal(int) {}

/// Splits @msg at NULs.
std::vector<std::string> split(std::string_view msg) {
	std::vector<std::string> out;
	size_t at = 0;
	for (size_t nul; (nul = msg.find('\0', at)) != std::string_view::npos; at = nul + 1)
		out.emplace_back(msg.substr(at, nul - at));
	out.emplace_back(msg.substr(at));
	return out;
}

/// One request -> its answer, in the helper.
std::string serve(std::string_view msg) {
	std::vector<std::string> f = split(msg);
	if (f.size() < 3) return "malformed request to the DNS helper";
	const long ms = std::strtol(f[0].c_str(), nullptr, 10);
	if (ms <= 0 || ms > 60000) return "malformed request to the DNS helper";
	std::vector<std::string> argv(f.begin() + 2, f.end());
	if (!dns_tool_allowed(argv)) return "refused by the DNS helper: not a DNS tool";
	return run_dns_tool(argv, f[1], std::chrono::milliseconds(ms));
}

/// The helper's life: answer requests until the endpoint hangs up.
[[noreturn]] void helper_main(int fd, pid_t parent) {
	::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (::getppid() != parent) ::_exit(0); // the endpoint died before the line above
	struct sigaction sa {};
	sa.sa_handler = ignore_signal;
	::sigaction(SIGINT, &sa, nullptr);
	::sigaction(SIGTERM, &sa, nullptr);
	::signal(SIGHUP, SIG_DFL);
	// Only stdin/out/err and the socket stay open: the tun, the sockets and
	// the control socket are the endpoint's alone.
	if (fd != kHelperFd && ::dup2(fd, kHelperFd) < 0) ::_exit(1);
	::close_range(kHelperFd + 1, ~0U, 0);
	std::vector<char> buf(kMaxMessage);
	for (;;) {
		const ssize_t n = ::recv(kHelperFd, buf.data(), buf.size(), MSG_TRUNC);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) ::_exit(0);
		std::string answer;
		try {
			answer = size_t(n) > buf.size() ? "request to the DNS helper too long"
			                                : serve(std::string_view(buf.data(), size_t(n)));
		} catch (...) {
			answer = "the DNS helper failed";
		}
		answer.insert(0, 1, '=');
		answer.resize(std::min(answer.size(), kMaxMessage));
		if (::send(kHelperFd, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) ::_exit(0);
	}
}

} // namespace

bool dns_tool_allowed(const std::vector<std::string>& argv) {
	if (argv.empty()) return false;
	bool known = false;
	for (const std::string& dir : kDnsToolDirs)
		for (const char* tool : {"resolvectl", "resolvconf"})
			known = known || argv[0] == dir + "/" + tool;
	return known && std::none_of(argv.begin(), argv.end(),
	                             [](const std::string& a) { return a.find('\0') != std::string::npos; });
}

std::unique_ptr<DnsHelper> DnsHelper::start() {
	const platform::HelperProcess h = platform::fork_helper(
	    SOCK_SEQPACKET, "DNS helper", [](int fd, pid_t parent) { helper_main(fd, parent); });
	return std::unique_ptr<DnsHelper>(new DnsHelper(h.fd, h.pid));
}

DnsHelper::~DnsHelper() {
	::close(fd_); // the helper sees end of file and exits
	while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
}

std::string DnsHelper::run(const std::vector<std::string>& argv, const std::string& input,
                           std::chrono::milliseconds timeout) noexcept {
	try {
		if (input.find('\0') != std::string::npos) return "input holds a NUL";
		std::string msg = std::to_string(timeout.count());
		msg.push_back('\0');
		msg += input;
		for (const std::string& a : argv) {
			msg.push_back('\0');
			msg += a;
		}
		if (msg.size() > kMaxMessage) return "request to the DNS helper too long";
		// The helper kills the tool at @timeout; a few seconds more for it to answer.
		const auto wait = timeout + std::chrono::seconds(3);
		timeval tv{};
		tv.tv_sec = wait.count() / 1000;
		tv.tv_usec = (wait.count() % 1000) * 1000;
		::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		if (::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) < 0)
			return std::string("the DNS helper is gone: ") + std::strerror(errno);
		std::string answer(kMaxMessage, '\0');
		ssize_t n;
		while ((n = ::recv(fd_, answer.data(), answer.size(), 0)) < 0 && errno == EINTR) {}
		if (n < 0) return std::string("no answer from the DNS helper: ") + std::strerror(errno);
		if (n == 0 || answer[0] != '=') return "the DNS helper is gone";
		answer.resize(size_t(n));
		return answer.substr(1);
	} catch (...) {
		return "out of memory";
	}
}

} // namespace esptun::service
