// IKEv2 message fragmentation (RFC 7383): an encrypted message longer than
// the path takes leaves as Encrypted Fragment (SKF) payloads, and the
// peer's fragments are put back together. Sits between the engine's
// exchanges and Host::send() / Engine::receive() (see engine.cpp).
//
// Theory of operation:
//   1. Negotiation (section 2.3, engine_init.cpp): both IKE_SA_INIT messages
//      carry IKEV2_FRAGMENTATION_SUPPORTED; IkeSa::frag_peer records the peer's.
//   2. Sending: seal_message() seals one SK message, or, when the peer
//      supports fragments and the message would exceed the fragment size,
//      cuts the encoded inner chain into pieces, each sealed in its own SKF
//      payload with its own IV and ICV (section 2.5). Retransmissions and
//      answers to retransmitted requests resend every fragment (2.6.1).
//   3. Receiving: reassemble() authenticates each fragment before anything
//      of it is kept or believed (2.6), checks Fragment Number and Total
//      Fragments, and holds at most one message per direction and IKE SA,
//      within kMaxFragments, kMaxReassemblyBytes per IKE SA and
//      kMaxReassemblyTotal for the engine. The last fragment hands the
//      whole inner chain back to receive_message(), as if it had come in
//      one SK payload.
#include "ike/engine_internal.hpp"

