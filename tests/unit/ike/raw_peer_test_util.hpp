// The raw IKEv2 initiator (tests/tools/raw_ike_peer.hpp) wired straight to
// the engine under test, for the engine's hostile-peer tests.
#pragma once

#include "tests/tools/raw_ike_peer.hpp"
#include "tests/unit/ike/engine_test_util.hpp"

namespace esptun::ike::test {

/// The last hop of RawPeer: the engine under test and the host it sends through.
struct Target {
	Engine* engine = nullptr;
	FakeHost* host = nullptr;
	Clock::time_point* now = nullptr;
};

/**
 * RawPeer - tools::RawPeer wired to the engine under test: each message
 * goes to @t's engine as if from @self, and what the engine sent to @self
 * comes back.
 */
struct RawPeer : tools::RawPeer {
	Target t;
	Endpoint self = ep("10.0.0.66:4500");

	RawPeer() {
		psk = kPsk;
		transport = [this](std::span<const uint8_t> bytes) {
			t.engine->receive(Port::natt, self, bytes, *t.now);
			std::vector<std::vector<uint8_t>> back;
			for (auto it = t.host->out.begin(); it != t.host->out.end();) {
				if (!(it->to == self)) {
					++it;
					continue;
				}
				back.push_back(it->bytes);
				it = t.host->out.erase(it);
			}
			return back;
		};
	}
	/// IKE_SA_INIT, with an initiator SPI that names @self (tells peers apart).
	bool init() {
		spi_tag = self.addr.bytes[3];
		return tools::RawPeer::init();
	}
	RawPeer(const RawPeer&) = delete;
	RawPeer& operator=(const RawPeer&) = delete;
};

/// The notify of @type in @payloads, or nullptr.
inline const NotifyPayload* notify_of(const std::vector<Payload>& payloads, uint16_t type) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->type == type) return n;
	return nullptr;
}

/// The TS payload (TSi when @initiator) in @payloads, or nullptr.
inline const TsPayload* ts_of(const std::vector<Payload>& payloads, bool initiator) {
	for (const Payload& p : payloads)
		if (const auto* t = std::get_if<TsPayload>(&p); t && t->initiator == initiator) return t;
	return nullptr;
}

} // namespace esptun::ike::test
