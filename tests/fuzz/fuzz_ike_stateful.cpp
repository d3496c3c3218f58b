// libFuzzer target: the IKE engine after authentication (issue 16). Per
// input, a fresh responder Engine and a RawPeer (tests/unit/ike/
// raw_peer_test_util.hpp) complete IKE_SA_INIT and IKE_AUTH with a valid PSK;
// then the input is cut into messages whose inner payload chains the peer
// seals in a valid SK payload of its IKE SA, so every byte reaches the
// engine's CREATE_CHILD_SA / INFORMATIONAL handling (RFC 7296 sections 1.3,
// 1.4) as an authenticated peer's request or response. After each message:
//  - nothing escaped Engine::receive() or Engine::tick();
//  - counters().internal_errors is 0: an exception the engine contained is
//    still a bug (a peer message that reaches a throw is a malformed-input
//    path without its own check);
//  - the peer holds at most kMaxIkeSasPerPeer IKE SAs and
//    kMaxChildSasPerPeer CHILD_SAs, and the host no more SAs than that.
//
// Input: a sequence of messages, each
//   [ctl 1][first payload type 1][length 2, big-endian][inner chain, length bytes]
// ctl bit 0: exchange (0 CREATE_CHILD_SA, 1 INFORMATIONAL); bit 1: Response
// flag; bits 2-3: message ID (0, 1: the next expected; 2: the previous one
// again; 3: a gap of bits 4-7); bits 4-7 also advance the clock by that many
// times 7 s and tick the engine. A short length takes what is left.
//
// Seeds: tests/fuzz/corpus/ike_stateful/, written by this binary:
//   fuzz-ike_stateful -write_seeds=DIR
#define DOCTEST_CONFIG_DISABLE // the shared test helpers' checks are not this program's
#include "tests/fuzz/fuzz_seeds.hpp"
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr uint32_t kChildSpi = 0xa0000001; ///< the CHILD_SA SPI the peer offers in IKE_AUTH
constexpr size_t kMaxMessages = 16;

TrafficSelector ts(const char* prefix) { return selector_of(*parse_prefix(prefix)); }

/// A responder engine with one peer, "mallory", and the raw peer that plays it.
struct Bench {
	FakeHost host;
	std::unique_ptr<Engine> gw;
	Clock::time_point now = Clock::time_point{} + std::chrono::hours(1000);
	RawPeer m;

	Bench() {
		host.self = ep("10.0.0.2:4500");
		PeerPolicy p = policy("mallory", "gw.example", "mallory.example");
		p.allowed_ips = {*parse_prefix("10.9.1.0/24"), *parse_prefix("10.9.2.0/24")};
		p.child_rekey_s = 600;
		p.ike_rekey_s = 3000;
		gw = std::make_unique<Engine>(std::vector<PeerPolicy>{p}, host);
		m.t = {gw.get(), &host, &now};
		m.id = *parse_identity("mallory.example");
	}

	/// INIT and AUTH with one CHILD_SA; false if the engine did not accept them.
	bool up() {
		if (!m.init()) return false;
		bool got = false;
		m.auth({ts("10.9.1.0/24")}, {ts("0.0.0.0/0")}, kChildSpi, &got);
		return got && m.t.host->installed.size() == 1;
	}

	/// Aborts (a finding) when a bound or the error counter is broken.
	void check() const {
		if (gw->counters().internal_errors != 0) {
			std::fprintf(stderr, "internal_errors = %llu\n",
			             static_cast<unsigned long long>(gw->counters().internal_errors));
			std::abort();
		}
		size_t ike = 0, children = 0;
		for (const IkeSaStatus& s : gw->status(now)) {
			ike++;
			children += s.children.size();
		}
		if (ike > Engine::kMaxIkeSasPerPeer || children > Engine::kMaxChildSasPerPeer ||
		    host.installed.size() > Engine::kMaxChildSasPerPeer ||
		    host.parked.size() > Engine::kMaxChildSasPerPeer) {
			std::fprintf(stderr,
			             "bounds: %zu IKE SAs, %zu CHILD_SAs, %zu installed, %zu parked\n", ike,
			             children, host.installed.size(), host.parked.size());
			std::abort();
		}
	}
};

/// One fuzz message: how to send it and its inner chain.
struct Msg {
	uint8_t ctl = 0, first = 0;
	std::vector<uint8_t> chain;
};

/// The bytes of @msgs in the input format above (for seeds).
std::vector<uint8_t> encode_input(const std::vector<Msg>& msgs) {
	std::vector<uint8_t> out;
	for (const Msg& x : msgs) {
		out.push_back(x.ctl);
		out.push_back(x.first);
		out.push_back(uint8_t(x.chain.size() >> 8));
		out.push_back(uint8_t(x.chain.size()));
		out.insert(out.end(), x.chain.begin(), x.chain.end());
	}
	return out;
}

