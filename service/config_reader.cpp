// ConfigReader: see config_reader.hpp. A SOCK_STREAM socket pair, as an
// answer (a config of up to 16 MiB) outgrows any one datagram.
//
// 1. The endpoint sends the one-byte request kRequest; it names no path.
// 2. The helper runs load_config() over a RecordingFileSource, as root.
// 3. It answers with the framed records, or the ConfigError it got
//    (config_answer below), and never with more than the endpoint takes.
// 4. The endpoint reads the frame (bounded, in wiping memory, with a
//    timeout), decodes it, and runs load_config() over a ReplayFileSource.
#include "service/config_reader.hpp"

#include "platform/process.hpp"

#include "base/bytes.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <poll.h>
#include <string_view>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace esptun::service {

namespace {

constexpr char kRequest = 'L';
constexpr uint8_t kRecords = 'R';
constexpr uint8_t kError = 'E';
/// The helper's own descriptor for its end of the pair.
constexpr int kHelperFd = 3;

void put32(SecretBytes& out, uint32_t v) {
	uint8_t b[4];
	store_be32(b, v);
	out.insert(out.end(), b, b + 4);
}

void put_text(SecretBytes& out, std::string_view s) {
	put32(out, static_cast<uint32_t>(s.size()));
	out.insert(out.end(), s.begin(), s.end());
}

/// A frame: room for the header, the kind, then the caller's body.
SecretBytes start_frame(uint8_t kind) {
	SecretBytes out(4, 0);
	out.push_back(kind);
	return out;
}

SecretBytes finish_frame(SecretBytes out) {
	store_be32(out.data(), static_cast<uint32_t>(out.size() - 4));
	return out;
}

[[noreturn]] void malformed(const std::string& source, const std::string& what) {
	throw conf::ConfigError(source, 0, "malformed answer from the config reader (" + what + ")");
}

/// A length-prefixed field of at most @max bytes, else malformed().
std::span<const uint8_t> take_field(ByteReader& r, size_t max, const std::string& source, const char* what) {
	const uint32_t n = r.be32();
	if (!r.ok()) malformed(source, "truncated");
	if (n > max) malformed(source, std::string(what) + " too long");
	std::span<const uint8_t> b = r.bytes(n);
	if (!r.ok()) malformed(source, "truncated");
	return b;
}

std::string take_text(ByteReader& r, size_t max, const std::string& source, const char* what) {
	std::span<const uint8_t> b = take_field(r, max, source, what);
	return {b.begin(), b.end()};
}

/**
 * serve() - the helper's answer to one request: load the config as root,
 * recording what the loader read. The answer is decoded here once before it
 * goes out, so a config past the endpoint's limits fails here with a
 * message rather than there as a malformed answer.
 */
SecretBytes serve(const std::filesystem::path& path, conf::Role role) {
	const std::string source = path.string();
	try {
		conf::RecordingFileSource files(conf::real_files());
		conf::load_config(path, role, files);
		SecretBytes answer = config_answer::encode_records(files.records());
		if (answer.size() - 4 > config_answer::kMaxAnswer)
			throw conf::ConfigError(source, 0,
			                        "the config and its key files are too large to reload");
		config_answer::decode_body(std::span<const uint8_t>(answer).subspan(4), source);
		return answer;
	} catch (const conf::ConfigError& e) {
		return config_answer::encode_error(e);
	} catch (const std::exception& e) {
		return config_answer::encode_error(
		    conf::ConfigError(source, 0, std::string("the config reader failed: ") + e.what()));
	}
}

bool send_all(int fd, std::span<const uint8_t> data) {
	while (!data.empty()) {
		const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) return false;
		data = data.subspan(static_cast<size_t>(n));
	}
	return true;
}

