// Internals of the IKE engine (engine.hpp), shared by the files that
// implement it (engine*.cpp). Not part of the interface: only they include it.
#pragma once

#include "base/bytes.hpp"
#include "ike/engine.hpp"

#include <algorithm>
#include <cstring>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

namespace esptun::ike {
namespace engine_detail {

using std::chrono::seconds;

constexpr size_t kNonceLen = 32;
/// A responder SA that has not authenticated after this long is dropped.
constexpr seconds kHalfOpenTimeout{30};
/// Requests are sent again after 1, 2, 4, 8, 16 s, then given up (section 2.1).
constexpr int kMaxRetransmits = 5;
/// A liveness check is sent again every quarter interval, this many times.
constexpr int kLivenessRetransmits = 4;
/// Unauthenticated events are logged at most this often (a flood must not fill the log).
constexpr unsigned kLogsPerWindow = 20;
constexpr seconds kLogWindow{10};
/// Backoff before initiating again after a failure: doubles up to the maximum.
constexpr uint32_t kRestartMinS = 2, kRestartMaxS = 60;

enum class RequestKind : uint8_t {
	init,
	auth,
	liveness,
	del_ike,
	del_child,
	rekey_child,
	rekey_ike,
	redirect
};

/// EAP in IKE_AUTH: at most this many EAP round trips (each an IKE_AUTH
/// exchange) before the conversation is given up. EAP-TLS with a long
/// chain in 1 KB fragments needs a few dozen; MSCHAPv2 needs four.
constexpr unsigned kMaxEapRounds = 64;
/// An EAP identity longer than this is refused.
constexpr size_t kMaxEapIdentity = 255;

/// @s seconds less up to 10%: two peers with the same settings rarely rekey
/// at the same moment (collisions are handled, but cost an extra exchange).
inline Clock::duration jittered(uint32_t s) {
	uint8_t r[2];
	random_bytes(r);
	const double f = 0.9 + 0.1 * double(r[0] << 8 | r[1]) / 65535.0;
	return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(s) * f));
}

/// Section 2.8.1 compares nonces as unsigned byte strings, shorter first on a tie.
inline bool nonce_less(std::span<const uint8_t> a, std::span<const uint8_t> b) {
	return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
}

inline bool ct_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
	return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

inline uint64_t random_spi() {
	uint64_t v = 0;
	while (v == 0) {
		uint8_t b[8];
		random_bytes(b);
		std::memcpy(&v, b, 8);
	}
	return v;
}

inline std::vector<uint8_t> random_nonce() {
	std::vector<uint8_t> n(kNonceLen);
	random_bytes(n);
	return n;
}

inline std::vector<uint8_t> be16_bytes(uint16_t v) {
	std::vector<uint8_t> b(2);
	store_be16(b.data(), v);
	return b;
}

inline std::vector<uint8_t> be32_bytes(uint32_t v) {
	std::vector<uint8_t> b(4);
	store_be32(b.data(), v);
	return b;
}

inline std::string hex_spi(uint64_t v, int digits) {
	char buf[24];
	std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
	return buf;
}

inline std::string endpoint_text(const Endpoint& e) {
	return e.addr.family == Family::v6 ? "[" + to_string(e.addr) + "]:" + std::to_string(e.port)
	                                   : to_string(e.addr) + ":" + std::to_string(e.port);
}

/// NAT_DETECTION_*_IP data (section 2.23): SHA-1(SPIi | SPIr | IP | port).
inline std::vector<uint8_t> nat_hash(uint64_t spi_i, uint64_t spi_r, const Endpoint& e) {
	uint8_t buf[8 + 8 + 16 + 2];
	store_be64(buf, spi_i);
	store_be64(buf + 8, spi_r);
	const size_t alen = e.addr.size();
	std::memcpy(buf + 16, e.addr.bytes.data(), alen);
	store_be16(buf + 16 + alen, e.port);
	std::vector<uint8_t> out(SHA_DIGEST_LENGTH);
	unsigned len = 0;
	EVP_Digest(buf, 16 + alen + 2, out.data(), &len, EVP_sha1(), nullptr);
	return out;
}

