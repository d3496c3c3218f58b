// Logging to stderr: see log.hpp.
#include "service/log.hpp"

#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace esptun::service::log {
namespace {

std::mutex g_mutex;
std::string g_program = "esptun";
Level g_level = Level::info;

} // namespace

void set_program(std::string_view name) {
	std::lock_guard lock(g_mutex);
	g_program = name;
}

void set_level(Level level) {
	std::lock_guard lock(g_mutex);
	g_level = level;
}

void write(Level level, std::string_view message) {
	static constexpr const char* names[] = {"error", "warning", "info", "debug"};
	std::lock_guard lock(g_mutex);
	if (level > g_level) return;
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	tm local{};
	localtime_r(&ts.tv_sec, &local);
	char stamp[32];
	strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
	std::fprintf(stderr, "%s.%03ld %s %s: %.*s\n", stamp, ts.tv_nsec / 1000000, g_program.c_str(),
	             names[static_cast<int>(level)], int(message.size()), message.data());
}

} // namespace esptun::service::log
