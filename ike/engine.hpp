// The IKEv2 protocol engine (RFC 7296): IKE SAs and their CHILD_SAs for every
// peer that is keyed by IKE. It does no I/O of its own: datagrams, time and
// SPIs come in through its methods and the Host interface, datagrams to send
// and CHILD_SAs to install go out through Host. One thread drives it (the
// control thread of service/service.cpp).
//
// Exchanges, in the order this file's functions follow them:
//   IKE_SA_INIT (section 1.2): proposals, key exchange, nonces, NAT detection;
//     a responder under load asks for a cookie first (section 2.6).
//   IKE_AUTH: identities, PSK authentication (section 2.15) and the first
//     CHILD_SA with its traffic selectors, narrowed to the peer's allowed_ips
//     (its side) and local_ts (ours).
//   INFORMATIONAL: deletes and liveness checks, both directions.
//   CREATE_CHILD_SA as responder: CHILD_SA and IKE SA rekeys the peer starts
//     (make-before-break: the new inbound SA is live before the reply goes).
// Requests we send are retransmitted with exponential backoff (section 2.1);
// the last response is kept and resent when a request is retransmitted to us.
#pragma once

#include "base/inet.hpp"
#include "crypto/esp_transform.hpp"
#include "ike/cert.hpp"
#include "ike/eap.hpp"
#include "ike/keymat.hpp"
#include "ike/log_budget.hpp"
#include "ike/message.hpp"
#include "ike/proposal.hpp"
#include "ike/users.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace esptun::ike {

using Clock = std::chrono::steady_clock;

/// How an IKE message travels: plain on UDP 500, or on the ESP port (4500)
/// behind the four-byte non-ESP marker (RFC 3948 section 2.2).
enum class Port : uint8_t { ike, natt };

/// An IKE identity (section 3.5) and how it was written.
struct Identity {
	IdType type = IdType::fqdn;
	std::vector<uint8_t> data;
	friend bool operator==(const Identity&, const Identity&) = default;
};
/// "192.0.2.1" / "2001:db8::1" -> address, "user@example.com" -> RFC822,
/// "CN=gw, O=Example" (anything with '=') -> DER_ASN1_DN, "@example.com" or
/// anything else -> FQDN (without a leading '@'). nullopt for empty text or
/// a DN that does not parse.
std::optional<Identity> parse_identity(std::string_view text);
std::string identity_text(const Identity& id);
/// The same identity: byte for byte, or for DNs the same name (X509_NAME_cmp).
bool same_identity(const Identity& a, const Identity& b);
/// A template's pattern (PeerPolicy::remote_pattern) matches @text (an
/// identity_text()): '*' stands for any run of characters, the rest must
/// be equal, ASCII letters in either case.
bool pattern_matches(std::string_view pattern, std::string_view text) noexcept;

/// IKE fragments (RFC 7383) are at most this long as IP datagrams (IP and
/// UDP headers included, as strongSwan's charon.fragment_size counts): the
/// IPv6 minimum MTU, which also passes every IPv4 path that carries
/// ordinary full-size packets. Section 2.5.1 leaves the size to the sender.
inline constexpr uint32_t kDefaultFragmentSize = 1280;
/// The smallest fragment size accepted: the IPv4 datagram every host must
/// take (RFC 791); a smaller one buys nothing and multiplies the fragments.
inline constexpr uint32_t kMinFragmentSize = 576;

/// A gateway that clients are sent to by IKE Redirect (RFC 5685 section
/// 10): its identity as the REDIRECT notify carries it.
struct RedirectTarget {
	enum class Type : uint8_t { ipv4 = 1, ipv6 = 2, fqdn = 3 };
	Type type = Type::ipv4;
	std::vector<uint8_t> data; ///< 4 or 16 address bytes, or the name (1-255 bytes)
	friend bool operator==(const RedirectTarget&, const RedirectTarget&) = default;
};
/// "192.0.2.1", "2001:db8::1" or a DNS name ("gw2.example.net": letters,
/// digits, '-' and '.', at most 255 bytes); nullopt for anything else.
std::optional<RedirectTarget> parse_redirect_target(std::string_view text);
std::string redirect_target_text(const RedirectTarget& t);
/// The data of a REDIRECT or REDIRECTED_FROM notify: type, length, identity,
/// then @nonce (the initiator's Ni in an IKE_SA_INIT answer, else empty).
std::vector<uint8_t> redirect_data(const RedirectTarget& t, std::span<const uint8_t> nonce = {});
/// Reads redirect_data() back: the target and the nonce data after it;
/// nullopt for an unknown type or a length that does not fit.
std::optional<std::pair<RedirectTarget, std::vector<uint8_t>>>
parse_redirect_data(std::span<const uint8_t> data);

/**
 * RedirectPolicy - a gateway's use of IKE Redirect (RFC 5685): which
 * clients it sends to the gateways in @to (taken in turn) instead of
 * serving them. Only clients that announced REDIRECT_SUPPORTED in
 * IKE_SA_INIT can be sent; the others are served as usual.
 */
struct RedirectPolicy {
	enum class When : uint8_t {
		never,    ///< redirect nobody
		capacity, ///< new clients, while @capacity peers or more hold an IKE SA
		share,    ///< @share_percent of new clients (none that was redirected here)
		all,      ///< every new client, and established ones by INFORMATIONAL (maintenance)
	};
	When when = When::never;
	std::vector<RedirectTarget> to; ///< new clients spread over them by a hash, established ones in turn
	size_t capacity = 0;
	unsigned share_percent = 0; ///< 1-100
	/// When::all: established clients sent away per second at most, so
	/// that they do not all arrive at the other gateways at once.
	unsigned move_rate = 100;
};
std::string_view redirect_when_name(RedirectPolicy::When w) noexcept;

