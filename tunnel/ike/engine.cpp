// The IKEv2 engine: see engine.hpp for the exchanges and their order.
#include "tunnel/ike/engine.hpp"

#include "tunnel/bytes.hpp"

#include <algorithm>
#include <cstring>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

namespace esptun::ike {
namespace {

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

enum class RequestKind : uint8_t { init, auth, liveness, del_ike, del_child, rekey_child, rekey_ike };

/// @s seconds less up to 10%: two peers with the same settings rarely rekey
/// at the same moment (collisions are handled, but cost an extra exchange).
Clock::duration jittered(uint32_t s) {
	uint8_t r[2];
	random_bytes(r);
	const double f = 0.9 + 0.1 * double(r[0] << 8 | r[1]) / 65535.0;
	return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(s) * f));
}

/// Section 2.8.1 compares nonces as unsigned byte strings, shorter first on a tie.
bool nonce_less(std::span<const uint8_t> a, std::span<const uint8_t> b) {
	return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
}

bool ct_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
	return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

uint64_t random_spi() {
	uint64_t v = 0;
	while (v == 0) {
		uint8_t b[8];
		random_bytes(b);
		std::memcpy(&v, b, 8);
	}
	return v;
}

std::vector<uint8_t> random_nonce() {
	std::vector<uint8_t> n(kNonceLen);
	random_bytes(n);
	return n;
}

std::vector<uint8_t> be16_bytes(uint16_t v) {
	std::vector<uint8_t> b(2);
	store_be16(b.data(), v);
	return b;
}

std::vector<uint8_t> be32_bytes(uint32_t v) {
	std::vector<uint8_t> b(4);
	store_be32(b.data(), v);
	return b;
}

std::string hex_spi(uint64_t v, int digits) {
	char buf[24];
	std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
	return buf;
}

std::string endpoint_text(const Endpoint& e) {
	return e.addr.family == Family::v6 ? "[" + to_string(e.addr) + "]:" + std::to_string(e.port)
	                                   : to_string(e.addr) + ":" + std::to_string(e.port);
}

/// NAT_DETECTION_*_IP data (section 2.23): SHA-1(SPIi | SPIr | IP | port).
std::vector<uint8_t> nat_hash(uint64_t spi_i, uint64_t spi_r, const Endpoint& e) {
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

std::string notify_name(uint16_t t) {
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

/// The first error notify among @payloads, or nullptr.
const NotifyPayload* first_error(const std::vector<Payload>& payloads) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->is_error()) return n;
	return nullptr;
}

template <class T> const T* find_in(const std::vector<Payload>& payloads) {
	for (const Payload& p : payloads)
		if (const T* t = std::get_if<T>(&p)) return t;
	return nullptr;
}

const NotifyPayload* find_notify_in(const std::vector<Payload>& payloads, uint16_t type) {
	for (const Payload& p : payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p); n && n->type == type) return n;
	return nullptr;
}

const TsPayload* find_ts(const std::vector<Payload>& payloads, bool initiator) {
	for (const Payload& p : payloads)
		if (const auto* t = std::get_if<TsPayload>(&p); t && t->initiator == initiator) return t;
	return nullptr;
}

const IdPayload* find_id(const std::vector<Payload>& payloads, bool initiator) {
	for (const Payload& p : payloads)
		if (const auto* t = std::get_if<IdPayload>(&p); t && t->initiator == initiator) return t;
	return nullptr;
}

NotifyPayload make_notify(uint16_t type, std::vector<uint8_t> data = {}) {
	NotifyPayload n;
	n.type = type;
	n.data = std::move(data);
	return n;
}

int compare_addr(const IpAddress& a, const IpAddress& b) {
	return std::memcmp(a.bytes.data(), b.bytes.data(), a.size());
}

/// The last address of @p (host bits all ones).
IpAddress last_address(const IpPrefix& p) {
	IpAddress a = p.addr.masked(p.len);
	for (unsigned bit = p.len; bit < a.max_prefix(); bit++)
		a.bytes[bit / 8] |= uint8_t(0x80u >> (bit % 8));
	return a;
}