inline std::string notify_name(uint16_t t) {
	switch (t) {
	case notify::unsupported_critical_payload:
		return "UNSUPPORTED_CRITICAL_PAYLOAD";
	case notify::invalid_ike_spi:
		return "INVALID_IKE_SPI";
	case notify::invalid_major_version:
		return "INVALID_MAJOR_VERSION";
	case notify::invalid_syntax:
		return "INVALID_SYNTAX";
	case notify::invalid_message_id:
		return "INVALID_MESSAGE_ID";
	case notify::invalid_spi:
		return "INVALID_SPI";
	case notify::no_proposal_chosen:
		return "NO_PROPOSAL_CHOSEN";
	case notify::invalid_ke_payload:
		return "INVALID_KE_PAYLOAD";
	case notify::authentication_failed:
		return "AUTHENTICATION_FAILED";
	case notify::single_pair_required:
		return "SINGLE_PAIR_REQUIRED";
	case notify::no_additional_sas:
		return "NO_ADDITIONAL_SAS";
	case notify::internal_address_failure:
		return "INTERNAL_ADDRESS_FAILURE";
	case notify::failed_cp_required:
		return "FAILED_CP_REQUIRED";
	case notify::ts_unacceptable:
		return "TS_UNACCEPTABLE";
	case notify::invalid_selectors:
		return "INVALID_SELECTORS";
	case notify::temporary_failure:
		return "TEMPORARY_FAILURE";
	case notify::child_sa_not_found:
		return "CHILD_SA_NOT_FOUND";
	default:
		return "notify " + std::to_string(t);
	}
}

/// IKE suites in config spelling, for log lines.
inline std::string suites_text(std::span<const IkeSuite> suites) {
	std::string out;
	for (const IkeSuite& s : suites)
		out += (out.empty() ? "" : ", ") + ike_suite_name(s);
	return out;
}

/// The first error notify among @payloads, or nullptr.
inline const NotifyPayload* first_error(const std::vector<Payload>& payloads) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->is_error()) return n;
	return nullptr;
}

template <class T> const T* find_in(const std::vector<Payload>& payloads) {
	for (const Payload& p : payloads)
		if (const T* t = std::get_if<T>(&p)) return t;
	return nullptr;
}

inline const NotifyPayload* find_notify_in(const std::vector<Payload>& payloads, uint16_t type) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->type == type) return n;
	return nullptr;
}

inline const TsPayload* find_ts(const std::vector<Payload>& payloads, bool initiator) {
	for (const Payload& p : payloads)
		if (const auto* t = std::get_if<TsPayload>(&p); t && t->initiator == initiator) return t;
	return nullptr;
}

inline const IdPayload* find_id(const std::vector<Payload>& payloads, bool initiator) {
	for (const Payload& p : payloads)
		if (const auto* t = std::get_if<IdPayload>(&p); t && t->initiator == initiator) return t;
	return nullptr;
}

inline NotifyPayload make_notify(uint16_t type, std::vector<uint8_t> data = {}) {
	NotifyPayload n;
	n.type = type;
	n.data = std::move(data);
	return n;
}

/// CERT payloads (encoding 4) for our certificate and its chain, ours first.
inline std::vector<Payload> cert_payloads(const Credentials& c) {
	std::vector<Payload> out;
	for (const std::vector<uint8_t>& der : c.certs_der())
		out.push_back(RawPayload{PayloadType::cert, false, cert_body(der)});
	return out;
}

inline int compare_addr(const IpAddress& a, const IpAddress& b) {
	return std::memcmp(a.bytes.data(), b.bytes.data(), a.size());
}

/// The last address of @p (host bits all ones).
inline IpAddress last_address(const IpPrefix& p) {
	IpAddress a = p.addr.masked(p.len);
	for (unsigned bit = p.len; bit < a.max_prefix(); bit++)
		a.bytes[bit / 8] |= uint8_t(0x80u >> (bit % 8));
	return a;
}