/// Which side of EAP (RFC 7296 section 2.16) we are for a peer.
enum class EapRole : uint8_t {
	none,   ///< no EAP: both sides authenticate with AUTH (PSK or certificates)
	server, ///< gateway: we sign with our certificate, the peer authenticates by EAP
	client, ///< client: the gateway signs with its certificate, we authenticate by EAP
};

/// "EAP-MSCHAPv2", "EAP-TLS" (or "EAP type N") for log lines and status.
std::string eap_method_name(uint8_t type);

/// One peer keyed by IKE, as configured.
struct PeerPolicy {
	std::string name;
	SecretBytes psk; ///< never logged; wiped when freed
	/// Certificate authentication, both ways, when both are set (then psk
	/// is unused): our certificate, chain and key, and the CAs (with CRLs)
	/// the peer's certificate must lead to (ike/cert.hpp).
	std::shared_ptr<const Credentials> credentials;
	std::shared_ptr<const TrustStore> trust;
	/// An RSA key of ours signs AUTH with RSASSA-PSS (RFC 7427 with RFC
	/// 4055 parameters) instead of PKCS#1 v1.5.
	bool rsa_pss = false;
	/// EAP: our role and the method (eap::type::mschapv2 or eap::type::tls).
	/// Server: credentials sign our AUTH; trust verifies EAP-TLS client
	/// certificates (unused for MSCHAPv2). Client: trust verifies the
	/// gateway's certificate; credentials are our EAP-TLS certificate.
	EapRole eap_role = EapRole::none;
	uint8_t eap_method = 0;
	/// Gateway: the users_file; needed for EAP-MSCHAPv2 (their passwords),
	/// optional for a template (per-user addresses and allowed_ips).
	std::shared_ptr<const Users> users;
	std::string eap_identity;  ///< client: our EAP-Identity and MSCHAPv2 name
	SecretString eap_password; ///< client, MSCHAPv2; wiped when freed
	/// We authenticate with a signature (certificates, with or without EAP after it).
	bool we_sign() const noexcept {
		return credentials && (eap_role == EapRole::server || (eap_role == EapRole::none && trust));
	}
	/// The peer authenticates with a signature we verify against trust.
	bool peer_signs() const noexcept {
		return trust && (eap_role == EapRole::client || (eap_role == EapRole::none && credentials));
	}
	Identity local_id, remote_id;
	/// A template (gateway only): not one peer but every peer whose IDi
	/// matches this pattern ('*' stands for any run of characters, the rest
	/// must match identity_text() exactly), remote_id unused. Each user that
	/// authenticates becomes an instance: a peer of its own, made by the
	/// engine from this policy (Host::instance_added()), with its own IKE
	/// SA, CHILD_SAs and virtual address, gone with its last IKE SA.
	/// Empty: an ordinary peer with the one identity remote_id.
	std::string remote_pattern;
	/// Set by the engine on an instance: the index of its template, and the
	/// user it serves (Users' key: what authentication proved).
	std::optional<size_t> template_of;
	std::string instance_user;
	bool is_template() const noexcept { return !remote_pattern.empty(); }
	std::vector<IkeSuite> ike_proposals;
	std::vector<EspSuite> esp_proposals;
	std::vector<IpPrefix> allowed_ips; ///< the peer's side of every CHILD_SA
	/// Our side of every CHILD_SA: what the peer may reach through us. The
	/// peer's TSr is narrowed to it, and inbound ESP to elsewhere is dropped.
	/// Empty: any address (0.0.0.0/0 and ::/0).
	std::vector<IpPrefix> local_ts;
	std::optional<Endpoint> endpoint; ///< where to initiate to (IKE and ESP go there)
	bool initiate = false;
	/// Initiator: announce REDIRECT_SUPPORTED and follow a gateway's
	/// REDIRECT to an address (RFC 5685). Off where the host cannot reach
	/// another gateway outside the tunnel (a route_all client's host route
	/// keeps only the configured one there).
	bool follow_redirects = true;
	uint32_t dpd_interval_s = 30; ///< 0 = no liveness checks of our own
	/// Initiator (a client without addresses of its own): ask for a virtual
	/// address and DNS servers in IKE_AUTH (configuration payload, section 3.15).
	bool request_address = false;
	/// Responder: the virtual addresses this peer gets when it asks; for a
	/// family without one here, Host::lease_address() is asked.
	std::vector<IpAddress> assign;
	std::vector<IpAddress> dns;    ///< responder: DNS servers handed out with them
	uint32_t child_rekey_s = 3600; ///< we rekey each CHILD_SA after this (minus up to 10%); 0 = never
	uint32_t ike_rekey_s = 14400;  ///< the same for the IKE SA
	/// We also rekey a CHILD_SA once either direction of it has carried this
	/// many inner bytes, or packets; 0 = no such limit. Without ESN, a
	/// CHILD_SA is always rekeyed before its 32-bit sequence numbers run out
	/// (kSeqRekeyAt).
	uint64_t child_rekey_bytes = 0, child_rekey_packets = 0;
	/// Encrypted messages longer than this (as IP datagrams) go as RFC 7383
	/// fragments of at most this size, when the peer supports them.
	uint32_t fragment_size = kDefaultFragmentSize;
};

/// A CHILD_SA without ESN is rekeyed once either direction's sequence
/// number passes this: 2^28 numbers (268 million packets, about 27 s at 10
/// million packets a second) before the 32-bit counter would wrap, which
/// RFC 4303 section 3.3.3 forbids. Should the rekey not be done by then,
/// the data path stops sending on the old SA (counted as seq_exhausted)
/// rather than wrap.
inline constexpr uint64_t kSeqRekeyAt = (uint64_t(1) << 32) - (uint64_t(1) << 28);

