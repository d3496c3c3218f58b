// capture(), run_in() and find_program(): see command.hpp.
#include "apps/bench/lab/command.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

std::string tail_of(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

} // namespace

std::string find_program(const std::string& name) {
	const char* path = std::getenv("PATH");
	std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	std::istringstream in(dirs);
	for (std::string dir; std::getline(in, dir, ':');) {
		if (dir.empty()) continue;
		std::string full = dir + "/" + name;
		if (access(full.c_str(), X_OK) == 0) return full;
	}
	return {};
}

CmdResult capture(const std::string& netns, const std::vector<std::string>& argv, Millis timeout,
                  const std::string& scratch) {
	static unsigned counter = 0;
	std::string err_path = scratch + "/cmd-" + std::to_string(++counter) + ".err";
	auto deadline = Clock::now() + timeout;
	Pipe out = Pipe::make();
	Child c = fork_in_netns(netns, [&] {
		dup2(out.write_end.get(), STDOUT_FILENO);
		int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (err >= 0) dup2(err, STDERR_FILENO);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0) dup2(null, STDIN_FILENO);
		exec_argv(argv, true, "");
		return 127;
	});
	out.write_end.reset();
	CmdResult r;
	try {
		r.out = read_all(out.read_end.get(), deadline);
		auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
		r.status = c.wait(std::max(Millis(1000), left));
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		throw std::runtime_error(join_args(argv) + ": " + e.what());
	}
	std::ifstream in(err_path);
	r.err = tail_of(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
	                2000);
	std::error_code ec;
	std::filesystem::remove(err_path, ec);
	return r;
}

std::string run_in(const std::string& netns, const std::vector<std::string>& argv, const std::string& scratch,
                   Millis timeout) {
	CmdResult r = capture(netns, argv, timeout, scratch);
	if (!r.ok()) {
		std::string err = r.err.empty() ? tail_of(r.out, 400) : tail_of(r.err, 400);
		while (!err.empty() && err.back() == '\n')
			err.pop_back();
		throw std::runtime_error(join_args(argv) + " failed (" + describe_status(r.status) +
		                         "): " + err);
	}
	return r.out;
}

std::string word_after(const std::string& text, const std::string& prefix) {
	auto at = text.find(prefix);
	if (at == std::string::npos) return "";
	at += prefix.size();
	auto end = text.find_first_of(" \t\r\n", at);
	return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::string version_word(const std::vector<std::string>& argv, const std::string& prefix,
                         const std::string& scratch) {
	try {
		CmdResult r = capture("", argv, Millis(5000), scratch);
		std::string v = word_after(r.out, prefix);
		return v.empty() ? word_after(r.err, prefix) : v;
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception&) {
		return "";
	}
}

} // namespace esptun::bench::lab
