// The control socket: a UNIX stream socket that answers every connection
// with the status JSON and closes it. Runs on the control plane's Asio
// io_context, never on a data-path worker.
#pragma once

#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <functional>
#include <string>

namespace esptun::service {

class ControlServer {
public:
	/**
	 * ControlServer() - listen on @path
	 * @render: produces the JSON for each connection
	 *
	 * Creates the parent folder (0755) if needed. A stale socket file left by
	 * a crashed run is replaced; a live one (another esptun answers) is an
	 * error. Throws std::runtime_error with a message saying which.
	 */
	ControlServer(asio::io_context& io, std::string path, std::function<std::string()> render);
	~ControlServer();
	ControlServer(const ControlServer&) = delete;
	ControlServer& operator=(const ControlServer&) = delete;

private:
	void accept();

	asio::local::stream_protocol::acceptor acceptor_;
	std::string path_;
	std::function<std::string()> render_;
};

/**
 * query_control() - connect to @path and return what the endpoint sends.
 * Throws std::runtime_error saying how to start the endpoint when nothing
 * listens there.
 */
std::string query_control(const std::string& path);

} // namespace esptun::service
