// TempDir and write_private_file(): see temp_dir.hpp.
#include "apps/bench/lab/temp_dir.hpp"

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace esptun::bench::lab {

TempDir::TempDir(const std::string& prefix) {
	std::string tmpl = prefix + "XXXXXX";
	if (!mkdtemp(tmpl.data())) throw_errno("mkdtemp", tmpl);
	path_ = tmpl; // mkdtemp creates it with mode 0700
	// 0711: others may not list it, but the gateways it starts, which drop to
	// user nobody once set up (README.md, "Privileges"), must still reach the
	// state_dir inside it. Its files stay 0600 and root's.
	if (::chmod(path_.c_str(), 0711) != 0) throw_errno("chmod", path_);
}

TempDir::~TempDir() {
	std::error_code ec;
	std::filesystem::remove_all(path_, ec);
}

void write_private_file(const std::string& path, std::string_view text) {
	platform::UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
	if (!fd) throw_errno("create", path);
	for (size_t off = 0; off < text.size();) {
		ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) throw_errno("write", path);
		off += static_cast<size_t>(n);
	}
}

} // namespace esptun::bench::lab