/// One CHILD_SA for the host to install: keys for both directions.
struct ChildKeys {
	uint32_t spi_in = 0;  ///< we receive with it (allocated through Host)
	uint32_t spi_out = 0; ///< the peer receives with it
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = false;
	SecretBytes enc_in, auth_in, enc_out, auth_out; ///< wiped when freed
	Endpoint remote;                                ///< where ESP goes
	/// Our side of the CHILD_SA as negotiated: inbound packets must be
	/// addressed inside it (RFC 4301 section 5.2).
	std::vector<TrafficSelector> local_ts;
};

/// Traffic one CHILD_SA has carried so far (inner packets and bytes).
struct ChildUsage {
	uint64_t out_bytes = 0, out_packets = 0;
	uint64_t in_bytes = 0, in_packets = 0;
	uint64_t out_seq = 0; ///< the highest outbound sequence number used
	uint64_t in_seq = 0;  ///< the highest inbound sequence number accepted
};

/// How much an engine log line matters; the host maps it to its own levels
/// (ike/ does not know service/'s logger).
enum class LogLevel : uint8_t { error, warning, info, debug };

/// What the engine needs from the service around it.
class Host {
public:
	virtual ~Host() = default;
	/// Sends @msg (an IKE message, without the non-ESP marker) to @to.
	virtual void send(Port via, const Endpoint& to, std::span<const uint8_t> msg) = 0;
	/// Our address as the peer at @to sees it as destination (for NAT detection).
	virtual std::optional<Endpoint> local_endpoint(Port via, const Endpoint& to) = 0;
	/// A fresh inbound SPI, reserved until installed or released; nullopt
	/// when none is free (the SA table is full): that exchange is refused
	/// with NO_ADDITIONAL_SAS (RFC 7296 section 3.10.1).
	virtual std::optional<uint32_t> allocate_spi() = 0;
	virtual void release_spi(uint32_t spi) = 0;
	/// Installs both directions; @replace_out: the new outbound SA replaces the
	/// current one now (false: keep sending on the old one until switch_outbound).
	/// Return: false when it could not (the host has logged why, and neither
	/// direction nor the SPI's reservation is left behind): the exchange fails.
	virtual bool install_child(size_t peer, const ChildKeys& keys, bool replace_out) = 0;
	/// Makes the CHILD_SA whose inbound SPI is @spi_in the one we send with.
	virtual void switch_outbound(size_t peer, uint32_t spi_in) = 0;
	/// Removes the inbound SA @spi_in, and the outbound SA @spi_out if it is
	/// still the one the peer's packets are sent with (then nothing is sent
	/// until a new CHILD_SA is installed).
	virtual void remove_child(size_t peer, uint32_t spi_in, uint32_t spi_out) = 0;
	/// Traffic so far of the CHILD_SA @spi_in / @spi_out, for rekeys by
	/// volume; nullopt when the host cannot tell (then only time rekeys it).
	virtual std::optional<ChildUsage> child_usage(size_t /*peer*/, uint32_t /*spi_in*/,
	                                              uint32_t /*spi_out*/) {
		return std::nullopt;
	}
	/// Wall-clock-free activity: when the peer's last authenticated ESP packet came.
	virtual std::optional<Clock::time_point> last_esp_rx(size_t peer) = 0;
	/// The gateway assigned us @addresses and @dns (configuration payload):
	/// called before the CHILD_SA that uses them is installed.
	virtual void assigned(size_t /*peer*/, std::span<const IpAddress> /*addresses*/,
	                      std::span<const IpAddress> /*dns*/) {}
	/// Gateway: a virtual address of @family from the address pool for @peer
	/// (which has no fixed one of that family), the one it holds if any;
	/// nullopt when there is no pool of that family or it is full.
	virtual std::optional<IpAddress> lease_address(size_t /*peer*/, Family /*family*/) {
		return std::nullopt;
	}
	/// Gateway: @peer's last IKE SA is gone; its pool addresses go back.
	virtual void release_addresses(size_t /*peer*/) {}
	/**
	 * instance_added() - a user of a template authenticated
	 * @instance: the index peers()[instance] now holds its policy at (a new
	 *            index, or the slot of an instance that has ended); its
	 *            template_of names the template, its allowed_ips are the
	 *            user's own (fixed addresses as host prefixes, then networks)
	 *
	 * The host sets up what it keeps per peer for it. Called before any
	 * other callback names @instance. Return: false when it cannot (the host
	 * has logged why): the user is refused, nothing is left behind.
	 */
	virtual bool instance_added(size_t /*instance*/) { return false; }
	/// instance_removed() - @instance's last IKE SA is gone (or its template
	/// was removed): after release_addresses(), the host drops what
	/// instance_added() set up. The index may be given again later.
	virtual void instance_removed(size_t /*instance*/) {}
	/// Initiator: the first CHILD_SA of an IKE SA is up, and @remote is the
	/// peer's side as the responder narrowed it (section 2.9).
	virtual void child_selectors(size_t /*peer*/, std::span<const TrafficSelector> /*remote*/) {}
	/// An authenticated IKE message came from @to, a new address: ESP follows it.
	virtual void peer_moved(size_t /*peer*/, const Endpoint& /*to*/) {}
	/// Sends a NAT keepalive (one 0xff byte, RFC 3948 section 2.3) to @to on the ESP port.
	virtual void send_keepalive(const Endpoint& /*to*/) {}
	/// One line for the operator (never called per data packet).
	virtual void log(const std::string& line) = 0;
	/// One line at @level. Debug lines describe single IKE messages (never
	/// keys, nonces or other secrets) and are rate-limited by the engine.
	/// The default drops debug lines and passes the rest to log().
	virtual void log_at(LogLevel level, const std::string& line) {
		if (level != LogLevel::debug) log(line);
	}
	/// Whether the host wants debug lines: the engine builds none otherwise.
	virtual bool debug_enabled() const { return false; }
};

