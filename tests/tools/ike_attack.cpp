// ike-attack - a misbehaving IKEv2 peer for the netns attack tests
// (tests/netns/test_ike_attacks.py, issue 16). Test-only: it is built from
// tests/CMakeLists.txt and never installed.
//
//   ike-attack MODE --to IP:PORT --from IP:PORT --secs S [--psk K --id ID]
//
// Modes:
//   ts-flood     authenticate (PSK), then CREATE_CHILD_SA requests with 255
//                selectors each (issue 16 item 1: narrowing blow-up)
//   child-flood  authenticate, then CREATE_CHILD_SA requests for new
//                CHILD_SAs, each with a fresh SPI (item 2: per-peer cap)
//   init-flood   IKE_SA_INIT requests from one source with fresh SPIs,
//                answering COOKIE demands (RFC 7296 section 2.6) but never
//                going on to IKE_AUTH: half-open SAs (item 3)
//   natt-flood   IKE on the ESP port as fast as it goes: junk, headers
//                with random SPIs, IKE_SA_INIT-shaped messages (item 4)
// Every mode sends for --secs seconds and prints one JSON line: what was
// sent and answered, and the rate.
#include "base/bytes.hpp"
#include "base/inet.hpp"
#include "ike/keymat.hpp"
#include "ike/message.hpp"
#include "ike/proposal.hpp"

#include "tests/tools/raw_ike_peer.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

using namespace esptun;
using namespace esptun::ike;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
	std::string mode;
	Endpoint to, from;
	double secs = 5;
	std::string psk, id;
};

/// The IPv4 sockaddr of @e (the attack tests run over IPv4).
sockaddr_in sockaddr_of(const Endpoint& e) {
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(e.port);
	std::memcpy(&sa.sin_addr, e.addr.bytes.data(), 4);
	return sa;
}

/// A UDP socket bound to @o.from and connected to @o.to; exits on failure.
int open_socket(const Options& o) {
	const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	const sockaddr_in from = sockaddr_of(o.from), to = sockaddr_of(o.to);
	const int one = 1;
	::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0 ||
	    ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
		std::perror("ike-attack: socket");
		std::exit(2);
	}
	return fd;
}

/// Whether messages to @o.to carry the non-ESP marker (RFC 3948 section 2.2).
bool natt(const Options& o) { return o.to.port != 500; }

void send_ike(int fd, bool marker, std::span<const uint8_t> msg, uint64_t& errors) {
	std::vector<uint8_t> buf(marker ? 4 : 0, 0);
	buf.insert(buf.end(), msg.begin(), msg.end());
	if (::send(fd, buf.data(), buf.size(), MSG_DONTWAIT) < 0) errors++;
}

/// One IKE message received within @ms (marker stripped), or empty.
std::vector<uint8_t> recv_ike(int fd, bool marker, int ms) {
	pollfd p{fd, POLLIN, 0};
	std::vector<uint8_t> buf(65536);
	for (;;) {
		if (::poll(&p, 1, ms) != 1) return {};
		const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
		if (n <= 0) return {};
		size_t off = 0;
		if (marker) {
			if (n < 4 || load_be32(buf.data()) != 0) continue; // ESP or a keepalive
			off = 4;
		}
		return std::vector<uint8_t>(buf.begin() + long(off), buf.begin() + n);
	}
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void report(const Options& o, const std::map<std::string, uint64_t>& counts, double secs, uint64_t sent) {
	std::printf("{\"mode\": \"%s\", \"secs\": %.2f, \"sent\": %llu, \"rate\": %.0f", o.mode.c_str(), secs,
	            static_cast<unsigned long long>(sent), secs > 0 ? double(sent) / secs : 0.0);
	for (const auto& [k, v] : counts)
		std::printf(", \"%s\": %llu", k.c_str(), static_cast<unsigned long long>(v));
	std::printf("}\n");
	std::fflush(stdout);
}

/// Notifies of @payloads, counted by type name into @counts.
void count_notifies(const std::vector<Payload>& payloads, std::map<std::string, uint64_t>& counts) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p)) {
			if (n->type == notify::ts_unacceptable) counts["ts_unacceptable"]++;
			if (n->type == notify::no_additional_sas) counts["no_additional_sas"]++;
		}
}