/// The helper's life: answer requests until the endpoint hangs up or dies.
[[noreturn]] void helper_main(int fd, pid_t parent, const std::filesystem::path& path, conf::Role role) {
	::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (::getppid() != parent) ::_exit(0); // the endpoint died before the line above
	// Keys pass through this root process: no core dump, no ptrace by the user.
	::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	// A SIGHUP to the process group (a reload) or a Ctrl-C is the endpoint's
	// business; the helper ends when its socket does.
	for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGPIPE})
		::signal(sig, SIG_IGN);
	// Only stdin/out/err and the socket stay open: the tun, the sockets and
	// the control socket are the endpoint's alone.
	if (fd != kHelperFd && ::dup2(fd, kHelperFd) < 0) ::_exit(1);
	::close_range(kHelperFd + 1, ~0U, 0);
	for (;;) {
		char request = 0;
		const ssize_t n = ::recv(kHelperFd, &request, 1, 0);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0 || request != kRequest) ::_exit(0);
		if (!send_all(kHelperFd, serve(path, role))) ::_exit(0);
	}
}

/// Fills @out from @fd, waiting at most kAnswerTimeoutMs for each part. Return: "" or why not.
std::string read_exact(int fd, std::span<uint8_t> out) {
	while (!out.empty()) {
		pollfd p{fd, POLLIN, 0};
		const int rc = ::poll(&p, 1, ConfigReader::kAnswerTimeoutMs);
		if (rc < 0 && errno == EINTR) continue;
		if (rc < 0) return std::strerror(errno);
		if (rc == 0)
			return "no answer in " + std::to_string(ConfigReader::kAnswerTimeoutMs / 1000) + " s";
		const ssize_t n = ::recv(fd, out.data(), out.size(), 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
		if (n < 0) return std::strerror(errno);
		if (n == 0) return "it has exited";
		out = out.subspan(static_cast<size_t>(n));
	}
	return {};
}

} // namespace

namespace config_answer {

SecretBytes encode_records(const std::vector<conf::FileRecord>& records) {
	SecretBytes out = start_frame(kRecords);
	put32(out, static_cast<uint32_t>(records.size()));
	for (const conf::FileRecord& r : records) {
		out.push_back(static_cast<uint8_t>(r.op));
		put_text(out, r.path);
		put_text(out, r.error);
		put32(out, r.facts.mode);
		put32(out, static_cast<uint32_t>(r.facts.size >> 32));
		put32(out, static_cast<uint32_t>(r.facts.size));
		put32(out, r.facts.uid);
		put_text(out, r.data.view());
	}
	return finish_frame(std::move(out));
}

SecretBytes encode_error(const conf::ConfigError& e) {
	SecretBytes out = start_frame(kError);
	put32(out, static_cast<uint32_t>(std::max(e.line(), 0)));
	put_text(out, std::string_view(e.source()).substr(0, kMaxText));
	put_text(out, std::string_view(e.message()).substr(0, kMaxText));
	return finish_frame(std::move(out));
}

size_t body_length(std::span<const uint8_t, 4> header, const std::string& source) {
	const uint32_t n = load_be32(header.data());
	if (n == 0) malformed(source, "empty");
	if (n > kMaxAnswer) malformed(source, "longer than " + std::to_string(kMaxAnswer) + " bytes");
	return n;
}

std::vector<conf::FileRecord> decode_body(std::span<const uint8_t> body, const std::string& source) {
	ByteReader r(body);
	const uint8_t kind = r.u8();
	if (!r.ok()) malformed(source, "empty");
	if (kind == kError) {
		const uint32_t line = r.be32();
		std::string from = take_text(r, kMaxText, source, "error source");
		std::string message = take_text(r, kMaxText, source, "error message");
		if (!r.ok()) malformed(source, "truncated");
		if (r.remaining() != 0) malformed(source, "bytes after the end");
		if (line > INT_MAX) malformed(source, "line number out of range");
		throw conf::ConfigError(from, static_cast<int>(line), message);
	}
	if (kind != kRecords) malformed(source, "unknown kind of answer");
	const uint32_t count = r.be32();
	if (!r.ok()) malformed(source, "truncated");
	if (count > kMaxRecords) malformed(source, "too many files");
	std::vector<conf::FileRecord> records;
	records.reserve(count);
	for (uint32_t i = 0; i < count; i++) {
		conf::FileRecord& rec = records.emplace_back();
		const uint8_t op = r.u8();
		if (op != static_cast<uint8_t>(conf::FileRecord::Op::stat) &&
		    op != static_cast<uint8_t>(conf::FileRecord::Op::read) &&
		    op != static_cast<uint8_t>(conf::FileRecord::Op::list))
			malformed(source, r.ok() ? "unknown file operation" : "truncated");
		rec.op = static_cast<conf::FileRecord::Op>(op);
		rec.path = take_text(r, kMaxPath, source, "path");
		rec.error = take_text(r, kMaxText, source, "error text");
		rec.facts.mode = r.be32();
		const uint64_t high = r.be32();
		rec.facts.size = high << 32 | r.be32();
		rec.facts.uid = r.be32();
		std::span<const uint8_t> data = take_field(r, conf::kMaxConfigSize, source, "file");
		if (rec.op == conf::FileRecord::Op::stat && !data.empty())
			malformed(source, "data for a stat");
		rec.data.assign(data.begin(), data.end());
	}
	if (r.remaining() != 0) malformed(source, "bytes after the end");
	return records;
}

} // namespace config_answer