/// Counters of IKE traffic that was dropped before or at authentication.
struct IkeCounters {
	uint64_t received = 0, sent = 0;
	uint64_t malformed = 0;    ///< does not parse (RFC 7296 section 3)
	uint64_t unknown_sa = 0;   ///< SPIs of no IKE SA we have
	uint64_t bad_icv = 0;      ///< SK payload did not verify
	uint64_t auth_failed = 0;  ///< AUTH payload wrong or rejected by the peer
	uint64_t no_proposal = 0;  ///< nothing in common
	uint64_t cookies_sent = 0; ///< COOKIE demands under half-open load (section 2.6)
	uint64_t retransmits = 0;  ///< our requests sent again
	uint64_t half_open_dropped = 0;
	uint64_t logs_suppressed = 0; ///< log lines held back by the rate limit
	uint64_t sa_refused = 0;      ///< CHILD_SA or IKE SA refused: per-peer cap or SA table full
	uint64_t internal_errors = 0; ///< exchanges or timers ended by an exception
	// IKE_SA_INIT from unauthenticated initiators (half_open_dropped above:
	// the half-open table was full and no busier source could make room).
	/// Dropped before any DH: the source is at its half-open bound.
	uint64_t half_open_source_dropped = 0;
	/// Half-open SAs of the busiest source removed to make room for another.
	uint64_t half_open_evicted = 0;
	/// A returned cookie that did not verify (forged, or its secret retired).
	uint64_t cookies_rejected = 0;
	/// Under load: INVALID_KE_PAYLOAD asking for a cheaper group both sides allow.
	uint64_t groups_steered = 0;
	/// Initiator: unauthenticated errors in answer to our IKE_SA_INIT, noted
	/// while we keep waiting for a real answer (section 2.21.1).
	uint64_t init_errors_ignored = 0;
	// Message fragmentation (RFC 7383); a fragment whose ICV fails is bad_icv.
	uint64_t fragments_sent = 0;
	uint64_t fragments_received = 0; ///< verified and kept for reassembly
	/// Verified but not kept: fragmentation not negotiated, Fragment Number
	/// or Total Fragments out of range or inconsistent, a duplicate, or the
	/// reassembly bounds reached.
	uint64_t fragments_dropped = 0;
	/// Messages given up half reassembled: timed out, another message ID
	/// began, or more fragments announced (their reassembly restarts).
	uint64_t reassembly_abandoned = 0;
	/// EAP conversations that ended in EAP-Failure or were abandoned
	/// (malformed, out of order, too many rounds), either role.
	uint64_t eap_failed = 0;
	// IKE Redirect (RFC 5685). Gateway: new clients answered with REDIRECT
	// in IKE_SA_INIT; established ones sent a REDIRECT by INFORMATIONAL.
	uint64_t redirects_sent = 0;
	uint64_t redirects_established = 0;
	/// Client: redirects followed, and those not followed (a nonce that is
	/// not ours, a malformed or unusable target, or a loop).
	uint64_t redirects_followed = 0;
	uint64_t redirects_ignored = 0;
};

/// Status of one CHILD_SA for the status JSON.
struct ChildStatus {
	uint32_t spi_in = 0, spi_out = 0;
	std::string cipher;
	bool esn = false;
	std::string pfs; ///< key exchange group of the exchange that made it ("x25519"); empty: none
	int64_t age_s = 0;
	bool sending = true;                          ///< the outbound half is the peer's current one
	int64_t rekey_in_s = -1;                      ///< until our rekey; -1 = we do not rekey it
	std::vector<std::string> local_ts, remote_ts; ///< as prefixes: selector_strings()
};

/// Status of one IKE SA.
struct IkeSaStatus {
	std::string peer; ///< policy name, empty while unauthenticated
	std::string state;
	bool initiator = false;
	uint64_t spi_i = 0, spi_r = 0;
	std::string suite;
	std::string remote;
	int64_t age_s = 0;
	uint32_t child_rekeys = 0, ike_rekeys = 0;
	bool behind_nat = false;              ///< NAT detection says our address is translated
	int64_t rekey_in_s = -1;              ///< until our rekey; -1 = we do not rekey it
	std::vector<std::string> virtual_ips; ///< handed out (gateway) or received (client)
	std::vector<std::string> dns;
	/// How the peer authenticated: "psk", or its key and signature scheme;
	/// with certificates, its certificate's subject and issuer.
	std::string peer_auth;
	std::string peer_subject, peer_issuer;
	/// Gateway: the identity the peer's EAP authenticated (the MSCHAPv2 user
	/// name or the EAP-TLS certificate's subject); empty without EAP.
	std::string eap_identity;
	std::vector<ChildStatus> children;
};

struct ChildSa;
struct PendingRequest;

class Engine {
public:
	Engine(std::vector<PeerPolicy> peers, Host& host);
	~Engine();
	Engine(const Engine&) = delete;
	Engine& operator=(const Engine&) = delete;

	/// Starts the IKE SAs of peers with initiate = true.
	void start(Clock::time_point now);
	/// One received IKE message (the marker already stripped).
	void receive(Port via, const Endpoint& from, std::span<const uint8_t> msg, Clock::time_point now);
	/// Retransmissions, liveness checks, half-open expiry, restarts.
	void tick(Clock::time_point now);
	/// Sends a Delete for every established IKE SA (best effort, no waiting).
	void shutdown();

