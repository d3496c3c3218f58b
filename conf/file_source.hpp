// Where the config loader gets its files (the config and its key files): the
// file system by default, or a recording of what it read there, so that a
// helper which keeps root can read for an endpoint that gave it up
// (service/config_reader.hpp) and the endpoint still runs the one loader.
//
// Theory of operation: the helper runs load_config() over a
// RecordingFileSource wrapped around real_files(), so every check (types,
// sizes, modes) runs as root on the real files. It sends the records back;
// the endpoint runs load_config() again over a ReplayFileSource of them.
// The loader is deterministic in what it reads, so the replay asks for the
// same files in the same order and gets the same answers, and yields the
// same Config, or the same ConfigError, by the same code.
#pragma once

#include "base/secret.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace esptun::conf {

/// What the loader looks at besides a file's bytes (from stat(2) or fstat(2)).
struct FileFacts {
	uint32_t mode = 0; ///< st_mode: file type and permission bits
	uint64_t size = 0; ///< st_size
	uint32_t uid = 0;  ///< st_uid: the owner
};

/// The loader's only way to the file system.
class FileSource {
public:
	virtual ~FileSource() = default;
	/**
	 * stat() - stat(2) of @path
	 * @facts: set when the call succeeds
	 * Return: "" or strerror(3) text.
	 */
	virtual std::string stat(const std::filesystem::path& path, FileFacts& facts) = 0;
	/**
	 * read() - as read_file_wiped(): the whole regular file @path, at most
	 * @max bytes, into @out, with the facts of the file actually opened
	 * Return: "" or why not, in read_file_wiped()'s words.
	 */
	virtual std::string read(const std::filesystem::path& path, size_t max, SecretString& out,
	                         FileFacts& facts) = 0;
	/**
	 * list() - the names of the regular files in the directory @path
	 * (symbolic links followed), sorted, at most kMaxListed of them
	 * @names: set when the call succeeds
	 * Return: "" or why not (strerror(3) text, "not a directory", "more
	 * than N files").
	 */
	virtual std::string list(const std::filesystem::path& path, std::vector<std::string>& names) = 0;
	static constexpr size_t kMaxListed = 256;
};

/// real_files() - the file system: stat(2) and read_file_wiped().
FileSource& real_files();

/// One call a FileSource answered, with its answer.
struct FileRecord {
	enum class Op : uint8_t { stat = 1, read = 2, list = 3 };
	Op op = Op::stat;
	std::string path;
	std::string error; ///< "" when the call succeeded
	FileFacts facts;
	SecretString data; ///< read: the bytes (key files are secrets; wiped when freed);
	                   ///< list: the names, each ended by '\n'
};

/// Passes each call to another source and keeps the call with its answer.
class RecordingFileSource : public FileSource {
public:
	explicit RecordingFileSource(FileSource& inner) : inner_(inner) {}
	std::string stat(const std::filesystem::path& path, FileFacts& facts) override;
	std::string read(const std::filesystem::path& path, size_t max, SecretString& out,
	                 FileFacts& facts) override;
	std::string list(const std::filesystem::path& path, std::vector<std::string>& names) override;
	/// The calls so far, oldest first.
	std::vector<FileRecord>& records() noexcept { return records_; }

private:
	FileSource& inner_;
	std::vector<FileRecord> records_;
};

/**
 * ReplayFileSource - answers each call with the next record, which must be
 * the same call (operation and path); any other call, or one past the end,
 * fails with kNotRecorded. A read whose record holds more than @max bytes
 * fails as the real file would have.
 */
class ReplayFileSource : public FileSource {
public:
	static constexpr const char* kNotRecorded = "not in the answer of the config reader";

	explicit ReplayFileSource(std::vector<FileRecord> records) : records_(std::move(records)) {}
	std::string stat(const std::filesystem::path& path, FileFacts& facts) override;
	std::string read(const std::filesystem::path& path, size_t max, SecretString& out,
	                 FileFacts& facts) override;
	std::string list(const std::filesystem::path& path, std::vector<std::string>& names) override;
	/// True once every record has been asked for.
	bool used_up() const noexcept { return next_ == records_.size(); }

private:
	const FileRecord* take(FileRecord::Op op, const std::filesystem::path& path);

	std::vector<FileRecord> records_;
	size_t next_ = 0;
};

} // namespace esptun::conf
