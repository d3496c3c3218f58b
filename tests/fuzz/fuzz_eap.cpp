// libFuzzer target for EAP in IKE_AUTH (ike/eap.hpp, ike/eap_mschapv2.hpp):
// the bytes of a peer's EAP payload, before it is authenticated.
// Each input is used two ways:
//   1. as a whole EAP packet: parse(); whatever parses must encode back to
//      the same bytes (the encoding is canonical);
//   2. as MSCHAPv2 type-data: byte 0 picks a method and a state (the server
//      before start(), after its Challenge, after its Success or Failure
//      request, after it finished; the peer before a Challenge, after its
//      Response, after it finished), a real conversation is run up to that
//      state, and the rest of the input goes in, twice: as it is, and with
//      its MS-CHAPv2-ID set to the conversation's so the fuzzer gets past
//      that check. Nothing may throw; the server may only succeed on the
//      one-byte Success response after its Success request, and the peer
//      may never finish on made-up bytes (it would mean accepting a server
//      that does not know the password).
// Seeds: tests/fuzz/corpus/eap/ (an EAP packet of each code and each
// MSCHAPv2 message, with a state byte in front).
#include "ike/eap.hpp"
#include "ike/eap_mschapv2.hpp"

#include "tests/unit/support/bytes_test_util.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

namespace {

using namespace esptun;
using namespace esptun::ike::eap;
using esptun::test::Bytes;

[[noreturn]] void fail(const char* what) {
	std::fprintf(stderr, "fuzz-eap: %s\n", what);
	__builtin_trap();
}

void check_codec(std::span<const uint8_t> in) {
	const auto p = parse(in);
	if (!p) return;
	if (encode(*p) != Bytes(in.begin(), in.end())) fail("packet does not encode back to its bytes");
	if ((p->code == Code::success || p->code == Code::failure) && (p->type != 0 || !p->data.empty()))
		fail("success/failure with a payload");
}

const SecretBytes& alice_hash() {
	static const SecretBytes h = nt_password_hash("correct horse");
	return h;
}

std::unique_ptr<ServerMethod> server() {
	return make_mschapv2_server(
	    [](std::string_view u) -> std::optional<SecretBytes> {
		    if (u == "alice") return alice_hash();
		    return std::nullopt;
	    },
	    "fuzz-gw");
}

std::unique_ptr<PeerMethod> peer(const char* password) {
	return make_mschapv2_peer("alice", SecretString(std::string_view(password)));
}

/// with_id() - @in with its MS-CHAPv2-ID byte (the second) set to @id.
Bytes with_id(std::span<const uint8_t> in, uint8_t id) {
	Bytes b(in.begin(), in.end());
	if (b.size() >= 2) b[1] = id;
	return b;
}

enum class S : uint8_t { idle, challenged, sent_success, sent_failure, done };

void fuzz_server(S state, std::span<const uint8_t> in) {
	for (int round = 0; round < 2; round++) {
		auto srv = server();
		uint8_t id = 0;
		if (state != S::idle) {
			const Bytes challenge = srv->start();
			id = challenge.at(1);
			if (state != S::challenged) {
				auto p = peer(state == S::sent_failure ? "wrong" : "correct horse");
				const Step r = p->on_request(challenge);
				const Step s = srv->on_response(r.data);
				if (s.kind != Step::Kind::send) fail("conversation set-up failed");
				if (state == S::done &&
				    srv->on_response(Bytes{3}).kind != Step::Kind::success)
					fail("conversation set-up did not succeed");
			}
		}
		const Bytes data = round == 0 ? Bytes(in.begin(), in.end()) : with_id(in, id);
		const Step s = srv->on_response(data);
		const bool ok = s.kind == Step::Kind::success;
		if (ok && !(state == S::sent_success && data == Bytes{3}))
			fail("server succeeded on made-up bytes");
		if (ok != (srv->msk().size() == 64) && state != S::done) fail("server MSK without success");
		if (s.kind == Step::Kind::failure && s.error.empty()) fail("failure without a reason");
		// Whatever happened, one more response must not throw either.
		(void)srv->on_response(data);
	}
}

void fuzz_peer(S state, std::span<const uint8_t> in) {
	for (int round = 0; round < 2; round++) {
		auto srv = server();
		auto p = peer("correct horse");
		uint8_t id = 0;
		if (state != S::idle) {
			const Bytes challenge = srv->start();
			id = challenge.at(1);
			const Step r = p->on_request(challenge);
			if (state == S::done) {
				const Step s = srv->on_response(r.data);
				if (p->on_request(s.data).kind != Step::Kind::send || !p->finished())
					fail("conversation set-up did not finish");
			}
		}
		const Bytes data = round == 0 ? Bytes(in.begin(), in.end()) : with_id(in, id);
		const Step s = p->on_request(data);
		if (state != S::done && p->finished()) fail("peer finished on made-up bytes");
		if (s.kind == Step::Kind::failure && s.error.empty()) fail("failure without a reason");
		if (p->finished() != (p->msk().size() == 64)) fail("peer MSK and finished() disagree");
		(void)p->on_request(data);
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	std::span<const uint8_t> in(data, size);
	try {
		check_codec(in);
		if (size == 0) return 0;
		const uint8_t pick = data[0] % 9;
		const auto rest = in.subspan(1);
		if (pick < 5)
			fuzz_server(S(pick), rest);
		else if (pick == 5)
			fuzz_peer(S::idle, rest);
		else if (pick == 6)
			fuzz_peer(S::challenged, rest);
		else if (pick == 7)
			fuzz_peer(S::done, rest);
		else if (const auto p = parse(rest); p && p->type == type::mschapv2)
			fuzz_peer(S::challenged, p->data); // a whole EAP request around it
	} catch (const std::exception& e) {
		std::fprintf(stderr, "fuzz-eap: exception: %s\n", e.what());
		__builtin_trap();
	}
	return 0;
}
