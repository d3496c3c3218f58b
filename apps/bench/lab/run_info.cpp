// The run's facts for reports, and the sibling programs' paths.
#include "apps/bench/lab/run_info.hpp"

#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <sys/utsname.h>
#include <unistd.h>

namespace esptun::bench::lab {

std::string self_dir() {
	std::error_code ec;
	auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
	if (ec) throw std::runtime_error("cannot read /proc/self/exe: " + ec.message());
	return self.parent_path().string();
}

std::string gateway_binary(const std::string& given) {
	const std::string gw = given.empty() ? self_dir() + "/esptun-gateway" : given;
	if (access(gw.c_str(), X_OK) != 0)
		throw std::runtime_error(
		    gw + (given.empty() ? " not found: build it (cmake --build build) or pass --gateway PATH"
		                        : ": not an executable program"));
	return gw;
}

std::string utc_now() {
	std::time_t t = std::time(nullptr);
	std::tm tm{};
	gmtime_r(&t, &tm);
	char buf[32];
	std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

std::string host_text() {
	utsname u{};
	uname(&u);
	return std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores, kernel " + u.release;
}

} // namespace esptun::bench::lab
