// The loader's file sources (see file_source.hpp).
#include "conf/file_source.hpp"

#include "conf/checks.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace esptun::conf {

namespace {

FileFacts facts_of(const struct stat& st) {
	return {static_cast<uint32_t>(st.st_mode), static_cast<uint64_t>(st.st_size),
	        static_cast<uint32_t>(st.st_uid)};
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
	std::string list(const std::filesystem::path& path, std::vector<std::string>& names) override {
		names.clear();
		std::error_code ec;
		if (!std::filesystem::is_directory(path, ec)) return ec ? ec.message() : "not a directory";
		for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end;
		     it.increment(ec)) {
			std::error_code type_ec;
			if (!it->is_regular_file(type_ec)) continue;
			if (names.size() >= kMaxListed)
				return "more than " + std::to_string(kMaxListed) + " files";
			names.push_back(it->path().filename().string());
		}
		if (ec) return ec.message();
		std::sort(names.begin(), names.end());
		return {};
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

std::string RecordingFileSource::list(const std::filesystem::path& path, std::vector<std::string>& names) {
	FileRecord& r = records_.emplace_back();
	r.op = FileRecord::Op::list;
	r.path = path.string();
	r.error = inner_.list(path, names);
	if (r.error.empty())
		for (const std::string& n : names)
			r.data += n + "\n";
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

std::string ReplayFileSource::list(const std::filesystem::path& path, std::vector<std::string>& names) {
	names.clear();
	const FileRecord* r = take(FileRecord::Op::list, path);
	if (!r) return kNotRecorded;
	if (!r->error.empty()) return r->error;
	std::string_view rest = r->data.view();
	while (!rest.empty()) {
		const size_t nl = rest.find('\n');
		if (nl == std::string_view::npos || nl == 0 || names.size() >= kMaxListed)
			return kNotRecorded;
		names.emplace_back(rest.substr(0, nl));
		rest.remove_prefix(nl + 1);
	}
	return {};
}

} // namespace esptun::conf
