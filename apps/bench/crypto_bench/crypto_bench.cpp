// `esptun-bench crypto`: per-packet seal/open cost of every ESP suite and
// implementation, with OpenSSL's EVP ciphers as the ceiling (crypto_bench.hpp).
//
// Theory of operation
// -------------------
// Subjects: each esptun transform (built through SaTable, as the gateway
// builds it, ESN on) and each EVP ceiling. For every payload size a subject
// prepare()s one packet outside the timed region: esptun subjects run
// tunnel/esp.cpp's encapsulate() on an IPv4 inner packet, so header, IV
// room, padding, trailer and ICV room sit exactly where the tunnel puts them.
//
// What is timed, per sample, a calibrated number of times in a row:
//   seal       transform->seal(packet, seq++) on that packet in place (it
//              re-encrypts its own output; the cost does not depend on the
//              bytes)
//   copy+open  memcpy(work, pristine sealed copy) then transform->open(work)
//              (open decrypts in place, so each one needs a fresh copy)
//   copy       the memcpy alone
// open = (copy+open) - copy, taken per round, so the copy is not counted.
//
// Rounds: after calibration (each sample ~sample_ms long, well above timer
// resolution), every round visits every size and, within a size, every
// subject, starting at a different subject each round: a burst of load from
// the other tenants of a shared machine then hits all subjects alike instead
// of one. Each figure is the median over rounds; min and max go to the JSON.
#include "apps/bench/crypto_bench/crypto_bench.hpp"

#include "apps/bench/crypto_bench/subjects.hpp"
#include "apps/bench/lab/cli.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "crypto/cbc_hmac_stitched.hpp"
#include "crypto/esp_transform.hpp"
#include "service/json_io.hpp"
#include "tunnel/esp.hpp"
#include "tunnel/esp_wire.hpp"
#include "tunnel/sa.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <optional>
#include <sched.h>
#include <stdexcept>
#include <system_error>