/// The CP attribute value for @a: IPv4 4 bytes; IPv6 16 bytes and a prefix length (section 3.15.1).
CpAttribute address_attribute(const IpAddress& a, bool dns) {
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
std::optional<IpAddress> attribute_address(const CpAttribute& at) {
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

std::string addresses_text(std::span<const IpAddress> as) {
	std::string out;
	for (const IpAddress& a : as)
		out += (out.empty() ? "" : ", ") + to_string(a);
	return out;
}

std::string selectors_text(std::span<const TrafficSelector> ts) {
	std::string out;
	for (const TrafficSelector& t : ts)
		out += (out.empty() ? "" : ", ") + to_string(t.start) + "-" + to_string(t.end);
	return out.empty() ? "(none)" : out;
}

} // namespace

struct ChildSa {
	uint32_t spi_in = 0, spi_out = 0;
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = false;
	bool sending = true; ///< its outbound half is the one in use
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
};

PendingRequest new_request(std::vector<uint8_t> bytes, uint32_t id, RequestKind kind, Clock::time_point now);

/// The engine's record of a CHILD_SA it just had installed.
ChildSa child_record(const ChildKeys& k, bool sending, bool by_us, std::span<const uint8_t> ni,
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

struct PendingRequest {
	std::vector<uint8_t> bytes;
	uint32_t id = 0;
	RequestKind kind = RequestKind::init;
	int tries = 0;
	Clock::time_point next{};
	seconds interval{1};
	// What a rekey or delete request needs when its answer comes.
	uint32_t old_spi_in = 0, new_spi_in = 0;
	std::vector<uint8_t> nonce;
	std::shared_ptr<DhKeyPair> dh;
	uint64_t new_ike_spi = 0;
	std::vector<uint32_t> spis;
};

/// A request just sent: first retransmission after a second (section 2.1).
PendingRequest new_request(std::vector<uint8_t> bytes, uint32_t id, RequestKind kind, Clock::time_point now) {
	PendingRequest r;
	r.bytes = std::move(bytes);
	r.id = id;
	r.kind = kind;
	r.next = now + seconds(1);
	return r;
}

struct Engine::IkeSa {
	enum class State : uint8_t { init_sent, auth_sent, responder_init, established, closed };
	State state = State::init_sent;
	bool initiator = false;
	uint64_t spi_i = 0, spi_r = 0;
	std::optional<size_t> peer;
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
	uint32_t next_id = 0;      ///< message ID of our next request
	uint32_t peer_next_id = 0; ///< message ID we expect in the peer's next request
	std::vector<uint8_t> last_response;
	std::optional<PendingRequest> pending;
	std::vector<ChildSa> children;
	uint32_t reserved_spi = 0; ///< initiator: inbound SPI offered in IKE_AUTH
	bool rekeyed = false;      ///< a new IKE SA took over; closing it restarts nothing
	Clock::time_point created{}, established_at{}, last_heard{};
	Clock::time_point rekey_at{};       ///< when we rekey this IKE SA; {} = never
	std::vector<uint32_t> delete_queue; ///< CHILD_SAs (inbound SPIs) to delete when no request is out
	std::vector<IpAddress> virtual_ips, dns; ///< from the configuration payload exchange
	bool behind_nat = false;                 ///< send NAT keepalives (RFC 3948 section 2.3)
	Clock::time_point next_keepalive{};
	uint32_t child_rekeys = 0, ike_rekeys = 0;

	uint64_t our_spi() const noexcept { return initiator ? spi_i : spi_r; }
};

std::optional<Identity> parse_identity(std::string_view text) {
	if (text.empty()) return std::nullopt;
	Identity id;
	if (auto ip = parse_ip(text)) {
		id.type = ip->family == Family::v4 ? IdType::ipv4 : IdType::ipv6;
		id.data.assign(ip->bytes.begin(), ip->bytes.begin() + long(ip->size()));
		return id;
	}
	if (text.front() == '@') {
		text.remove_prefix(1);
		if (text.empty()) return std::nullopt;
		id.type = IdType::fqdn;
	} else {
		id.type = text.find('@') != std::string_view::npos ? IdType::rfc822 : IdType::fqdn;
	}
	id.data.assign(text.begin(), text.end());
	return id;
}

std::string identity_text(const Identity& id) {
	if ((id.type == IdType::ipv4 && id.data.size() == 4) ||
	    (id.type == IdType::ipv6 && id.data.size() == 16)) {
		IpAddress a;
		a.family = id.type == IdType::ipv4 ? Family::v4 : Family::v6;
		std::copy(id.data.begin(), id.data.end(), a.bytes.begin());
		return to_string(a);
	}
	std::string s;
	for (uint8_t c : id.data)
		s += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
	return s;
}

TrafficSelector selector_of(const IpPrefix& p) {
	TrafficSelector t;
	t.start = p.addr.masked(p.len);
	t.end = last_address(p);
	return t;
}

std::vector<TrafficSelector> narrow(std::span<const TrafficSelector> offered,
                                    std::span<const IpPrefix> allowed) {
	std::vector<TrafficSelector> out;
	for (const TrafficSelector& o : offered) {
		for (const IpPrefix& p : allowed) {
			if (p.addr.family != o.start.family || o.end.family != o.start.family) continue;
			const TrafficSelector a = selector_of(p);
			TrafficSelector cut = o;
			if (compare_addr(a.start, cut.start) > 0) cut.start = a.start;
			if (compare_addr(a.end, cut.end) < 0) cut.end = a.end;
			if (compare_addr(cut.start, cut.end) > 0) continue;
			if (std::find(out.begin(), out.end(), cut) == out.end()) out.push_back(cut);
		}
	}
	return out;
}

Engine::Engine(std::vector<PeerPolicy> peers, Host& host)
    : peers_(std::move(peers)), host_(host), restart_at_(peers_.size()),
      restart_backoff_s_(peers_.size(), kRestartMinS), cookie_secret_(32) {
	random_bytes(cookie_secret_);
	for (const PeerPolicy& p : peers_)
		for (const IkeSuite& s : p.ike_proposals)
			if (std::find(responder_suites_.begin(), responder_suites_.end(), s) ==
			    responder_suites_.end())
				responder_suites_.push_back(s);
}

Engine::~Engine() = default;

std::string Engine::peer_label(const IkeSa& sa) const {
	if (sa.peer) return "peer " + peers_[*sa.peer].name;
	return "IKE from " + endpoint_text(sa.remote);
}

void Engine::log_limited(const std::string& line) {
	const Clock::time_point now = Clock::now();
	if (now - log_window_ >= kLogWindow) {
		if (counters_.logs_suppressed && logs_in_window_ >= kLogsPerWindow)
			host_.log("(IKE log lines held back so far: " +
			          std::to_string(counters_.logs_suppressed) + ")");
		log_window_ = now;
		logs_in_window_ = 0;
	}
	if (logs_in_window_++ < kLogsPerWindow)
		host_.log(line);
	else
		counters_.logs_suppressed++;
}

Engine::IkeSa* Engine::find(uint64_t our_spi) noexcept {
	auto it = sas_.find(our_spi);
	return it == sas_.end() || it->second->state == IkeSa::State::closed ? nullptr : it->second.get();
}

void Engine::start(Clock::time_point now) {
	for (size_t i = 0; i < peers_.size(); i++)
		if (peers_[i].initiate && peers_[i].endpoint) initiate(i, now);
}

// ---- receiving -------------------------------------------------------------

void Engine::receive(Port via, const Endpoint& from, std::span<const uint8_t> msg, Clock::time_point now) {
	counters_.received++;
	Message m;
	if (!parse_message(msg, m)) {
		counters_.malformed++;
		return;
	}
	const Header& h = m.header;
	if (h.exchange == Exchange::ike_sa_init) {
		if (!h.is_response()) {
			if (!h.from_initiator() || h.spi_r != 0 || h.message_id != 0) {
				counters_.malformed++;
				return;
			}
			handle_init_request(via, from, msg, m, now);
		} else {
			IkeSa* sa = find(h.spi_i);
			// A notify-only answer (COOKIE, INVALID_KE_PAYLOAD, an error) has no responder SPI.
			if (!sa || !sa->initiator || sa->state != IkeSa::State::init_sent) {
				counters_.unknown_sa++;
				return;
			}
			handle_init_response(*sa, msg, m, now);
		}
		sweep();
		return;
	}

	// Every later exchange is protected by the SK payload of a known IKE SA.
	const uint64_t our_spi = h.from_initiator() ? h.spi_r : h.spi_i;
	IkeSa* sa = find(our_spi);
	if (!sa || sa->spi_i != h.spi_i || sa->spi_r != h.spi_r || sa->initiator == h.from_initiator() ||
	    !sa->sk_in || sa->state == IkeSa::State::init_sent) {
		counters_.unknown_sa++;
		return;
	}
	const SkPayload* sk = m.find<SkPayload>();
	if (!sk) {
		counters_.malformed++;
		return;
	}
	const bool retransmitted_request =
	    !h.is_response() && sa->peer_next_id > 0 && h.message_id == sa->peer_next_id - 1;
	if (h.is_response() ? (!sa->pending || h.message_id != sa->pending->id)
	                    : (h.message_id != sa->peer_next_id && !retransmitted_request)) {
		counters_.unknown_sa++; // a stale or out-of-window message ID (section 2.3)
		return;
	}
	std::optional<std::vector<uint8_t>> plain = sa->sk_in->open(msg, sk->offset);
	if (!plain) {
		counters_.bad_icv++;
		return;
	}
	if (retransmitted_request) {
		// The peer did not get our answer: the same answer again (section 2.1).
		if (!sa->last_response.empty()) {
			host_.send(sa->via, sa->remote, sa->last_response);
			counters_.sent++;
		}
		return;
	}
	std::vector<Payload> inner;
	if (!parse_payloads(sk->first_inner, *plain, inner)) {
		counters_.malformed++;
		if (!h.is_response()) {
			sa->peer_next_id++;
			NotifyPayload n = make_notify(notify::invalid_syntax);
			const Payload p[] = {n};
			send_response(*sa, h, p);
		}
		return;
	}
	sa->last_heard = now;
	// An authenticated message from a new address: the peer moved, or a NAT
	// in between did (section 2.23); follow it.
	if (!(from == sa->remote) || via != sa->via) {
		const bool moved =
		    !(from == sa->remote) && sa->state == IkeSa::State::established && sa->peer;
		sa->remote = from;
		sa->via = via;
		if (moved && via == Port::natt) host_.peer_moved(*sa->peer, from);
	}
	if (h.is_response()) {
		handle_response(*sa, inner, now);
	} else {
		sa->peer_next_id++;
		switch (h.exchange) {
		case Exchange::ike_auth:
			if (sa->state == IkeSa::State::responder_init)
				handle_auth_request(*sa, msg, inner, now);
			else
				counters_.malformed++;
			break;
		case Exchange::informational:
			handle_informational_request(*sa, inner, now);
			break;
		case Exchange::create_child_sa:
			handle_create_child_request(*sa, inner, now);
			break;
		default:
			counters_.malformed++;
			break;
		}
	}
	sweep();
}

void Engine::handle_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	PendingRequest req = std::move(*sa.pending);
	sa.pending.reset();
	switch (req.kind) {
	case RequestKind::auth:
		handle_auth_response(sa, inner, now);
		break;
	case RequestKind::liveness:
		break; // any authenticated answer proves the peer is alive
	case RequestKind::del_ike:
		close(sa, "deleted", false, now);
		break;
	case RequestKind::del_child:
		handle_delete_child_response(sa, req);
		break;
	case RequestKind::rekey_child:
		handle_rekey_child_response(sa, req, inner, now);
		break;
	case RequestKind::rekey_ike:
		handle_rekey_ike_response(sa, req, inner, now);
		break;
	case RequestKind::init:
		break;
	}
	if (sa.state == IkeSa::State::established) send_child_deletes(sa, now);
}

// ---- IKE_SA_INIT -----------------------------------------------------------

std::vector<uint8_t> Engine::cookie_for(const Endpoint& from, uint64_t spi_i,
                                        std::span<const uint8_t> ni) const {
	// Section 2.6: Cookie = <VersionIDofSecret> | Hash(Ni | IPi | SPIi | <secret>);
	// the secret is per process, so a restart invalidates old cookies.
	std::vector<uint8_t> data(ni.begin(), ni.end());
	data.insert(data.end(), from.addr.bytes.begin(), from.addr.bytes.begin() + long(from.addr.size()));
	uint8_t b[10];
	store_be16(b, from.port);
	store_be64(b + 2, spi_i);
	data.insert(data.end(), b, b + sizeof b);
	return prf(PrfId::hmac_sha256, cookie_secret_, data);
}

std::vector<Payload> Engine::nat_detection(uint64_t spi_i, uint64_t spi_r, Port via, const Endpoint& remote) {
	// esptun carries ESP in UDP only (RFC 3948), so the peer must
	// encapsulate whether or not there is a NAT. A peer does that when it
	// believes one side is behind a NAT, so our source hash is deliberately
	// one of no address (strongSwan's encap=yes does the same). The
	// destination hash is honest: it lets the peer find out about its own NAT.
	(void)via;
	std::vector<uint8_t> fake(SHA_DIGEST_LENGTH);
	random_bytes(fake);
	std::vector<Payload> out;
	out.push_back(make_notify(notify::nat_detection_source_ip, std::move(fake)));
	out.push_back(make_notify(notify::nat_detection_destination_ip, nat_hash(spi_i, spi_r, remote)));
	return out;
}

bool Engine::we_are_behind_nat(const Message& m, uint64_t spi_i, uint64_t spi_r, Port via,
                               const Endpoint& remote) {
	// Section 2.23: the peer hashed our address as it saw it arrive; if none
	// of its NAT_DETECTION_DESTINATION_IP values is the hash of the address
	// we sent from, something in between rewrote it.
	std::optional<Endpoint> local = host_.local_endpoint(via, remote);
	bool any = false;
	for (const Payload& p : m.payloads) {
		const auto* n = std::get_if<NotifyPayload>(&p);
		if (!n || n->type != notify::nat_detection_destination_ip) continue;
		any = true;
		if (local && ct_equal(n->data, nat_hash(spi_i, spi_r, *local))) return false;
	}
	return any && local;
}

void Engine::send_plain_notify(Port via, const Endpoint& to, const Header& req, uint16_t type,
                               std::span<const uint8_t> data) {
	Header h;
	h.spi_i = req.spi_i;
	h.spi_r = 0;
	h.exchange = req.exchange;
	h.flags = kFlagResponse;
	h.message_id = req.message_id;
	const Payload p[] = {make_notify(type, std::vector<uint8_t>(data.begin(), data.end()))};
	host_.send(via, to, build_message(h, p));
	counters_.sent++;
}

void Engine::handle_init_request(Port via, const Endpoint& from, std::span<const uint8_t> msg,
                                 const Message& m, Clock::time_point now) {
	const Header& h = m.header;
	const SaPayload* sa_p = m.find<SaPayload>();
	const KePayload* ke = m.find<KePayload>();
	const NoncePayload* nonce = m.find<NoncePayload>();
	if (!sa_p || !ke || !nonce) {
		counters_.malformed++;
		send_plain_notify(via, from, h, notify::invalid_syntax, {});
		return;
	}
	size_t half_open = 0;
	for (auto& [spi, s] : sas_) {
		if (s->initiator || s->state != IkeSa::State::responder_init) continue;
		if (s->spi_i == h.spi_i && s->remote == from) {
			// A retransmitted request: the same answer (section 2.1).
			host_.send(via, from, s->init_response);
			counters_.sent++;
			return;
		}
		half_open++;
	}
	if (half_open >= kHalfOpenLimit) {
		counters_.half_open_dropped++;
		return;
	}
	if (half_open >= kCookieThreshold) {
		const std::vector<uint8_t> want = cookie_for(from, h.spi_i, nonce->data);
		const NotifyPayload* c = m.find_notify(notify::cookie);
		if (!c || !ct_equal(c->data, want)) {
			counters_.cookies_sent++;
			send_plain_notify(via, from, h, notify::cookie, want);
			return;
		}
	}
	std::optional<IkeChoice> choice = choose_ike(*sa_p, responder_suites_);
	if (!choice) {
		counters_.no_proposal++;
		std::string ours;
		for (const IkeSuite& s : responder_suites_)
			ours += (ours.empty() ? "" : ", ") + ike_suite_name(s);
		log_limited("IKE_SA_INIT from " + endpoint_text(from) +
		            ": no IKE proposal in common; it offered " + describe_offer(*sa_p) +
		            "; we accept " + ours);
		send_plain_notify(via, from, h, notify::no_proposal_chosen, {});
		return;
	}
	if (ke->group != uint16_t(choice->suite.dh)) {
		// Section 1.2: tell the initiator which group to use and let it retry.
		send_plain_notify(via, from, h, notify::invalid_ke_payload,
		                  be16_bytes(uint16_t(choice->suite.dh)));
		return;
	}

	auto sa = std::make_unique<IkeSa>();
	sa->initiator = false;
	sa->state = IkeSa::State::responder_init;
	sa->spi_i = h.spi_i;
	do
		sa->spi_r = random_spi();
	while (sas_.count(sa->spi_r));
	sa->remote = from;
	sa->via = via;
	sa->suite = choice->suite;
	sa->dh = std::make_unique<DhKeyPair>(choice->suite.dh);
	std::optional<std::vector<uint8_t>> g_ir = sa->dh->shared_secret(ke->data);
	if (!g_ir) {
		counters_.malformed++;
		send_plain_notify(via, from, h, notify::invalid_syntax, {});
		return;
	}
	sa->ni = nonce->data;
	sa->nr = random_nonce();
	sa->keys = derive_ike_keys(sa->suite, sa->ni, sa->nr, *g_ir, sa->spi_i, sa->spi_r);
	sa->sk_in = std::make_unique<SkCipher>(sa->suite, sa->keys.sk_ei, sa->keys.sk_ai);
	sa->sk_out = std::make_unique<SkCipher>(sa->suite, sa->keys.sk_er, sa->keys.sk_ar);
	sa->init_request.assign(msg.begin(), msg.end());
	sa->behind_nat = we_are_behind_nat(m, sa->spi_i, 0, via, from);

	Header rh;
	rh.spi_i = sa->spi_i;
	rh.spi_r = sa->spi_r;
	rh.exchange = Exchange::ike_sa_init;
	rh.flags = kFlagResponse;
	std::vector<Payload> payloads;
	payloads.push_back(SaPayload{{choice->reply}});
	payloads.push_back(
	    KePayload{uint16_t(sa->suite.dh),
	              std::vector<uint8_t>(sa->dh->public_value().begin(), sa->dh->public_value().end())});
	payloads.push_back(NoncePayload{sa->nr});
	for (Payload& p : nat_detection(sa->spi_i, sa->spi_r, via, from))
		payloads.push_back(std::move(p));
	sa->init_response = build_message(rh, payloads);
	sa->peer_next_id = 1;
	sa->next_id = 0;
	sa->created = sa->last_heard = now;
	host_.send(via, from, sa->init_response);
	counters_.sent++;
	const uint64_t key = sa->spi_r;
	sas_.emplace(key, std::move(sa));
}

void Engine::initiate(size_t peer, Clock::time_point now) {
	const PeerPolicy& pol = peers_[peer];
	if (pol.ike_proposals.empty() || !pol.endpoint) return;
	auto sa = std::make_unique<IkeSa>();
	sa->initiator = true;
	sa->state = IkeSa::State::init_sent;
	do
		sa->spi_i = random_spi();
	while (sas_.count(sa->spi_i));
	sa->peer = peer;
	sa->remote = *pol.endpoint;
	sa->via = Port::natt; // RFC 7296 section 2.23 lets an initiator start on the NAT-T port
	sa->dh = std::make_unique<DhKeyPair>(pol.ike_proposals.front().dh);
	sa->ni = random_nonce();
	sa->created = sa->last_heard = now;
	IkeSa& ref = *sa;
	sas_.emplace(sa->spi_i, std::move(sa));
	restart_at_[peer] = {};
	send_init(ref, now);
}

void Engine::send_init(IkeSa& sa, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	Header h;
	h.spi_i = sa.spi_i;
	h.exchange = Exchange::ike_sa_init;
	h.flags = kFlagInitiator;
	std::vector<Payload> payloads;
	if (!sa.cookie.empty()) payloads.push_back(make_notify(notify::cookie, sa.cookie));
	// The proposals that use the group of our key share come first, so a
	// responder that picks the first match needs no INVALID_KE round trip.
	std::vector<IkeSuite> order;
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh == sa.dh->group()) order.push_back(s);
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh != sa.dh->group()) order.push_back(s);
	payloads.push_back(ike_offer(order));
	payloads.push_back(
	    KePayload{uint16_t(sa.dh->group()),
	              std::vector<uint8_t>(sa.dh->public_value().begin(), sa.dh->public_value().end())});
	payloads.push_back(NoncePayload{sa.ni});
	for (Payload& p : nat_detection(sa.spi_i, 0, sa.via, sa.remote))
		payloads.push_back(std::move(p));
	sa.init_request = build_message(h, payloads);
	sa.pending = new_request(sa.init_request, 0, RequestKind::init, now);
	host_.send(sa.via, sa.remote, sa.init_request);
	counters_.sent++;
}