namespace esptun::ike {

namespace {
constexpr size_t kIpv4HeaderLen = 20, kIpv6HeaderLen = 40, kUdpHeaderLen = 8;
constexpr size_t kNonEspMarkerLen = 4; ///< RFC 3948 section 2.2, on the NAT-T port
} // namespace

/**
 * datagram_limit() - the longest IKE message (UDP payload) @sa may send in
 * one piece: the peer's fragment size less the IP and UDP headers and the
 * non-ESP marker. Before IKE_AUTH names the peer, the default size.
 */
size_t Engine::datagram_limit(const IkeSa& sa) const {
	const size_t size = sa.peer ? peers_[*sa.peer].fragment_size : kDefaultFragmentSize;
	const size_t headers = (sa.remote.addr.family == Family::v6 ? kIpv6HeaderLen : kIpv4HeaderLen) +
	                       kUdpHeaderLen + (sa.via == Port::natt ? kNonEspMarkerLen : 0);
	return size > headers ? size - headers : 0;
}

/**
 * seal_message() - @inner under @h as the datagrams to send
 * @sa:    an IKE SA with keys
 * @h:     the header (next payload and length are filled in here)
 * @inner: the payloads to protect
 *
 * One SK message, unless the peer takes fragments and that message would be
 * longer than datagram_limit(): then fragments 1..n of the encoded chain,
 * each filling the limit but the last, fragment 1 naming the first inner
 * payload (section 2.5). IKE_SA_INIT is never fragmented (it is not encrypted).
 * Throws like SkCipher::seal().
 */
Datagrams Engine::seal_message(IkeSa& sa, Header h, std::span<const Payload> inner) {
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(inner, first);
	const size_t limit = datagram_limit(sa);
	Datagrams out;
	if (!sa.frag_peer || h.exchange == Exchange::ike_sa_init ||
	    kHeaderLen + sa.sk_out->overhead(chain.size()) + chain.size() <= limit) {
		h.next = PayloadType::sk;
		std::vector<uint8_t> bytes(kHeaderLen);
		encode_header(h, bytes.data());
		sa.sk_out->seal(bytes, uint8_t(first), chain);
		out.push_back(std::move(bytes));
		return out;
	}
	const size_t piece = sa.sk_out->fragment_capacity(limit > kHeaderLen ? limit - kHeaderLen : 0);
	const size_t n = piece ? (chain.size() + piece - 1) / piece : 0;
	if (n == 0 || n > 0xffff) throw std::length_error("fragment size too small for this message");
	h.next = PayloadType::skf;
	out.reserve(n);
	for (size_t i = 0; i < n; i++) {
		const auto part =
		    std::span(chain).subspan(i * piece, std::min(piece, chain.size() - i * piece));
		std::vector<uint8_t> bytes(kHeaderLen);
		encode_header(h, bytes.data());
		sa.sk_out->seal_fragment(bytes, i == 0 ? uint8_t(first) : 0, uint16_t(i + 1), uint16_t(n),
		                         part);
		out.push_back(std::move(bytes));
	}
	return out;
}

/**
 * transmit() - send every datagram of one message to the peer
 * @inner: the payloads they carry, for the debug line (empty: named from the message)
 * @what:  "sent", or "sent again (...)"
 *
 * One debug line per message: a fragmented one is named by its first
 * fragment, with the count.
 */
void Engine::transmit(IkeSa& sa, const Datagrams& datagrams, std::span<const Payload> inner,
                      const char* what) {
	if (datagrams.empty()) return;
	if (datagrams.size() == 1) {
		debug_sent(&sa, sa.remote, datagrams.front(), inner, what);
	} else {
		const std::string label =
		    std::string(what) + " in " + std::to_string(datagrams.size()) + " fragments";
		debug_sent(&sa, sa.remote, datagrams.front(), inner, label.c_str());
	}
	for (const std::vector<uint8_t>& d : datagrams) {
		host_.send(sa.via, sa.remote, d);
		counters_.sent++;
		if (datagrams.size() > 1) counters_.fragments_sent++;
	}
}

/**
 * reassemble() - one received fragment (an SKF payload ends @msg)
 * @sa:                   its IKE SA (the message ID is already in the window)
 * @from, @msg, @skf, @h: the message as received and parsed
 * @retransmitted_request: a fragment of the request we answered last
 * @now:                  the time
 * @first:                set to the first inner payload type with the result
 *
 * Return: the whole inner chain once the last fragment arrived; nullopt
 * while fragments are missing and for every fragment dropped (counted).
 * Section 2.6: the ICV is checked first, so nothing unauthenticated is ever
 * stored or acted on; a larger Total Fragments restarts the reassembly, a
 * smaller one is dropped. A retransmitted request is answered again, all
 * fragments, on its fragment 1 only (2.6.1: not once per fragment).
 */
std::optional<std::vector<uint8_t>> Engine::reassemble(IkeSa& sa, const Endpoint& from,
                                                       std::span<const uint8_t> msg, const RawPayload& skf,
                                                       const Header& h, bool retransmitted_request,
                                                       Clock::time_point now, PayloadType& first) {
	if (skf.body.size() < SkCipher::kFragmentFieldsLen) {
		counters_.malformed++;
		debug_dropped(from, msg, "an SKF payload too short for its fields");
		return std::nullopt;
	}
	// The SKF payload runs to the end of the message (parse_message() checked).
	const size_t offset = msg.size() - kGenericHeaderLen - skf.body.size();
	std::optional<std::vector<uint8_t>> piece = sa.sk_in->open_fragment(msg, offset);
	if (!piece) {
		counters_.bad_icv++;
		debug_dropped(from, msg, "the SKF payload's ICV did not verify");
		return std::nullopt;
	}
	const uint16_t number = load_be16(skf.body.data());
	const uint16_t total = load_be16(skf.body.data() + 2);
	auto drop = [&](const char* why) {
		counters_.fragments_dropped++;
		debug_dropped(from, msg, why);
		OPENSSL_cleanse(piece->data(), piece->size());
		return std::nullopt;
	};
	if (!sa.frag_peer) return drop("a fragment from a peer that did not announce fragmentation");
	if (number == 0 || number > total) return drop("a Fragment Number outside 1..Total Fragments");
	if (total > kMaxFragments) return drop("more Total Fragments than we reassemble");
	if (retransmitted_request) {
		if (number == 1 && !sa.last_response.empty())
			transmit(sa, sa.last_response, {}, "sent again (a retransmitted request)");
		return std::nullopt;
	}
	Reassembly& r = h.is_response() ? sa.frags_response : sa.frags_request;
	if (r.total && (r.id != h.message_id || total > r.total)) {
		// Another message began (the last one's ID is out of the window
		// now), or the peer cut the same one smaller: start over with this.
		counters_.reassembly_abandoned++;
		r.clear();
	}
	if (r.total && total < r.total) return drop("fewer Total Fragments than earlier fragments said");
	if (r.total && h.exchange != r.exchange) return drop("a fragment of another exchange type");
	if (!r.total) {
		r.id = h.message_id;
		r.exchange = h.exchange;
		r.total = total;
		r.parts.assign(total, {});
		r.got.assign(total, false);
		r.started = now;
		r.budget = &reassembly_bytes_;
	}
	if (r.got[number - 1]) return drop("a fragment we already hold");
	if (sa.frags_request.bytes + sa.frags_response.bytes + piece->size() > kMaxReassemblyBytes) {
		// This message can never complete within the bound: give it up.
		counters_.reassembly_abandoned++;
		r.clear();
		return drop("fragments past the reassembly bound of the IKE SA");
	}
	if (reassembly_bytes_ + piece->size() > kMaxReassemblyTotal)
		return drop("fragments past the reassembly bound of all IKE SAs");
	r.bytes += piece->size();
	reassembly_bytes_ += piece->size();
	r.parts[number - 1] = std::move(*piece);
	r.got[number - 1] = true;
	r.have++;
	counters_.fragments_received++;
	if (number == 1) r.first = skf.first_inner; // section 2.5: the others carry none
	if (r.have < r.total) return std::nullopt;

	std::vector<uint8_t> whole;
	whole.reserve(r.bytes);
	for (const std::vector<uint8_t>& p : r.parts)
		whole.insert(whole.end(), p.begin(), p.end());
	first = r.first;
	r.clear();
	return whole;
}

/// expire_reassembly() - give up messages whose fragments stopped coming (kReassemblyTimeout).
void Engine::expire_reassembly(IkeSa& sa, Clock::time_point now) {
	for (Reassembly* r : {&sa.frags_request, &sa.frags_response}) {
		if (r->total && now - r->started >= kReassemblyTimeout) {
			counters_.reassembly_abandoned++;
			r->clear();
		}
	}
}

} // namespace esptun::ike
