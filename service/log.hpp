// Logging for the set-up and control paths: one line per event on stderr.
// Never called per packet: the data path counts instead.
//
// Under systemd, stderr is a stream into the journal: each line then starts
// with the sd-daemon priority prefix ("<3>" error ... "<7>" debug, see
// sd-daemon(3)) so journald files it at that priority, and carries no
// timestamp of ours (journald stamps every line). Anywhere else a line reads
// "HH:MM:SS.mmm program level: message".
#pragma once

#include <string>
#include <string_view>

namespace esptun::service::log {

enum class Level { error, warn, info, debug };

/// set_program() - the name every line starts with, e.g. "esptun-gateway"
void set_program(std::string_view name);
void set_level(Level level);
/// enabled() - whether a line of @level would be written (to skip building it)
bool enabled(Level level);

void write(Level level, std::string_view message);
inline void error(std::string_view m) { write(Level::error, m); }
inline void warn(std::string_view m) { write(Level::warn, m); }
inline void info(std::string_view m) { write(Level::info, m); }
inline void debug(std::string_view m) { write(Level::debug, m); }

/**
 * stream_is_journal() - whether @fd is the journal stream systemd names
 * @journal_stream: the value of $JOURNAL_STREAM ("<device>:<inode>", both
 *                  decimal, as systemd.exec(5) sets it), or null
 * @fd:             the descriptor to compare, stderr in use
 *
 * systemd.exec(5): a program should compare both numbers with fstat() of its
 * own stderr, since a child may have inherited the variable but had stderr
 * redirected elsewhere.
 */
bool stream_is_journal(const char* journal_stream, int fd);

/// syslog_priority() - the sd-daemon priority of @level: 3, 4, 6 or 7
int syslog_priority(Level level);

/**
 * format_line() - one line as write() prints it, with its newline
 * @journal: true: "<N>message" for journald; false: "@stamp @program level: message"
 * @stamp:   the time of day, used only when @journal is false
 */
std::string format_line(Level level, std::string_view program, std::string_view message, bool journal,
                        std::string_view stamp);

/// reset_output() - decide again (from $JOURNAL_STREAM) where stderr goes;
/// done once on the first line, and by set_program().
void reset_output();

} // namespace esptun::service::log
