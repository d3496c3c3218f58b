// Logging to stderr: see log.hpp.
#include "service/log.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace esptun::service::log {
namespace {

std::mutex g_mutex;
std::string g_program = "esptun";
Level g_level = Level::info;
enum class Output { unknown, human, journal };
Output g_output = Output::unknown;

Output detect_output() {
	return stream_is_journal(std::getenv("JOURNAL_STREAM"), STDERR_FILENO) ? Output::journal
	                                                                       : Output::human;
}

std::string time_of_day() {
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	tm local{};
	localtime_r(&ts.tv_sec, &local);
	char stamp[32];
	const size_t n = strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
	std::snprintf(stamp + n, sizeof stamp - n, ".%03ld", ts.tv_nsec / 1000000);
	return stamp;
}

} // namespace

bool stream_is_journal(const char* journal_stream, int fd) {
	if (!journal_stream) return false;
	uintmax_t dev = 0, ino = 0;
	int used = 0;
	if (std::sscanf(journal_stream, "%" SCNuMAX ":%" SCNuMAX "%n", &dev, &ino, &used) != 2 ||
	    journal_stream[used] != '\0')
		return false;
	struct stat st {};
	if (fstat(fd, &st) != 0) return false;
	return uintmax_t(st.st_dev) == dev && uintmax_t(st.st_ino) == ino;
}

int syslog_priority(Level level) {
	switch (level) {
	case Level::error:
		return 3; // LOG_ERR
	case Level::warn:
		return 4; // LOG_WARNING
	case Level::info:
		return 6; // LOG_INFO
	case Level::debug:
		break;
	}
	return 7; // LOG_DEBUG
}

std::string format_line(Level level, std::string_view program, std::string_view message, bool journal,
                        std::string_view stamp) {
	static constexpr const char* names[] = {"error", "warning", "info", "debug"};
	std::string line;
	line.reserve(message.size() + program.size() + 32);
	if (journal) {
		// journald knows the program (SYSLOG_IDENTIFIER) and the time.
		line += '<';
		line += char('0' + syslog_priority(level));
		line += '>';
	} else {
		line += stamp;
		line += ' ';
		line += program;
		line += ' ';
		line += names[static_cast<int>(level)];
		line += ": ";
	}
	line += message;
	line += '\n';
	return line;
}

void reset_output() {
	std::lock_guard lock(g_mutex);
	g_output = detect_output();
}

void set_program(std::string_view name) {
	std::lock_guard lock(g_mutex);
	g_program = name;
	g_output = detect_output();
}

void set_level(Level level) {
	std::lock_guard lock(g_mutex);
	g_level = level;
}

bool enabled(Level level) {
	std::lock_guard lock(g_mutex);
	return level <= g_level;
}

void write(Level level, std::string_view message) {
	std::lock_guard lock(g_mutex);
	if (level > g_level) return;
	if (g_output == Output::unknown) g_output = detect_output();
	const bool journal = g_output == Output::journal;
	const std::string line =
	    format_line(level, g_program, message, journal, journal ? std::string() : time_of_day());
	std::fwrite(line.data(), 1, line.size(), stderr);
}

} // namespace esptun::service::log
