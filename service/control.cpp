// Control socket: see control.hpp.
#include "service/control.hpp"

#include "service/json_io.hpp"

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <sys/socket.h>
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
		if (!ec) serve(std::make_shared<stream_protocol::socket>(std::move(sock)));
		accept();
	});
}

/// serve() - read one request line (bounded in size and time), answer it.
void ControlServer::serve(std::shared_ptr<stream_protocol::socket> conn) {
	struct Exchange {
		std::string request;
		std::string answer;
		asio::steady_timer deadline;
		explicit Exchange(asio::any_io_executor ex) : deadline(std::move(ex)) {}
	};
	auto x = std::make_shared<Exchange>(conn->get_executor());
	x->deadline.expires_after(std::chrono::milliseconds(kRequestTimeoutMs));
	x->deadline.async_wait([conn](asio::error_code ec) {
		if (!ec) conn->close(ec); // too slow: the read below ends with an error
	});
	asio::async_read_until(
	    *conn, asio::dynamic_buffer(x->request, kMaxRequest), '\n',
	    [this, conn, x](asio::error_code ec, size_t) {
		    x->deadline.cancel();
		    // A line, or a client that half-closed after sending (or without
		    // sending) one; anything else (too long, too slow) just closes.
		    if (ec && ec != asio::error::eof) return;
		    std::string request = x->request.substr(0, x->request.find('\n'));
		    if (request.empty()) request = "status";
		    struct ucred cred {};
		    socklen_t len = sizeof cred;
		    const int uid =
		        ::getsockopt(conn->native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0
		            ? int(cred.uid)
		            : -1;
		    x->answer = answer(request, uid);
		    asio::async_write(*conn, asio::buffer(x->answer),
		                      [conn, x](asio::error_code, size_t) { /* closes when conn goes */ });
	    });
}

std::string ControlServer::answer(const std::string& request, int peer_uid) {
	auto refusal = [](const std::string& why) {
		return json_text(Json{{"ok", false}, {"error", why}}) + "\n";
	};
	if (request == "status") return render_();
	if (request == "reload") {
		// The socket is root's and private already; a reload also needs root
		// (or this process's own user) at the other end.
		if (peer_uid != 0 && peer_uid != int(::geteuid())) return refusal("reload needs root");
		if (!reload_) return refusal("this endpoint does not reload its config; restart it");
		return reload_();
	}
	return refusal("unknown request (want status or reload)");
}

std::string query_control(const std::string& path, const std::string& request) {
	asio::io_context io;
	stream_protocol::socket s(io);
	asio::error_code ec;
	s.connect(stream_protocol::endpoint(path), ec);
	if (ec)
		throw std::runtime_error("cannot reach the control socket " + path + ": " + ec.message() +
		                         " (is the endpoint running with this config?)");
	const std::string line = request + "\n";
	asio::write(s, asio::buffer(line), ec);
	if (ec) throw std::runtime_error("writing to " + path + ": " + ec.message());
	std::string out;
	asio::read(s, asio::dynamic_buffer(out), ec);
	if (ec && ec != asio::error::eof) throw std::runtime_error("reading " + path + ": " + ec.message());
	return out;
}

} // namespace esptun::service
