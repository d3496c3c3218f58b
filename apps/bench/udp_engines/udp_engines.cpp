// `esptun-bench udp-engines`: see udp_engines.hpp.
#include "apps/bench/udp_engines/udp_engines.hpp"
#include "apps/bench/lab/cli.hpp"

#include "platform/udp_engine.hpp"
#include "service/json_io.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <thread>
#include <unistd.h>

namespace esptun::bench::udp_engines {

using namespace lab;

namespace {

using Clock = std::chrono::steady_clock;
using platform::UdpEngine;
using platform::UdpSocket;

/// Datagrams the sender may be ahead of the receiver.
constexpr uint64_t kWindow = 1024;

struct Options {
	unsigned rounds = 5;
	double seconds = 1.0;
	size_t size = 1400;
	size_t batch = 64;
	bool pin = true;
	bool json = false;
	std::string json_file; ///< empty: stdout
};

/// One engine configuration measured.
struct Subject {
	const char* name;
	bool uring;
	platform::UringRecv recv;
	bool gso;
};

const Subject kSubjects[] = {
    {"mmsg", false, platform::UringRecv::multishot, true},
    {"uring multishot", true, platform::UringRecv::multishot, true},
    {"uring oneshot", true, platform::UringRecv::oneshot, true},
    {"mmsg", false, platform::UringRecv::multishot, false},
    {"uring multishot", true, platform::UringRecv::multishot, false},
    {"uring oneshot", true, platform::UringRecv::oneshot, false},
};

/// What one round of one subject measured.
struct Sample {
	double tx_pps = 0, rx_pps = 0, loss = 0;
	double tx_cpu_ns = 0, rx_cpu_ns = 0; ///< thread CPU per packet sent / received
	double tx_sys = 0, rx_sys = 0;       ///< system calls per packet sent / received
	double rearms = 0;                   ///< multishot re-arms per 1000 packets received
	double stalls = 0;                   ///< flow-control waits that timed out (datagrams lost)
};

/// thread_cpu_ns() - user + system CPU time of the calling thread
double thread_cpu_ns() {
	rusage ru{};
	getrusage(RUSAGE_THREAD, &ru);
	return (double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
	        double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3);
}

/// pin_thread() - the calling thread to @cpu, when there is such a CPU
void pin_thread(int cpu) {
	if (cpu < 0 || cpu >= int(std::thread::hardware_concurrency())) return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

std::unique_ptr<UdpEngine> make_engine(const Subject& s, UdpSocket& sock) {
	if (!s.uring) return std::make_unique<platform::MmsgEngine>(sock);
	platform::UringOptions o;
	o.recv = s.recv;
	return std::make_unique<platform::UringEngine>(sock, o);
}

/**
 * measure() - one round of @s: a sender thread for o.seconds, a receiver
 * thread until the socket stays empty 20 ms after the sender stopped
 * Throws std::runtime_error on an unexpected errno.
 */
Sample measure(const Subject& s, const Options& o) {
	UdpSocket tx_sock = UdpSocket::bind(Endpoint{*parse_ip("127.0.0.1"), 0});
	UdpSocket rx_sock = UdpSocket::bind(Endpoint{*parse_ip("127.0.0.1"), 0});
	tx_sock.set_gso(s.gso);
	std::unique_ptr<UdpEngine> tx = make_engine(s, tx_sock);
	std::unique_ptr<UdpEngine> rx = make_engine(s, rx_sock);
	const Endpoint to = rx_sock.local_endpoint();

	std::vector<uint8_t> payload(o.size, 0x45);
	std::vector<platform::SendSlot> out(o.batch, platform::SendSlot{payload, to});
	std::vector<std::vector<uint8_t>> bufs(UdpEngine::kMaxBatch, std::vector<uint8_t>(2048));
	std::vector<platform::RecvSlot> slots;
	for (auto& b : bufs)
		slots.emplace_back(b);

	std::atomic<bool> go{false}, sender_done{false};
	uint64_t sent = 0, tx_polls = 0, received = 0, rx_polls = 0;
	// Flow control: the sender stays at most kWindow datagrams ahead of the
	// receiver (well inside the socket buffer), so nothing is dropped and
	// both sides do the whole per-datagram work. A sender that gets ahead
	// sleeps until the receiver has caught up by half a window: one wake-up
	// per kWindow / 2 datagrams, which is not counted as an engine call.
	std::atomic<uint64_t> sent_pub{0}, received_pub{0};
	std::atomic<bool> waiting{false};
	std::mutex mu;
	std::condition_variable cv;
	uint64_t stalls = 0;
	double tx_cpu = 0, rx_cpu = 0, tx_secs = 0, rx_secs = 0;
	int tx_err = 0, rx_err = 0;

	std::thread receiver([&] {
		pin_thread(o.pin ? 1 : -1);
		while (!go.load())
			;
		const double cpu0 = thread_cpu_ns();
		const auto t0 = Clock::now();
		auto last = t0;
		for (;;) {
			const BatchResult r = rx->recv_batch(slots);
			if (r.count) {
				received += r.count;
				received_pub.store(received);
				if (waiting.load() && sent_pub.load() - received <= kWindow / 2) {
					std::lock_guard lk(mu);
					cv.notify_one();
				}
				last = Clock::now();
				continue;
			}
			if (r.err != EAGAIN) {
				rx_err = r.err;
				break;
			}
			pollfd p{rx->poll_fd(), POLLIN, 0};
			rx_polls++;
			if (::poll(&p, 1, 20) == 0 && sender_done.load()) break;
		}
		rx_cpu = thread_cpu_ns() - cpu0;
		rx_secs = std::chrono::duration<double>(last - t0).count();
	});
	std::thread sender([&] {
		pin_thread(o.pin ? 0 : -1);
		while (!go.load())
			;
		const double cpu0 = thread_cpu_ns();
		const auto t0 = Clock::now();
		const auto end = t0 + std::chrono::duration<double>(o.seconds);
		while (Clock::now() < end) {
			if (sent - received_pub.load() > kWindow) {
				std::unique_lock lk(mu);
				waiting.store(true);
				// Bounded: a lost datagram must not stop the round.
				if (!cv.wait_for(lk, std::chrono::milliseconds(20),
				                 [&] { return sent - received_pub.load() <= kWindow / 2; }))
					stalls++;
				waiting.store(false);
				continue;
			}
			const BatchResult r = tx->send_batch(out);
			sent += r.count;
			sent_pub.store(sent);
			if (r.count == out.size()) continue;
			if (r.err != EAGAIN && r.err != ENOBUFS) {
				tx_err = r.err;
				break;
			}
			pollfd p{tx_sock.fd(), POLLOUT, 0};
			tx_polls++;
			::poll(&p, 1, 10);
		}
		tx_cpu = thread_cpu_ns() - cpu0;
		tx_secs = std::chrono::duration<double>(Clock::now() - t0).count();
		sender_done.store(true);
	});
	go.store(true);
	sender.join();
	receiver.join();
	if (tx_err) throw std::runtime_error(std::string(s.name) + " send: " + std::strerror(tx_err));
	if (rx_err) throw std::runtime_error(std::string(s.name) + " receive: " + std::strerror(rx_err));
	if (sent == 0 || received == 0) throw std::runtime_error(std::string(s.name) + ": nothing received");

	Sample m;
	m.stalls = double(stalls);
	m.tx_pps = double(sent) / tx_secs;
	m.rx_pps = double(received) / rx_secs;
	m.loss = 1.0 - double(received) / double(sent);
	m.tx_cpu_ns = tx_cpu / double(sent);
	m.rx_cpu_ns = rx_cpu / double(received);
	const platform::EngineCounts tc = tx->counts(), rc = rx->counts();
	m.tx_sys = double(tc.send_syscalls + tx_polls) / double(sent);
	m.rx_sys = double(rc.recv_syscalls + rx_polls) / double(received);
	if (auto* u = dynamic_cast<platform::UringEngine*>(rx.get()))
		m.rearms = double(u->rearms()) * 1000.0 / double(received);
	return m;
}

double median(std::vector<double> v) {
	std::sort(v.begin(), v.end());
	const size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The medians of one subject's rounds, field by field.
Sample medians(const std::vector<Sample>& v) {
	auto med = [&](double Sample::*f) {
		std::vector<double> x;
		for (const Sample& s : v)
			x.push_back(s.*f);
		return median(x);
	};
	Sample m;
	for (double Sample::*f :
	     {&Sample::tx_pps, &Sample::rx_pps, &Sample::loss, &Sample::tx_cpu_ns, &Sample::rx_cpu_ns,
	      &Sample::tx_sys, &Sample::rx_sys, &Sample::rearms, &Sample::stalls})
		m.*f = med(f);
	return m;
}

std::string kernel_release() {
	utsname u{};
	return uname(&u) == 0 ? u.release : "?";
}

void print_table(std::FILE* f, const Options& o, const std::vector<Sample>& rows) {
	std::fprintf(f,
	             "esptun-bench udp-engines: kernel %s, %u CPUs, %zu-byte datagrams, batches of %zu, "
	             "%u rounds of %.1f s, loopback; medians\n\n",
	             kernel_release().c_str(), std::thread::hardware_concurrency(), o.size, o.batch, o.rounds,
	             o.seconds);
	std::fprintf(f, "%-16s %-4s %9s %9s %6s %10s %10s %10s %10s %8s\n", "engine", "gso", "tx kpps",
	             "rx kpps", "loss", "tx ns/pkt", "rx ns/pkt", "tx sc/pkt", "rx sc/pkt", "rearm/k");
	for (size_t i = 0; i < rows.size(); i++) {
		const Subject& s = kSubjects[i];
		const Sample& m = rows[i];
		std::fprintf(f, "%-16s %-4s %9.0f %9.0f %5.1f%% %10.0f %10.0f %10.4f %10.4f %8.2f\n", s.name,
		             s.gso ? "on" : "off", m.tx_pps / 1e3, m.rx_pps / 1e3, m.loss * 100, m.tx_cpu_ns,
		             m.rx_cpu_ns, m.tx_sys, m.rx_sys, m.rearms);
	}
	std::fprintf(
	    f, "\nratios to mmsg with the same gso (CPU ns/pkt: < 1 is cheaper; rx kpps: > 1 is faster)\n");
	for (size_t i = 0; i < rows.size(); i++) {
		const Subject& s = kSubjects[i];
		if (!s.uring) continue;
		const Sample& base = rows[s.gso ? 0 : 3];
		std::fprintf(f, "  %-16s gso %-3s  tx ns %.2fx  rx ns %.2fx  rx kpps %.2fx\n", s.name,
		             s.gso ? "on" : "off", rows[i].tx_cpu_ns / base.tx_cpu_ns,
		             rows[i].rx_cpu_ns / base.rx_cpu_ns, rows[i].rx_pps / base.rx_pps);
	}
}

service::Json to_json(const Options& o, const std::vector<Sample>& rows) {
	using service::json_round3;
	service::Json j{{"kernel", kernel_release()},
	                {"cpus", std::thread::hardware_concurrency()},
	                {"size", uint64_t(o.size)},
	                {"batch", uint64_t(o.batch)},
	                {"rounds", o.rounds},
	                {"seconds", json_round3(o.seconds)},
	                {"pinned", o.pin},
	                {"path", "loopback"}};
	service::Json& out = j["rows"] = service::Json::array();
	for (size_t i = 0; i < rows.size(); i++) {
		const Subject& s = kSubjects[i];
		const Sample& m = rows[i];
		out.push_back(service::Json{
		    {"engine", s.uring ? "uring" : "mmsg"},
		    {"recv", s.uring ? (s.recv == platform::UringRecv::multishot ? "multishot" : "oneshot")
		                     : "recvmmsg"},
		    {"gso", s.gso},
		    {"tx_pps", json_round3(m.tx_pps)},
		    {"rx_pps", json_round3(m.rx_pps)},
		    {"loss", json_round3(m.loss)},
		    {"tx_cpu_ns_per_pkt", json_round3(m.tx_cpu_ns)},
		    {"rx_cpu_ns_per_pkt", json_round3(m.rx_cpu_ns)},
		    {"tx_syscalls_per_pkt", json_round3(m.tx_sys)},
		    {"rx_syscalls_per_pkt", json_round3(m.rx_sys)},
		    {"rearms_per_1000_pkts", json_round3(m.rearms)},
		    {"flow_control_timeouts", json_round3(m.stalls)}});
	}
	return j;
}

/// run_udp_engines() - the udp-engines command with @o; the exit status
int run_udp_engines(const Options& o) {
	// Fail early, with io_uring's own reason, rather than in round 1.
	{
		UdpSocket probe = UdpSocket::bind(Endpoint{*parse_ip("127.0.0.1"), 0});
		platform::UringEngine check(probe);
	}
	constexpr size_t n = std::size(kSubjects);
	std::vector<std::vector<Sample>> samples(n);
	for (unsigned round = 0; round < o.rounds; round++) {
		std::fprintf(stderr, "round %u/%u\r", round + 1, o.rounds);
		// Interleaved, and in a rotating order so no engine always runs
		// right after the same neighbour.
		for (size_t k = 0; k < n; k++) {
			const size_t i = (k + round) % n;
			samples[i].push_back(measure(kSubjects[i], o));
		}
	}
	std::fprintf(stderr, "\n");
	std::vector<Sample> rows;
	for (const auto& v : samples)
		rows.push_back(medians(v));

	const bool json_stdout = o.json && o.json_file.empty();
	print_table(json_stdout ? stderr : stdout, o, rows);
	if (o.json) write_json(to_json(o, rows), o.json_file);
	return 0;
}

} // namespace

cli::Verb add_udp_engines(CLI::App& bench) {
	auto o = std::make_shared<Options>();
	CLI::App* verb = cli::add_verb(
	    bench, "udp-engines", "the underlay engines (mmsg, io_uring) moving datagrams over loopback",
	    "The underlay engines (recvmmsg/sendmmsg, io_uring multishot, io_uring one\n"
	    "receive per slot) moving datagrams over loopback, GSO on and off, the sender\n"
	    "at most 1024 datagrams ahead, interleaved rounds (default 5 of 1 s each, 1400\n"
	    "bytes, batches of 64; sender pinned to CPU 0, receiver to CPU 1): packets/s,\n"
	    "CPU ns and system calls per packet on each side, medians; --json writes them\n"
	    "to FILE or stdout (table to stderr).");
	verb->add_option("--rounds", o->rounds, "rounds")->type_name("N")->check(cli::between(1, 1000));
	CLI::Option* seconds = verb->add_option("--seconds", o->seconds, "length of one round")
	                           ->type_name("S")
	                           ->check(cli::between(1, 600));
	auto ms = std::make_shared<unsigned>(0);
	verb->add_option("--ms", *ms, "length of one round in ms, instead of --seconds")
	    ->type_name("MS")
	    ->check(cli::between(10, 600000))
	    ->excludes(seconds)
	    ->default_str("");
	verb->add_option("--size", o->size, "datagram bytes")
	    ->type_name("BYTES")
	    ->check(cli::between(1, 2048));
	verb->add_option("--batch", o->batch, "datagrams per system call")
	    ->type_name("N")
	    ->check(cli::between(1, 1024));
	CLI::Option* no_pin = verb->add_flag("--no-pin")->description("leave the threads unpinned");
	CLI::Option* json = add_json_option(*verb, o->json_file);
	return {verb, [verb, o, ms, no_pin, json] {
		        if (*ms) o->seconds = double(*ms) / 1000.0;
		        o->pin = no_pin->count() == 0;
		        o->json = json->count() > 0;
		        return cli::run_verb(*verb, [&] { return run_udp_engines(*o); });
	        }};
}

} // namespace esptun::bench::udp_engines