namespace esptun::bench::crypto_bench {

using namespace lab;

namespace {

using Clock = std::chrono::steady_clock;
using crypto::Cipher;
using crypto::CryptoImpl;

struct Options {
	unsigned rounds = 15;
	double sample_ms = 25;
	std::vector<size_t> sizes{64, 576, 1400, 1500, 9000, 16384};
	int cpu = -1;
	bool json = false;
	std::string json_file; ///< empty: stdout
};

// --- Measurement ------------------------------------------------------------

enum class Op : uint8_t { seal, copy_open, copy };
constexpr size_t kOps = 3;

/// run() - @n operations of @op on @s; elapsed nanoseconds.
double run(Subject& s, Op op, uint64_t n) {
	const auto t0 = Clock::now();
	switch (op) {
	case Op::seal:
		s.seal(n);
		break;
	case Op::copy_open:
		s.copy_open(n);
		break;
	case Op::copy:
		s.copy(n);
		break;
	}
	return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

/// calibrate() - how many operations take about @target_ns (at least one).
uint64_t calibrate(Subject& s, Op op, double target_ns) {
	(void)run(s, op, 1); // first touch of the buffers and code
	uint64_t n = 1;
	for (;;) {
		const double t = run(s, op, n);
		if (t >= target_ns / 8 || n >= (uint64_t(1) << 32))
			return std::max<uint64_t>(1, uint64_t(double(n) * target_ns / std::max(t, 1.0)));
		n *= 4;
	}
}

/// Per subject and size: operations per sample, and ns per operation per round.
struct Cell {
	std::array<uint64_t, kOps> iters{};
	std::array<std::vector<double>, kOps> ns;
	std::vector<double> open_ns; ///< copy_open - copy, per round
};

struct Stat {
	double median = 0, min = 0, max = 0;
	bool valid = false;
};

Stat stat_of(std::vector<double> v) {
	Stat s;
	if (v.empty()) return s;
	std::sort(v.begin(), v.end());
	const size_t n = v.size();
	s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	s.min = v.front();
	s.max = v.back();
	s.valid = true;
	return s;
}

/// One line of the result.
struct Row {
	const Subject* subject = nullptr;
	size_t size = 0;
	Stat enc, dec, copy;
	std::optional<double> enc_ratio, dec_ratio; ///< throughput / the ceiling's
};

double mbps(size_t size, double ns) noexcept { return ns > 0 ? double(size) * 1e3 / ns : 0; }

class Bench {
public:
	Bench(const Options& o, std::vector<std::unique_ptr<Subject>> subjects)
	    : o_(o), subjects_(std::move(subjects)), cells_(subjects_.size() * o.sizes.size()) {}

	void run_all() {
		const double target = o_.sample_ms * 1e6;
		std::fprintf(stderr, "calibrating (%zu subjects x %zu sizes)...\n", subjects_.size(),
		             o_.sizes.size());
		for (size_t z = 0; z < o_.sizes.size(); z++)
			for (size_t i = 0; i < subjects_.size(); i++) {
				Subject& s = *subjects_[i];
				s.prepare(o_.sizes[z]);
				Cell& c = cell(i, z);
				c.iters[size_t(Op::seal)] = calibrate(s, Op::seal, target);
				if (s.can_open()) {
					c.iters[size_t(Op::copy_open)] = calibrate(s, Op::copy_open, target);
					c.iters[size_t(Op::copy)] = calibrate(s, Op::copy, target);
				}
			}
		for (unsigned r = 0; r < o_.rounds; r++) {
			std::fprintf(stderr, "round %u/%u\n", r + 1, o_.rounds);
			for (size_t z = 0; z < o_.sizes.size(); z++)
				for (size_t k = 0; k < subjects_.size(); k++)
					sample((k + r) % subjects_.size(), z);
		}
		for (const auto& s : subjects_)
			if (s->failures())
				throw std::runtime_error(s->suite() + " " + s->impl() + ": " +
				                         std::to_string(s->failures()) +
				                         " operations failed");
	}

	std::vector<Row> rows() const {
		std::vector<Row> out;
		for (size_t i = 0; i < subjects_.size(); i++)
			for (size_t z = 0; z < o_.sizes.size(); z++) {
				const Cell& c = cell(i, z);
				Row r;
				r.subject = subjects_[i].get();
				r.size = o_.sizes[z];
				r.enc = stat_of(c.ns[size_t(Op::seal)]);
				r.dec = stat_of(c.open_ns);
				r.copy = stat_of(c.ns[size_t(Op::copy)]);
				out.push_back(r);
			}
		// Ratios: throughput against the primary ceiling of the same group and size.
		for (Row& r : out) {
			if (r.subject->ceiling()) continue;
			for (const Row& c : out) {
				if (!c.subject->primary_ceiling() ||
				    c.subject->group() != r.subject->group() || c.size != r.size)
					continue;
				if (c.enc.valid && r.enc.valid) r.enc_ratio = c.enc.median / r.enc.median;
				if (c.dec.valid && r.dec.valid) r.dec_ratio = c.dec.median / r.dec.median;
			}
		}
		return out;
	}

private:
	Cell& cell(size_t subject, size_t size) { return cells_[subject * o_.sizes.size() + size]; }
	const Cell& cell(size_t subject, size_t size) const {
		return cells_[subject * o_.sizes.size() + size];
	}

	void sample(size_t i, size_t z) {
		Subject& s = *subjects_[i];
		Cell& c = cell(i, z);
		s.prepare(o_.sizes[z]);
		auto one = [&](Op op) {
			const uint64_t n = c.iters[size_t(op)];
			const double per = run(s, op, n) / double(n);
			c.ns[size_t(op)].push_back(per);
			return per;
		};
		one(Op::seal);
		if (s.can_open()) {
			const double both = one(Op::copy_open);
			const double copy = one(Op::copy);
			c.open_ns.push_back(both - copy);
		}
	}

	const Options& o_;
	std::vector<std::unique_ptr<Subject>> subjects_;
	std::vector<Cell> cells_;
};

// --- Set-up and output -------------------------------------------------------

/**
 * pin_to_one_cpu() - run this thread on one CPU only
 * @wanted: that CPU, or -1 for the highest-numbered one this process may use
 * Return: the CPU. Throws UsageError when @wanted is not allowed.
 */
int pin_to_one_cpu(int wanted) {
	cpu_set_t allowed;
	CPU_ZERO(&allowed);
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		throw std::system_error(errno, std::generic_category(), "sched_getaffinity");
	int cpu = wanted;
	if (cpu < 0) {
		for (int i = CPU_SETSIZE - 1; i >= 0 && cpu < 0; i--)
			if (CPU_ISSET(i, &allowed)) cpu = i;
	} else if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
		throw cli::UsageError("--cpu " + std::to_string(wanted) +
		                      ": not a CPU this process may run on");
	}
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof one, &one) != 0)
		throw std::system_error(errno, std::generic_category(), "sched_setaffinity");
	return cpu;
}