	// Live reload: peers come and go while the others keep their SAs. A
	// peer's index is never reused, so the host's per-index tables stay
	// valid; a removed peer keeps its slot in peers(), inactive.
	/**
	 * add_peer() - a peer added at run time
	 * @policy: its policy; its name and remote_id differ from every active peer's
	 * @now:    the time
	 *
	 * Its IKE proposals are accepted in IKE_SA_INIT from now on; once start()
	 * has run, an initiating peer with an endpoint is initiated at once.
	 * Return: its index, peers().size() before the call.
	 * Throws: std::invalid_argument for a name or remote_id an active peer
	 * has (nothing changed then), std::bad_alloc.
	 */
	size_t add_peer(PeerPolicy policy, Clock::time_point now);
	/**
	 * remove_peer() - a peer removed at run time
	 * @peer: its index
	 * @now:  the time
	 *
	 * Each established IKE SA of it gets a best-effort Delete; all of its
	 * SAs, CHILD_SAs, reserved SPIs and leased addresses go through Host.
	 * Then it is never matched in IKE_AUTH, initiated or listed in status(),
	 * and its PSK is wiped. Nothing else changes: other peers' SAs and
	 * timers are untouched. A removed peer is removed again as a no-op.
	 * Throws: std::out_of_range for an index never given, std::bad_alloc
	 * (nothing changed then); nothing once it has begun changing state.
	 */
	void remove_peer(size_t peer, Clock::time_point now);
	/**
	 * update_users() - a reload changed only the users file of template @tmpl
	 * @users: the new table (may be null: no users file)
	 * @now:   the time
	 *
	 * The template takes @users from now on. Connected users whose entry
	 * changed or went (a new password, address or network; removed from
	 * the file) are ended, each with a Delete, and log in again under the
	 * new entry; every other user keeps its SAs untouched.
	 * Return: how many users were ended.
	 * Throws: std::invalid_argument when @tmpl is no active template.
	 */
	size_t update_users(size_t tmpl, std::shared_ptr<const Users> users, Clock::time_point now);
	/**
	 * set_redirect() - the gateway's redirect policy from now on
	 * @policy: when (and where) to send clients elsewhere; When::never, or
	 *          an empty @policy.to, redirects nobody
	 *
	 * New IKE_SA_INITs follow it at once; with When::all, established
	 * clients that support redirects are sent away over the next ticks at
	 * @policy.move_rate a second. Nothing else changes.
	 */
	void set_redirect(RedirectPolicy policy);
	const RedirectPolicy& redirect_policy() const noexcept { return redirect_; }
	/// @peer was added and not removed (false for an index never given).
	bool peer_active(size_t peer) const noexcept { return peer < active_.size() && active_[peer]; }

	/// Every policy by index, removed ones included (see peer_active()).
	const std::vector<PeerPolicy>& peers() const noexcept { return peers_; }
	const IkeCounters& counters() const noexcept { return counters_; }
	/// Plaintext held for the peers' unfinished fragmented messages, all IKE SAs together.
	size_t reassembly_bytes() const noexcept { return reassembly_bytes_; }
	std::vector<IkeSaStatus> status(Clock::time_point now) const;
	/// Our SPI of every IKE SA held, half-open ones included, ascending into
	/// @out (reused, so a caller that asks often does not allocate). The
	/// service publishes them so workers can tell messages for our IKE SAs
	/// from a flood of strangers (datapath/ike_inbox.hpp).
	/// Changes whenever an IKE SA is added or removed, so a caller of
	/// our_spis() can tell that nothing changed without asking (with
	/// thousands of IKE SAs, asking after every message cost more than the
	/// message).
	uint64_t sas_version() const noexcept { return sas_version_; }
	void our_spis(std::vector<uint64_t>& out) const { out = spis_sorted_; }

	// Half-open responder SAs are counted in cost units: one unit is an
	// X25519 or ECP-256 key exchange, a MODP-2048 one is kModpCost units
	// (half_open_cost() in engine_init.cpp says why).
	/// From this much half-open load on, IKE_SA_INIT needs a cookie.
	static constexpr size_t kCookieThreshold = 64;
	/// At most this much half-open load at all; past it a new source takes
	/// room from the busiest one, and a request that cannot is dropped.
	static constexpr size_t kHalfOpenLimit = 4096;
	/// At most this much half-open load from one source (an IPv4 address or
	/// an IPv6 /64); more from it is dropped before any key exchange.
	static constexpr size_t kHalfOpenPerSource = 32;
	/// What a MODP-2048 key exchange costs in units (measured: 7.3 times X25519).
	static constexpr size_t kModpCost = 8;
	/// The cookie secret is replaced this often; the one before stays valid
	/// for one more period, so a cookie in flight still passes (section 2.6).
	static constexpr std::chrono::seconds kCookieSecretLifetime{120};
	/// NAT keepalive interval while behind a NAT (RFC 3948 section 4 suggests 20 s).
	static constexpr std::chrono::seconds kKeepaliveInterval{20};
	/// CHILD_SAs one peer may hold at once. A peer needs one per selector
	/// set, two while one rekeys and three in a rekey collision; more is a
	/// peer filling the shared SA table (4,096 slots) for everyone else.
	static constexpr size_t kMaxChildSasPerPeer = 16;
	/// IKE SAs one peer may hold at once: the current one and those it
	/// rekeyed recently, still in their grace period.
	static constexpr size_t kMaxIkeSasPerPeer = 3;
	/// An IKE SA the peer rekeyed is retired this long after, whether or not
	/// the peer deletes it (section 2.18 leaves the delete to the peer; a
	/// hostile one never sends it). Long enough for answers still in flight.
	static constexpr std::chrono::seconds kRekeyedIkeGrace{30};
	/// Initiator: at most this many redirects followed per peer within
	/// kRedirectLoopPeriod; past it they are ignored (RFC 5685 section 9:
	/// a loop between gateways must end).
	static constexpr size_t kMaxRedirects = 5;
	static constexpr std::chrono::seconds kRedirectLoopPeriod{300};
	/// Gateway: an established client sent elsewhere has this long to
	/// delete its IKE SA with us itself; then we delete it.
	static constexpr std::chrono::seconds kRedirectGrace{30};
	/// Instances of templates (users connected through one) at once, all
	/// templates together: past it a new user is refused. Each holds an IKE
	/// SA and a virtual address, so the address pool and the SA table are
	/// usually the tighter bounds.
	static constexpr size_t kMaxInstances = 65536;
	/// At most this many selectors in a narrowed set (section 2.9): an answer
	/// must fit the TS payload's one-byte count, and a bigger set is no use.
	static constexpr size_t kMaxNarrowedSelectors = 64;
	// Reassembly of the peer's fragmented messages (RFC 7383 section 2.6,
	// engine_fragments.cpp). Only fragments whose ICV verified count here.
	/// More Total Fragments than this is dropped: at the default fragment
	/// size, 64 fragments carry more than the largest IKE message.
	static constexpr uint16_t kMaxFragments = 64;
	/// Plaintext held for unfinished messages, per IKE SA (both directions together).
	static constexpr size_t kMaxReassemblyBytes = kMaxMessageLen;
	/// The same for all IKE SAs together: half-open SAs have keys and may
	/// send fragments, so the per-SA bound alone would let all of them hold
	/// thousands of times as much.
	static constexpr size_t kMaxReassemblyTotal = size_t(16) << 20;
	/// A message not complete this long after its first fragment is given
	/// up. The peer retransmits for about as long (section 2.1), and each
	/// retransmission resends every fragment, filling what was lost.
	static constexpr std::chrono::seconds kReassemblyTimeout{30};

