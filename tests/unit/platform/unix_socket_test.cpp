// platform::unix_socket_listening(): a socket file is ready only once its
// owner listens. The defect it fixes: esptun-bench waited for charon's VICI
// socket file to appear, and a swanctl started between charon's bind() and
// listen() was refused (netns-ike_load failed once in CI that way).
#include "platform/sockaddr.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using esptun::platform::unix_socket_listening;

TEST_CASE("unix_socket_listening: bound is not listening; listening is; closed is not again") {
	char dir_template[] = "/tmp/esptun-unix-XXXXXX";
	REQUIRE(::mkdtemp(dir_template) != nullptr);
	const std::string dir = dir_template, path = dir + "/s.sock";
	CHECK_FALSE(unix_socket_listening(path)); // no file yet

	const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0);
	sockaddr_un sa{};
	sa.sun_family = AF_UNIX;
	path.copy(sa.sun_path, path.size());
	REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
	CHECK(std::filesystem::exists(path));     // the file is there...
	CHECK_FALSE(unix_socket_listening(path)); // ...but a connection is refused
	REQUIRE(::listen(fd, 4) == 0);
	CHECK(unix_socket_listening(path));
	::close(fd);
	CHECK(std::filesystem::exists(path)); // left behind
	CHECK_FALSE(unix_socket_listening(path));

	CHECK_FALSE(unix_socket_listening(""));
	CHECK_FALSE(unix_socket_listening(dir + "/" + std::string(200, 'x')));
	std::filesystem::remove_all(dir);
}