/// The CP attribute value for @a: IPv4 4 bytes; IPv6 16 bytes and a prefix length (section 3.15.1).
inline CpAttribute address_attribute(const IpAddress& a, bool dns) {
	CpAttribute at;
	if (a.family == Family::v4) {
		at.type = dns ? cp_attr::internal_ip4_dns : cp_attr::internal_ip4_address;
		at.value.assign(a.bytes.begin(), a.bytes.begin() + 4);
	} else {
		at.type = dns ? cp_attr::internal_ip6_dns : cp_attr::internal_ip6_address;
		at.value.assign(a.bytes.begin(), a.bytes.end());
		if (!dns) at.value.push_back(128);
	}
	return at;
}

/// Reads an address attribute back; nullopt for a wrong length (or an empty request).
inline std::optional<IpAddress> attribute_address(const CpAttribute& at) {
	IpAddress a;
	if ((at.type == cp_attr::internal_ip4_address || at.type == cp_attr::internal_ip4_dns) &&
	    at.value.size() == 4) {
		a.family = Family::v4;
		std::copy(at.value.begin(), at.value.end(), a.bytes.begin());
		return a;
	}
	const size_t want = at.type == cp_attr::internal_ip6_address ? 17 : 16;
	if ((at.type == cp_attr::internal_ip6_address || at.type == cp_attr::internal_ip6_dns) &&
	    at.value.size() == want) {
		a.family = Family::v6;
		std::copy(at.value.begin(), at.value.begin() + 16, a.bytes.begin());
		return a;
	}
	return std::nullopt;
}

inline std::string addresses_text(std::span<const IpAddress> as) {
	std::string out;
	for (const IpAddress& a : as)
		out += (out.empty() ? "" : ", ") + to_string(a);
	return out;
}

/// The first few selectors of @ts for a log line (a peer may send 255).
inline std::string selectors_text(std::span<const TrafficSelector> ts) {
	constexpr size_t kShown = 8;
	std::string out;
	for (size_t i = 0; i < ts.size() && i < kShown; i++)
		out += (out.empty() ? "" : ", ") + to_string(ts[i].start) + "-" + to_string(ts[i].end);
	if (ts.size() > kShown) out += ", ... (" + std::to_string(ts.size()) + " in all)";
	return out.empty() ? "(none)" : out;
}

} // namespace engine_detail
using namespace engine_detail;

struct ChildSa {
	uint32_t spi_in = 0, spi_out = 0;
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = false;
	std::optional<DhGroup> pfs; ///< the group of the key exchange that made it (section 1.3.1)
	bool sending = true;        ///< its outbound half is the one in use
	uint32_t successor_in =
	    0; ///< the peer rekeyed it: the new CHILD_SA (inbound SPI) takes over on delete
	Clock::time_point created{};
	bool created_by_us = false;
	uint32_t replaces = 0;       ///< inbound SPI of the CHILD_SA this one rekeyed
	std::vector<uint8_t> ni, nr; ///< nonces of the exchange that made it (section 2.8.1)
	std::vector<TrafficSelector> ts_local, ts_remote;
	Clock::time_point rekey_at{}; ///< when we rekey it; {} = never
	bool rekeying = false;        ///< our CREATE_CHILD_SA for it is under way
	bool deleting = false;        ///< our Delete for it is under way or queued
	bool over_volume = false;     ///< its byte, packet or sequence limit is reached
};

/// @k with our side of the CHILD_SA, @local, for the host's inbound check.
inline ChildKeys with_local(ChildKeys k, std::span<const TrafficSelector> local) {
	k.local_ts.assign(local.begin(), local.end());
	return k;
}

/// The engine's record of a CHILD_SA it just had installed.
inline ChildSa child_record(const ChildKeys& k, bool sending, bool by_us, std::span<const uint8_t> ni,
                            std::span<const uint8_t> nr, std::vector<TrafficSelector> ts_local,
                            std::vector<TrafficSelector> ts_remote, uint32_t rekey_s, Clock::time_point now) {
	ChildSa c;
	c.spi_in = k.spi_in;
	c.spi_out = k.spi_out;
	c.cipher = k.cipher;
	c.esn = k.esn;
	c.sending = sending;
	c.created = now;
	c.created_by_us = by_us;
	c.ni.assign(ni.begin(), ni.end());
	c.nr.assign(nr.begin(), nr.end());
	c.ts_local = std::move(ts_local);
	c.ts_remote = std::move(ts_remote);
	if (rekey_s) c.rekey_at = now + jittered(rekey_s);
	return c;
}

