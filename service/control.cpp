// Control socket: see control.hpp.
#include "service/control.hpp"

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace esptun::service {

using asio::local::stream_protocol;

namespace {

/// True when something accepts connections on @path right now.
bool socket_is_live(const std::string& path) {
	asio::io_context io;
	stream_protocol::socket s(io);
	asio::error_code ec;
	s.connect(stream_protocol::endpoint(path), ec);
	return !ec;
}

stream_protocol::acceptor open_acceptor(asio::io_context& io, const std::string& path) {
	std::filesystem::path parent = std::filesystem::path(path).parent_path();
	std::error_code fec;
	if (!parent.empty()) std::filesystem::create_directories(parent, fec);
	if (fec)
		throw std::runtime_error("control socket " + path + ": cannot create " + parent.string() +
		                         ": " + fec.message());
	struct stat st {};
	if (lstat(path.c_str(), &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			throw std::runtime_error(
			    "control socket " + path +
			    ": a file that is not a socket is in the way; remove it or set "
			    "control_socket to another path");
		if (socket_is_live(path))
			throw std::runtime_error(
			    "control socket " + path +
			    ": another esptun is running there; stop it or set control_socket");
		::unlink(path.c_str()); // stale: left by a run that did not exit cleanly
	}
	stream_protocol::acceptor acceptor(io);
	asio::error_code ec;
	acceptor.open(stream_protocol(), ec);
	if (!ec) acceptor.bind(stream_protocol::endpoint(path), ec);
	if (!ec) ::chmod(path.c_str(), 0600); // counters and peer addresses are for the admin only
	if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
	if (ec) throw std::runtime_error("control socket " + path + ": " + ec.message());
	return acceptor;
}

} // namespace

ControlServer::ControlServer(asio::io_context& io, std::string path, std::function<std::string()> render)
    : acceptor_(open_acceptor(io, path)), path_(std::move(path)), render_(std::move(render)) {
	accept();
}

ControlServer::~ControlServer() {
	asio::error_code ec;
	acceptor_.close(ec);
	::unlink(path_.c_str());
}

void ControlServer::accept() {
	acceptor_.async_accept([this](asio::error_code ec, stream_protocol::socket sock) {
		if (ec == asio::error::operation_aborted) return;
		if (!ec) {
			auto conn = std::make_shared<stream_protocol::socket>(std::move(sock));
			auto text = std::make_shared<std::string>(render_());
			asio::async_write(
			    *conn, asio::buffer(*text),
			    [conn, text](asio::error_code, size_t) { /* closes when conn goes */ });
		}
		accept();
	});
}

std::string query_control(const std::string& path) {
	asio::io_context io;
	stream_protocol::socket s(io);
	asio::error_code ec;
	s.connect(stream_protocol::endpoint(path), ec);
	if (ec)
		throw std::runtime_error("cannot reach the control socket " + path + ": " + ec.message() +
		                         " (is the endpoint running with this config?)");
	std::string out;
	asio::read(s, asio::dynamic_buffer(out), ec);
	if (ec && ec != asio::error::eof) throw std::runtime_error("reading " + path + ": " + ec.message());
	return out;
}

} // namespace esptun::service
