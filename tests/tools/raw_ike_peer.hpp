// RawPeer - a hand-driven IKEv2 initiator: it completes IKE_SA_INIT and
// IKE_AUTH with a valid PSK, then sends whatever protected request its
// user writes, as a hostile but authenticated peer would. One copy, used by
// the engine unit tests (tests/unit/ike/raw_peer_test_util.hpp, which hands
// its messages straight to an engine) and by the attack tool
// (tests/tools/ike_attack.cpp, which sends them over UDP).
#pragma once

#include "base/bytes.hpp"
#include "ike/engine.hpp"
#include "ike/keymat.hpp"
#include "ike/message.hpp"
#include "ike/proposal.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace esptun::ike::tools {

/// An initiator whose every payload the test chooses.
struct RawPeer {
	/// Sends one message from us; returns every message that came back for us.
	std::function<std::vector<std::vector<uint8_t>>(std::span<const uint8_t>)> transport;
	uint8_t spi_tag = 0x42; ///< the low byte of our initiator SPI (tells peers apart)
	IkeSuite suite = default_ike_proposals().front();
	std::string psk;
	bool fragmentation = false;      ///< init() announces IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383)
	bool peer_fragmentation = false; ///< init(): the answer announced it
	Identity id, peer_id;
	uint64_t spi_i = 0, spi_r = 0;
	uint32_t next_id = 0;
	std::vector<uint8_t> ni, nr, init_request;
	IkeKeys keys;
	std::unique_ptr<SkCipher> sk_in, sk_out;
	std::vector<std::vector<uint8_t>> requests_from_engine; ///< what the engine asked us (encrypted)

	/**
	 * exchange() - send @bytes (a whole IKE message from us) and return the
	 * answer to it (empty if none); requests from the other side are kept in
	 * requests_from_engine. The transport decides how (a unit test hands the
	 * message to an engine, the attack tool sends it over UDP).
	 */
	std::vector<uint8_t> exchange(std::span<const uint8_t> bytes) {
		std::vector<std::vector<uint8_t>> got = transport(bytes);
		std::vector<uint8_t> answer;
		for (std::vector<uint8_t>& m : got) {
			Header h;
			if (parse_header(m, h) && h.is_response())
				answer = std::move(m);
			else
				requests_from_engine.push_back(std::move(m));
		}
		return answer;
	}

	/// init() - IKE_SA_INIT with one proposal; false when there is no usable answer.
	bool init() {
		spi_i = 0x6666000000000000ull | spi_tag;
		DhKeyPair dh(suite.dh);
		ni.assign(32, 0x42);
		Header h;
		h.spi_i = spi_i;
		h.exchange = Exchange::ike_sa_init;
		h.flags = kFlagInitiator;
		const std::vector<IkeSuite> one{suite};
		std::vector<Payload> p{
		    ike_offer(one),
		    KePayload{uint16_t(suite.dh),
		              std::vector<uint8_t>(dh.public_value().begin(), dh.public_value().end())},
		    NoncePayload{ni}};
		if (fragmentation) {
			NotifyPayload n;
			n.type = notify::ikev2_fragmentation_supported;
			p.push_back(n);
		}
		init_request = build_message(h, p);
		const std::vector<uint8_t> answer = exchange(init_request);
		Message m;
		if (answer.empty() || !parse_message(answer, m)) return false;
		const KePayload* ke = m.find<KePayload>();
		const NoncePayload* n = m.find<NoncePayload>();
		if (!ke || !n || m.header.spi_r == 0) return false;
		std::optional<SecretBytes> g_ir = dh.shared_secret(ke->data);
		if (!g_ir) return false;
		spi_r = m.header.spi_r;
		nr = n->data;
		peer_fragmentation = m.find_notify(notify::ikev2_fragmentation_supported) != nullptr;
		keys = derive_ike_keys(suite, ni, nr, *g_ir, spi_i, spi_r);
		sk_out = std::make_unique<SkCipher>(suite, keys.sk_ei, keys.sk_ai);
		sk_in = std::make_unique<SkCipher>(suite, keys.sk_er, keys.sk_ar);
		next_id = 1;
		return true;
	}

	/**
	 * send_sealed() - any inner payload chain, valid or not, in a valid SK
	 * payload of this IKE SA; return the engine's answer (empty if none)
	 * @ex, @flags, @msg_id: the IKE header's exchange type, flags and message ID
	 * @first:           the SK payload's Next Payload (the chain's first type)
	 * @chain:           the encoded inner payloads, as the fuzzer or a test wrote them
	 */
	std::vector<uint8_t> send_sealed(Exchange ex, uint8_t flags, uint32_t msg_id, uint8_t first,
	                                 std::span<const uint8_t> chain) {
		std::vector<uint8_t> bytes = header_of(ex, flags, msg_id, PayloadType::sk);
		sk_out->seal(bytes, first, chain);
		return exchange(bytes);
	}

	/**
	 * fragment() - one RFC 7383 fragment of request @msg_id, sealed with
	 * this IKE SA's keys (not sent): Fragment Number @number of @total,
	 * carrying @data; @first is the inner chain's first payload type
	 * (fragment 1 only, 0 for the others)
	 */
	std::vector<uint8_t> fragment(uint32_t msg_id, uint16_t number, uint16_t total,
	                              std::span<const uint8_t> data, Exchange ex = Exchange::informational,
	                              uint8_t first = 0, uint8_t flags = kFlagInitiator) const {
		std::vector<uint8_t> bytes = header_of(ex, flags, msg_id, PayloadType::skf);
		sk_out->seal_fragment(bytes, first, number, total, data);
		return bytes;
	}