std::string cpu_model() {
	std::ifstream in("/proc/cpuinfo");
	for (std::string line; std::getline(in, line);)
		if (line.rfind("model name", 0) == 0) {
			const size_t colon = line.find(':');
			if (colon != std::string::npos)
				return line.substr(line.find_first_not_of(' ', colon + 1));
		}
	return "unknown";
}

struct Machine {
	std::string cpu_model, openssl, stitched_variant;
	int cpu = -1;
};

/// Goal - one of issue 4's goals, from the rows of this run.
struct Goal {
	std::string what, measured;
	bool met = false;
	bool known = false; ///< false when the rows needed are missing
};

const Row* find_row(const std::vector<Row>& rows, std::string_view group, std::string_view impl,
                    size_t size) {
	for (const Row& r : rows)
		if (r.subject->group() == group && r.subject->impl() == impl && r.size == size) return &r;
	return nullptr;
}

std::string fmt(const char* f, double v) {
	char buf[48];
	std::snprintf(buf, sizeof buf, f, v);
	return buf;
}

/// goals() - issue 4: stitched AES-128-CBC-HMAC-SHA1 encrypt at 1400 bytes
/// >= 1.6x two-pass and >= 90% of OpenSSL's TLS stitched EVP cipher.
std::vector<Goal> goals(const std::vector<Row>& rows) {
	constexpr size_t kSize = 1400;
	const Row* st = find_row(rows, "aes128-cbc-hmac-sha1", "stitched", kSize);
	const Row* tp = find_row(rows, "aes128-cbc-hmac-sha1", "two-pass", kSize);
	const Row* tls = find_row(rows, "aes128-cbc-hmac-sha1", "evp-tls", kSize);
	std::vector<Goal> g(2);
	g[0].what = "stitched aes128-cbc-hmac-sha1 encrypt at 1400 B >= 1.6x two-pass";
	g[1].what =
	    "stitched aes128-cbc-hmac-sha1 encrypt at 1400 B >= 90% of EVP AES-128-CBC-HMAC-SHA1 (TLS)";
	if (st && tp && st->enc.valid && tp->enc.valid) {
		const double x = tp->enc.median / st->enc.median;
		g[0].known = true;
		g[0].met = x >= 1.6;
		g[0].measured = fmt("%.2fx", x) + " (" + fmt("%.0f", mbps(kSize, st->enc.median)) + " vs " +
		                fmt("%.0f", mbps(kSize, tp->enc.median)) + " MB/s)";
	}
	if (st && tls && st->enc.valid && tls->enc.valid) {
		const double x = tls->enc.median / st->enc.median;
		g[1].known = true;
		g[1].met = x >= 0.9;
		g[1].measured = fmt("%.1f%%", 100 * x) + " (" + fmt("%.0f", mbps(kSize, st->enc.median)) +
		                " vs " + fmt("%.0f", mbps(kSize, tls->enc.median)) + " MB/s)";
	}
	for (Goal& x : g)
		if (!x.known)
			x.measured = "not measured in this run (needs size 1400 and the stitched transform)";
	return g;
}

/// spread() - how much the rounds disagreed: the median over rows of
/// (max - min) / median of the encrypt samples. A quiet machine gives a few
/// percent; tens of percent mean other load shared the CPU during the run.
double spread(const std::vector<Row>& rows) {
	std::vector<double> v;
	for (const Row& r : rows)
		if (r.enc.valid && r.enc.median > 0) v.push_back((r.enc.max - r.enc.min) / r.enc.median);
	return stat_of(v).median;
}