void Engine::handle_init_response(IkeSa& sa, std::span<const uint8_t> msg, const Message& m,
                                  Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	if (m.header.message_id != 0) {
		counters_.malformed++;
		return;
	}
	if (const NotifyPayload* c = m.find_notify(notify::cookie)) {
		if (c->data.empty() || c->data.size() > 64 || !sa.cookie.empty()) {
			counters_.malformed++;
			return;
		}
		sa.cookie = c->data;
		send_init(sa, now);
		return;
	}
	if (const NotifyPayload* k = m.find_notify(notify::invalid_ke_payload)) {
		const uint16_t group = k->data.size() == 2 ? load_be16(k->data.data()) : 0;
		const bool offered = std::any_of(pol.ike_proposals.begin(), pol.ike_proposals.end(),
		                                 [&](const IkeSuite& s) { return uint16_t(s.dh) == group; });
		if (!offered || sa.ke_retries++ >= 2 || group == uint16_t(sa.dh->group())) {
			close(sa,
			      "the responder asks for key exchange group " + std::to_string(group) +
			          ", which we did not offer",
			      true, now);
			return;
		}
		sa.dh = std::make_unique<DhKeyPair>(DhGroup(group));
		send_init(sa, now);
		return;
	}
	if (const NotifyPayload* err = m.find_notify(notify::no_proposal_chosen);
	    err || first_error(m.payloads)) {
		const NotifyPayload* e = err ? err : first_error(m.payloads);
		std::string ours;
		for (const IkeSuite& s : pol.ike_proposals)
			ours += (ours.empty() ? "" : ", ") + ike_suite_name(s);
		if (e->type == notify::no_proposal_chosen) counters_.no_proposal++;
		close(sa,
		      "IKE_SA_INIT refused by " + endpoint_text(sa.remote) + ": " + notify_name(e->type) +
		          (e->type == notify::no_proposal_chosen ? " (we offered " + ours + ")" : ""),
		      true, now);
		return;
	}
	const SaPayload* sa_p = m.find<SaPayload>();
	const KePayload* ke = m.find<KePayload>();
	const NoncePayload* nonce = m.find<NoncePayload>();
	if (!sa_p || !ke || !nonce || m.header.spi_r == 0) {
		counters_.malformed++;
		return;
	}
	std::optional<IkeSuite> suite = accept_ike(*sa_p, pol.ike_proposals);
	if (!suite || suite->dh != sa.dh->group() || ke->group != uint16_t(suite->dh)) {
		close(sa, "the responder chose " + describe_offer(*sa_p) + ", which is not one we offered",
		      true, now);
		return;
	}
	std::optional<std::vector<uint8_t>> g_ir = sa.dh->shared_secret(ke->data);
	if (!g_ir) {
		close(sa, "the responder's key exchange value is invalid", true, now);
		return;
	}
	sa.suite = *suite;
	sa.spi_r = m.header.spi_r;
	sa.nr = nonce->data;
	sa.keys = derive_ike_keys(sa.suite, sa.ni, sa.nr, *g_ir, sa.spi_i, sa.spi_r);
	sa.sk_in = std::make_unique<SkCipher>(sa.suite, sa.keys.sk_er, sa.keys.sk_ar);
	sa.sk_out = std::make_unique<SkCipher>(sa.suite, sa.keys.sk_ei, sa.keys.sk_ai);
	sa.init_response.assign(msg.begin(), msg.end());
	sa.behind_nat = we_are_behind_nat(m, sa.spi_i, sa.spi_r, sa.via, sa.remote);
	sa.pending.reset();
	sa.next_id = 1;
	sa.last_heard = now;

	// IKE_AUTH: who we are, proof of the PSK, and the first CHILD_SA.
	sa.reserved_spi = host_.allocate_spi();
	IdPayload idi{true, pol.local_id.type, pol.local_id.data};
	IdPayload idr{false, pol.remote_id.type, pol.remote_id.data};
	AuthPayload auth{AuthMethod::psk,
	                 psk_auth(sa.suite.prf, pol.psk, sa.init_request, sa.nr, sa.keys.sk_pi, idi.body())};
	TsPayload tsi{true, {}}, tsr{false, {}};
	bool v6 = false;
	for (const IpPrefix& p : pol.allowed_ips) {
		tsr.selectors.push_back(selector_of(p));
		v6 = v6 || p.addr.family == Family::v6;
	}
	tsi.selectors.push_back(selector_of(*parse_prefix("0.0.0.0/0")));
	if (v6) tsi.selectors.push_back(selector_of(*parse_prefix("::/0")));
	std::vector<Payload> payloads{idi, idr, auth};
	if (pol.request_address) {
		// Empty attributes ask for a value (section 3.15.1): an IPv4 address
		// and DNS servers; IPv6 too when some allowed_ips are IPv6.
		CpPayload cp{CpType::request,
		             {{cp_attr::internal_ip4_address, {}}, {cp_attr::internal_ip4_dns, {}}}};
		if (v6) {
			cp.attributes.push_back({cp_attr::internal_ip6_address, {}});
			cp.attributes.push_back({cp_attr::internal_ip6_dns, {}});
		}
		payloads.push_back(cp);
	}
	payloads.push_back(esp_offer(pol.esp_proposals, sa.reserved_spi));
	payloads.push_back(tsi);
	payloads.push_back(tsr);
	sa.state = IkeSa::State::auth_sent;
	send_request(sa, Exchange::ike_auth, payloads, now);
	sa.pending->kind = RequestKind::auth;
}

