// LinkDns: the gateway's DNS servers handed to resolvectl or resolvconf. The
// tools here are shell scripts in a temporary folder (LinkDns takes the
// folders to search), each appending what it was called with to a file:
// "NAME ARGS...", then the lines it read on stdin, then "--".
#include "service/dns_config.hpp"
#include "tests/unit/support/runtime_test_util.hpp"

#include "service/log.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace esptun;

namespace {

std::string read_file(const std::string& path) {
	std::ifstream f(path);
	std::stringstream ss;
	ss << f.rdbuf();
	return ss.str();
}

/// A tool @name in @dir that records its call in @dir/calls, then runs @then
/// (shell, e.g. "exit 1").
void fake_tool(const std::string& dir, const std::string& name, const std::string& then = "exit 0") {
	const std::string path = dir + "/" + name;
	std::ofstream(path) << "#!/bin/sh\n"
	                    << "{ echo \"" << name << " $*\"; cat; echo --; } >>'" << dir << "/calls'\n"
	                    << then << "\n";
	REQUIRE(chmod(path.c_str(), 0755) == 0);
}

std::vector<IpAddress> ips(std::initializer_list<const char*> texts) {
	std::vector<IpAddress> out;
	for (const char* t : texts)
		out.push_back(*parse_ip(t));
	return out;
}

/// What stderr (the log) got while it lived.
class CaptureStderr {
public:
	CaptureStderr() : file_(std::tmpfile()), saved_(dup(2)) {
		std::fflush(stderr);
		dup2(fileno(file_), 2);
	}
	~CaptureStderr() {
		restore();
		std::fclose(file_);
	}
	std::string text() {
		restore();
		std::rewind(file_);
		std::string s;
		for (int c; (c = std::fgetc(file_)) != EOF;)
			s += char(c);
		return s;
	}

private:
	void restore() {
		if (saved_ < 0) return;
		std::fflush(stderr);
		dup2(saved_, 2);
		close(saved_);
		saved_ = -1;
	}
	std::FILE* file_;
	int saved_;
};

size_t count_lines(const std::string& s) {
	size_t n = 0;
	for (char c : s)
		n += c == '\n';
	return n;
}

} // namespace

TEST_CASE("LinkDns: resolvconf -a with nameserver lines, -d on restore() and once only") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf");
	const auto servers = ips({"10.77.0.53", "2001:db8::53"});
	{
		service::LinkDns dns({d.path});
		CaptureStderr log;
		CHECK(dns.apply("esp9", servers) == "resolvconf");
		const std::string said = log.text();
		CHECK(count_lines(said) == 1);
		CHECK(said.find("10.77.0.53 2001:db8::53") != std::string::npos);
		CHECK(said.find("esp9") != std::string::npos);
		CHECK(read_file(d.path + "/calls") ==
		      "resolvconf -a esp9\nnameserver 10.77.0.53\nnameserver 2001:db8::53\n--\n");

		dns.restore();
		CHECK(read_file(d.path + "/calls") ==
		      "resolvconf -a esp9\nnameserver 10.77.0.53\nnameserver 2001:db8::53\n--\n"
		      "resolvconf -d esp9\n--\n");
		dns.restore(); // idempotent
	}                      // and the destructor has nothing left to do
	CHECK(count_lines(read_file(d.path + "/calls")) == 6);
}

TEST_CASE("LinkDns: a new server list replaces the record; the destructor deletes it") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf");
	{
		service::LinkDns dns({d.path});
		CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf");
		CHECK(dns.apply("esp9", ips({"10.77.0.54", "10.77.0.55"})) == "resolvconf");
	}
	CHECK(read_file(d.path + "/calls") == "resolvconf -a esp9\nnameserver 10.77.0.53\n--\n"
	                                      "resolvconf -a esp9\nnameserver 10.77.0.54\nnameserver "
	                                      "10.77.0.55\n--\n"
	                                      "resolvconf -d esp9\n--\n");
}

