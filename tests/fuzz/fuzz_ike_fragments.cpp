// libFuzzer target: IKE fragments (RFC 7383 SKF payloads) into the engine's
// reassembly (ike/engine_fragments.cpp). Per input, a fresh responder
// Engine with one PSK peer and a RawPeer (tests/unit/ike/raw_peer_test_util.hpp)
// that announces fragmentation and completes IKE_SA_INIT; then the input is
// cut into fragments the peer seals with the IKE SA's keys, so each one
// passes the integrity check and reaches reassembly as a keyed peer's
// would: any Fragment Number and Total Fragments, any message ID and
// exchange, any first-payload type and content, duplicates, gaps,
// overlapping restarts, and time passing. After each fragment:
//  - nothing escaped Engine::receive() or Engine::tick(), and
//    counters().internal_errors is 0;
//  - the reassembly holds at most Engine::kMaxReassemblyTotal bytes;
//  - nothing is established and no CHILD_SA installed: the fuzzer cannot
//    compute the AUTH payload (it depends on this run's nonces), so a
//    reassembled message that logs the peer in would be a bypass.
// At the end, once the reassembly timeout has passed, nothing is held.
//
// Input: items, each [number 2][total 2][ctl 1][length 2][bytes, length],
// big-endian:
//   ctl & 3:        the message ID (1 to 4: the expected one and a few past it)
//   ctl >> 2 & 1:   exchange IKE_AUTH (0) or INFORMATIONAL (1)
//   ctl >> 3 & 1:   first inner payload: IDi (0) or the item's first byte (1)
//   ctl >> 4:       after sending, advance the clock by that many seconds and tick
//
// Seeds: tests/fuzz/corpus/ike_fragments/, written by this binary:
//   fuzz-ike_fragments -write_seeds=DIR
#define DOCTEST_CONFIG_DISABLE // the shared test helpers' checks are not this program's
#include "tests/fuzz/fuzz_ike_oracle.hpp"
#include "tests/fuzz/fuzz_seeds.hpp"
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr size_t kMaxItems = 200;

struct Bench {
	FakeHost host;
	std::unique_ptr<Engine> gw;
	Clock::time_point now = Clock::time_point{} + std::chrono::hours(1000);
	RawPeer m;

	Bench() {
		host.self = ep("10.0.0.2:4500");
		PeerPolicy p = policy("mallory", "gw.example", "mallory.example");
		p.fragment_size = 576;
		p.dpd_interval_s = 0;
		p.allowed_ips = {*parse_prefix("10.9.1.0/24")};
		gw = std::make_unique<Engine>(std::vector<PeerPolicy>{p}, host);
		m.t = {gw.get(), &host, &now};
		m.id = *parse_identity("mallory.example");
		m.fragmentation = true;
	}

	/// One fragment of request @id, sealed with the IKE SA's keys.
	void send_fragment(uint32_t id, Exchange ex, uint8_t first, uint16_t number, uint16_t total,
	                   std::span<const uint8_t> data) {
		(void)m.transport(m.fragment(id, number, total, data, ex, first));
	}

	void check() const {
		fuzz::check_no_bypass(*gw, host, now, "from fuzzed fragments");
		if (gw->reassembly_bytes() > Engine::kMaxReassemblyTotal) {
			std::fprintf(stderr, "reassembly holds %zu bytes\n", gw->reassembly_bytes());
			std::abort();
		}
	}
};

/// An item: fragment @number of @total, @ctl, @bytes.
std::vector<uint8_t> item(uint16_t number, uint16_t total, uint8_t ctl, const std::vector<uint8_t>& bytes) {
	std::vector<uint8_t> out{uint8_t(number >> 8), uint8_t(number), uint8_t(total >> 8), uint8_t(total)};
	const std::vector<uint8_t> rest = fuzz::frame(ctl, bytes);
	out.insert(out.end(), rest.begin(), rest.end());
	return out;
}