// ---- IKE_AUTH --------------------------------------------------------------

ChildKeys Engine::child_keys(const IkeSa& sa, crypto::Cipher c, bool esn, uint32_t spi_in, uint32_t spi_out,
                             bool we_initiated, std::span<const uint8_t> ni,
                             std::span<const uint8_t> nr) const {
	// Section 2.17: KEYMAT = prf+(SK_d, Ni | Nr); the exchange initiator's
	// outbound keys (encryption, then integrity) come first.
	const crypto::CipherSpec& spec = crypto::cipher_spec(c);
	const size_t per_dir = spec.enc_key_len + spec.auth_key_len;
	const std::vector<uint8_t> km = child_keymat(sa.suite.prf, sa.keys.sk_d, {}, ni, nr, 2 * per_dir);
	auto part = [&](size_t off, size_t len) {
		return std::vector<uint8_t>(km.begin() + long(off), km.begin() + long(off + len));
	};
	ChildKeys k;
	k.spi_in = spi_in;
	k.spi_out = spi_out;
	k.cipher = c;
	k.esn = esn;
	k.remote = sa.remote;
	const size_t out_off = we_initiated ? 0 : per_dir, in_off = we_initiated ? per_dir : 0;
	k.enc_out = part(out_off, spec.enc_key_len);
	k.auth_out = part(out_off + spec.enc_key_len, spec.auth_key_len);
	k.enc_in = part(in_off, spec.enc_key_len);
	k.auth_in = part(in_off + spec.enc_key_len, spec.auth_key_len);
	return k;
}

void Engine::handle_auth_request(IkeSa& sa, std::span<const uint8_t> /*msg*/, std::vector<Payload>& inner,
                                 Clock::time_point now) {
	const Header req{sa.spi_i,           sa.spi_r,       PayloadType::sk,     kVersion2,
	                 Exchange::ike_auth, kFlagInitiator, sa.peer_next_id - 1, 0};
	const IdPayload* idi = find_id(inner, true);
	const AuthPayload* auth = find_in<AuthPayload>(inner);
	if (!idi || !auth) {
		counters_.malformed++;
		const Payload p[] = {make_notify(notify::invalid_syntax)};
		send_response(sa, req, p);
		close(sa, "IKE_AUTH without identity or AUTH payload", false, now);
		return;
	}
	const Identity who{idi->type, idi->data};
	std::optional<size_t> match;
	for (size_t i = 0; i < peers_.size(); i++)
		if (peers_[i].remote_id == who) {
			match = i;
			break;
		}
	const auto fail_auth = [&](const std::string& why) {
		counters_.auth_failed++;
		log_limited(why);
		const Payload p[] = {make_notify(notify::authentication_failed)};
		send_response(sa, req, p);
		sa.state = IkeSa::State::closed;
	};
	if (!match) {
		fail_auth("IKE_AUTH from " + endpoint_text(sa.remote) +
		          ": authentication failed: identity '" + identity_text(who) +
		          "' is not configured for any peer");
		return;
	}
	const PeerPolicy& pol = peers_[*match];
	const std::vector<uint8_t> want =
	    psk_auth(sa.suite.prf, pol.psk, sa.init_request, sa.nr, sa.keys.sk_pi, idi->body());
	if (auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
		fail_auth("peer " + pol.name + ": authentication failed: " + endpoint_text(sa.remote) +
		          " (ID '" + identity_text(who) + "') " +
		          (auth->method != AuthMethod::psk ? "uses an authentication method other than PSK"
		                                           : "does not prove our pre-shared key"));
		return;
	}
	sa.peer = match;

	IdPayload idr{false, pol.local_id.type, pol.local_id.data};
	std::vector<Payload> reply{
	    idr, AuthPayload{AuthMethod::psk, psk_auth(sa.suite.prf, pol.psk, sa.init_response, sa.ni,
	                                               sa.keys.sk_pr, idr.body())}};
	// A client asking for a virtual address gets the one(s) of its peer entry
	// (its allowed_ips inside the address pool), and the DNS servers.
	if (const CpPayload* cp = find_in<CpPayload>(inner); cp && cp->type == CpType::request) {
		bool want4 = false, want6 = false, want_dns = false;
		for (const CpAttribute& at : cp->attributes) {
			want4 = want4 || at.type == cp_attr::internal_ip4_address;
			want6 = want6 || at.type == cp_attr::internal_ip6_address;
			want_dns = want_dns || at.type == cp_attr::internal_ip4_dns ||
			           at.type == cp_attr::internal_ip6_dns;
		}
		CpPayload out{CpType::reply, {}};
		sa.virtual_ips.clear();
		for (const IpAddress& a : pol.assign)
			if ((a.family == Family::v4 && want4) || (a.family == Family::v6 && want6)) {
				out.attributes.push_back(address_attribute(a, false));
				sa.virtual_ips.push_back(a);
			}
		if (want_dns)
			for (const IpAddress& d : pol.dns)
				out.attributes.push_back(address_attribute(d, true));
		if ((want4 || want6) && sa.virtual_ips.empty())
			host_.log("peer " + pol.name +
			          " asks for a virtual address, but none of its allowed_ips is in "
			          "[tunnel] address_pool");
		if (!out.attributes.empty()) reply.push_back(out);
		sa.dns = pol.dns;
	}
	const SaPayload* child_sa = find_in<SaPayload>(inner);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	std::string child_note;
	if (child_sa && tsi && tsr) {
		std::optional<EspChoice> choice = choose_esp(*child_sa, pol.esp_proposals);
		std::vector<TrafficSelector> ts_i = narrow(tsi->selectors, pol.allowed_ips);
		if (!choice) {
			counters_.no_proposal++;
			child_note =
			    "no CHILD_SA: no ESP proposal in common; it offered " + describe_offer(*child_sa);
			reply.push_back(make_notify(notify::no_proposal_chosen));
		} else if (ts_i.empty()) {
			child_note = "no CHILD_SA: its traffic selectors " + selectors_text(tsi->selectors) +
			             " are outside allowed_ips";
			reply.push_back(make_notify(notify::ts_unacceptable));
		} else {
			const uint32_t spi_in = host_.allocate_spi();
			choice->reply.spi = be32_bytes(spi_in);
			const ChildKeys keys = child_keys(sa, choice->cipher, choice->esn, spi_in,
			                                  choice->peer_spi, false, sa.ni, sa.nr);
			host_.install_child(*match, keys, true);
			sa.children.push_back(child_record(keys, true, false, sa.ni, sa.nr, tsr->selectors,
			                                   ts_i, pol.child_rekey_s, now));
			child_note =
			    "CHILD_SA up, SPIs in " + hex_spi(spi_in, 8) + " out " +
			    hex_spi(choice->peer_spi, 8) + ", " +
			    std::string(crypto::cipher_spec(choice->cipher).name) +
			    (choice->esn ? " with ESN" : "") + ", selectors " + selectors_text(ts_i) +
			    (sa.virtual_ips.empty() ? ""
			                            : ", virtual address " + addresses_text(sa.virtual_ips));
			reply.push_back(SaPayload{{choice->reply}});
			reply.push_back(TsPayload{true, ts_i});
			reply.push_back(TsPayload{false, tsr->selectors});
		}
	}
	send_response(sa, req, reply);
	established(sa, now);
	if (!child_note.empty()) host_.log("peer " + pol.name + ": " + child_note);
}