void print_table(std::FILE* to, const Machine& m, const Options& o, const std::vector<Row>& rows) {
	std::fprintf(to, "esptun-bench crypto: %s, %s, stitched variant %s, pinned to CPU %d\n",
	             m.cpu_model.c_str(), m.openssl.c_str(), m.stitched_variant.c_str(), m.cpu);
	std::fprintf(
	    to,
	    "ESN on; medians over %u rounds of ~%.0f ms samples; MB/s = inner packet bytes / time;\n"
	    "dec excludes the copy of the sealed packet; ratio = throughput / the evp-tls or evp-gcm row\n\n",
	    o.rounds, o.sample_ms);
	std::fprintf(to, "%-24s %-10s %6s %11s %9s %11s %9s %8s %8s\n", "suite", "impl", "size", "enc ns/pkt",
	             "enc MB/s", "dec ns/pkt", "dec MB/s", "enc/ceil", "dec/ceil");
	const Subject* last = nullptr;
	for (const std::string_view group :
	     {"aes128-cbc-hmac-sha1", "aes256-cbc-hmac-sha1", "aes128-cbc-hmac-sha256",
	      "aes256-cbc-hmac-sha256", "aes128-gcm", "aes256-gcm"}) {
		for (const Row& r : rows) {
			if (r.subject->group() != group) continue;
			if (last && last != r.subject) std::fprintf(to, "\n");
			last = r.subject;
			auto num = [](const Stat& s, const char* f) {
				return s.valid ? fmt(f, s.median) : "-";
			};
			auto rate = [&](const Stat& s) {
				return s.valid ? fmt("%.0f", mbps(r.size, s.median)) : "-";
			};
			auto ratio = [](const std::optional<double>& x) { return x ? fmt("%.2f", *x) : "-"; };
			std::fprintf(to, "%-24s %-10s %6zu %11s %9s %11s %9s %8s %8s\n",
			             r.subject->suite().c_str(), r.subject->impl().c_str(), r.size,
			             num(r.enc, "%.1f").c_str(), rate(r.enc).c_str(),
			             num(r.dec, "%.1f").c_str(), rate(r.dec).c_str(),
			             ratio(r.enc_ratio).c_str(), ratio(r.dec_ratio).c_str());
		}
	}
	std::fprintf(
	    to,
	    "\nnoise: round-to-round spread (max - min) / median of the encrypt samples, median over "
	    "rows: %.1f%%\n",
	    100 * spread(rows));
	std::fprintf(to, "\ngoals (issue 4):\n");
	for (const Goal& g : goals(rows))
		std::fprintf(to, "  %-7s %s: %s\n",
		             !g.known ? "UNKNOWN"
		             : g.met  ? "MET"
		                      : "MISSED",
		             g.what.c_str(), g.measured.c_str());
}

using service::json_round3;

/// add_stat() - @prefix_ns (the median), _ns_min, _ns_max and _mbps of @s, or nulls
void add_stat(service::Json& j, const char* prefix, const Stat& s, size_t size) {
	const std::string p(prefix);
	if (!s.valid) {
		j[p + "_ns"] = nullptr;
		j[p + "_mbps"] = nullptr;
		return;
	}
	j[p + "_ns"] = json_round3(s.median);
	j[p + "_ns_min"] = json_round3(s.min);
	j[p + "_ns_max"] = json_round3(s.max);
	j[p + "_mbps"] = json_round3(mbps(size, s.median));
}

/// optional_json() - @v rounded, or null
service::Json optional_json(const std::optional<double>& v) {
	return v ? service::Json(json_round3(*v)) : service::Json(nullptr);
}