/// Fragments in order, reversed, duplicated, overlapping restarts, too
/// many, and a gap left to time out.
void write_seeds(const std::string& dir) {
	const std::vector<uint8_t> a(300, 0x41), b(300, 0x42), c(120, 0x43);
	fuzz::write_seed_files(
	    dir,
	    {
	        {"in_order", {item(1, 3, 1, a), item(2, 3, 1, b), item(3, 3, 1, c)}},
	        {"reversed", {item(3, 3, 1, c), item(2, 3, 1, b), item(1, 3, 1, a)}},
	        {"duplicates", {item(1, 2, 1, a), item(1, 2, 1, a), item(2, 2, 1, b), item(2, 2, 1, b)}},
	        {"restart_more", {item(1, 2, 1, a), item(1, 4, 1, b), item(4, 4, 1, c), item(2, 2, 1, a)}},
	        {"too_many", {item(1, 65, 1, a), item(1, 64, 1, a), item(64, 64, 1, b)}},
	        {"gap_times_out", {item(1, 3, 1, a), item(3, 3, 0xf1, c), item(2, 3, 0xf1, b)}},
	        {"informational", {item(1, 2, 5, a), item(2, 2, 5, b)}},
	        {"future_ids", {item(1, 2, 2, a), item(1, 2, 3, b), item(2, 2, 0, c)}},
	    });
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
	fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
	// The harness itself: a sealed fragment must reach the reassembly, or
	// the fuzzer would only exercise the integrity check.
	Bench b;
	const std::vector<uint8_t> data(100, 0x41);
	if (!b.m.init()) std::abort();
	b.send_fragment(1, Exchange::ike_auth, uint8_t(PayloadType::idi), 1, 2, data);
	if (b.gw->counters().fragments_received != 1 || b.gw->reassembly_bytes() != data.size()) {
		std::fprintf(stderr, "a sealed fragment did not reach the reassembly\n");
		std::abort();
	}
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	Bench b;
	try {
		if (!b.m.init()) { // IKE_SA_INIT itself must work every time
			for (const std::string& line : b.host.logs)
				std::fprintf(stderr, "engine: %s\n", line.c_str());
			std::fprintf(stderr, "IKE_SA_INIT got no answer\n");
			std::abort();
		}
		if (!b.m.peer_fragmentation) {
			std::fprintf(stderr, "the gateway did not announce fragmentation\n");
			std::abort();
		}
		b.check();
		size_t off = 0;
		for (size_t n = 0; n < kMaxItems && off + 7 <= size; n++) {
			const uint16_t number = uint16_t(data[off] << 8 | data[off + 1]);
			const uint16_t total = uint16_t(data[off + 2] << 8 | data[off + 3]);
			const uint8_t ctl = data[off + 4];
			const size_t len =
			    std::min<size_t>(size_t(data[off + 5]) << 8 | data[off + 6], size - off - 7);
			const std::span<const uint8_t> bytes(data + off + 7, len);
			off += 7 + len;
			const uint32_t id = 1 + (ctl & 3);
			const Exchange ex = (ctl >> 2 & 1) ? Exchange::informational : Exchange::ike_auth;
			const uint8_t first =
			    (ctl >> 3 & 1) && !bytes.empty() ? bytes[0] : uint8_t(PayloadType::idi);
			b.send_fragment(id, ex, first, number, total, bytes);
			b.check();
			if (ctl >> 4) {
				b.now += std::chrono::seconds(ctl >> 4);
				b.gw->tick(b.now);
				b.check();
			}
		}
		// Whatever is still waiting is given up after the timeout.
		b.now += Engine::kReassemblyTimeout + std::chrono::seconds(1);
		b.gw->tick(b.now);
		b.check();
		if (b.gw->reassembly_bytes() != 0) {
			std::fprintf(stderr, "%zu reassembly bytes held after the timeout\n",
			             b.gw->reassembly_bytes());
			std::abort();
		}
	} catch (const std::exception& e) {
		std::fprintf(stderr, "exception escaped the engine: %s\n", e.what());
		std::abort();
	}
	return 0;
}