/// ts-flood and child-flood: an authenticated peer that keeps asking.
int authenticated_flood(const Options& o) {
	const int fd = open_socket(o);
	const bool marker = natt(o);
	uint64_t errors = 0;
	tools::RawPeer peer;
	peer.psk = o.psk;
	std::optional<Identity> id = parse_identity(o.id);
	if (!id) return 2;
	peer.id = *id;
	peer.spi_tag = uint8_t(::getpid());
	peer.transport = [&](std::span<const uint8_t> bytes) {
		std::vector<std::vector<uint8_t>> back;
		for (int attempt = 0; attempt < 3 && back.empty(); attempt++) {
			send_ike(fd, marker, bytes, errors);
			const auto t0 = Clock::now();
			while (back.empty() && since(t0) < 1.0) {
				std::vector<uint8_t> m = recv_ike(fd, marker, 100);
				Header h;
				if (!m.empty() && parse_header(m, h) && h.is_response())
					back.push_back(std::move(m));
			}
		}
		return back;
	};
	std::map<std::string, uint64_t> counts;
	const auto t0 = Clock::now();
	const TrafficSelector any = selector_of(*parse_prefix("0.0.0.0/0"));
	bool got = false;
	if (!peer.init()) {
		counts["init_failed"] = 1;
		report(o, counts, since(t0), 0);
		return 1;
	}
	peer.auth({any}, {any}, 0xa0000001, &got);
	counts["authenticated"] = got ? 1 : 0;
	if (!got) {
		report(o, counts, since(t0), 2);
		return 1;
	}
	std::vector<TrafficSelector> flood;
	for (uint16_t i = 0; i < 255; i++) {
		TrafficSelector t = any;
		t.ip_protocol = 17;
		t.start_port = t.end_port = uint16_t(1000 + i);
		flood.push_back(t);
	}
	uint64_t sent = 0;
	const auto f0 = Clock::now();
	for (uint32_t i = 0; since(f0) < o.secs; i++) {
		std::vector<Payload> r;
		if (o.mode == "ts-flood")
			r = peer.new_child(0xb0000000 + i, flood, {any}, &got);
		else
			r = peer.new_child(0xb0000000 + i, {any}, {any}, &got);
		sent++;
		counts[got ? "answered" : "unanswered"]++;
		count_notifies(r, counts);
		if (!got) break; // the gateway dropped our IKE SA (or is gone)
	}
	counts["send_errors"] = errors;
	report(o, counts, since(f0), sent);
	return 0;
}

/// init-flood: half-open IKE SAs from one source, cookies answered.
int init_flood(const Options& o) {
	const int fd = open_socket(o);
	const bool marker = natt(o);
	uint64_t errors = 0, sent = 0;
	std::map<std::string, uint64_t> counts;
	const IkeSuite suite = default_ike_proposals().front();
	DhKeyPair dh(suite.dh); // one key pair for all: the gateway still computes each
	const std::vector<uint8_t> pub(dh.public_value().begin(), dh.public_value().end());
	std::vector<uint8_t> ni(32);
	random_bytes(ni);
	const std::vector<IkeSuite> one{suite};
	auto request = [&](uint64_t spi_i, const std::vector<uint8_t>* cookie) {
		Header h;
		h.spi_i = spi_i;
		h.exchange = Exchange::ike_sa_init;
		h.flags = kFlagInitiator;
		std::vector<Payload> p;
		if (cookie) { // section 2.6: the COOKIE notify comes first
			NotifyPayload n;
			n.type = notify::cookie;
			n.data = *cookie;
			p.push_back(n);
		}
		p.push_back(ike_offer(one));
		p.push_back(KePayload{uint16_t(suite.dh), pub});
		p.push_back(NoncePayload{ni});
		send_ike(fd, marker, build_message(h, p), errors);
		sent++;
	};
	auto take_answers = [&](int ms) {
		for (std::vector<uint8_t> m = recv_ike(fd, marker, ms); !m.empty();
		     m = recv_ike(fd, marker, 0)) {
			Message msg;
			if (!parse_message(m, msg)) continue;
			counts["answered"]++;
			bool cookie = false;
			for (const Payload& p : msg.payloads)
				if (const auto* n = std::get_if<NotifyPayload>(&p);
				    n && n->type == notify::cookie) {
					counts["cookies"]++;
					request(msg.header.spi_i, &n->data);
					cookie = true;
				}
			if (!cookie && msg.header.spi_r != 0) counts["half_open"]++;
		}
	};
	uint64_t spi = (uint64_t(::getpid()) << 32) | 1;
	const auto t0 = Clock::now();
	while (since(t0) < o.secs) {
		for (int i = 0; i < 16; i++)
			request(spi++, nullptr);
		take_answers(1);
	}
	take_answers(200);
	counts["send_errors"] = errors;
	report(o, counts, since(t0), sent);
	return 0;
}

