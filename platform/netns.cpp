// NetnsGuard and enter_netns(): the steps of iproute2's "ip netns add",
// "ip netns del" and the setns() half of "ip netns exec".
#include "platform/netns.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

namespace esptun::platform {

namespace {

constexpr const char* kNetnsRunDir = "/run/netns";

/**
 * make_run_dir_shared() - create /run/netns as a shared mount point
 *
 * As iproute2 does: if /run/netns is not a mount point yet, bind-mount it
 * onto itself, then mark it shared, so that a namespace mounted here later
 * also appears in other mount namespaces (for example a process started by
 * "ip netns exec", which makes its own). Throws SystemError.
 */
void make_run_dir_shared() {
	if (::mkdir(kNetnsRunDir, 0755) < 0 && errno != EEXIST) throw_errno("mkdir", kNetnsRunDir);
	bool bound = false;
	while (::mount("", kNetnsRunDir, "none", MS_SHARED | MS_REC, nullptr) < 0) {
		// EINVAL: not a mount point yet.
		if (errno != EINVAL || bound) throw_errno("mount --make-shared", kNetnsRunDir);
		if (::mount(kNetnsRunDir, kNetnsRunDir, "none", MS_BIND | MS_REC, nullptr) < 0)
			throw_errno("mount --bind", kNetnsRunDir);
		bound = true;
	}
}

} // namespace

NetnsGuard::NetnsGuard(std::string_view name) : name_(name), path_(std::string(kNetnsRunDir) + "/" + name_) {
	if (name_.empty() || name_.find('/') != std::string::npos || name_ == "." || name_ == "..")
		throw SystemError(EINVAL, "netns name \"" + name_ + "\"", "no slashes, not empty");
	make_run_dir_shared();

	// The mount target: an empty file, created exclusively so that an
	// existing namespace of the same name is never shadowed.
	UniqueFd file(::open(path_.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0));
	if (!file) throw_errno("create", path_);
	file.reset();

	// unshare() moves only the calling thread into the new namespace. Do it
	// in a short-lived thread so the caller's thread stays where it is; the
	// bind mount keeps the namespace alive after that thread exits.
	int err = 0;
	std::thread([&] {
		if (::unshare(CLONE_NEWNET) < 0) {
			err = errno;
			return;
		}
		if (::mount("/proc/thread-self/ns/net", path_.c_str(), "none", MS_BIND, nullptr) < 0)
			err = errno;
	}).join();
	if (err) {
		::unlink(path_.c_str());
		throw SystemError(err, "create netns " + name_, privilege_hint(err));
	}
}

NetnsGuard::~NetnsGuard() {
	// MNT_DETACH: processes still inside keep the namespace; only the name goes.
	::umount2(path_.c_str(), MNT_DETACH);
	::unlink(path_.c_str());
}

void enter_netns(std::string_view name) {
	const std::string path =
	    name.starts_with('/') ? std::string(name) : std::string(kNetnsRunDir) + "/" + std::string(name);
	UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
	if (!fd) throw_errno("open", path);
	if (::setns(fd.get(), CLONE_NEWNET) < 0) throw_errno("setns", path, privilege_hint(errno));
}

} // namespace esptun::platform