TEST_CASE("LinkDns: an empty list removes the record; another interface moves it") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf");
	service::LinkDns dns({d.path});
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf");
	CHECK(dns.apply("esp9", {}) == "");
	CHECK(dns.apply("esp7", ips({"10.77.0.53"})) == "resolvconf");
	CHECK(dns.apply("esp8", ips({"10.77.0.53"})) == "resolvconf");
	CHECK(read_file(d.path + "/calls") == "resolvconf -a esp9\nnameserver 10.77.0.53\n--\n"
	                                      "resolvconf -d esp9\n--\n"
	                                      "resolvconf -a esp7\nnameserver 10.77.0.53\n--\n"
	                                      "resolvconf -d esp7\n--\n"
	                                      "resolvconf -a esp8\nnameserver 10.77.0.53\n--\n");
	// A name resolvconf would take for an option is refused, and the old record goes.
	CHECK(dns.apply("-x", ips({"10.77.0.53"})) == "not applied: no usable interface name");
	CHECK(read_file(d.path + "/calls").ends_with("resolvconf -d esp8\n--\n"));
}

TEST_CASE("LinkDns: a failing resolvconf gives \"resolvconf failed\" and its words in the log") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf", "echo 'Cannot write to /run/resolvconf/lock' >&2; exit 1");
	service::LinkDns dns({d.path});
	CaptureStderr log;
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf failed");
	const std::string said = log.text();
	CHECK(said.find("warning") != std::string::npos);
	CHECK(said.find("exit status 1: Cannot write to /run/resolvconf/lock") != std::string::npos);
	// The record may exist all the same: restore() deletes it.
	dns.restore();
	CHECK(read_file(d.path + "/calls").ends_with("resolvconf -d esp9\n--\n"));
}

TEST_CASE("LinkDns: a hanging resolvconf is killed, with what it started, at the time limit") {
	test::TempDir d("esptun-dns");
	// The script waits for a child of its own: killing only the shell would
	// leave the sleep behind.
	fake_tool(d.path, "resolvconf", "sleep 60 & echo $! >'" + d.path + "/sleep.pid'; wait");
	service::LinkDns dns({d.path}, std::chrono::milliseconds(500));
	const auto t0 = std::chrono::steady_clock::now();
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf failed");
	const auto took = std::chrono::steady_clock::now() - t0;
	CHECK(took >= std::chrono::milliseconds(450));
	CHECK(took < std::chrono::seconds(3));
	const pid_t sleeper = pid_t(std::atoi(read_file(d.path + "/sleep.pid").c_str()));
	REQUIRE(sleeper > 0);
	// Gone, or a zombie until init reaps it: either way no longer sleeping.
	std::string state;
	for (int i = 0; i < 100; i++) {
		const std::string stat = read_file("/proc/" + std::to_string(sleeper) + "/stat");
		const size_t paren = stat.rfind(')');
		state = paren == std::string::npos ? "gone" : stat.substr(paren + 2, 1);
		if (state == "gone" || state == "Z") break;
		usleep(10000);
	}
	CHECK((state == "gone" || state == "Z"));
	if (state != "gone" && state != "Z") kill(sleeper, SIGKILL);
}

TEST_CASE("LinkDns: resolvectl first; revert on restore()") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvectl");
	fake_tool(d.path, "resolvconf");
	{
		service::LinkDns dns({d.path});
		CHECK(dns.apply("esp9", ips({"10.77.0.53", "10.77.0.54"})) == "resolvectl");
	}
	CHECK(read_file(d.path + "/calls") == "resolvectl dns esp9 10.77.0.53 10.77.0.54\n--\n"
	                                      "resolvectl revert esp9\n--\n");
}

TEST_CASE("LinkDns: resolvconf when resolvectl fails (systemd-resolved not running)") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvectl", "exit 1");
	fake_tool(d.path, "resolvconf");
	{
		service::LinkDns dns({d.path});
		CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf");
	}
	CHECK(read_file(d.path + "/calls") == "resolvectl dns esp9 10.77.0.53\n--\n"
	                                      "resolvconf -a esp9\nnameserver 10.77.0.53\n--\n"
	                                      "resolvconf -d esp9\n--\n");
	fake_tool(d.path, "resolvconf", "exit 1");
	service::LinkDns dns({d.path});
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvectl and resolvconf failed");
}

