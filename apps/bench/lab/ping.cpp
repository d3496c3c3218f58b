// ICMP echo (RFC 792) over a raw socket, matched by identifier and sequence.
#include "apps/bench/lab/ping.hpp"

#include "base/error.hpp"
#include "platform/unique_fd.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace esptun::bench::lab {
namespace {

constexpr uint8_t kEchoReply = 0, kEchoRequest = 8;
constexpr size_t kIcmpHeader = 8, kPayload = 56; // ping(8)'s default: 64-byte ICMP message

uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

void store_be16(uint8_t* p, uint16_t v) {
	p[0] = static_cast<uint8_t>(v >> 8);
	p[1] = static_cast<uint8_t>(v);
}

/// inet_checksum() - the Internet checksum (RFC 1071) of @len bytes
uint16_t inet_checksum(const uint8_t* p, size_t len) {
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += load_be16(p + i);
	if (len & 1) sum += static_cast<uint32_t>(p[len - 1]) << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

/// build_echo() - an echo request with identifier @id and sequence @seq
std::array<uint8_t, kIcmpHeader + kPayload> build_echo(uint16_t id, uint16_t seq) {
	std::array<uint8_t, kIcmpHeader + kPayload> pkt{};
	pkt[0] = kEchoRequest;
	store_be16(&pkt[4], id);
	store_be16(&pkt[6], seq);
	for (size_t i = 0; i < kPayload; i++)
		pkt[kIcmpHeader + i] = static_cast<uint8_t>(i);
	store_be16(&pkt[2], inet_checksum(pkt.data(), pkt.size()));
	return pkt;
}

/**
 * is_our_reply() - true when @pkt (an IPv4 packet as a raw socket delivers
 * it) is the echo reply from @from with @id and @seq
 */
bool is_our_reply(const uint8_t* pkt, size_t len, in_addr_t from, uint16_t id, uint16_t seq) {
	if (len < 20 || (pkt[0] >> 4) != 4) return false;
	size_t ihl = static_cast<size_t>(pkt[0] & 0x0f) * 4;
	if (ihl < 20 || len < ihl + kIcmpHeader) return false;
	in_addr_t src; // network byte order, as in sockaddr_in
	std::memcpy(&src, pkt + 12, sizeof src);
	const uint8_t* icmp = pkt + ihl;
	return src == from && icmp[0] == kEchoReply && load_be16(icmp + 4) == id &&
	       load_be16(icmp + 6) == seq;
}

/**
 * await_reply() - wait until @deadline for the reply to (@id, @seq)
 * Return: true when it arrived
 */
bool await_reply(int fd, in_addr_t from, uint16_t id, uint16_t seq, Clock::time_point deadline) {
	std::array<uint8_t, 2048> buf;
	for (;;) {
		auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
		if (left <= 0) return false;
		pollfd p{fd, POLLIN, 0};
		int r = ::poll(&p, 1, static_cast<int>(left));
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) throw_errno("poll ICMP socket");
		if (r == 0) return false;
		ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
		if (n < 0) throw_errno("recv ICMP");
		if (is_our_reply(buf.data(), static_cast<size_t>(n), from, id, seq)) return true;
	}
}

} // namespace

std::string PingResult::to_text() const {
	std::ostringstream out;
	out.precision(17);
	out << sent;
	for (double r : rtt_ms)
		out << ' ' << r;
	return out.str();
}

PingResult PingResult::from_text(const std::string& text) {
	std::istringstream in(text);
	PingResult r;
	if (!(in >> r.sent)) throw std::runtime_error("ping: no result from the child");
	for (double v; in >> v;)
		r.rtt_ms.push_back(v);
	return r;
}

RttSummary RttSummary::of(std::vector<double> rtt_ms) {
	RttSummary s;
	if (rtt_ms.empty()) return s;
	std::sort(rtt_ms.begin(), rtt_ms.end());
	size_t n = rtt_ms.size();
	s.min = rtt_ms.front();
	s.max = rtt_ms.back();
	s.median = n % 2 ? rtt_ms[n / 2] : (rtt_ms[n / 2 - 1] + rtt_ms[n / 2]) / 2;
	return s;
}

PingResult ping(const std::string& dst, unsigned count, Millis interval, Millis timeout) {
	sockaddr_in to{};
	to.sin_family = AF_INET;
	if (inet_pton(AF_INET, dst.c_str(), &to.sin_addr) != 1)
		throw std::runtime_error("ping: bad address " + dst);
	platform::UniqueFd fd(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
	if (!fd) throw_errno("raw ICMP socket (needs root or CAP_NET_RAW)");

	auto id = static_cast<uint16_t>(getpid());
	PingResult result;
	for (unsigned i = 0; i < count; i++) {
		auto seq = static_cast<uint16_t>(i + 1);
		auto pkt = build_echo(id, seq);
		auto t0 = Clock::now();
		if (sendto(fd.get(), pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) <
		    0)
			throw_errno("sendto " + dst);
		result.sent++;
		if (await_reply(fd.get(), to.sin_addr.s_addr, id, seq, t0 + timeout))
			result.rtt_ms.push_back(
			    std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
		auto next = t0 + interval;
		if (Clock::now() < next) sleep_for(std::chrono::duration_cast<Millis>(next - Clock::now()));
	}
	return result;
}

} // namespace esptun::bench::lab