void Engine::handle_auth_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	if (find_notify_in(inner, notify::authentication_failed)) {
		counters_.auth_failed++;
		close(sa,
		      "authentication failed: " + endpoint_text(sa.remote) +
		          " rejected our identity or pre-shared key (AUTHENTICATION_FAILED)",
		      true, now);
		return;
	}
	const IdPayload* idr = find_id(inner, false);
	const AuthPayload* auth = find_in<AuthPayload>(inner);
	if (!idr || !auth) {
		const NotifyPayload* e = first_error(inner);
		close(sa,
		      "IKE_AUTH failed: " +
		          (e ? notify_name(e->type) : std::string("the answer has no AUTH payload")),
		      true, now);
		return;
	}
	if (!(Identity{idr->type, idr->data} == pol.remote_id)) {
		counters_.auth_failed++;
		close(sa,
		      "authentication failed: the responder identifies as '" +
		          identity_text({idr->type, idr->data}) + "', expected '" +
		          identity_text(pol.remote_id) + "'",
		      true, now);
		return;
	}
	const std::vector<uint8_t> want =
	    psk_auth(sa.suite.prf, pol.psk, sa.init_response, sa.ni, sa.keys.sk_pr, idr->body());
	if (auth->method != AuthMethod::psk || !ct_equal(auth->data, want)) {
		counters_.auth_failed++;
		close(sa,
		      "authentication failed: " + endpoint_text(sa.remote) +
		          " does not prove our pre-shared key",
		      true, now);
		return;
	}
	const uint32_t spi_in = sa.reserved_spi;
	sa.reserved_spi = 0;
	if (pol.request_address) {
		sa.virtual_ips.clear();
		sa.dns.clear();
		if (const CpPayload* cp = find_in<CpPayload>(inner); cp && cp->type == CpType::reply)
			for (const CpAttribute& at : cp->attributes) {
				std::optional<IpAddress> a = attribute_address(at);
				if (!a) continue;
				const bool dns = at.type == cp_attr::internal_ip4_dns ||
				                 at.type == cp_attr::internal_ip6_dns;
				(dns ? sa.dns : sa.virtual_ips).push_back(*a);
			}
		if (sa.virtual_ips.empty()) {
			host_.release_spi(spi_in);
			established(sa, now);
			close(sa,
			      "the gateway assigned no virtual address (it has none for our identity in its "
			      "address_pool)",
			      true, now, true);
			return;
		}
	}
	established(sa, now);
	if (pol.request_address) {
		host_.log("peer " + pol.name + ": virtual address " + addresses_text(sa.virtual_ips) +
		          (sa.dns.empty() ? "" : ", DNS " + addresses_text(sa.dns)));
		host_.assigned(*sa.peer, sa.virtual_ips, sa.dns);
	}
	const SaPayload* child_sa = find_in<SaPayload>(inner);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	std::optional<EspChoice> choice;
	if (child_sa) choice = accept_esp(*child_sa, pol.esp_proposals);
	std::string problem;
	if (const NotifyPayload* e = first_error(inner))
		problem = "the responder refused the CHILD_SA: " + notify_name(e->type);
	else if (!choice || !tsi || !tsr)
		problem = "the responder's CHILD_SA answer is not one we offered";
	else if (narrow(tsr->selectors, pol.allowed_ips) != tsr->selectors)
		problem = "the responder's traffic selectors " + selectors_text(tsr->selectors) +
		          " exceed allowed_ips";
	if (!problem.empty()) {
		host_.release_spi(spi_in);
		close(sa, problem, true, now, true);
		return;
	}
	const ChildKeys keys =
	    child_keys(sa, choice->cipher, choice->esn, spi_in, choice->peer_spi, true, sa.ni, sa.nr);
	host_.install_child(*sa.peer, keys, true);
	sa.children.push_back(child_record(keys, true, true, sa.ni, sa.nr, tsi->selectors, tsr->selectors,
	                                   pol.child_rekey_s, now));
	restart_backoff_s_[*sa.peer] =
	    kRestartMinS; // a working tunnel: the next failure starts the backoff over
	host_.log("peer " + pol.name + ": CHILD_SA up, SPIs in " + hex_spi(spi_in, 8) + " out " +
	          hex_spi(choice->peer_spi, 8) + ", " +
	          std::string(crypto::cipher_spec(choice->cipher).name) + (choice->esn ? " with ESN" : "") +
	          ", selectors " + selectors_text(tsr->selectors));
}

void Engine::established(IkeSa& sa, Clock::time_point now) {
	sa.state = IkeSa::State::established;
	sa.established_at = now;
	sa.next_keepalive = now + kKeepaliveInterval;
	if (peers_[*sa.peer].ike_rekey_s) sa.rekey_at = now + jittered(peers_[*sa.peer].ike_rekey_s);
	host_.log("peer " + peers_[*sa.peer].name + ": IKE SA established with " + endpoint_text(sa.remote) +
	          " (" + ike_suite_name(sa.suite) + ", SPIs " + hex_spi(sa.spi_i, 16) + "_i " +
	          hex_spi(sa.spi_r, 16) + "_r, " + (sa.initiator ? "we initiated" : "the peer initiated") +
	          ")");
	// One IKE SA per peer: an older one (from before a restart on either
	// side) is replaced by the one that just authenticated.
	for (auto& [spi, other] : sas_)
		if (other.get() != &sa && other->peer == sa.peer && other->state != IkeSa::State::closed)
			close(*other, "replaced by a newer IKE SA", false, now, true);
}

// ---- INFORMATIONAL and CREATE_CHILD_SA as responder ---------------------------

void Engine::handle_informational_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const Header req{sa.spi_i,
	                 sa.spi_r,
	                 PayloadType::sk,
	                 kVersion2,
	                 Exchange::informational,
	                 uint8_t(sa.initiator ? 0 : kFlagInitiator),
	                 sa.peer_next_id - 1,
	                 0};
	bool delete_ike = false;
	DeletePayload ours{Protocol::esp, {}};
	for (const Payload& p : inner) {
		const auto* d = std::get_if<DeletePayload>(&p);
		if (!d) continue;
		if (d->protocol == Protocol::ike) delete_ike = true;
		if (d->protocol != Protocol::esp) continue;
		for (uint32_t spi : d->spis) {
			// The peer names its inbound SPIs: our outbound ones (section 1.4.1).
			auto it = std::find_if(sa.children.begin(), sa.children.end(),
			                       [&](const ChildSa& c) { return c.spi_out == spi; });
			if (it == sa.children.end()) continue;
			if (it->successor_in) {
				// Make-before-break: the rekeyed CHILD_SA takes over sending first.
				for (ChildSa& c : sa.children) {
					if (c.spi_in != it->successor_in || c.sending) continue;
					c.sending = true;
					if (sa.peer) host_.switch_outbound(*sa.peer, c.spi_in);
				}
			}
			if (sa.peer) host_.remove_child(*sa.peer, it->spi_in, it->spi_out);
			if (!it->deleting)
				ours.spis.push_back(it->spi_in); // else our own Delete is under way
			std::erase(sa.delete_queue, it->spi_in);
			sa.children.erase(it);
		}
	}
	std::vector<Payload> reply;
	if (!ours.spis.empty() && !delete_ike) reply.push_back(ours);
	send_response(sa, req, reply);
	if (delete_ike) close(sa, "deleted by the peer", true, now);
}

