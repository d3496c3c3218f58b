// Readers of /proc/PID/stat and /proc/PID/status.
#include "apps/bench/lab/proc_stats.hpp"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

std::string read_proc(pid_t pid, const char* file) {
	std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
	std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	if (text.empty())
		throw std::runtime_error("process " + std::to_string(pid) + " is gone (no /proc " + file +
		                         ")");
	return text;
}

} // namespace

double cpu_seconds(const std::vector<pid_t>& pids) {
	static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
	double total = 0;
	for (pid_t pid : pids) {
		const std::string stat = read_proc(pid, "stat");
		auto close = stat.rfind(')');
		if (close == std::string::npos || close + 2 > stat.size())
			throw std::runtime_error("process " + std::to_string(pid) +
			                         ": unreadable /proc stat");
		// After "pid (comm)": field 3 is the state; utime and stime are fields 14, 15.
		std::istringstream f(stat.substr(close + 2));
		std::string field;
		double utime = 0, stime = 0;
		for (int i = 3; i <= 15 && f >> field; i++) {
			if (i == 14) utime = std::strtod(field.c_str(), nullptr);
			if (i == 15) stime = std::strtod(field.c_str(), nullptr);
		}
		total += (utime + stime) / ticks;
	}
	return total;
}

uint64_t rss_kib(pid_t pid) {
	std::istringstream in(read_proc(pid, "status"));
	for (std::string line; std::getline(in, line);)
		if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
	throw std::runtime_error("process " + std::to_string(pid) + ": no VmRSS in /proc status");
}

double machine_busy_seconds() {
	static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
	std::ifstream in("/proc/stat");
	std::string cpu;
	double v[10] = {};
	if (!(in >> cpu) || cpu != "cpu") throw std::runtime_error("/proc/stat: no cpu line");
	for (double& x : v)
		if (!(in >> x)) x = 0;
	// user nice system idle iowait irq softirq steal guest guest_nice; the
	// guest times are in user and nice already, and steal is time a
	// hypervisor gave to someone else, not work done here.
	return (v[0] + v[1] + v[2] + v[5] + v[6]) / ticks;
}

} // namespace esptun::bench::lab