/// A message of @ex (0 CREATE_CHILD_SA, 1 INFORMATIONAL) holding @p, next message ID.
Msg msg_of(uint8_t ex, std::vector<Payload> p) {
	Msg x;
	x.ctl = ex;
	PayloadType first = PayloadType::none;
	x.chain = encode_payloads(p, first);
	x.first = uint8_t(first);
	return x;
}

/// Valid request bodies an authenticated peer sends (sections 1.3.1-1.3.3, 1.4.1, 1.5).
void write_seeds(const std::string& dir) {
	const std::vector<uint8_t> nonce(32, 0x5a);
	const EspSuite esp = default_esp_proposals().front();
	const IkeSuite ike = default_ike_proposals().front();
	DhKeyPair dh(ike.dh);
	const std::vector<uint8_t> ke(dh.public_value().begin(), dh.public_value().end());
	uint8_t ike_spi[8] = {0x77, 0, 0, 0, 0, 0, 0, 1};

	const Msg new_child =
	    msg_of(0, {esp_offer(std::span(&esp, 1), 0xa0000002, ChildExchange::create_child_sa),
	               NoncePayload{nonce}, TsPayload{true, {ts("10.9.2.0/24")}},
	               TsPayload{false, {ts("0.0.0.0/0")}}});
	NotifyPayload rekey;
	rekey.protocol = Protocol::esp;
	rekey.type = notify::rekey_sa;
	rekey.spi = {uint8_t(kChildSpi >> 24), uint8_t(kChildSpi >> 16), uint8_t(kChildSpi >> 8),
	             uint8_t(kChildSpi)};
	const Msg rekey_child =
	    msg_of(0, {rekey, esp_offer(std::span(&esp, 1), 0xa0000003, ChildExchange::create_child_sa),
	               NoncePayload{nonce}, TsPayload{true, {ts("10.9.1.0/24")}},
	               TsPayload{false, {ts("0.0.0.0/0")}}});
	const Msg rekey_ike = msg_of(0, {ike_offer(std::span(&ike, 1), ike_spi), NoncePayload{nonce},
	                                 KePayload{uint16_t(ike.dh), ke}});
	const Msg liveness = msg_of(1, {});
	const Msg del_child = msg_of(1, {DeletePayload{Protocol::esp, {kChildSpi}}});
	const Msg del_ike = msg_of(1, {DeletePayload{Protocol::ike, {}}});

	const std::vector<std::pair<std::string, std::vector<Msg>>> seeds = {
	    {"new_child", {new_child}},
	    {"rekey_child", {rekey_child}},
	    {"rekey_ike", {rekey_ike}},
	    {"liveness", {liveness}},
	    {"delete_child", {del_child}},
	    {"delete_ike", {del_ike}},
	    {"mixed", {liveness, new_child, rekey_child, del_child, liveness}},
	};
	std::vector<fuzz::Seed> files;
	for (const auto& [name, msgs] : seeds)
		files.push_back({name, {encode_input(msgs)}});
	fuzz::write_seed_files(dir, files);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
	fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	Bench b;
	try {
		if (!b.up()) std::abort(); // the handshake itself must work every time
		b.check();
		uint32_t last_id = 0;
		size_t off = 0;
		for (size_t n = 0; n < kMaxMessages && off + 4 <= size; n++) {
			const uint8_t ctl = data[off], first = data[off + 1];
			const size_t len =
			    std::min<size_t>(size_t(data[off + 2]) << 8 | data[off + 3], size - off - 4);
			const std::span<const uint8_t> chain(data + off + 4, len);
			off += 4 + len;

			const Exchange ex = (ctl & 1) ? Exchange::informational : Exchange::create_child_sa;
			const uint8_t flags = uint8_t(kFlagInitiator | ((ctl & 2) ? kFlagResponse : 0));
			uint32_t id = b.m.next_id;
			switch ((ctl >> 2) & 3) {
			case 2:
				id = last_id;
				break;
			case 3:
				id = b.m.next_id + (ctl >> 4);
				break;
			default:
				break;
			}
			if (!(flags & kFlagResponse) && id == b.m.next_id) b.m.next_id++;
			last_id = id;
			b.m.send_sealed(ex, flags, id, first, chain);
			b.check();
			if (ctl >> 4) {
				b.now += std::chrono::seconds(7 * (ctl >> 4));
				b.gw->tick(b.now);
				b.check();
			}
		}
	} catch (const std::exception& e) {
		std::fprintf(stderr, "exception escaped the engine: %s\n", e.what());
		std::abort();
	}
	return 0;
}