	struct IkeSa;

private:
	IkeSa* find(uint64_t our_spi) noexcept;
	void receive_message(Port via, const Endpoint& from, std::span<const uint8_t> msg,
	                     Clock::time_point now);
	void tick_sa(IkeSa& sa, Clock::time_point now);
	void contain(const char* what, Clock::time_point now);
	void refuse_sa(IkeSa& sa, const std::string& why);
	size_t peer_children(size_t peer) const;
	size_t peer_ike_sas(size_t peer) const;
	void handle_init_request(Port via, const Endpoint& from, std::span<const uint8_t> msg,
	                         const Message& m, Clock::time_point now);
	void handle_init_response(IkeSa& sa, std::span<const uint8_t> msg, const Message& m,
	                          Clock::time_point now);
	void handle_auth_request(IkeSa& sa, std::span<const uint8_t> msg, std::vector<Payload>& inner,
	                         Clock::time_point now);
	void handle_auth_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	/// The rest of IKE_AUTH once the peer is authenticated (sa.peer set):
	/// the configuration payload and the first CHILD_SA from @request (the
	/// first IKE_AUTH message: with EAP, not the last), then @reply goes.
	void finish_auth_request(IkeSa& sa, const Header& req, const std::vector<Payload>& request,
	                         std::vector<Payload> reply, Clock::time_point now);
	/// Initiator: the rest of IKE_AUTH once the responder is authenticated.
	void finish_auth_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	/// Answers AUTHENTICATION_FAILED (after @extra) and closes @sa; @why is logged.
	void refuse_auth(IkeSa& sa, const Header& req, const std::string& why,
	                 std::vector<Payload> extra = {});
	/// Why @pol may not use the IKE SA's suite, or "".
	std::string suite_refusal(const IkeSa& sa, const PeerPolicy& pol) const;
	// EAP in IKE_AUTH (engine_eap.cpp).
	void begin_eap_server(IkeSa& sa, const Header& req, size_t peer, const IdPayload& idi,
	                      const std::vector<Payload>& inner, Clock::time_point now);
	void handle_eap_request(IkeSa& sa, const Header& req, std::vector<Payload>& inner,
	                        Clock::time_point now);
	void handle_eap_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	void fail_eap_server(IkeSa& sa, const Header& req, const std::string& why, bool send_failure);
	void handle_response(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	void handle_informational_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	void handle_create_child_request(IkeSa& sa, std::vector<Payload>& inner, Clock::time_point now);
	void handle_rekey_child_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
	                                 Clock::time_point now);
	void handle_rekey_ike_response(IkeSa& sa, PendingRequest& req, std::vector<Payload>& inner,
	                               Clock::time_point now);
	void handle_delete_child_response(IkeSa& sa, PendingRequest& req);
	void note_child_volume(IkeSa& sa, Clock::time_point now);
	bool start_child_rekey(IkeSa& sa, size_t child, Clock::time_point now,
	                       std::optional<DhGroup> group = std::nullopt);
	void start_ike_rekey(IkeSa& sa, Clock::time_point now);
	void send_child_deletes(IkeSa& sa, Clock::time_point now);
	void resolve_collision(IkeSa& sa, uint32_t old_spi_in);
	/// Starts an IKE SA for @peer: to its endpoint, or to @to after a
	/// redirect from @from (named in REDIRECTED_FROM).
	void initiate(size_t peer, Clock::time_point now, std::optional<Endpoint> to = std::nullopt,
	              std::optional<Endpoint> from = std::nullopt);
	// IKE Redirect (engine_redirect.cpp).
	/// The target a new client from @from (SPIi @spi_i) is sent to, or nullptr to serve it.
	const RedirectTarget* redirect_choice(const Endpoint& from, uint64_t spi_i, bool was_redirected);
	/// Initiator: a REDIRECT from the gateway of @sa (in IKE_SA_INIT when
	/// @in_init, then its nonce data must be our Ni; else by INFORMATIONAL).
	void follow_redirect(IkeSa& sa, const NotifyPayload& n, bool in_init, Clock::time_point now);
	/// Gateway, When::all: sends REDIRECT to @sa if it is a client due to go.
	bool move_established(IkeSa& sa, Clock::time_point now);
	void send_init(IkeSa& sa, Clock::time_point now);
	// Fragmentation (engine_fragments.cpp).
	std::vector<std::vector<uint8_t>> seal_message(IkeSa& sa, Header h, std::span<const Payload> inner);
	void transmit(IkeSa& sa, const std::vector<std::vector<uint8_t>>& datagrams,
	              std::span<const Payload> inner, const char* what = "sent");
	size_t datagram_limit(const IkeSa& sa) const;
	std::optional<std::vector<uint8_t>> reassemble(IkeSa& sa, const Endpoint& from,
	                                               std::span<const uint8_t> msg, const RawPayload& skf,
	                                               const Header& h, bool retransmitted_request,
	                                               Clock::time_point now, PayloadType& first);
	void expire_reassembly(IkeSa& sa, Clock::time_point now);
	void send_request(IkeSa& sa, Exchange ex, std::span<const Payload> inner, Clock::time_point now);
	void send_response(IkeSa& sa, const Header& req, std::span<const Payload> inner);
	void send_plain_notify(Port via, const Endpoint& to, const Header& req, uint16_t type,
	                       std::span<const uint8_t> data);
	void established(IkeSa& sa, Clock::time_point now);
	void close(IkeSa& sa, const std::string& why, bool restart, Clock::time_point now,
	           bool tell_peer = false);
	void remove_children(IkeSa& sa);
	void send_ike_delete(IkeSa& sa, Clock::time_point now);
	std::vector<IkeSuite> active_suites() const;
	void sweep();
	void sweep_all();
	using SaMap = std::map<uint64_t, std::unique_ptr<IkeSa>>;
	SaMap::iterator sweep_entry(SaMap::iterator it);
	/// The only ways an IKE SA becomes closed or established: each notes it
	/// for the next sweep().
	void mark_closed(IkeSa& sa);
	void mark_established(IkeSa& sa);
	/// A peer was added, removed or activated: the indexes below are stale.
	void peers_changed() noexcept;
	/// An IKE SA went into sas_ under @key (after the emplace): the SPI
	/// list and the per-peer index learn it.
	void note_added(uint64_t key);
	/// @sa's peer was set or changed: peer_sas_ follows.
	void index_peer(IkeSa& sa, uint64_t key);
	void unindex_peer(IkeSa& sa, uint64_t key);
	// Templates (engine_templates.cpp).
	/// The active peer IKE_AUTH's IDi @who names: an ordinary peer with that
	/// identity, else the first template whose pattern it matches.
	std::optional<size_t> match_peer(const Identity& who) const;
	/// The instance of template @tmpl for @user (who authenticated as @who):
	/// the one it has, else a new one. nullopt (and @why) when it cannot be made.
	std::optional<size_t> instantiate(size_t tmpl, const std::string& user, const Identity& who,
	                                  std::string& why);
	/// Ends the instances in ending_ that no IKE SA uses any more.
	void end_instances();
	ChildKeys child_keys(const IkeSa& sa, crypto::Cipher c, bool esn, uint32_t spi_in, uint32_t spi_out,
	                     bool we_initiated, std::span<const uint8_t> ni, std::span<const uint8_t> nr,
	                     std::span<const uint8_t> g_ir = {}) const;
	std::string peer_label(const IkeSa& sa) const;
	/// The peer's side of its CHILD_SAs: allowed_ips plus its leased addresses.
	std::vector<IpPrefix> peer_side(size_t peer) const;
	/// Our side of its CHILD_SAs: local_ts, or every address when it has none.
	std::vector<IpPrefix> local_side(size_t peer) const;
	std::vector<IpAddress> offer_addresses(IkeSa& sa, const PeerPolicy& pol, bool want4, bool want6);
	void log_limited(const std::string& line);
	// Debug lines, one per IKE message (engine_debug.cpp).
	bool debug_allowed(bool authenticated);
	void debug_received_plain(const Endpoint& from, size_t size, const Message& m);
	void debug_received(const IkeSa& sa, size_t size, const Header& h, std::span<const Payload> inner);
	void debug_dropped(const Endpoint& from, std::span<const uint8_t> msg, const char* why);
	void debug_sent(const IkeSa* sa, const Endpoint& to, std::span<const uint8_t> bytes,
	                std::span<const Payload> inner, const char* what = "sent");
	/// Our IKE_SA_INIT response's SIGNATURE_HASH_ALGORITHMS and CERTREQ
	/// (for the CAs of every active peer that uses certificates, at most
	/// kMaxCertreqCas); nothing when no peer does.
	std::vector<Payload> cert_init_payloads() const;
	/// IKE_AUTH with certificates: checks the peer's CERT and AUTH payloads
	/// in @inner against @pol; "" when they prove @who, else the reason.
	std::string verify_cert_auth(IkeSa& sa, const PeerPolicy& pol, const Identity& who,
	                             std::span<const Payload> inner, const AuthPayload& auth,
	                             std::span<const uint8_t> octets);
	std::vector<Payload> nat_detection(uint64_t spi_i, uint64_t spi_r, Port via, const Endpoint& remote);
	bool we_are_behind_nat(const Message& m, uint64_t spi_i, uint64_t spi_r, Port via,
	                       const Endpoint& remote);
	std::vector<uint8_t> cookie_for(const Endpoint& from, uint64_t spi_i, std::span<const uint8_t> ni,
	                                bool previous = false) const;
	bool cookie_valid(std::span<const uint8_t> cookie, const Endpoint& from, uint64_t spi_i,
	                  std::span<const uint8_t> ni) const;
	void rotate_cookie_secret(Clock::time_point now);
	bool admit_half_open(const Endpoint& from, size_t cost);
	void half_open_forget(IkeSa& sa);
	void note_init_error(IkeSa& sa, const NotifyPayload& n);

