// esptun-gateway as a child process of a bench command.
#include "apps/bench/lab/gateway_process.hpp"

#include <csignal>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <unistd.h>

namespace esptun::bench::lab {

using service::Json;
using service::parse_json;

GatewayProcess::GatewayProcess(std::string label, std::string netns, std::string binary, std::string config,
                               std::string log, std::string control_socket)
    : label_(std::move(label)), netns_(std::move(netns)), binary_(std::move(binary)),
      config_(std::move(config)), log_(std::move(log)), control_socket_(std::move(control_socket)) {
	child_ = spawn_in_netns(netns_, {binary_, "run", "-c", config_}, log_);
}

std::optional<Json> GatewayProcess::status(Millis timeout) const {
	auto deadline = Clock::now() + timeout;
	Pipe out = Pipe::make();
	std::string err_log = log_ + ".status";
	Child c = fork_in_netns(netns_, [&] {
		dup2(out.write_end.get(), STDOUT_FILENO);
		platform::UniqueFd err(open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
		if (err) dup2(err.get(), STDERR_FILENO);
		const bool by_socket = !control_socket_.empty();
		execl(binary_.c_str(), binary_.c_str(), "status", by_socket ? "-s" : "-c",
		      by_socket ? control_socket_.c_str() : config_.c_str(), static_cast<char*>(nullptr));
		return 127;
	});
	out.write_end.reset();
	std::string text = read_all(out.read_end.get(), deadline);
	int st = c.wait(Millis(2000));
	if (!exited_ok(st)) return std::nullopt;
	try {
		return parse_json(text);
	} catch (const std::exception& e) {
		throw std::runtime_error("gateway " + label_ + ": status output is not JSON (" + e.what() +
		                         "): " + text.substr(0, 200));
	}
}

void GatewayProcess::check_alive() {
	if (auto st = child_.poll())
		throw std::runtime_error("gateway " + label_ + " exited (" + describe_status(*st) +
		                         "); its log:\n" + log_tail());
}

std::string GatewayProcess::stop() {
	if (!child_.running()) return "gateway " + label_ + " was not running";
	int st = child_.stop(Millis(5000));
	if (exited_ok(st)) return {};
	return "gateway " + label_ + " did not exit cleanly on SIGTERM (" + describe_status(st) + ")";
}

void GatewayProcess::kill() noexcept {
	if (child_.running()) ::kill(child_.pid(), SIGKILL);
	child_.stop(Millis(5000));
}

std::string GatewayProcess::log_tail(size_t lines) const {
	std::ifstream in(log_);
	std::deque<std::string> tail;
	for (std::string line; std::getline(in, line);) {
		tail.push_back("    | " + line);
		if (tail.size() > lines) tail.pop_front();
	}
	std::string s;
	for (const auto& l : tail)
		s += l + "\n";
	return s.empty() ? "    | (empty)\n" : s;
}

std::string GatewayProcess::status_error() const {
	std::ifstream in(log_ + ".status");
	std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
		s.pop_back();
	return s.empty() ? "(nothing)" : s;
}

void wait_until_ready(GatewayProcess& a, GatewayProcess& b, Millis timeout) {
	auto deadline = Clock::now() + timeout;
	bool ready_a = false, ready_b = false;
	while (!(ready_a && ready_b)) {
		a.check_alive();
		b.check_alive();
		if (!ready_a) ready_a = a.status().has_value();
		if (!ready_b) ready_b = b.status().has_value();
		if (ready_a && ready_b) return;
		if (Clock::now() > deadline)
			throw std::runtime_error("gateways did not answer `status` within " +
			                         std::to_string(timeout.count() / 1000) +
			                         " s\n  last status error of A: " + a.status_error() +
			                         "\n  last status error of B: " + b.status_error() +
			                         "\nlog of A:\n" + a.log_tail() + "log of B:\n" +
			                         b.log_tail());
		sleep_for(Millis(100));
	}
}

} // namespace esptun::bench::lab
