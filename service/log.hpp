// Logging for the set-up and control paths: one line per event on stderr.
// Never called per packet: the data path counts instead.
#pragma once

#include <string_view>

namespace esptun::service::log {

enum class Level { error, warn, info, debug };

/// set_program() - the name every line starts with, e.g. "esptun-gateway"
void set_program(std::string_view name);
void set_level(Level level);

void write(Level level, std::string_view message);
inline void error(std::string_view m) { write(Level::error, m); }
inline void warn(std::string_view m) { write(Level::warn, m); }
inline void info(std::string_view m) { write(Level::info, m); }
inline void debug(std::string_view m) { write(Level::debug, m); }

} // namespace esptun::service::log