void Engine::handle_create_child_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now) {
	const Header req{sa.spi_i,
	                 sa.spi_r,
	                 PayloadType::sk,
	                 kVersion2,
	                 Exchange::create_child_sa,
	                 uint8_t(sa.initiator ? 0 : kFlagInitiator),
	                 sa.peer_next_id - 1,
	                 0};
	auto refuse = [&](uint16_t type, std::vector<uint8_t> data = {}) {
		const Payload p[] = {make_notify(type, std::move(data))};
		send_response(sa, req, p);
	};
	if (sa.state != IkeSa::State::established || !sa.peer || sa.rekeyed) {
		refuse(notify::temporary_failure);
		return;
	}
	const PeerPolicy& pol = peers_[*sa.peer];
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const KePayload* ke = find_in<KePayload>(inner);
	if (!sa_p || !nonce || sa_p->proposals.empty()) {
		counters_.malformed++;
		refuse(notify::invalid_syntax);
		return;
	}
	std::vector<uint8_t> nr = random_nonce();

	if (sa_p->proposals.front().protocol == Protocol::ike) {
		// IKE SA rekey (section 2.18): a new IKE SA that inherits the CHILD_SAs.
		// While a request of ours is out on this SA (a rekey of our own, or a
		// CHILD_SA exchange whose answer must still find this SA), the peer is
		// asked to try again later (section 2.25).
		if (sa.pending && sa.pending->kind != RequestKind::liveness) {
			refuse(notify::temporary_failure);
			return;
		}
		std::optional<IkeChoice> choice = choose_ike(*sa_p, pol.ike_proposals);
		if (!choice || choice->reply.spi.size() != 8) {
			counters_.no_proposal++;
			refuse(notify::no_proposal_chosen);
			return;
		}
		if (!ke || ke->group != uint16_t(choice->suite.dh)) {
			refuse(notify::invalid_ke_payload, be16_bytes(uint16_t(choice->suite.dh)));
			return;
		}
		auto next = std::make_unique<IkeSa>();
		next->dh = std::make_unique<DhKeyPair>(choice->suite.dh);
		std::optional<std::vector<uint8_t>> g_ir = next->dh->shared_secret(ke->data);
		if (!g_ir) {
			refuse(notify::invalid_syntax);
			return;
		}
		next->initiator = false;
		next->state = IkeSa::State::established;
		next->spi_i = load_be64(choice->reply.spi.data());
		do
			next->spi_r = random_spi();
		while (sas_.count(next->spi_r));
		store_be64(choice->reply.spi.data(), next->spi_r);
		next->peer = sa.peer;
		next->remote = sa.remote;
		next->via = sa.via;
		next->suite = choice->suite;
		next->ni = nonce->data;
		next->nr = nr;
		next->keys = derive_rekeyed_ike_keys(sa.suite.prf, sa.keys.sk_d, next->suite, *g_ir, next->ni,
		                                     next->nr, next->spi_i, next->spi_r);
		next->sk_in = std::make_unique<SkCipher>(next->suite, next->keys.sk_ei, next->keys.sk_ai);
		next->sk_out = std::make_unique<SkCipher>(next->suite, next->keys.sk_er, next->keys.sk_ar);
		next->children = std::move(sa.children);
		sa.children.clear();
		next->created = sa.created;
		next->established_at = now;
		next->last_heard = now;
		next->child_rekeys = sa.child_rekeys;
		next->ike_rekeys = sa.ike_rekeys + 1;
		next->delete_queue = std::move(sa.delete_queue);
		next->virtual_ips = sa.virtual_ips;
		next->dns = sa.dns;
		next->behind_nat = sa.behind_nat;
		next->next_keepalive = sa.next_keepalive;
		if (pol.ike_rekey_s) next->rekey_at = now + jittered(pol.ike_rekey_s);
		std::vector<Payload> reply{SaPayload{{choice->reply}}, NoncePayload{nr},
		                           KePayload{uint16_t(next->suite.dh),
		                                     std::vector<uint8_t>(next->dh->public_value().begin(),
		                                                          next->dh->public_value().end())}};
		send_response(sa, req, reply);
		sa.rekeyed = true;
		host_.log("peer " + pol.name + ": IKE SA rekeyed by the peer (" +
		          ike_suite_name(next->suite) + ", SPIs " + hex_spi(next->spi_i, 16) + "_i " +
		          hex_spi(next->spi_r, 16) + "_r)");
		const uint64_t key = next->spi_r;
		sas_.emplace(key, std::move(next));
		return;
	}

	// A CHILD_SA: a rekey of one we have (REKEY_SA names the exchange
	// initiator's inbound SPI, our outbound one; section 1.3.3) or a new one.
	const NotifyPayload* rekey = find_notify_in(inner, notify::rekey_sa);
	ChildSa* old = nullptr;
	if (rekey) {
		const uint32_t spi = rekey->spi.size() == 4 ? load_be32(rekey->spi.data()) : 0;
		for (ChildSa& c : sa.children)
			if (c.spi_out == spi) old = &c;
		if (!old) {
			refuse(notify::child_sa_not_found);
			return;
		}
	}
	if (ke) {
		// PFS for CHILD_SAs is not offered by esptun, so a proposal that
		// requires a group cannot be chosen.
		refuse(notify::no_proposal_chosen);
		return;
	}
	std::optional<EspChoice> choice = choose_esp(*sa_p, pol.esp_proposals);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	if (!choice) {
		counters_.no_proposal++;
		refuse(notify::no_proposal_chosen);
		return;
	}
	if (!tsi || !tsr) {
		refuse(notify::invalid_syntax);
		return;
	}
	// The exchange initiator's selectors: TSi is its side. As responder of the
	// exchange, the peer's side is TSi when the peer initiates.
	std::vector<TrafficSelector> ts_i = narrow(tsi->selectors, pol.allowed_ips);
	if (ts_i.empty()) {
		refuse(notify::ts_unacceptable);
		return;
	}
	const uint32_t spi_in = host_.allocate_spi();
	choice->reply.spi = be32_bytes(spi_in);
	const ChildKeys keys =
	    child_keys(sa, choice->cipher, choice->esn, spi_in, choice->peer_spi, false, nonce->data, nr);
	// Make-before-break: the new inbound SA is live before the answer leaves;
	// we keep sending on the old one until the peer deletes it.
	host_.install_child(*sa.peer, keys, old == nullptr);
	const uint32_t old_spi = old ? old->spi_in : 0;
	const bool ours_done = old && !old->rekeying &&
	                       std::any_of(sa.children.begin(), sa.children.end(), [&](const ChildSa& c) {
		                       return c.replaces == old_spi && c.created_by_us;
	                       });
	if (old) old->successor_in = spi_in;
	ChildSa rec = child_record(keys, old == nullptr, false, nonce->data, nr, tsr->selectors, ts_i,
	                           pol.child_rekey_s, now);
	rec.replaces = old_spi;
	sa.children.push_back(std::move(rec)); // may move the vector: `old` is not used after this
	if (old_spi) sa.child_rekeys++;
	// We rekeyed the same CHILD_SA and already have our answer: a collision
	// found late (section 2.8.1). With our request still out, the answer
	// settles it instead.
	if (ours_done) resolve_collision(sa, old_spi);
	std::vector<Payload> reply{SaPayload{{choice->reply}}, NoncePayload{nr}, TsPayload{true, ts_i},
	                           TsPayload{false, tsr->selectors}};
	send_response(sa, req, reply);
	host_.log("peer " + pol.name + ": CHILD_SA " +
	          std::string(old ? "rekeyed by the peer" : "added by the peer") + ", SPIs in " +
	          hex_spi(spi_in, 8) + " out " + hex_spi(choice->peer_spi, 8));
}

// ---- rekeying and deleting, as the exchange initiator --------------------------

void Engine::start_child_rekey(IkeSa& sa, size_t child, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	ChildSa& c = sa.children[child];
	const uint32_t new_in = host_.allocate_spi();
	std::vector<uint8_t> ni = random_nonce();
	// Section 1.3.3: REKEY_SA names the SPI we receive the old CHILD_SA with.
	NotifyPayload rekey = make_notify(notify::rekey_sa);
	rekey.protocol = Protocol::esp;
	rekey.spi = be32_bytes(c.spi_in);
	const std::vector<Payload> payloads{rekey, esp_offer(pol.esp_proposals, new_in), NoncePayload{ni},
	                                    TsPayload{true, c.ts_local}, TsPayload{false, c.ts_remote}};
	c.rekeying = true;
	const uint32_t old_in = c.spi_in;
	send_request(sa, Exchange::create_child_sa, payloads, now);
	sa.pending->kind = RequestKind::rekey_child;
	sa.pending->old_spi_in = old_in;
	sa.pending->new_spi_in = new_in;
	sa.pending->nonce = std::move(ni);
}

void Engine::handle_rekey_child_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
                                         Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	auto find_child = [&](uint32_t spi_in) -> ChildSa* {
		for (ChildSa& c : sa.children)
			if (c.spi_in == spi_in) return &c;
		return nullptr;
	};
	if (ChildSa* old = find_child(req.old_spi_in)) old->rekeying = false;
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const TsPayload* tsi = find_ts(inner, true);
	const TsPayload* tsr = find_ts(inner, false);
	std::optional<EspChoice> choice;
	if (sa_p) choice = accept_esp(*sa_p, pol.esp_proposals);
	const NotifyPayload* err = first_error(inner);
	if (err || !choice || !nonce || !tsi || !tsr) {
		host_.release_spi(req.new_spi_in);
		ChildSa* old = find_child(req.old_spi_in);
		if (err && err->type == notify::temporary_failure) {
			// Section 2.25: the peer is busy (often with its own rekey); retry soon.
			if (old)
				old->rekey_at =
				    now + std::chrono::milliseconds(2000) + jittered(8) - seconds(7);
			return;
		}
		if (err && err->type == notify::child_sa_not_found) return; // the peer deleted it meanwhile
		host_.log("peer " + pol.name + ": CHILD_SA rekey refused: " +
		          (err ? notify_name(err->type) : std::string("the answer is not one we offered")) +
		          "; trying again in a minute");
		if (old) old->rekey_at = now + seconds(60);
		return;
	}
	ChildSa* old = find_child(req.old_spi_in);
	// The peer rekeyed the same CHILD_SA while our request was out (it
	// answered us, and we answered it): section 2.8.1 decides which stays.
	const bool collision = old && old->successor_in != 0;
	const ChildKeys keys = child_keys(sa, choice->cipher, choice->esn, req.new_spi_in, choice->peer_spi,
	                                  true, req.nonce, nonce->data);
	host_.install_child(*sa.peer, keys, !collision);
	ChildSa rec = child_record(keys, !collision, true, req.nonce, nonce->data, tsi->selectors,
	                           tsr->selectors, pol.child_rekey_s, now);
	rec.replaces = old ? req.old_spi_in : 0;
	if (old && !collision) {
		// Make-before-break: the peer has had the new SA since it answered;
		// we send on it from now on and delete the old one.
		old->sending = false;
		old->deleting = true;
		sa.delete_queue.push_back(old->spi_in);
	}
	sa.children.push_back(std::move(rec));
	sa.child_rekeys++;
	host_.log("peer " + pol.name + ": CHILD_SA rekeyed, SPIs in " + hex_spi(req.new_spi_in, 8) + " out " +
	          hex_spi(choice->peer_spi, 8) + " (replacing in " + hex_spi(req.old_spi_in, 8) + ")");
	if (collision) resolve_collision(sa, req.old_spi_in);
}

