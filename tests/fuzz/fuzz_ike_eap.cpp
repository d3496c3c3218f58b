// libFuzzer target: EAP inside IKE_AUTH at a gateway (RFC 7296 section
// 2.16, ike/engine_eap.cpp). Per input, a fresh responder Engine with two
// EAP peers (EAP-MSCHAPv2 and EAP-TLS, the gateway signing with a P-256
// certificate) and a RawPeer (tests/unit/ike/raw_peer_test_util.hpp) that
// completes IKE_SA_INIT and the first IKE_AUTH without AUTH, which the
// gateway answers with its certificate and EAP-Identity. Then the input is
// cut into IKE_AUTH requests the peer seals in valid SK payloads, so every
// byte reaches the engine's EAP handling as a keyed peer's message. After
// each message:
//  - nothing escaped Engine::receive() or Engine::tick(), and
//    counters().internal_errors is 0;
//  - nothing is established and no CHILD_SA installed: the fuzzer knows no
//    user's password and holds no client certificate, so an IKE SA coming
//    up would be an authentication bypass.
//
// Input: byte 0 bit 0 picks the peer (0 MSCHAPv2, 1 TLS); then messages,
// each [ctl 1][length 2, big-endian][bytes, length]:
//   ctl & 3 = 0: an EAP payload holding the bytes as they are;
//             1: an EAP Response with the identifier of the gateway's last
//                request, bytes[0] as type and the rest as type-data;
//             2: an AUTH payload (shared key MIC) holding the bytes;
//             3: the previous request again (a retransmission).
//   ctl >> 4: advance the clock by that many times 5 s and tick.
//
// Seeds: tests/fuzz/corpus/ike_eap/, written by this binary:
//   fuzz-ike_eap -write_seeds=DIR
#define DOCTEST_CONFIG_DISABLE // the shared test helpers' checks are not this program's
#include "ike/eap_mschapv2.hpp"
#include "tests/fuzz/fuzz_ike_oracle.hpp"
#include "tests/fuzz/fuzz_ike_pki.hpp"
#include "tests/fuzz/fuzz_seeds.hpp"
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr size_t kMaxMessages = 24;

/// The gateway's credentials (tests/fuzz/fuzz_ike_pki.hpp: also the CA
/// EAP-TLS clients would need) and the users, made once.
struct Material : fuzz::GatewayPki {
	std::shared_ptr<const Users> users;
	Material() : GatewayPki("fuzz-ike_eap") {
		auto u = std::make_shared<Users>();
		u->emplace("carol",
		           User{eap::nt_password_hash("a password the fuzzer does not know"), {}, {}});
		users = u;
	}
};

const Material& material() {
	static const Material m;
	return m;
}

PeerPolicy eap_peer(const char* name, const char* remote, uint8_t method) {
	PeerPolicy p = policy(name, "gw.example.com", remote);
	p.psk.clear();
	p.eap_role = EapRole::server;
	p.eap_method = method;
	p.credentials = material().credentials;
	if (method == eap::type::tls)
		p.trust = material().trust;
	else
		p.users = material().users;
	p.allowed_ips = {*parse_prefix("10.9.1.0/24")};
	return p;
}

struct Bench {
	FakeHost host;
	std::unique_ptr<Engine> gw;
	Clock::time_point now = Clock::time_point{} + std::chrono::hours(1000);
	RawPeer m;
	uint8_t last_eap_id = 0;

	explicit Bench(bool tls) {
		host.self = ep("10.0.0.2:4500");
		gw = std::make_unique<Engine>(
		    std::vector<PeerPolicy>{eap_peer("ms", "ms.example", eap::type::mschapv2),
		                            eap_peer("tls", "tls.example", eap::type::tls)},
		    host);
		m.t = {gw.get(), &host, &now};
		m.id = *parse_identity(tls ? "tls.example" : "ms.example");
	}

	/// Notes the identifier of the EAP request in @answer, if any.
	void note(const std::vector<Payload>& answer) {
		for (const Payload& p : answer)
			if (const auto* r = std::get_if<RawPayload>(&p); r && r->type == PayloadType::eap)
				if (auto e = eap::parse(r->body); e && e->code == eap::Code::request)
					last_eap_id = e->id;
	}