service::Json to_json(const Machine& m, const Options& o, const std::vector<Row>& rows) {
	service::Json j{{"machine",
	                 {{"cpu_model", m.cpu_model},
	                  {"openssl", m.openssl},
	                  {"stitched_variant", m.stitched_variant},
	                  {"pinned_cpu", m.cpu}}},
	                {"rounds", o.rounds},
	                {"sample_ms", json_round3(o.sample_ms)},
	                {"esn", true},
	                {"spread", json_round3(spread(rows))}};
	service::Json& out = j["rows"] = service::Json::array();
	for (const Row& r : rows) {
		service::Json row{{"suite", r.subject->suite()},
		                  {"group", r.subject->group()},
		                  {"impl", r.subject->impl()},
		                  {"ceiling", r.subject->ceiling()},
		                  {"size", uint64_t(r.size)}};
		add_stat(row, "enc", r.enc, r.size);
		add_stat(row, "dec", r.dec, r.size);
		if (r.copy.valid) row["copy_ns"] = json_round3(r.copy.median);
		row["enc_ratio"] = optional_json(r.enc_ratio);
		row["dec_ratio"] = optional_json(r.dec_ratio);
		out.push_back(std::move(row));
	}
	service::Json& goal_list = j["goals"] = service::Json::array();
	for (const Goal& g : goals(rows))
		goal_list.push_back(
		    service::Json{{"goal", g.what},
		                  {"measured", g.measured},
		                  {"met", g.known ? service::Json(g.met) : service::Json(nullptr)}});
	return j;
}

/// run_crypto_bench() - the crypto command with @o; the exit status
int run_crypto_bench(const Options& o) {
	Machine m;
	m.cpu = pin_to_one_cpu(o.cpu);
	m.cpu_model = cpu_model();
	m.openssl = OpenSSL_version(OPENSSL_VERSION);
	m.stitched_variant = std::string(crypto::stitched_variant());
	if (!crypto::stitched_supported())
		std::fprintf(stderr,
		             "esptun-bench crypto: this CPU cannot run the stitched transform (%s); "
		             "measuring two-pass and GCM only\n",
		             crypto::stitched_unsupported_reason().c_str());

	Bench bench(o, make_subjects());
	bench.run_all();
	const std::vector<Row> rows = bench.rows();

	const bool json_stdout = o.json && o.json_file.empty();
	print_table(json_stdout ? stderr : stdout, m, o, rows);
	if (o.json) write_json(to_json(m, o, rows), o.json_file);
	return 0;
}

} // namespace

cli::Verb add_crypto_bench(CLI::App& bench) {
	auto o = std::make_shared<Options>();
	CLI::App* verb = cli::add_verb(
	    bench, "crypto", "ns/packet of ESP seal and open, every suite, next to OpenSSL's EVP",
	    "ns/packet and MB/s of ESP seal and open for every suite and implementation,\n"
	    "next to OpenSSL's EVP ciphers as the ceiling; one pinned CPU, medians over N\n"
	    "rounds (default 15; --quick: 3 short rounds); --json writes the same as JSON\n"
	    "to FILE or, without FILE, to stdout (the table then goes to stderr).");
	CLI::Option* rounds = verb->add_option("--rounds", o->rounds, "rounds (default 15)")
	                          ->type_name("N")
	                          ->check(cli::between(1, 1000));
	verb->add_option("--sizes", o->sizes, "payload sizes in bytes")
	    ->type_name("A,B,...")
	    ->delimiter(',')
	    ->check(cli::between(kMinSize, kMaxSize));
	CLI::Option* sample = verb->add_option("--sample-ms", o->sample_ms, "length of one sample")
	                          ->type_name("MS")
	                          ->check(cli::between(1, 10000));
	verb->add_option("--cpu", o->cpu, "the CPU to pin to (default: the highest allowed)")
	    ->type_name("N")
	    ->check(cli::between(0, CPU_SETSIZE - 1))
	    ->default_str("");
	CLI::Option* quick = verb->add_flag("--quick")->description("3 rounds of 5 ms samples, unless given");
	CLI::Option* json = add_json_option(*verb, o->json_file);
	return {verb, [verb, o, rounds, sample, quick, json] {
		        if (quick->count() && !rounds->count()) o->rounds = 3;
		        if (quick->count() && !sample->count()) o->sample_ms = 5;
		        o->json = json->count() > 0;
		        return cli::run_verb(*verb, [&] { return run_crypto_bench(*o); });
	        }};
}

} // namespace esptun::bench::crypto_bench