void Engine::resolve_collision(IkeSa& sa, uint32_t old_spi_in) {
	// Both sides rekeyed the CHILD_SA old_spi_in. Section 2.8.1: the new SA
	// made by the exchange with the lowest of the four nonces is redundant,
	// and the side that started that exchange deletes it; the other side's
	// new SA replaces the old one, and its maker deletes the old one.
	ChildSa *ours = nullptr, *theirs = nullptr, *old = nullptr;
	for (ChildSa& c : sa.children) {
		if (c.spi_in == old_spi_in) old = &c;
		if (c.replaces != old_spi_in || c.deleting) continue;
		(c.created_by_us ? ours : theirs) = &c;
	}
	if (!ours || !theirs) return;
	auto lowest = [](const ChildSa& c) { return nonce_less(c.ni, c.nr) ? c.ni : c.nr; };
	const bool ours_redundant = nonce_less(lowest(*ours), lowest(*theirs));
	ChildSa& winner = ours_redundant ? *theirs : *ours;
	if (ours_redundant) {
		// The peer's SA stays. We answered its request, so (as after any
		// rekey the peer starts) we move to it when the peer deletes the old
		// one, which it has had to do as the winner. Only if we already send
		// on our own redundant SA (its answer came before the peer's request)
		// do we move right away.
		if (ours->sending && sa.peer) {
			host_.switch_outbound(*sa.peer, theirs->spi_in);
			theirs->sending = true;
		}
		ours->sending = false;
		ours->deleting = true;
		sa.delete_queue.push_back(ours->spi_in);
	} else {
		// Ours stays: the peer installed it before it answered us, so we send
		// on it now, and delete the old one; the peer deletes its own new SA.
		if (!ours->sending && sa.peer) host_.switch_outbound(*sa.peer, ours->spi_in);
		ours->sending = true;
		theirs->sending = false;
		if (old) {
			old->sending = false;
			old->successor_in = 0;
			if (!old->deleting) {
				old->deleting = true;
				sa.delete_queue.push_back(old->spi_in);
			}
		}
	}
	host_.log("peer " + (sa.peer ? peers_[*sa.peer].name : std::string("?")) +
	          ": CHILD_SA rekey collision resolved, keeping SPI in " + hex_spi(winner.spi_in, 8));
}

void Engine::start_ike_rekey(IkeSa& sa, Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	uint64_t new_spi;
	do
		new_spi = random_spi();
	while (sas_.count(new_spi));
	auto dh = std::make_shared<DhKeyPair>(sa.suite.dh);
	std::vector<uint8_t> ni = random_nonce();
	std::vector<IkeSuite> order;
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh == dh->group()) order.push_back(s);
	for (const IkeSuite& s : pol.ike_proposals)
		if (s.dh != dh->group()) order.push_back(s);
	uint8_t spi[8];
	store_be64(spi, new_spi);
	const std::vector<Payload> payloads{
	    ike_offer(order, spi), NoncePayload{ni},
	    KePayload{uint16_t(dh->group()),
	              std::vector<uint8_t>(dh->public_value().begin(), dh->public_value().end())}};
	send_request(sa, Exchange::create_child_sa, payloads, now);
	sa.pending->kind = RequestKind::rekey_ike;
	sa.pending->new_ike_spi = new_spi;
	sa.pending->nonce = std::move(ni);
	sa.pending->dh = std::move(dh);
}

void Engine::handle_rekey_ike_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
                                       Clock::time_point now) {
	const PeerPolicy& pol = peers_[*sa.peer];
	const SaPayload* sa_p = find_in<SaPayload>(inner);
	const NoncePayload* nonce = find_in<NoncePayload>(inner);
	const KePayload* ke = find_in<KePayload>(inner);
	const NotifyPayload* err = first_error(inner);
	std::optional<IkeSuite> suite;
	if (sa_p) suite = accept_ike(*sa_p, pol.ike_proposals);
	std::optional<std::vector<uint8_t>> g_ir;
	if (!err && suite && nonce && ke && suite->dh == req.dh->group() &&
	    ke->group == uint16_t(suite->dh) && sa_p->proposals[0].spi.size() == 8)
		g_ir = req.dh->shared_secret(ke->data);
	if (!g_ir) {
		if (err && err->type == notify::temporary_failure) {
			sa.rekey_at = now + seconds(2) + jittered(8) - seconds(7);
			return;
		}
		host_.log("peer " + pol.name + ": IKE SA rekey refused: " +
		          (err ? notify_name(err->type) : std::string("the answer is not one we offered")) +
		          "; trying again in a minute");
		sa.rekey_at = now + seconds(60);
		return;
	}
	auto next = std::make_unique<IkeSa>();
	next->initiator = true; // section 2.18: who rekeys becomes the new SA's initiator
	next->state = IkeSa::State::established;
	next->spi_i = req.new_ike_spi;
	next->spi_r = load_be64(sa_p->proposals[0].spi.data());
	next->peer = sa.peer;
	next->remote = sa.remote;
	next->via = sa.via;
	next->suite = *suite;
	next->ni = req.nonce;
	next->nr = nonce->data;
	next->keys = derive_rekeyed_ike_keys(sa.suite.prf, sa.keys.sk_d, next->suite, *g_ir, next->ni,
	                                     next->nr, next->spi_i, next->spi_r);
	next->sk_in = std::make_unique<SkCipher>(next->suite, next->keys.sk_er, next->keys.sk_ar);
	next->sk_out = std::make_unique<SkCipher>(next->suite, next->keys.sk_ei, next->keys.sk_ai);
	next->children = std::move(sa.children);
	sa.children.clear();
	next->delete_queue = std::move(sa.delete_queue);
	sa.delete_queue.clear();
	next->virtual_ips = sa.virtual_ips;
	next->dns = sa.dns;
	next->behind_nat = sa.behind_nat;
	next->next_keepalive = sa.next_keepalive;
	next->created = sa.created;
	next->established_at = now;
	next->last_heard = now;
	next->child_rekeys = sa.child_rekeys;
	next->ike_rekeys = sa.ike_rekeys + 1;
	if (pol.ike_rekey_s) next->rekey_at = now + jittered(pol.ike_rekey_s);
	host_.log("peer " + pol.name + ": IKE SA rekeyed (" + ike_suite_name(next->suite) + ", SPIs " +
	          hex_spi(next->spi_i, 16) + "_i " + hex_spi(next->spi_r, 16) + "_r)");
	const uint64_t key = next->spi_i;
	sas_.emplace(key, std::move(next));
	// The old IKE SA goes; its CHILD_SAs live on under the new one.
	sa.rekeyed = true;
	const Payload del[] = {DeletePayload{Protocol::ike, {}}};
	send_request(sa, Exchange::informational, del, now);
	sa.pending->kind = RequestKind::del_ike;
}

void Engine::send_child_deletes(IkeSa& sa, Clock::time_point now) {
	if (sa.pending || sa.delete_queue.empty() || sa.state != IkeSa::State::established) return;
	std::vector<uint32_t> spis = std::move(sa.delete_queue);
	sa.delete_queue.clear();
	const Payload p[] = {DeletePayload{Protocol::esp, spis}};
	send_request(sa, Exchange::informational, p, now);
	sa.pending->kind = RequestKind::del_child;
	sa.pending->spis = std::move(spis);
}

void Engine::handle_delete_child_response(IkeSa& sa, PendingRequest& req) {
	// The answer lists the peer's halves; ours go now whatever it says.
	for (uint32_t spi : req.spis) {
		auto it = std::find_if(sa.children.begin(), sa.children.end(),
		                       [&](const ChildSa& c) { return c.spi_in == spi; });
		if (it == sa.children.end()) continue;
		if (sa.peer) host_.remove_child(*sa.peer, it->spi_in, it->spi_out);
		sa.children.erase(it);
	}
}

// ---- sending -----------------------------------------------------------------

void Engine::send_request(IkeSa& sa, Exchange ex, std::span<const Payload> inner, Clock::time_point now) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.next = PayloadType::sk;
	h.exchange = ex;
	h.flags = sa.initiator ? kFlagInitiator : 0;
	h.message_id = sa.next_id++;
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(inner, first);
	std::vector<uint8_t> bytes(kHeaderLen);
	encode_header(h, bytes.data());
	sa.sk_out->seal(bytes, uint8_t(first), chain);
	sa.pending = new_request(bytes, h.message_id, RequestKind::liveness, now);
	host_.send(sa.via, sa.remote, bytes);
	counters_.sent++;
}