	/// IKE_SA_INIT and the first IKE_AUTH (no AUTH: EAP); false unless the
	/// gateway answered with an EAP request.
	bool up() {
		if (!m.init()) return false;
		IdPayload idi{true, m.id.type, m.id.data};
		const std::vector<EspSuite> esp = default_esp_proposals();
		const Payload first[] = {idi, esp_offer(esp, 0xa0000001, ChildExchange::ike_auth),
		                         TsPayload{true, {selector_of(*parse_prefix("10.9.1.0/24"))}},
		                         TsPayload{false, {selector_of(*parse_prefix("0.0.0.0/0"))}}};
		bool got = false;
		const std::vector<Payload> answer = m.request(Exchange::ike_auth, first, &got);
		note(answer);
		return got && std::any_of(answer.begin(), answer.end(), [](const Payload& p) {
			       const auto* r = std::get_if<RawPayload>(&p);
			       return r && r->type == PayloadType::eap;
		       });
	}

	void check() const { fuzz::check_no_bypass(*gw, host, now, "without a password or certificate"); }
};

/// Plausible conversations: an identity, then each method's first answer.
void write_seeds(const std::string& dir) {
	std::vector<uint8_t> identity{eap::type::identity, 'c', 'a', 'r', 'o', 'l'};
	// MSCHAPv2 Response (OpCode 2): MS-CHAPv2-ID 0, MS-Length, Value-Size 49,
	// Peer-Challenge 16, Reserved 8, NT-Response 24, Flags, Name "carol".
	std::vector<uint8_t> ms{eap::type::mschapv2, 2, 0, 0, 59, 49};
	ms.resize(ms.size() + 49, 0x11);
	for (char c : std::string("carol"))
		ms.push_back(uint8_t(c));
	// EAP-TLS: an empty acknowledgement and a ClientHello-sized record.
	std::vector<uint8_t> tls_ack{eap::type::tls, 0};
	std::vector<uint8_t> tls_hello{eap::type::tls, 0, 0x16, 3, 3, 0, 4, 1, 0, 0, 0};
	using fuzz::frame;
	const std::vector<fuzz::Seed> seeds = {
	    {"ms_identity", {{0}, frame(1, identity)}},
	    {"ms_response", {{0}, frame(1, identity), frame(1, ms)}},
	    {"ms_auth_early", {{0}, frame(1, identity), frame(2, std::vector<uint8_t>(32, 7))}},
	    {"ms_retransmit", {{0}, frame(1, identity), frame(3, {}), frame(0x21, ms)}},
	    {"tls_hello", {{1}, frame(1, identity), frame(1, tls_hello), frame(1, tls_ack)}},
	    {"raw_eap", {{0}, frame(0, {2, 0, 0, 5, 1})}},
	};
	fuzz::write_seed_files(dir, seeds);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
	fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
	(void)material();
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	if (size < 1) return 0;
	Bench b((data[0] & 1) != 0);
	try {
		if (!b.up()) { // the start of EAP itself must work every time
			for (const std::string& line : b.host.logs)
				std::fprintf(stderr, "engine: %s\n", line.c_str());
			std::fprintf(stderr, "the first IKE_AUTH got no EAP request\n");
			std::abort();
		}
		b.check();
		size_t off = 1;
		uint32_t previous_id = 0;
		std::vector<uint8_t> previous_chain;
		uint8_t previous_first = 0;
		for (size_t n = 0; n < kMaxMessages && off + 3 <= size; n++) {
			const uint8_t ctl = data[off];
			const size_t len =
			    std::min<size_t>(size_t(data[off + 1]) << 8 | data[off + 2], size - off - 3);
			const std::span<const uint8_t> bytes(data + off + 3, len);
			off += 3 + len;
			std::vector<Payload> inner;
			switch (ctl & 3) {
			case 0:
				inner.push_back(
				    RawPayload{PayloadType::eap, false, {bytes.begin(), bytes.end()}});
				break;
			case 1: {
				eap::Packet p{eap::Code::response,
				              b.last_eap_id,
				              bytes.empty() ? uint8_t(0) : bytes[0],
				              {}};
				if (bytes.size() > 1) p.data.assign(bytes.begin() + 1, bytes.end());
				if (p.type == 0 || p.data.size() + 5 > eap::kMaxPacket) continue;
				inner.push_back(RawPayload{PayloadType::eap, false, eap::encode(p)});
				break;
			}
			case 2:
				inner.push_back(AuthPayload{AuthMethod::psk, {bytes.begin(), bytes.end()}});
				break;
			case 3:
				if (previous_chain.empty()) continue;
				b.m.send_sealed(Exchange::ike_auth, kFlagInitiator, previous_id,
				                previous_first, previous_chain);
				b.check();
				continue;
			}
			PayloadType first = PayloadType::none;
			previous_chain = encode_payloads(inner, first);
			previous_first = uint8_t(first);
			previous_id = b.m.next_id;
			const std::vector<Payload> answer = b.m.request(Exchange::ike_auth, inner);
			b.note(answer);
			b.check();
			if (ctl >> 4) {
				b.now += std::chrono::seconds(5 * (ctl >> 4));
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