	std::vector<PeerPolicy> peers_;
	std::vector<bool> active_; ///< per peer: not removed
	bool started_ = false;     ///< start() ran: add_peer() initiates at once
	Host& host_;
	/// Bytes held by every IKE SA's reassembly (kMaxReassemblyTotal); before
	/// sas_, whose IKE SAs give their share back when destroyed.
	size_t reassembly_bytes_ = 0;
	std::map<uint64_t, std::unique_ptr<IkeSa>> sas_; ///< by our SPI
	uint64_t sas_version_ = 0;                       ///< see sas_version()
	std::vector<uint64_t> spis_sorted_;              ///< the keys of sas_, for our_spis()
	/// Per peer, our SPIs of its IKE SAs (closed ones until swept), so
	/// finding a peer's other SAs does not walk all of them.
	std::unordered_map<size_t, std::vector<uint64_t>> peer_sas_;
	std::vector<uint64_t> to_sweep_; ///< our SPIs of SAs sweep() must look at
	/// Built on first use after peers_changed(): configured (not template,
	/// not instance) peers by exact identity (type byte, then the bytes),
	/// the lowest index for each; the DN-typed ones apart, since DNs match
	/// by dn_equal(); the active templates in order; and what cert_init_payloads() returns. Templates'
	/// instances are in none of them, so a user's login does not make them stale.
	mutable std::unordered_map<std::string, size_t> peers_by_id_;
	mutable std::vector<size_t> dn_peers_, template_peers_;
	mutable std::optional<std::vector<Payload>> cert_init_cache_;
	mutable bool peer_index_valid_ = false;
	std::vector<Clock::time_point> restart_at_; ///< per peer: when to initiate again
	std::vector<uint32_t> restart_backoff_s_;
	std::vector<std::vector<IpAddress>> leased_; ///< per peer: from Host::lease_address()
	std::vector<IkeSuite> responder_suites_;     ///< union of the active peers' IKE proposals
	/// Instances by template and user; slots of ended ones, given again
	/// before peers_ grows; instances whose IKE SA went, checked in sweep().
	std::map<std::pair<size_t, std::string>, size_t, std::less<>> instances_;
	std::vector<size_t> free_slots_;
	std::vector<size_t> ending_;
	IkeCounters counters_;
	RedirectPolicy redirect_;
	size_t redirect_next_ = 0; ///< the target the next established client moved gets
	/// When::all: tokens for move_rate (established clients sent away), and
	/// when they were last topped up.
	double move_tokens_ = 0;
	Clock::time_point move_tokens_at_{};
	/// Initiator: per peer, when its recent redirects were followed (at most kMaxRedirects).
	std::unordered_map<size_t, std::vector<Clock::time_point>> redirected_at_;
	/// Cookie secrets (section 2.6): [0] current, [1] the one before; the
	/// version byte leads each cookie. Wiped when replaced and in ~Engine.
	struct CookieSecret {
		uint8_t version = 0;
		std::array<uint8_t, 32> key{};
	};
	std::array<CookieSecret, 2> cookie_secrets_{};
	Clock::time_point cookie_rotate_at_{}; ///< {}: not started (the first tick starts it)
	/// Half-open responder SAs per source (half_open_source()): their load
	/// in cost units and our SPIs, oldest first. Kept by handle_init_request
	/// and sweep(); at most kHalfOpenPerSource SPIs per source.
	struct HalfOpenSource {
		size_t load = 0;
		std::vector<uint64_t> spis;
	};
	std::map<std::array<uint8_t, 17>, HalfOpenSource> half_open_;
	size_t half_open_load_ = 0; ///< the sum of every source's load
	/// The message being handled, for an answer when a handler throws.
	struct Handling {
		uint64_t our_spi = 0;
		Header header;
		uint64_t sent_before = 0; ///< counters_.sent when the handler began
	};
	std::optional<Handling> handling_;
	Clock::time_point log_window_{};
	unsigned logs_in_window_ = 0;
	/// Debug lines (engine_debug.cpp): messages that did not authenticate
	/// (anyone can send them) get a small budget; those of IKE SAs whose
	/// keys verified them a larger one, so a busy peer's lines still show
	/// while a flood is held back.
	LogBudget debug_unauthenticated_{20, std::chrono::seconds(1), std::chrono::seconds(10)};
	LogBudget debug_authenticated_{200, std::chrono::milliseconds(50), std::chrono::seconds(10)};
};

/// Narrows @offered to what @allowed covers (section 2.9): each selector is
/// cut to its overlap with each prefix; empty overlaps vanish. Empty (as
/// for no overlap, answered TS_UNACCEPTABLE) when the result would have more
/// than Engine::kMaxNarrowedSelectors selectors.
std::vector<TrafficSelector> narrow(std::span<const TrafficSelector> offered,
                                    std::span<const IpPrefix> allowed);
/// A selector covering exactly @p (any protocol, all ports).
TrafficSelector selector_of(const IpPrefix& p);
/// The fewest prefixes that cover exactly @ts's address range (protocol and
/// ports aside); empty for a malformed range.
std::vector<IpPrefix> selector_prefixes(const TrafficSelector& ts);
/// Each selector as prefixes, e.g. "10.1.0.0/16", with " proto 6 ports 80-80"
/// when it is narrower than all protocols and ports.
std::vector<std::string> selector_strings(std::span<const TrafficSelector> ts);

} // namespace esptun::ike