void Engine::send_response(IkeSa& sa, const Header& req, std::span<const Payload> inner) {
	Header h;
	h.spi_i = sa.spi_i;
	h.spi_r = sa.spi_r;
	h.next = PayloadType::sk;
	h.exchange = req.exchange;
	h.flags = uint8_t(kFlagResponse | (sa.initiator ? kFlagInitiator : 0));
	h.message_id = req.message_id;
	PayloadType first = PayloadType::none;
	const std::vector<uint8_t> chain = encode_payloads(inner, first);
	std::vector<uint8_t> bytes(kHeaderLen);
	encode_header(h, bytes.data());
	sa.sk_out->seal(bytes, uint8_t(first), chain);
	sa.last_response = bytes;
	host_.send(sa.via, sa.remote, bytes);
	counters_.sent++;
}

// ---- timers and teardown -------------------------------------------------------

void Engine::tick(Clock::time_point now) {
	for (auto& [spi, owned] : sas_) {
		IkeSa& sa = *owned;
		if (sa.state == IkeSa::State::closed) continue;
		if (sa.state == IkeSa::State::responder_init && now - sa.created >= kHalfOpenTimeout) {
			sa.state = IkeSa::State::closed; // never authenticated: nothing to tell anyone
			continue;
		}
		if (sa.pending && now >= sa.pending->next) {
			PendingRequest& p = *sa.pending;
			if (p.tries >=
			    (p.kind == RequestKind::liveness ? kLivenessRetransmits : kMaxRetransmits)) {
				const bool liveness = p.kind == RequestKind::liveness;
				close(sa,
				      liveness ? "the peer is dead: no answer to liveness checks"
				               : "no answer from " + endpoint_text(sa.remote),
				      p.kind != RequestKind::del_ike, now);
				continue;
			}
			p.tries++;
			if (p.kind != RequestKind::liveness)
				p.interval *= 2; // liveness checks keep their pace
			p.next = now + p.interval;
			counters_.retransmits++;
			host_.send(sa.via, sa.remote, p.bytes);
			counters_.sent++;
			continue;
		}
		if (sa.state == IkeSa::State::established && sa.behind_nat && !sa.rekeyed &&
		    now >= sa.next_keepalive) {
			// Behind a NAT: keep its mapping open for the peer's packets, also
			// when we have nothing to send (RFC 3948 section 2.3).
			host_.send_keepalive(sa.remote);
			sa.next_keepalive = now + kKeepaliveInterval;
		}
		if (sa.state == IkeSa::State::established && !sa.pending && sa.peer && !sa.rekeyed) {
			if (!sa.delete_queue.empty()) {
				send_child_deletes(sa, now);
				continue;
			}
			if (sa.rekey_at != Clock::time_point{} && now >= sa.rekey_at) {
				start_ike_rekey(sa, now);
				continue;
			}
			bool rekeying = false;
			for (size_t i = 0; i < sa.children.size() && !rekeying; i++) {
				const ChildSa& c = sa.children[i];
				if (c.sending && !c.successor_in && !c.deleting &&
				    c.rekey_at != Clock::time_point{} && now >= c.rekey_at) {
					start_child_rekey(sa, i, now);
					rekeying = true;
				}
			}
			if (rekeying) continue;
			const uint32_t dpd = peers_[*sa.peer].dpd_interval_s;
			if (dpd == 0) continue;
			Clock::time_point last = sa.last_heard;
			if (auto esp = host_.last_esp_rx(*sa.peer); esp && *esp > last) last = *esp;
			if (now - last < seconds(dpd)) continue;
			// Liveness check (section 2.4): an empty INFORMATIONAL request,
			// retransmitted at a quarter of the interval so a dead peer is
			// noticed within about two intervals.
			send_request(sa, Exchange::informational, {}, now);
			sa.pending->kind = RequestKind::liveness;
			sa.pending->interval = seconds(std::max<uint32_t>(1, dpd / 4));
			sa.pending->next = now + sa.pending->interval;
		}
	}
	sweep();
	for (size_t i = 0; i < peers_.size(); i++) {
		if (restart_at_[i] == Clock::time_point{} || now < restart_at_[i]) continue;
		const bool active = std::any_of(sas_.begin(), sas_.end(), [&](const auto& kv) {
			return kv.second->peer == i && kv.second->state != IkeSa::State::closed;
		});
		restart_at_[i] = {};
		if (!active) initiate(i, now);
	}
}

void Engine::remove_children(IkeSa& sa) {
	if (sa.peer)
		for (const ChildSa& c : sa.children)
			host_.remove_child(*sa.peer, c.spi_in, c.spi_out);
	sa.children.clear();
	sa.delete_queue.clear();
	if (sa.pending && sa.pending->kind == RequestKind::rekey_child && sa.pending->new_spi_in) {
		host_.release_spi(sa.pending->new_spi_in);
		sa.pending->new_spi_in = 0;
	}
	if (sa.reserved_spi) {
		host_.release_spi(sa.reserved_spi);
		sa.reserved_spi = 0;
	}
}

void Engine::close(IkeSa& sa, const std::string& why, bool restart, Clock::time_point now, bool tell_peer) {
	if (sa.state == IkeSa::State::closed) return;
	if (tell_peer && sa.state == IkeSa::State::established && sa.sk_out) {
		// A Delete the peer may or may not get (section 1.4.1); nobody waits for it.
		const Payload p[] = {DeletePayload{Protocol::ike, {}}};
		if (sa.pending && sa.pending->kind == RequestKind::rekey_child)
			host_.release_spi(sa.pending->new_spi_in);
		send_request(sa, Exchange::informational, p, now);
		sa.pending.reset();
	}
	remove_children(sa);
	sa.state = IkeSa::State::closed;
	if (!sa.peer) return;
	const size_t peer = *sa.peer;
	if (!sa.rekeyed) host_.log(peer_label(sa) + ": IKE SA closed: " + why);
	const PeerPolicy& pol = peers_[peer];
	if (restart && !sa.rekeyed && pol.initiate && pol.endpoint) {
		restart_at_[peer] = now + seconds(restart_backoff_s_[peer]);
		restart_backoff_s_[peer] = std::min(kRestartMaxS, restart_backoff_s_[peer] * 2);
	}
}

void Engine::sweep() {
	for (auto it = sas_.begin(); it != sas_.end();) {
		if (it->second->state == IkeSa::State::closed) {
			remove_children(*it->second);
			it = sas_.erase(it);
		} else {
			++it;
		}
	}
}

void Engine::shutdown() {
	const Clock::time_point now = Clock::now();
	for (auto& [spi, sa] : sas_) {
		if (sa->state != IkeSa::State::established) continue;
		const Payload p[] = {DeletePayload{Protocol::ike, {}}};
		if (sa->pending && sa->pending->kind == RequestKind::rekey_child)
			host_.release_spi(sa->pending->new_spi_in);
		send_request(*sa, Exchange::informational, p, now);
		sa->pending.reset();
		remove_children(*sa);
		sa->state = IkeSa::State::closed;
	}
	sweep();
}

std::vector<IkeSaStatus> Engine::status(Clock::time_point now) const {
	std::vector<IkeSaStatus> out;
	for (const auto& [spi, sa] : sas_) {
		IkeSaStatus s;
		s.peer = sa->peer ? peers_[*sa->peer].name : "";
		switch (sa->state) {
		case IkeSa::State::init_sent:
			s.state = "connecting";
			break;
		case IkeSa::State::auth_sent:
			s.state = "authenticating";
			break;
		case IkeSa::State::responder_init:
			s.state = "half-open";
			break;
		case IkeSa::State::established:
			s.state = "established";
			break;
		case IkeSa::State::closed:
			s.state = "closed";
			break;
		}
		s.initiator = sa->initiator;
		s.spi_i = sa->spi_i;
		s.spi_r = sa->spi_r;
		if (sa->sk_in) s.suite = ike_suite_name(sa->suite);
		s.remote = endpoint_text(sa->remote);
		const Clock::time_point since =
		    sa->state == IkeSa::State::established ? sa->established_at : sa->created;
		s.age_s = std::chrono::duration_cast<seconds>(now - since).count();
		s.child_rekeys = sa->child_rekeys;
		s.ike_rekeys = sa->ike_rekeys;
		s.behind_nat = sa->behind_nat;
		if (sa->rekey_at != Clock::time_point{})
			s.rekey_in_s = std::chrono::duration_cast<seconds>(sa->rekey_at - now).count();
		for (const IpAddress& a : sa->virtual_ips)
			s.virtual_ips.push_back(to_string(a));
		for (const IpAddress& a : sa->dns)
			s.dns.push_back(to_string(a));
		for (const ChildSa& c : sa->children) {
			ChildStatus cs{c.spi_in,
			               c.spi_out,
			               std::string(crypto::cipher_spec(c.cipher).name),
			               c.esn,
			               std::chrono::duration_cast<seconds>(now - c.created).count(),
			               c.sending};
			if (c.rekey_at != Clock::time_point{} && c.sending)
				cs.rekey_in_s = std::chrono::duration_cast<seconds>(c.rekey_at - now).count();
			s.children.push_back(std::move(cs));
		}
		out.push_back(std::move(s));
	}
	return out;
}

} // namespace esptun::ike
