// The control socket: a UNIX stream socket (mode 0600, root's) that takes
// one request line per connection, answers it and closes: "status" (or
// nothing: a client that only half-closes) gets the status JSON, "reload"
// re-reads the config (service/reload.hpp) and gets {"ok": ..., "message":
// ...}. Runs on the control plane's Asio io_context, never on a data-path
// worker.
#pragma once

#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <functional>
#include <memory>
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

	/// set_reload() - what "reload" does: returns the answer's JSON. Without
	/// one, "reload" is answered with an error (a client does not reload).
	void set_reload(std::function<std::string()> reload) { reload_ = std::move(reload); }

	/// The longest request line taken, and how long a connection may take to send it.
	static constexpr size_t kMaxRequest = 64;
	static constexpr int kRequestTimeoutMs = 2000;
	~ControlServer();
	ControlServer(const ControlServer&) = delete;
	ControlServer& operator=(const ControlServer&) = delete;

private:
	void accept();
	void serve(std::shared_ptr<asio::local::stream_protocol::socket> conn);
	std::string answer(const std::string& request, int peer_uid);

	asio::local::stream_protocol::acceptor acceptor_;
	std::string path_;
	std::function<std::string()> render_;
	std::function<std::string()> reload_;
};

/**
 * query_control() - send @request ("status" or "reload") to @path and
 * return what the endpoint answers.
 * Throws std::runtime_error saying how to start the endpoint when nothing
 * listens there.
 */
std::string query_control(const std::string& path, const std::string& request = "status");

} // namespace esptun::service
