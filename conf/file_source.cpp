// The loader's file sources (see file_source.hpp).
#include "conf/file_source.hpp"

#include "conf/checks.hpp"

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace esptun::conf {

namespace {

FileFacts facts_of(const struct stat& st) {
	return {static_cast<uint32_t>(st.st_mode), static_cast<uint64_t>(st.st_size)};
}

class RealFiles : public FileSource {
public:
	std::string stat(const std::filesystem::path& path, FileFacts& facts) override {
		struct stat st {};
		if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
		facts = facts_of(st);
		return {};
	}
	std::string read(const std::filesystem::path& path, size_t max, SecretString& out,
	                 FileFacts& facts) override {
		struct stat st {};
		std::string err = read_file_wiped(path, max, out, st);
		facts = facts_of(st);
		return err;
	}
};

} // namespace

FileSource& real_files() {
	static RealFiles files;
	return files;
}

std::string RecordingFileSource::stat(const std::filesystem::path& path, FileFacts& facts) {
	FileRecord& r = records_.emplace_back();
	r.op = FileRecord::Op::stat;
	r.path = path.string();
	r.error = inner_.stat(path, r.facts);
	facts = r.facts;
	return r.error;
}

std::string RecordingFileSource::read(const std::filesystem::path& path, size_t max, SecretString& out,
                                      FileFacts& facts) {
	FileRecord& r = records_.emplace_back();
	r.op = FileRecord::Op::read;
	r.path = path.string();
	r.error = inner_.read(path, max, out, r.facts);
	if (r.error.empty()) r.data = out;
	facts = r.facts;
	return r.error;
}

const FileRecord* ReplayFileSource::take(FileRecord::Op op, const std::filesystem::path& path) {
	if (next_ >= records_.size()) return nullptr;
	const FileRecord& r = records_[next_];
	if (r.op != op || r.path != path.string()) return nullptr;
	next_++;
	return &r;
}

std::string ReplayFileSource::stat(const std::filesystem::path& path, FileFacts& facts) {
	const FileRecord* r = take(FileRecord::Op::stat, path);
	if (!r) return kNotRecorded;
	facts = r->facts;
	return r->error;
}

std::string ReplayFileSource::read(const std::filesystem::path& path, size_t max, SecretString& out,
                                   FileFacts& facts) {
	out.clear();
	const FileRecord* r = take(FileRecord::Op::read, path);
	if (!r) return kNotRecorded;
	facts = r->facts;
	if (!r->error.empty()) return r->error;
	// The helper read with the same limit; a record past it was not made by
	// this loader, and is refused as read_file_wiped() refuses a big file.
	if (r->data.size() > max) return "larger than " + std::to_string(max) + " bytes";
	out = r->data;
	return {};
}

} // namespace esptun::conf