	/// header_of() - an IKE header of this IKE SA, encoded (kHeaderLen bytes)
	std::vector<uint8_t> header_of(Exchange ex, uint8_t flags, uint32_t msg_id, PayloadType next) const {
		Header h;
		h.spi_i = spi_i;
		h.spi_r = spi_r;
		h.next = next;
		h.exchange = ex;
		h.flags = flags;
		h.message_id = msg_id;
		std::vector<uint8_t> bytes(kHeaderLen);
		encode_header(h, bytes.data());
		return bytes;
	}

	/**
	 * request() - one protected request; return the payloads of the answer
	 * @ex:    the exchange type
	 * @inner: the payloads inside the SK payload
	 * @got:   set to whether an answer came and opened
	 */
	std::vector<Payload> request(Exchange ex, std::span<const Payload> inner, bool* got = nullptr) {
		PayloadType first = PayloadType::none;
		const std::vector<uint8_t> chain = encode_payloads(inner, first);
		const std::vector<uint8_t> answer =
		    send_sealed(ex, kFlagInitiator, next_id++, uint8_t(first), chain);
		std::vector<Payload> out;
		if (got) *got = false;
		Message m;
		if (answer.empty() || !parse_message(answer, m)) return out;
		const SkPayload* sk = m.find<SkPayload>();
		if (!sk) return out;
		std::optional<std::vector<uint8_t>> plain = sk_in->open(answer, sk->offset);
		if (!plain || !parse_payloads(sk->first_inner, *plain, out)) return out;
		if (got) *got = true;
		return out;
	}

	/// auth_payloads() - what auth() sends inside SK (for tests that seal it their own way).
	std::vector<Payload> auth_payloads(std::vector<TrafficSelector> tsi, std::vector<TrafficSelector> tsr,
	                                   uint32_t child_spi) const {
		IdPayload idi{true, id.type, id.data};
		const std::vector<uint8_t> secret(psk.begin(), psk.end());
		AuthPayload a{AuthMethod::psk,
		              psk_auth(suite.prf, secret, init_request, nr, keys.sk_pi, idi.body())};
		const std::vector<EspSuite> esp = default_esp_proposals();
		return {idi, a, esp_offer(esp, child_spi, ChildExchange::ike_auth),
		        TsPayload{true, std::move(tsi)}, TsPayload{false, std::move(tsr)}};
	}

	/// auth() - IKE_AUTH proving the PSK, with a CHILD_SA for @tsi / @tsr.
	std::vector<Payload> auth(std::vector<TrafficSelector> tsi, std::vector<TrafficSelector> tsr,
	                          uint32_t child_spi, bool* got = nullptr) {
		const std::vector<Payload> p = auth_payloads(std::move(tsi), std::move(tsr), child_spi);
		return request(Exchange::ike_auth, p, got);
	}

	/**
	 * rekey_ike() - CREATE_CHILD_SA rekeying this IKE SA (section 2.18)
	 * Return: the answer; when it accepts, this peer goes on with the new
	 * IKE SA (and never deletes the old one, as a hostile peer would not).
	 */
	std::vector<Payload> rekey_ike() {
		DhKeyPair dh(suite.dh);
		const uint64_t new_spi = spi_i + 0x100;
		uint8_t spi[8];
		store_be64(spi, new_spi);
		const std::vector<IkeSuite> one{suite};
		std::vector<uint8_t> n(32);
		random_bytes(n);
		const std::vector<Payload> p{
		    ike_offer(one, spi), NoncePayload{n},
		    KePayload{uint16_t(suite.dh),
		              std::vector<uint8_t>(dh.public_value().begin(), dh.public_value().end())}};
		std::vector<Payload> answer = request(Exchange::create_child_sa, p);
		const SaPayload* sa = nullptr;
		const KePayload* ke = nullptr;
		const NoncePayload* nonce = nullptr;
		for (const Payload& x : answer) {
			if (const auto* v = std::get_if<SaPayload>(&x)) sa = v;
			if (const auto* v = std::get_if<KePayload>(&x)) ke = v;
			if (const auto* v = std::get_if<NoncePayload>(&x)) nonce = v;
		}
		if (!sa || !ke || !nonce || sa->proposals.empty() || sa->proposals[0].spi.size() != 8)
			return answer;
		std::optional<SecretBytes> g_ir = dh.shared_secret(ke->data);
		if (!g_ir) return answer;
		const uint64_t new_r = load_be64(sa->proposals[0].spi.data());
		keys = derive_rekeyed_ike_keys(suite.prf, keys.sk_d, suite, *g_ir, n, nonce->data, new_spi,
		                               new_r);
		spi_i = new_spi;
		spi_r = new_r;
		sk_out = std::make_unique<SkCipher>(suite, keys.sk_ei, keys.sk_ai);
		sk_in = std::make_unique<SkCipher>(suite, keys.sk_er, keys.sk_ar);
		next_id = 0;
		return answer;
	}

	/// new_child() - CREATE_CHILD_SA for a new CHILD_SA with @tsi / @tsr.
	std::vector<Payload> new_child(uint32_t child_spi, std::vector<TrafficSelector> tsi,
	                               std::vector<TrafficSelector> tsr, bool* got = nullptr) {
		const std::vector<EspSuite> esp{default_esp_proposals().front()};
		std::vector<uint8_t> n(32);
		random_bytes(n);
		const std::vector<Payload> p{esp_offer(esp, child_spi, ChildExchange::create_child_sa),
		                             NoncePayload{n}, TsPayload{true, std::move(tsi)},
		                             TsPayload{false, std::move(tsr)}};
		return request(Exchange::create_child_sa, p, got);
	}
};

} // namespace esptun::ike::tools