TEST_CASE("LinkDns: the folders are searched in order; a file that is not executable is skipped") {
	test::TempDir a("esptun-dns"), b("esptun-dns");
	std::ofstream(a.path + "/resolvconf") << "#!/bin/sh\nexit 1\n"; // mode 0644
	fake_tool(b.path, "resolvconf");
	service::LinkDns dns({"/nonexistent", a.path, b.path});
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf");
	CHECK(read_file(b.path + "/calls").starts_with("resolvconf -a esp9\n"));
}

TEST_CASE("LinkDns: neither tool installed: not applied, said once, nothing to restore") {
	test::TempDir d("esptun-dns");
	service::LinkDns dns({d.path, "/nonexistent"});
	CaptureStderr log;
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) ==
	      "not applied: neither resolvectl nor resolvconf is installed");
	dns.restore();
	const std::string said = log.text();
	CHECK(count_lines(said) == 1);
	CHECK(said.find("10.77.0.53") != std::string::npos);
}

TEST_CASE("LinkDns: at most kMaxServers servers are handed on") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf");
	std::vector<IpAddress> many;
	for (uint32_t i = 1; i <= 20; i++)
		many.push_back(IpAddress::v4(0x0a4d0000 + i));
	service::LinkDns dns({d.path});
	CHECK(dns.apply("esp9", many) == "resolvconf");
	const std::string calls = read_file(d.path + "/calls");
	CHECK(count_lines(calls) == 2 + service::LinkDns::kMaxServers);
	CHECK(calls.find("nameserver 10.77.0.8\n") != std::string::npos);
	CHECK(calls.find("nameserver 10.77.0.9\n") == std::string::npos);
}

TEST_CASE("LinkDns: the tool gets stdin, stdout and stderr, none of our other descriptors") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf", "ls /proc/$$/fd >'" + d.path + "/fds'");
	const int devnull = open("/dev/null", O_RDONLY); // not close-on-exec, as asio's sockets
	REQUIRE(devnull >= 0);
	const int ours = fcntl(devnull, F_DUPFD, 50);
	close(devnull);
	REQUIRE(ours >= 50);
	service::LinkDns dns({d.path});
	CHECK(dns.apply("esp9", ips({"10.77.0.53"})) == "resolvconf");
	close(ours);
	std::istringstream fds(read_file(d.path + "/fds"));
	std::vector<int> seen;
	for (int fd; fds >> fd;)
		seen.push_back(fd);
	CHECK(std::find(seen.begin(), seen.end(), 0) != seen.end());
	CHECK(std::find(seen.begin(), seen.end(), 2) != seen.end());
	CHECK(std::find(seen.begin(), seen.end(), ours) == seen.end());
}

TEST_CASE("LinkDns: catch_all adds the routing domain ~. and default-route; revert takes all back") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvectl");
	{
		service::LinkDns dns({d.path});
		CaptureStderr log;
		CHECK(dns.apply("esp9", ips({"10.77.0.53"}), true) == "resolvectl");
		CHECK(log.text().find("routing domain ~.") != std::string::npos);
	}
	CHECK(read_file(d.path + "/calls") == "resolvectl dns esp9 10.77.0.53\n--\n"
	                                      "resolvectl domain esp9 ~.\n--\n"
	                                      "resolvectl default-route esp9 yes\n--\n"
	                                      "resolvectl revert esp9\n--\n");
}

TEST_CASE("LinkDns: catch_all with resolvconf writes only the nameservers (no routing domains)") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvconf");
	{
		service::LinkDns dns({d.path});
		CHECK(dns.apply("esp9", ips({"10.77.0.53"}), true) == "resolvconf");
	}
	CHECK(read_file(d.path + "/calls") == "resolvconf -a esp9\nnameserver 10.77.0.53\n--\n"
	                                      "resolvconf -d esp9\n--\n");
}

TEST_CASE("LinkDns: a failing resolvectl domain keeps the servers and says so") {
	test::TempDir d("esptun-dns");
	fake_tool(d.path, "resolvectl", "[ \"$1\" = domain ] && exit 1; exit 0");
	service::LinkDns dns({d.path});
	CaptureStderr log;
	CHECK(dns.apply("esp9", ips({"10.77.0.53"}), true) == "resolvectl");
	const std::string said = log.text();
	CHECK(said.find("not as the catch-all") != std::string::npos);
	CHECK(said.find("warning") != std::string::npos);
}