std::unique_ptr<ConfigReader> ConfigReader::start(std::filesystem::path config_path, conf::Role role) {
	if (::geteuid() != 0) return direct(std::move(config_path), role);
	const platform::HelperProcess h =
	    platform::fork_helper(SOCK_STREAM, "config reader",
	                          [&](int fd, pid_t parent) { helper_main(fd, parent, config_path, role); });
	return std::unique_ptr<ConfigReader>(new ConfigReader(std::move(config_path), role, h.fd, h.pid));
}

std::unique_ptr<ConfigReader> ConfigReader::direct(std::filesystem::path config_path, conf::Role role) {
	return std::unique_ptr<ConfigReader>(new ConfigReader(std::move(config_path), role, -1, 0));
}

ConfigReader::~ConfigReader() {
	if (pid_ <= 0) return;
	const bool was_broken = fd_ < 0;
	if (fd_ >= 0) ::close(fd_); // the helper sees end of file and exits
	// A helper that stopped answering may still be stuck in a read; the
	// process cannot kill it (seccomp), and its PDEATHSIG ends it later.
	while (::waitpid(pid_, nullptr, was_broken ? WNOHANG : 0) < 0 && errno == EINTR) {}
}

void ConfigReader::broken(const std::string& why) {
	::close(fd_);
	fd_ = -1;
	throw conf::ConfigError(path_.string(), 0, "cannot reload through the config reader: " + why);
}

conf::Config ConfigReader::load() {
	if (pid_ <= 0) return conf::load_config(path_, role_);
	std::lock_guard lock(mutex_);
	const std::string source = path_.string();
	if (fd_ < 0)
		throw conf::ConfigError(source, 0,
		                        "the config reader failed earlier; restart to load the config again");
	ssize_t n;
	while ((n = ::send(fd_, &kRequest, 1, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
	if (n != 1) broken(std::string("it has exited: ") + std::strerror(errno));
	std::array<uint8_t, 4> header{};
	if (auto err = read_exact(fd_, header); !err.empty()) broken(err);
	size_t length = 0;
	try {
		length = config_answer::body_length(header, source);
	} catch (const conf::ConfigError& e) {
		broken(e.message()); // what follows the header cannot be found
	}
	SecretBytes body(length);
	if (auto err = read_exact(fd_, body); !err.empty()) broken(err);
	// The whole frame is read: a body that does not decode leaves the
	// stream in step, so the next load() may still work.
	conf::ReplayFileSource files(config_answer::decode_body(body, source));
	conf::Config config = conf::load_config(path_, role_, files);
	if (!files.used_up()) malformed(source, "files the loader did not ask for");
	return config;
}

} // namespace esptun::service
