// TCP bulk transfer for the demo and ike-load: pseudo-random stream out, hash on both ends.
#include "apps/bench/lab/tcp_transfer.hpp"

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace esptun::bench::lab {

namespace {

constexpr size_t kChunk = 256 * 1024;
constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;

uint64_t load_le64(const uint8_t* p) noexcept {
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/// fill_random() - xorshift64* stream: cheap, and different for every chunk
void fill_random(std::span<uint8_t> buf, uint64_t& state) noexcept {
	for (size_t i = 0; i < buf.size(); i += 8) {
		state ^= state >> 12;
		state ^= state << 25;
		state ^= state >> 27;
		uint64_t v = state * 0x2545f4914f6cdd1dull;
		size_t n = std::min<size_t>(8, buf.size() - i);
		for (size_t k = 0; k < n; k++)
			buf[i + k] = static_cast<uint8_t>(v >> (8 * k));
	}
}

sockaddr_in make_addr(const std::string& addr, uint16_t port) {
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
		throw std::runtime_error("bad address " + addr);
	return sa;
}

/// set_timeouts() - SO_RCVTIMEO and SO_SNDTIMEO: a stalled tunnel fails the call
void set_timeouts(int fd, Millis idle) {
	timeval tv{static_cast<time_t>(idle.count() / 1000),
	           static_cast<suseconds_t>(idle.count() % 1000 * 1000)};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/// send_all() - send all of @data; a timeout (EAGAIN) is an error
void send_all(int fd, std::span<const uint8_t> data) {
	while (!data.empty()) {
		ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0 && errno == EAGAIN) throw std::runtime_error("send: no progress (tunnel stalled?)");
		if (n < 0) throw_errno("send");
		data = data.subspan(static_cast<size_t>(n));
	}
}

/// recv_some() - one recv(); 0 at EOF; a timeout is an error
size_t recv_some(int fd, std::span<uint8_t> buf) {
	for (;;) {
		ssize_t n = recv(fd, buf.data(), buf.size(), 0);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0 && errno == EAGAIN) throw std::runtime_error("recv: no data (tunnel stalled?)");
		if (n < 0) throw_errno("recv");
		return static_cast<size_t>(n);
	}
}

/// stop_asked() - @fd (when set) is readable: a byte or the writer gone
bool stop_asked(int fd) noexcept {
	if (fd < 0) return false;
	pollfd p{fd, POLLIN, 0};
	return ::poll(&p, 1, 0) == 1;
}

/// write_text() - write @s to a pipe; the reader is the parent process
void write_text(int fd, const std::string& s) {
	for (size_t off = 0; off < s.size();) {
		ssize_t n = ::write(fd, s.data() + off, s.size() - off);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) throw_errno("write to parent");
		off += static_cast<size_t>(n);
	}
}

/**
 * receive_stream() - the receiver child's work: listen, signal readiness on
 * @report, accept one connection, hash it to EOF, answer, report
 */
int receive_stream(int report, const std::string& addr, uint16_t port, Millis idle) {
	platform::UniqueFd lsn(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (!lsn) throw_errno("socket");
	int one = 1;
	setsockopt(lsn.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	sockaddr_in sa = make_addr(addr, port);
	if (bind(lsn.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
		throw_errno("bind " + addr + ":" + std::to_string(port));
	if (listen(lsn.get(), 1) < 0) throw_errno("listen");
	write_text(report, "R");

	pollfd p{lsn.get(), POLLIN, 0};
	if (::poll(&p, 1, static_cast<int>(idle.count())) <= 0)
		throw std::runtime_error("no connection arrived");
	platform::UniqueFd conn(accept4(lsn.get(), nullptr, nullptr, SOCK_CLOEXEC));
	if (!conn) throw_errno("accept");
	set_timeouts(conn.get(), idle);

	auto t0 = Clock::now();
	StreamHash hash;
	TransferSide side;
	std::vector<uint8_t> buf(kChunk);
	uint64_t next_note = TransferSide::kProgressStep;
	while (size_t n = recv_some(conn.get(), buf)) {
		hash.update(std::span(buf).first(n));
		side.bytes += n;
		if (side.bytes >= next_note) {
			if (side.progress.size() < TransferSide::kMaxProgress)
				side.progress.emplace_back(TransferSide::note_time(Clock::now()), side.bytes);
			next_note = side.bytes - side.bytes % TransferSide::kProgressStep +
			            TransferSide::kProgressStep;
		}
	}
	side.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
	side.hash = hash.digest();
	uint64_t answer = side.bytes;
	send_all(conn.get(), std::span(reinterpret_cast<const uint8_t*>(&answer), sizeof answer));
	write_text(report, side.to_text());
	return 0;
}

} // namespace

void StreamHash::mix(uint64_t word) noexcept {
	h_ = (h_ ^ word) * kMul;
	h_ ^= h_ >> 32;
}

void StreamHash::update(std::span<const uint8_t> data) noexcept {
	total_ += data.size();
	size_t i = 0;
	for (; carry_len_ != 0 && i < data.size(); i++) { // finish the word a previous call began
		carry_ |= static_cast<uint64_t>(data[i]) << (8 * carry_len_);
		if (++carry_len_ == 8) {
			mix(carry_);
			carry_ = 0;
			carry_len_ = 0;
		}
	}
	for (; i + 8 <= data.size(); i += 8)
		mix(load_le64(&data[i]));
	for (; i < data.size(); i++)
		carry_ |= static_cast<uint64_t>(data[i]) << (8 * carry_len_++);
}

uint64_t StreamHash::digest() const noexcept {
	uint64_t h = (h_ ^ carry_ ^ (uint64_t(carry_len_) << 56)) * kMul;
	h ^= h >> 29;
	h = (h ^ total_) * kMul;
	return h ^ (h >> 32);
}

int64_t TransferSide::note_time(Clock::time_point t) noexcept {
	return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

uint64_t TransferSide::bytes_by(Clock::time_point t) const noexcept {
	const int64_t at = note_time(t);
	uint64_t b = 0;
	for (const auto& [when, so_far] : progress) {
		if (when > at) break;
		b = so_far;
	}
	return b;
}

std::string TransferSide::to_text() const {
	std::ostringstream out;
	out.precision(17);
	out << bytes << ' ' << hash << ' ' << seconds << ' ' << progress.size();
	for (const auto& [t, b] : progress)
		out << ' ' << t << ' ' << b;
	return out.str();
}

TransferSide TransferSide::from_text(const std::string& text) {
	std::istringstream in(text);
	TransferSide s;
	size_t notes = 0;
	if (!(in >> s.bytes >> s.hash >> s.seconds >> notes) || notes > kMaxProgress)
		throw std::runtime_error("transfer: garbled child report");
	s.progress.resize(notes);
	for (auto& [t, b] : s.progress)
		if (!(in >> t >> b)) throw std::runtime_error("transfer: garbled child report");
	return s;
}

TcpReceiver::TcpReceiver(const std::string& netns, const std::string& addr, uint16_t port,
                         Millis idle_timeout)
    : pipe_(Pipe::make()) {
	child_ = fork_in_netns(netns, [&] {
		pipe_.read_end.reset();
		return receive_stream(pipe_.write_end.get(), addr, port, idle_timeout);
	});
	pipe_.write_end.reset();

	// Wait for the one-byte "listening" signal; EOF means the child failed.
	pollfd p{pipe_.read_end.get(), POLLIN, 0};
	auto deadline = Clock::now() + Millis(5000);
	char c = 0;
	for (;;) {
		throw_if_stopped();
		auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
		if (left <= 0) throw std::runtime_error("TCP receiver did not start listening");
		if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
		ssize_t n = ::read(pipe_.read_end.get(), &c, 1);
		if (n < 0 && errno == EINTR) continue;
		if (n == 1 && c == 'R') return;
		throw std::runtime_error("TCP receiver failed to start");
	}
}

TransferSide TcpReceiver::result(Millis timeout) {
	std::string text = read_all(pipe_.read_end.get(), Clock::now() + timeout);
	int st = child_.wait(Millis(5000));
	if (!exited_ok(st)) throw std::runtime_error("TCP receiver failed (" + describe_status(st) + ")");
	return TransferSide::from_text(text);
}

TransferSide send_stream(const std::string& addr, uint16_t port, uint64_t bytes, Millis idle_timeout,
                         const SendOptions& opt) {
	platform::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (!fd) throw_errno("socket");
	set_timeouts(fd.get(), idle_timeout);
	if (!opt.from.empty()) {
		sockaddr_in local = make_addr(opt.from, 0);
		if (bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) < 0)
			throw_errno("bind " + opt.from);
	}
	if (!opt.congestion.empty() &&
	    setsockopt(fd.get(), IPPROTO_TCP, TCP_CONGESTION, opt.congestion.data(),
	               socklen_t(opt.congestion.size())) < 0)
		throw_errno("TCP_CONGESTION " + opt.congestion);
	if (opt.pace_bytes_per_s) {
		const uint64_t rate = opt.pace_bytes_per_s;
		if (setsockopt(fd.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) < 0)
			throw_errno("SO_MAX_PACING_RATE");
	}
	sockaddr_in sa = make_addr(addr, port);
	if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
		throw_errno("connect " + addr + ":" + std::to_string(port));

	auto t0 = Clock::now();
	uint64_t state = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(getpid());
	StreamHash hash;
	std::vector<uint8_t> buf(kChunk);
	uint64_t sent = 0;
	while (sent < bytes && !stop_asked(opt.stop_fd)) {
		auto chunk =
		    std::span(buf).first(static_cast<size_t>(std::min<uint64_t>(bytes - sent, kChunk)));
		fill_random(chunk, state);
		hash.update(chunk);
		send_all(fd.get(), chunk);
		sent += chunk.size();
	}
	if (shutdown(fd.get(), SHUT_WR) < 0) throw_errno("shutdown");

	// The receiver answers with its byte count after EOF: only then has
	// everything crossed the tunnel, so the clock stops here.
	uint64_t answer = 0;
	size_t got = 0;
	auto* ap = reinterpret_cast<uint8_t*>(&answer);
	while (got < sizeof answer) {
		size_t n = recv_some(fd.get(), std::span(ap + got, sizeof answer - got));
		if (n == 0) throw std::runtime_error("receiver closed without answering");
		got += n;
	}
	TransferSide side;
	side.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
	side.bytes = sent;
	side.hash = hash.digest();
	if (answer != sent)
		throw std::runtime_error("receiver counted " + std::to_string(answer) + " bytes, sent " +
		                         std::to_string(sent));
	return side;
}

TcpSender::TcpSender(const std::string& netns, const std::string& addr, uint16_t port, uint64_t bytes,
                     Millis idle_timeout, SendOptions opt)
    : stop_(Pipe::make()), report_(Pipe::make()) {
	child_ = fork_in_netns(netns, [&] {
		stop_.write_end.reset();
		report_.read_end.reset();
		opt.stop_fd = stop_.read_end.get();
		write_text(report_.write_end.get(),
		           send_stream(addr, port, bytes, idle_timeout, opt).to_text());
		return 0;
	});
	stop_.read_end.reset();
	report_.write_end.reset();
}

void TcpSender::stop() noexcept {
	if (!stop_.write_end) return;
	const char b = 1;
	(void)!::write(stop_.write_end.get(), &b, 1);
	stop_.write_end.reset();
}

TransferSide TcpSender::result(Millis timeout) {
	stop();
	std::string text = read_all(report_.read_end.get(), Clock::now() + timeout);
	int st = child_.wait(Millis(5000));
	if (!exited_ok(st)) throw std::runtime_error("TCP sender failed (" + describe_status(st) + ")");
	return TransferSide::from_text(text);
}

} // namespace esptun::bench::lab