/// natt-flood: what a stranger can throw at port 4500 without keys.
int natt_flood(const Options& o) {
	const int fd = open_socket(o);
	uint64_t errors = 0, sent = 0;
	std::map<std::string, uint64_t> counts;
	std::vector<uint8_t> rnd(4096);
	size_t pos = rnd.size();
	auto next64 = [&]() {
		if (pos + 8 > rnd.size()) {
			random_bytes(rnd);
			pos = 0;
		}
		const uint64_t v = load_be64(rnd.data() + pos);
		pos += 8;
		return v;
	};
	const auto t0 = Clock::now();
	while (since(t0) < o.secs) {
		for (int i = 0; i < 64; i++) {
			std::vector<uint8_t> m(kHeaderLen + 36, 0);
			const uint64_t r = next64();
			store_be64(m.data(), next64() | 1);
			switch (r % 3) {
			case 0: // IKE_SA_INIT-shaped: responder SPI zero
				m[18] = uint8_t(Exchange::ike_sa_init);
				counts["init_shaped"]++;
				break;
			case 1: // a random SPI pair: an IKE SA we do not have
				store_be64(m.data() + 8, next64() | 1);
				m[18] = uint8_t(Exchange::informational);
				counts["random_spi"]++;
				break;
			default: // junk after the header
				for (size_t k = 8; k + 8 <= m.size(); k += 8)
					store_be64(m.data() + k, next64());
				counts["junk"]++;
			}
			m[17] = 0x20;
			if (r % 3 != 2) store_be32(m.data() + 24, uint32_t(m.size()));
			send_ike(fd, true, m, errors);
			sent++;
		}
		while (!recv_ike(fd, true, 0).empty())
			counts["answered"]++;
	}
	counts["send_errors"] = errors;
	report(o, counts, since(t0), sent);
	return 0;
}

int usage() {
	std::fprintf(stderr, "usage: ike-attack ts-flood|child-flood|init-flood|natt-flood --to IP:PORT "
	                     "--from IP:PORT --secs S [--psk KEY --id ID]\n");
	return 2;
}

} // namespace

/// main() - parses the options and runs one mode; exit 0 when it ran.
int main(int argc, char** argv) {
	if (argc < 2) return usage();
	Options o;
	o.mode = argv[1];
	for (int i = 2; i + 1 < argc; i += 2) {
		const std::string k = argv[i], v = argv[i + 1];
		if (k == "--to" || k == "--from") {
			std::optional<Endpoint> e = parse_endpoint(v);
			if (!e || e->addr.family != Family::v4) return usage();
			(k == "--to" ? o.to : o.from) = *e;
		} else if (k == "--secs") {
			o.secs = std::stod(v);
		} else if (k == "--psk") {
			o.psk = v;
		} else if (k == "--id") {
			o.id = v;
		} else {
			return usage();
		}
	}
	if (o.to.port == 0) return usage();
	if (o.mode == "ts-flood" || o.mode == "child-flood") return authenticated_flood(o);
	if (o.mode == "init-flood") return init_flood(o);
	if (o.mode == "natt-flood") return natt_flood(o);
	return usage();
}
