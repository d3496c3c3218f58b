// The private files of a bench run: a 0700 folder under /tmp, removed with
// its contents, and 0600 files inside it (configs hold keys).
#pragma once

#include <string>
#include <string_view>

namespace esptun::bench::lab {

/// TempDir - a mkdtemp() folder (mode 0700), removed with its contents.
class TempDir {
public:
	explicit TempDir(const std::string& prefix);
	~TempDir();
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;
	const std::string& path() const noexcept { return path_; }
	/// file() - @name inside the folder
	std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
	std::string path_;
};

/**
 * write_private_file() - create @path with mode 0600 and write @text
 * (configs hold keys). Throws on failure.
 */
void write_private_file(const std::string& path, std::string_view text);

} // namespace esptun::bench::lab
