// The engine's debug lines (`-v`): one per IKE message received, sent or
// dropped, with its exchange, message ID, SPIs, payload types, peer and
// size. They name payloads and never print their contents, so no key,
// nonce, KE value, AUTH value or identity data reaches the log.
//
// Anyone can send IKE messages, so the lines they cause draw on a budget
// (LogBudget): messages that did not authenticate share a small one, those
// an IKE SA's keys verified a larger one. What is held back is counted and
// reported in one line at most every ten seconds.
#include "ike/engine_internal.hpp"

namespace esptun::ike {
using namespace engine_detail;

namespace {

std::string exchange_label(Exchange e) {
	switch (e) {
	case Exchange::ike_sa_init:
		return "IKE_SA_INIT";
	case Exchange::ike_auth:
		return "IKE_AUTH";
	case Exchange::create_child_sa:
		return "CREATE_CHILD_SA";
	case Exchange::informational:
		return "INFORMATIONAL";
	}
	return "exchange " + std::to_string(unsigned(e));
}

/// Status notifies (section 3.10.1) that notify_name() leaves as numbers.
std::string notify_label(uint16_t t) {
	switch (t) {
	case notify::initial_contact:
		return "INITIAL_CONTACT";
	case notify::set_window_size:
		return "SET_WINDOW_SIZE";
	case notify::additional_ts_possible:
		return "ADDITIONAL_TS_POSSIBLE";
	case notify::ipcomp_supported:
		return "IPCOMP_SUPPORTED";
	case notify::nat_detection_source_ip:
		return "NAT_DETECTION_SOURCE_IP";
	case notify::nat_detection_destination_ip:
		return "NAT_DETECTION_DESTINATION_IP";
	case notify::cookie:
		return "COOKIE";
	case notify::use_transport_mode:
		return "USE_TRANSPORT_MODE";
	case notify::rekey_sa:
		return "REKEY_SA";
	case notify::esp_tfc_padding_not_supported:
		return "ESP_TFC_PADDING_NOT_SUPPORTED";
	case notify::non_first_fragments_also:
		return "NON_FIRST_FRAGMENTS_ALSO";
	case notify::mobike_supported:
		return "MOBIKE_SUPPORTED";
	case notify::redirect_supported:
		return "REDIR_SUP";
	case notify::redirect:
		return "REDIR";
	case notify::redirected_from:
		return "REDIR_FROM";
	case notify::ikev2_fragmentation_supported:
		return "FRAG_SUP";
	case notify::signature_hash_algorithms:
		return "SIGNATURE_HASH_ALGORITHMS";
	default:
		return notify_name(t);
	}
}

/// One payload's name in strongSwan's short spelling (SA, KE, No, N(...)).
std::string payload_label(const Payload& p) {
	if (const auto* n = std::get_if<NotifyPayload>(&p)) return "N(" + notify_label(n->type) + ")";
	switch (payload_type(p)) {
	case PayloadType::sa:
		return "SA";
	case PayloadType::ke:
		return "KE";
	case PayloadType::idi:
		return "IDi";
	case PayloadType::idr:
		return "IDr";
	case PayloadType::cert:
		return "CERT";
	case PayloadType::certreq:
		return "CERTREQ";
	case PayloadType::auth:
		return "AUTH";
	case PayloadType::nonce:
		return "No";
	case PayloadType::del:
		return "D";
	case PayloadType::vendor:
		return "V";
	case PayloadType::tsi:
		return "TSi";
	case PayloadType::tsr:
		return "TSr";
	case PayloadType::sk:
		return "SK";
	case PayloadType::cp:
		return "CP";
	case PayloadType::eap:
		return "EAP";
	case PayloadType::skf:
		return "SKF";
	case PayloadType::notify:
	case PayloadType::none:
		break;
	}
	return "payload " + std::to_string(unsigned(payload_type(p)));
}

/// "IKE_AUTH request #1, SPIs 0123456789abcdef/fedcba9876543210, 312 bytes: [IDi AUTH SA TSi TSr]"
std::string message_label(const Header& h, size_t size, std::span<const Payload> payloads) {
	std::string s = exchange_label(h.exchange);
	s += h.is_response() ? " response #" : " request #";
	s += std::to_string(h.message_id) + ", SPIs " + hex_spi(h.spi_i, 16) + "/" + hex_spi(h.spi_r, 16) +
	     ", " + std::to_string(size) + " bytes: [";
	for (size_t i = 0; i < payloads.size(); i++)
		s += (i ? " " : "") + payload_label(payloads[i]);
	return s + "]";
}

} // namespace

/**
 * debug_allowed() - whether one more debug line may be written now
 * @authenticated: the message authenticated (or is ours to an IKE SA with keys)
 *
 * Writes the "held back" line of either budget when one is due, so the
 * count reaches the log even while the flood goes on.
 */
bool Engine::debug_allowed(bool authenticated) {
	if (!host_.debug_enabled()) return false;
	const Clock::time_point now = Clock::now();
	for (auto* b : {&debug_unauthenticated_, &debug_authenticated_})
		if (uint64_t n = b->report_due(now))
			host_.log_at(LogLevel::debug, "(" + std::to_string(n) + " IKE debug lines about " +
			                                  (b == &debug_unauthenticated_ ? "unauthenticated"
			                                                                : "authenticated") +
			                                  " messages held back)");
	return (authenticated ? debug_authenticated_ : debug_unauthenticated_).take(now);
}

/// debug_received_plain() - an unprotected message (IKE_SA_INIT), parsed but not yet acted on.
void Engine::debug_received_plain(const Endpoint& from, size_t size, const Message& m) {
	if (!debug_allowed(false)) return;
	host_.log_at(LogLevel::debug, "received " + message_label(m.header, size, m.payloads) + " from " +
	                                  endpoint_text(from));
}

/// debug_received() - a message whose SK payload verified, with its inner payloads.
void Engine::debug_received(const IkeSa& sa, size_t size, const Header& h, std::span<const Payload> inner) {
	if (!debug_allowed(true)) return;
	host_.log_at(LogLevel::debug, peer_label(sa) + ": received " + message_label(h, size, inner) +
	                                  " from " + endpoint_text(sa.remote));
}

/// debug_dropped() - a message dropped before it authenticated, and why.
void Engine::debug_dropped(const Endpoint& from, std::span<const uint8_t> msg, const char* why) {
	if (!debug_allowed(false)) return;
	Header h;
	std::string what = "IKE message";
	// parse_header() fills every field before it checks them: the header
	// as sent, whatever is wrong with the rest.
	if (msg.size() >= kHeaderLen) {
		(void)parse_header(msg, h);
		what = exchange_label(h.exchange) + (h.is_response() ? " response #" : " request #") +
		       std::to_string(h.message_id) + ", SPIs " + hex_spi(h.spi_i, 16) + "/" +
		       hex_spi(h.spi_r, 16) + ",";
	}
	host_.log_at(LogLevel::debug, "dropped " + what + " " + std::to_string(msg.size()) + " bytes from " +
	                                  endpoint_text(from) + ": " + why);
}

/**
 * debug_sent() - a message we sent
 * @sa:    its IKE SA; null for an answer that creates none (a cookie demand,
 *         INVALID_KE_PAYLOAD, NO_PROPOSAL_CHOSEN to an unknown initiator)
 * @inner: the payloads inside SK when we just sealed them; empty: the
 *         message's own unprotected payloads are named (parsed from @bytes)
 * @what:  "sent", or "sent again" for a retransmission
 */
void Engine::debug_sent(const IkeSa* sa, const Endpoint& to, std::span<const uint8_t> bytes,
                        std::span<const Payload> inner, const char* what) {
	// Ours to start (we initiated the IKE SA) or answering what verified:
	// the larger budget. Answers to unauthenticated initiators: the small one.
	const bool authenticated =
	    sa && (sa->initiator || (sa->sk_in && sa->state != IkeSa::State::responder_init));
	if (!debug_allowed(authenticated)) return;
	Message m;
	if (!parse_message(bytes, m)) return; // ours: cannot happen, but a debug line is not worth a throw
	std::span<const Payload> shown = inner.empty() ? std::span<const Payload>(m.payloads) : inner;
	host_.log_at(LogLevel::debug, (sa ? peer_label(*sa) + ": " : std::string()) + what + " " +
	                                  message_label(m.header, bytes.size(), shown) + " to " +
	                                  endpoint_text(to));
}

} // namespace esptun::ike