/// One message as it goes on the wire: one datagram, or its fragments (RFC 7383).
using Datagrams = std::vector<std::vector<uint8_t>>;

struct PendingRequest {
	Datagrams datagrams; ///< resent whole on each retransmission (RFC 7383 section 2.6.1)
	uint32_t id = 0;
	RequestKind kind = RequestKind::init;
	int tries = 0;
	Clock::time_point next{};
	seconds interval{1};
	// What a rekey or delete request needs when its answer comes.
	uint32_t old_spi_in = 0, new_spi_in = 0;
	std::vector<uint8_t> nonce;
	std::shared_ptr<DhKeyPair> dh;
	bool ke_retried = false; ///< a CHILD_SA rekey sent again with the group the peer asked for
	uint64_t new_ike_spi = 0;
	std::vector<uint32_t> spis;
};

/// A request just sent: first retransmission after a second (section 2.1).
inline PendingRequest new_request(Datagrams datagrams, uint32_t id, RequestKind kind, Clock::time_point now) {
	PendingRequest r;
	r.datagrams = std::move(datagrams);
	r.id = id;
	r.kind = kind;
	r.next = now + seconds(1);
	return r;
}

/**
 * Reassembly - one message of the peer's being put together from its
 * fragments (RFC 7383 section 2.6). It holds only fragments that verified,
 * and while it holds bytes they are counted in *budget (the engine's total),
 * given back when it is cleared or destroyed with its IKE SA.
 */
struct Reassembly {
	uint32_t id = 0;                             ///< the message ID
	Exchange exchange = Exchange::informational; ///< every fragment's header names the same
	uint16_t total = 0;                          ///< Total Fragments; 0 = no message under way
	uint16_t have = 0;                           ///< fragments held
	PayloadType first = PayloadType::none;       ///< fragment 1's Next Payload
	std::vector<std::vector<uint8_t>> parts;     ///< by Fragment Number - 1
	std::vector<bool> got;
	size_t bytes = 0;
	Clock::time_point started{};
	size_t* budget = nullptr;

	Reassembly() = default;
	Reassembly(const Reassembly&) = delete;
	Reassembly& operator=(const Reassembly&) = delete;
	~Reassembly() { clear(); }
	void clear() noexcept {
		if (budget) *budget -= std::min(*budget, bytes);
		for (std::vector<uint8_t>& p : parts)
			OPENSSL_cleanse(p.data(), p.size());
		parts.clear();
		got.clear();
		bytes = 0;
		total = have = 0;
		first = PayloadType::none;
	}
};

/**
 * EapState - one IKE SA's EAP conversation (RFC 7296 section 2.16), for
 * either role, from the first IKE_AUTH without AUTH until AUTH with the MSK.
 */
struct EapState {
	enum class Stage : uint8_t {
		identity, ///< server: EAP-Identity requested; client: awaiting requests
		method,   ///< the method is under way
		success,  ///< EAP-Success sent or received: AUTH with the MSK comes next
	};
	Stage stage = Stage::identity;
	size_t peer = 0; ///< the policy whose EAP this is (the IKE SA's peer is set only once AUTH verifies)
	uint8_t id = 0;  ///< server: the identifier of our outstanding request
	unsigned rounds = 0;
	std::string identity;               ///< the peer's EAP-Identity (server) or ours (client)
	std::vector<uint8_t> id_body;       ///< the IDi (server) or IDr (client) body AUTH covers
	Identity idi;                       ///< server: the IDi (an instance's remote_id)
	std::vector<Payload> first_request; ///< server: the first IKE_AUTH's SA, TS and CP payloads
	std::unique_ptr<eap::ServerMethod> server;
	std::unique_ptr<eap::PeerMethod> client;
	SecretBytes msk;              ///< after success; wiped when freed
	std::string authenticated_as; ///< server: what the method proved
	std::string refusal;          ///< client: the method's account of the gateway's refusal
	bool refused = false;         ///< server: the method refused the peer (logged, counted)
};

