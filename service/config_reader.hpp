// Reading the config again after the privilege drop (live reload, issue 17).
//
// Configs and key files are root's, mode 0600 (the loader refuses looser
// modes), and the endpoint runs as an unprivileged user once set up
// (service/privileges.hpp), so it cannot read them itself. Before the drop
// it forks a helper that keeps root and does one thing: load the one config
// path fixed at start(), whenever the endpoint asks, and answer with what
// the loader read (conf/file_source.hpp) or the ConfigError it threw. The
// request carries no path, so a subverted endpoint can obtain at most the
// files its own config names, which it has already been given once. The
// endpoint then runs the same loader over that answer: the Config it gets,
// and every error message, are those of a direct load_config().
#pragma once

#include "base/secret.hpp"
#include "conf/config.hpp"
#include "conf/file_source.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <sys/types.h>
#include <vector>

namespace esptun::service {

class ConfigReader {
public:
	/**
	 * start() - fork the helper that loads @config_path as root for @role
	 *
	 * Call while the process is root and has one thread, before
	 * drop_privileges(), from the thread that lives as long as the process
	 * (PR_SET_PDEATHSIG fires when the forking thread ends, not the
	 * process). The helper ends when the reader is destroyed, the endpoint
	 * dies or its socket breaks. A process that is not root has nothing to
	 * keep: it gets a direct() reader.
	 * Throws SystemError when socketpair() or fork() fails.
	 */
	static std::unique_ptr<ConfigReader> start(std::filesystem::path config_path, conf::Role role);
	/// direct() - a reader without a helper, which calls load_config() itself
	/// (for drop_privileges = false, where the endpoint stays root).
	static std::unique_ptr<ConfigReader> direct(std::filesystem::path config_path, conf::Role role);

	/// Closes the socket and reaps the helper.
	~ConfigReader();
	ConfigReader(const ConfigReader&) = delete;
	ConfigReader& operator=(const ConfigReader&) = delete;

	/**
	 * load() - the config as it is now on disk, fully validated
	 *
	 * Throws ConfigError with load_config()'s own message; also (naming the
	 * config, line 0) when the helper is gone, takes longer than
	 * kAnswerTimeout, or answers with something malformed, after which this
	 * reader always fails (the stream may be out of step). Safe to call
	 * from several threads; they take turns.
	 */
	conf::Config load();

	/// True when loads go through a helper process.
	bool has_helper() const noexcept { return pid_ > 0; }
	const std::filesystem::path& path() const noexcept { return path_; }

	/// How long load() waits for each part of the helper's answer. A reload
	/// runs on the control loop, which also extends the sequence number
	/// reservations (SeqRefresh), so a stuck helper must not hold it long;
	/// reading even a 16 MiB config takes milliseconds.
	static constexpr int kAnswerTimeoutMs = 5000;

private:
	ConfigReader(std::filesystem::path path, conf::Role role, int fd, pid_t pid)
	    : path_(std::move(path)), role_(role), fd_(fd), pid_(pid) {}
	[[noreturn]] void broken(const std::string& why);

	std::filesystem::path path_;
	conf::Role role_;
	int fd_;    ///< our end of the socket pair; -1 without a helper or once broken
	pid_t pid_; ///< the helper; 0 without one
	std::mutex mutex_;
};

/**
 * The helper's answer on the wire: a 4-byte big-endian length, then that
 * many bytes of body (at most kMaxAnswer). Body: 'R', the records, or 'E',
 * the ConfigError. Exposed for the tests of the decoder.
 */
namespace config_answer {

/// A config at its limit plus key files, paths and facts for many peers.
inline constexpr size_t kMaxAnswer = 2 * conf::kMaxConfigSize;
inline constexpr size_t kMaxRecords = 65536;
inline constexpr size_t kMaxPath = 4096;     ///< PATH_MAX
inline constexpr size_t kMaxText = 1u << 16; ///< an error message or source name

/// encode_records() - the framed answer carrying @records.
SecretBytes encode_records(const std::vector<conf::FileRecord>& records);
/// encode_error() - the framed answer carrying @e.
SecretBytes encode_error(const conf::ConfigError& e);
/**
 * body_length() - the body length a frame header announces
 * Throws ConfigError (naming @source) when it is 0 or past kMaxAnswer.
 */
size_t body_length(std::span<const uint8_t, 4> header, const std::string& source);
/**
 * decode_body() - the records of an 'R' body
 * Throws the helper's ConfigError for an 'E' body, and a ConfigError
 * naming @source for a body that is truncated, too long, past a limit or
 * of an unknown kind.
 */
std::vector<conf::FileRecord> decode_body(std::span<const uint8_t> body, const std::string& source);

} // namespace config_answer

} // namespace esptun::service
