// charon in a namespace with a private /run; see charon.hpp.
#include "apps/bench/lab/charon.hpp"

#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "base/error.hpp"
#include "platform/sockaddr.hpp"

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sched.h>
#include <sstream>
#include <sys/mount.h>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

constexpr const char* kLibipsecPlugin = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so";
constexpr const char* kGcmPlugin = "/usr/lib/ipsec/plugins/libstrongswan-gcm.so";

bool exists(const std::string& path) {
	std::error_code ec;
	return std::filesystem::exists(path, ec);
}

/// log_end() - the last @bytes of @path, for error messages
std::string log_end(const std::string& path, size_t bytes = 1500) {
	std::ifstream in(path);
	std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

} // namespace

std::string charon_missing() {
	if (!exists(kCharon)) return std::string(kCharon) + " missing (package strongswan-charon)";
	if (!exists(kLibipsecPlugin))
		return "kernel-libipsec plugin missing (package libcharon-extra-plugins)";
	if (!exists(kGcmPlugin))
		return "strongSwan gcm plugin missing (package libstrongswan-standard-plugins)";
	if (find_program("swanctl").empty()) return "swanctl not found in PATH (package strongswan-swanctl)";
	return "";
}

std::string charon_conf(const CharonFiles& files, const std::string& settings, int log_level) {
	std::ostringstream conf;
	conf << "charon {\n"
	     << "  load_modular = no\n"
	     << "  load = random nonce openssl pem pkcs1 x509 pubkey aes sha1 sha2 hmac gcm curve25519 "
	        "gmp kdf kernel-libipsec kernel-netlink socket-default vici\n";
	std::istringstream lines(settings);
	for (std::string line; std::getline(lines, line);)
		conf << "  " << line << "\n";
	conf << "  plugins {\n    vici {\n      socket = " << files.uri() << "\n    }\n  }\n"
	     << "  filelog {\n    stderr {\n      default = " << log_level << "\n    }\n  }\n"
	     << "  journal {\n    default = -1\n  }\n}\n";
	return conf.str();
}

Child start_charon(const std::string& netns, const CharonFiles& files, const std::string& conf,
                   Millis timeout) {
	std::filesystem::create_directories(files.dir + "/run");
	std::error_code ec;
	std::filesystem::remove(files.conf, ec); // a restart writes it again
	write_private_file(files.conf, conf);
	const std::string run_dir = files.dir + "/run";
	Child c = fork_in_netns(netns, [&]() -> int {
		const int fd = open(files.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd < 0) throw_errno("open " + files.log);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0) dup2(null, STDIN_FILENO);
		// charon's PID file path is fixed under /run: a private mount
		// namespace with the daemon's own folder bound over /run.
		if (unshare(CLONE_NEWNS) < 0) throw_errno("unshare(CLONE_NEWNS)");
		if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0)
			throw_errno("make / private");
		if (mount(run_dir.c_str(), "/run", nullptr, MS_BIND, nullptr) < 0)
			throw_errno("bind " + run_dir + " over /run");
		setenv("STRONGSWAN_CONF", files.conf.c_str(), 1);
		execl(kCharon, kCharon, static_cast<char*>(nullptr));
		throw_errno(std::string("exec ") + kCharon);
	});
	// Ready once VICI accepts a connection: its socket file appears when
	// charon binds it, before it listens, and a swanctl that came in between
	// was refused (seen once in CI).
	const auto deadline = Clock::now() + timeout;
	while (!platform::unix_socket_listening(files.vici)) {
		if (auto st = c.poll())
			throw std::runtime_error(std::string("charon exited (") + describe_status(*st) +
			                         "); the end of its log:\n" + log_end(files.log));
		if (Clock::now() > deadline)
			throw std::runtime_error(files.vici + " did not accept a connection within " +
			                         std::to_string(timeout.count()) +
			                         " ms; the end of charon's log:\n" + log_end(files.log));
		sleep_for(Millis(20));
	}
	return c;
}

void load_swanctl(const std::string& netns, const CharonFiles& files, const std::string& scratch,
                  Millis timeout) {
	run_in(netns, {"swanctl", "--load-all", "--uri", files.uri(), "--file", files.swanctl}, scratch,
	       timeout);
}

} // namespace esptun::bench::lab