struct Engine::IkeSa {
	enum class State : uint8_t { init_sent, auth_sent, responder_init, established, closed };
	State state = State::init_sent;
	bool initiator = false;
	uint64_t spi_i = 0, spi_r = 0;
	std::optional<size_t> peer;
	/// The peer whose entry of Engine::peer_sas_ lists this SA (index_peer()).
	std::optional<size_t> indexed_peer;
	Endpoint remote;
	Port via = Port::natt;
	IkeSuite suite;
	std::unique_ptr<DhKeyPair> dh;
	std::vector<uint8_t> ni, nr;
	IkeKeys keys;
	std::unique_ptr<SkCipher> sk_in, sk_out;
	std::vector<uint8_t> init_request, init_response; ///< signed by AUTH (section 2.15)
	std::vector<uint8_t> cookie;
	int ke_retries = 0;
	/// Responder: the half-open load (cost units) this SA holds in its
	/// source's share while unauthenticated; 0 once it is not counted.
	size_t half_open_cost = 0;
	std::array<uint8_t, 17> half_open_key{}; ///< its source, as it was counted
	/// Initiator: the last unauthenticated error notify answering our
	/// IKE_SA_INIT (section 2.21.1), named when the wait for a real answer ends.
	uint16_t init_error = 0;
	uint32_t next_id = 0;      ///< message ID of our next request
	uint32_t peer_next_id = 0; ///< message ID we expect in the peer's next request
	Datagrams last_response;   ///< resent whole when the peer retransmits its request
	std::optional<PendingRequest> pending;
	/// The peer sent IKEV2_FRAGMENTATION_SUPPORTED in IKE_SA_INIT (RFC 7383
	/// section 2.3; we always do): large messages go as fragments, and only
	/// then are its fragments accepted. A rekeyed IKE SA keeps it.
	bool frag_peer = false;
	Reassembly frags_request, frags_response; ///< the peer's, one message per direction
	std::vector<ChildSa> children;
	uint32_t reserved_spi = 0;     ///< initiator: inbound SPI offered in IKE_AUTH
	bool rekeyed = false;          ///< a new IKE SA took over; closing it restarts nothing
	Clock::time_point retire_at{}; ///< the peer rekeyed it: closed then if still here
	Clock::time_point created{}, established_at{}, last_heard{};
	Clock::time_point rekey_at{};       ///< when we rekey this IKE SA; {} = never
	std::vector<uint32_t> delete_queue; ///< CHILD_SAs (inbound SPIs) to delete when no request is out
	std::vector<IpAddress> virtual_ips, dns; ///< from the configuration payload exchange
	bool behind_nat = false;                 ///< send NAT keepalives (RFC 3948 section 2.3)
	Clock::time_point next_keepalive{};
	/// The peer's SIGNATURE_HASH_ALGORITHMS from IKE_SA_INIT (RFC 7427 section 4).
	SigHashSet peer_sig_hashes = 0;
	/// How the peer authenticated, for status (IkeSaStatus::peer_auth).
	std::string peer_auth, peer_subject, peer_issuer;
	std::string eap_identity; ///< gateway: who the peer's EAP authenticated
	/// EAP under way in IKE_AUTH (either role); reset once the IKE SA is up.
	std::unique_ptr<EapState> eap;
	uint32_t child_rekeys = 0, ike_rekeys = 0;
	// IKE Redirect (RFC 5685, engine_redirect.cpp).
	/// Responder: the initiator announced REDIRECT_SUPPORTED (a rekeyed IKE SA keeps it).
	bool redirect_supported = false;
	/// Initiator: we were sent here by the gateway at this address
	/// (REDIRECTED_FROM in our IKE_SA_INIT).
	std::optional<Endpoint> redirected_from;
	/// Gateway: we sent this client elsewhere; if it has not deleted the
	/// IKE SA by then, we do.
	Clock::time_point redirect_deadline{};

	uint64_t our_spi() const noexcept { return initiator ? spi_i : spi_r; }
};

} // namespace esptun::ike
