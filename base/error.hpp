// Errors that keep errno: SystemError for set-up code (throws, with a
// message naming the operation and the object), IoResult and BatchResult
// for the packet path (noexcept).
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <system_error>

namespace esptun {

/// A failed system call during set-up. what() reads
/// "TUNSETIFF esp0: Operation not permitted (run as root or grant CAP_NET_ADMIN)":
/// the operation and its object, strerror(), then an optional hint.
class SystemError : public std::system_error {
public:
	/**
	 * SystemError() - an error for errno value @err
	 * @err:     the errno value (kept in code().value())
	 * @context: what failed and on what, e.g. "TUNSETIFF esp0"
	 * @hint:    extra advice appended in parentheses, empty for none
	 */
	SystemError(int err, const std::string& context, std::string_view hint = {})
	    : std::system_error(err, std::generic_category(), context),
	      message_(context + ": " + std::generic_category().message(err)) {
		if (!hint.empty()) message_.append(" (").append(hint).append(")");
	}

	/// what() - the full message: context, strerror text and hint
	const char* what() const noexcept override { return message_.c_str(); }

	/// err() - the errno value
	int err() const noexcept { return code().value(); }

private:
	std::string message_;
};

/**
 * throw_errno() - throw SystemError for the current errno
 * @op:     what failed, e.g. "TUNSETIFF"
 * @object: on what, e.g. "esp0"; empty for none
 * @hint:   optional advice, see SystemError
 *
 * Takes views, not a std::string, so that no allocation can run (and touch
 * errno) between the failed call and the moment errno is read here.
 */
[[noreturn]] inline void throw_errno(std::string_view op, std::string_view object = {},
                                     std::string_view hint = {}) {
	const int err = errno;
	std::string context(op);
	if (!object.empty()) context.append(" ").append(object);
	throw SystemError(err, context, hint);
}

/**
 * privilege_hint() - advice for errors that usually mean missing privileges
 * @err: errno value
 *
 * Return: "run as root or grant CAP_NET_ADMIN" for EPERM and EACCES, else empty
 */
inline std::string_view privilege_hint(int err) noexcept {
	return err == EPERM || err == EACCES ? "run as root or grant CAP_NET_ADMIN" : std::string_view{};
}

/// The outcome of one read() or write() style call on the packet path:
/// n >= 0 bytes on success, or n == -1 and err holding errno. Never loses errno.
struct IoResult {
	ssize_t n = -1;
	int err = 0;

	bool ok() const noexcept { return n >= 0; }
	/// would_block() - true when a non-blocking call found nothing to do
	bool would_block() const noexcept { return n < 0 && (err == EAGAIN || err == EWOULDBLOCK); }
};

/// The outcome of a batched call (recvmmsg, sendmmsg): @count slots were
/// completed; when count is short, err holds the errno that stopped the batch
/// (EAGAIN when the socket had nothing more to give or take).
struct BatchResult {
	size_t count = 0;
	int err = 0;
};

} // namespace esptun
