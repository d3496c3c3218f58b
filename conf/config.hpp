// Plain config structs for one endpoint, and the loader. conf/ is the only
// place that includes toml++; everything else sees these values.
#pragma once

#include "base/inet.hpp"
#include "crypto/esp_transform.hpp"
#include "ike/cert.hpp"
#include "ike/proposal.hpp"
#include "ike/users.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::conf {

inline constexpr uint16_t kDefaultPort = 4500; // RFC 3948 section 2.2
inline constexpr uint32_t kDefaultReplayWindow = 1024;
inline constexpr uint32_t kMaxReplayWindow = 65536;
/// tun_io vhost: inbound batches of at most this many packets skip an idle TX ring.
inline constexpr uint32_t kDefaultDirectWriteMax = 4;
inline constexpr uint32_t kMaxDirectWriteMax = 256; // the TX ring's size: a larger batch never fits
/// Underlay socket buffers (SO_RCVBUF/SO_SNDBUF, forced past net.core.*mem_max
/// when privileged): the kernel's ~208 KiB default overflows under bulk traffic.
inline constexpr uint32_t kDefaultSocketBuffer = 4u << 20;
inline constexpr uint32_t kMinSocketBuffer = 64u << 10;
inline constexpr uint32_t kMaxSocketBuffer = 1u << 30;
inline constexpr uint32_t kMaxWorkers = 64;
/// [tunnel] busy_poll_us and wake_poll_us: defaults and upper limit (microseconds).
inline constexpr uint32_t kDefaultBusyPollUs = 0;
inline constexpr uint32_t kDefaultWakePollUs = 50;
inline constexpr uint32_t kMaxPollUs = 1000;
/// [tunnel] queue_target_us and queue_interval_ms: the receive queue limit
/// (datapath/codel.hpp; docs/latency-under-load.md measures the defaults).
inline constexpr uint32_t kDefaultQueueTargetUs = 1000;
inline constexpr uint32_t kMaxQueueTargetUs = 100000;
inline constexpr uint32_t kDefaultQueueIntervalMs = 20;
inline constexpr uint32_t kMaxQueueIntervalMs = 1000;
inline constexpr uint16_t kDefaultIkePort = 500; // RFC 7296 section 2
inline constexpr uint32_t kDefaultDpdInterval = 30;
/// ike_fragment_size: ike::kDefaultFragmentSize (engine.hpp says why).
inline constexpr uint32_t kDefaultIkeFragmentSize = 1280;
inline constexpr size_t kMinPskLen = 16;
/// The largest config file load_config() reads.
inline constexpr size_t kMaxConfigSize = 16u << 20;

enum class TunIo : uint8_t { automatic, vhost, direct };
enum class Role : uint8_t { gateway, client };

/// The config spelling of @io: "auto", "vhost" or "direct".
std::string_view tun_io_name(TunIo io) noexcept;

/// Keys and SPI of one SA direction, already decoded from "0x..." hex.
struct SaConfig {
	uint32_t spi = 0;
	SecretBytes enc_key;  ///< CBC: AES key; GCM: key || salt (config key `key`); wiped when freed
	SecretBytes auth_key; ///< CBC-HMAC only
};

/// [[peer]] auth: how the two ends of an IKE peer authenticate. With EAP the
/// gateway signs with its certificate and the client authenticates by EAP.
enum class IkeAuth : uint8_t { psk, cert, eap_mschapv2, eap_tls };
/// The config spelling: "psk", "cert", "eap-mschapv2", "eap-tls".
std::string_view ike_auth_name(IkeAuth a) noexcept;

/// A peer keyed by IKEv2 (it has psk, psk_file, cert_file or auth instead of [peer.out]/[peer.in]).
struct IkePeerConfig {
	IkeAuth auth = IkeAuth::psk;
	/// Gateway: the users of users_file (eap-mschapv2: NT hashes, wiped when
	/// freed; a template: fixed addresses and networks); null without one.
	std::shared_ptr<const ike::Users> users;
	/// Client, EAP: our EAP identity (the MSCHAPv2 user name).
	std::string eap_identity;
	/// Client, eap-mschapv2: our password (eap_password or eap_password_file).
	SecretString eap_password;
	SecretBytes psk; ///< wiped when freed; never in a message; empty with certificates
	/// Certificate authentication (cert_file, private_key_file,
	/// cert_chain_file; ca_dir, crl_files), read at load time: both set, or neither.
	std::shared_ptr<const ike::Credentials> credentials;
	std::shared_ptr<const ike::TrustStore> trust;
	std::string local_id;  ///< our identity towards this peer ([tunnel] local_id unless set)
	std::string remote_id; ///< the identity the peer must prove; default: the peer's name
	/// A template's identity pattern (a remote_id with '*'; remote_id is then
	/// empty): ike::PeerPolicy::remote_pattern.
	std::string remote_pattern;
	/// rsa_pss: our RSA key signs AUTH with RSASSA-PSS (else PKCS#1 v1.5).
	bool rsa_pss = false;
	std::vector<ike::IkeSuite> ike_proposals = ike::default_ike_proposals();
	std::vector<ike::EspSuite> esp_proposals = ike::default_esp_proposals();
	/// What the peer may reach through us (our side of its CHILD_SAs, as
	/// networks); empty: any address.
	std::vector<IpPrefix> local_ts;
	uint32_t dpd_interval =
	    kDefaultDpdInterval;         ///< seconds without traffic before a liveness check; 0 = off
	uint32_t rekey_time = 3600;      ///< seconds until we rekey a CHILD_SA (less up to 10%); 0 = never
	uint32_t ike_rekey_time = 14400; ///< the same for the IKE SA
	uint64_t rekey_bytes = 0;   ///< we rekey a CHILD_SA after this many bytes either way; 0 = no limit
	uint64_t rekey_packets = 0; ///< the same in packets
	bool initiate = false;      ///< default: true when the peer has an endpoint
	/// The peer may use modp1024, prfsha1 and sha1 in its proposals (old gear
	/// that can do nothing better); the gateway warns at start and reload
	bool allow_weak = false;
	uint32_t fragment_size = kDefaultIkeFragmentSize; ///< [[peer]] ike_fragment_size; default: [tunnel]'s
};

struct PeerConfig {
	std::string name;
	std::optional<Endpoint> endpoint;  ///< absent: learned from the first authenticated packet
	std::vector<IpPrefix> allowed_ips; ///< stored as networks (host bits cleared)
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = true;
	uint32_t replay_window = kDefaultReplayWindow; ///< 0 disables the check
	SaConfig out;                                  ///< static SA we send with (no ike)
	SaConfig in;                                   ///< static SA we receive with (no ike)
	std::optional<IkePeerConfig> ike;              ///< set: keys come from IKEv2
	int line = 0;                                  ///< where the [[peer]] table starts, for messages
};

/// [tunnel] io_engine: how the underlay socket's batches reach the kernel.
enum class IoEngine { automatic, uring, mmsg };

struct TunnelConfig {
	std::string interface = "esp0";
	std::vector<IpPrefix> addresses; ///< interface addresses, host bits kept
	Endpoint listen;                 ///< default 0.0.0.0:4500
	uint32_t mtu = 0;                ///< 0 = derive from underlay MTU and cipher overhead
	TunIo tun_io = TunIo::automatic;
	/// vhost only: an inbound batch of at most this many packets is written to
	/// the tun directly when the TX ring is idle (would need a kick); 0 = always the ring
	uint32_t direct_write_max = kDefaultDirectWriteMax;
	/// CBC-HMAC suites: one-pass stitched AES+HMAC or two passes; auto picks
	/// stitched where the CPU supports it (GCM is unaffected)
	crypto::CryptoImpl crypto_impl = crypto::CryptoImpl::automatic;
	/// Send same-sized datagrams to one peer as UDP GSO trains (switched off
	/// at run time when the kernel cannot; see platform/udp_socket.hpp)
	bool udp_gso = true;
	/// Receive same-sized datagrams from one peer as one UDP GRO buffer
	/// (direct tun I/O with the mmsg engine; off with vhost rings, whose
	/// receive buffers are one packet long)
	bool udp_gro = true;
	/// direct tun I/O: IFF_VNET_HDR + TUNSETOFFLOAD, so the kernel hands over
	/// and takes TCP/UDP super-packets (datapath/offload_tun_port.hpp)
	bool tun_offload = true;
	/// Data-path threads, each with its own tun queue (IFF_MULTI_QUEUE) and
	/// underlay socket (SO_REUSEPORT); 0 = one per CPU this process may use,
	/// at most one per peer
	uint32_t workers = 0;
	/// Underlay batching: recvmmsg/sendmmsg or io_uring (platform/udp_engine.hpp)
	IoEngine io_engine = IoEngine::automatic;
	uint32_t socket_buffer = kDefaultSocketBuffer; ///< bytes, each direction
	/// After a pass that moved packets, a worker polls this long for more
	/// before it sleeps (a sleeping worker costs its waker an IPI and itself a
	/// wake-up): lower latency for more CPU time. 0 (default) = sleep at
	/// once. Off when the process has only one CPU.
	uint32_t busy_poll_us = kDefaultBusyPollUs;
	/// After a pass that followed an idle spell (>= 1 ms asleep), a worker
	/// polls this long for the answer before it sleeps again: one window per
	/// idle spell, so bulk traffic never pays and sparse request/answer
	/// traffic (ping, SSH, DNS) skips a wake-up. 0 = off. Off when the
	/// process has only one CPU. busy_poll_us, when set, applies instead.
	uint32_t wake_poll_us = kDefaultWakePollUs;
	/// The receive queue limit: datagrams that waited longer than this in
	/// the underlay socket's receive queue, for longer than
	/// queue_interval_ms, are marked CE (ECN-capable inner packets) or
	/// dropped (the others), CoDel's way (RFC 8289), so that a bulk flow
	/// cannot keep a standing queue in front of everyone else's packets.
	/// 0 = off.
	uint32_t queue_target_us = kDefaultQueueTargetUs;
	uint32_t queue_interval_ms = kDefaultQueueIntervalMs;
	/// The workers run under SCHED_FIFO (lowest band) while they have work
	/// and wait for a CPU, so a packet is handled when it arrives rather
	/// than when the scheduler next gives the worker its share
	/// (datapath/precedence.hpp); false: ordinary threads. Key
	/// worker_priority, "realtime" or "normal"; the loader's default is
	/// realtime for a client, normal for a gateway.
	bool realtime_workers = false;
	std::string control_socket; ///< default /run/esptun/<interface>.sock
	/// Where outbound sequence numbers are kept across restarts
	/// (<state_dir>/esptun.seq, keyed by a fingerprint of each key: service/seq_state.hpp)
	std::string state_dir = "/var/lib/esptun";
	/// After set-up: run as `user` with CAP_NET_ADMIN only, no new privileges
	/// and a seccomp allow-list (platform/privileges.hpp); false keeps root's
	/// privileges (debugging only)
	bool drop_privileges = true;
	std::string user = "nobody"; ///< who the endpoint runs as once set up
	bool route_all = false;      ///< client only: default route through the tunnel
	/// Client with route_all only: "unreachable" /1 routes of both families
	/// lie underneath the tunnel's and outlive a killed client, so nothing
	/// leaves outside the tunnel until a clean stop (service/tun_setup.hpp).
	bool kill_switch = false;
	/// UDP port for IKE_SA_INIT from initiators that start on port 500 (RFC
	/// 7296 section 2.23); 0 = IKE only on the listen port. Used when a peer has psk.
	uint16_t ike_port = kDefaultIkePort;
	std::string local_id; ///< our IKE identity; default: the host name
	/// Gateway: the networks virtual client addresses come from (each at most
	/// 2^16 addresses). An IKE peer whose allowed_ips holds a host address
	/// inside one is given that address when it asks (configuration payload,
	/// RFC 7296 section 3.15); any other gets a free one leased for as long
	/// as its IKE SA lives.
	std::vector<IpPrefix> address_pool;
	std::vector<IpAddress> dns; ///< gateway: DNS servers handed to clients with their address
	/// IKE messages longer than this (as IP datagrams, headers included) go
	/// as RFC 7383 fragments of at most this size to peers that take them;
	/// the default of every IKE peer, which may set its own.
	uint32_t ike_fragment_size = kDefaultIkeFragmentSize;
};

/// [redirect]: limits on its keys.
inline constexpr size_t kMaxRedirectTargets = 16;
inline constexpr uint32_t kMaxRedirectCapacity = 10'000'000;
inline constexpr uint32_t kDefaultRedirectMoveRate = 100;
inline constexpr uint32_t kMaxRedirectMoveRate = 100'000;

/// [redirect] when: which clients a gateway sends elsewhere
/// (ike::RedirectPolicy::When, which the IKE service turns it into).
enum class RedirectWhen : uint8_t { never, capacity, share, all };
/// The config spelling: "never", "capacity", "share", "all".
std::string_view redirect_when_name(RedirectWhen w) noexcept;

/**
 * RedirectConfig - [redirect]: a gateway sends IKE clients to other
 * gateways (IKE Redirect, RFC 5685) instead of serving them. Only clients
 * that announce REDIRECT_SUPPORTED are sent; a reload applies a change
 * without touching any peer.
 */
struct RedirectConfig {
	RedirectWhen when = RedirectWhen::never;
	/// Where clients go (new ones spread by a hash, established ones in
	/// turn): addresses and DNS names as
	/// ike::redirect_target_text() writes them (so that a diff ignores the
	/// spelling of an IPv6 address); empty only with when = never.
	std::vector<std::string> to;
	uint32_t capacity = 0; ///< when = capacity: peers with an IKE SA from which new clients go
	uint32_t share = 0;    ///< when = share: the percentage of new clients that go
	/// when = all: established clients sent away per second at most
	uint32_t move_rate = kDefaultRedirectMoveRate;
	friend bool operator==(const RedirectConfig&, const RedirectConfig&) = default;
};

struct Config {
	std::string source; ///< file path (or a name given to parse_config), for messages
	Role role = Role::gateway;
	TunnelConfig tunnel;
	std::vector<PeerConfig> peers;
	RedirectConfig redirect; ///< gateway only; when = never without a [redirect] table
};

/// Thrown for every config problem: what() reads "FILE:LINE: message. how to fix".
class ConfigError : public std::runtime_error {
public:
	ConfigError(const std::string& source, int line, const std::string& message);
	int line() const noexcept { return line_; }
	/// The parts what() is made of, so the error can be rebuilt elsewhere
	/// (service/config_reader.cpp carries it across a process boundary).
	const std::string& source() const noexcept { return source_; }
	const std::string& message() const noexcept { return message_; }

private:
	std::string source_;
	std::string message_;
	int line_;
};

/// The folder of control sockets when [tunnel] control_socket is not set.
inline constexpr std::string_view kControlSocketDir = "/run/esptun";
/// default_control_socket() - "/run/esptun/<interface>.sock"
std::string default_control_socket(std::string_view interface);

/**
 * load_config() - read, parse and validate a config file for @role.
 * Key files named by *_file keys are read relative to the config's folder and
 * must not be readable by group or others. Throws ConfigError; touches no
 * device, socket or route.
 */
Config load_config(const std::filesystem::path& path, Role role);

class FileSource;
/**
 * load_config() - the same with every file (the config and its key files)
 * read through @files (file_source.hpp): how service/config_reader.cpp
 * records a load as root and replays it unprivileged.
 */
Config load_config(const std::filesystem::path& path, Role role, FileSource& files);

/**
 * parse_config() - the same from text already in memory (tests, fuzzing).
 * @source:   the name messages use for the text
 * @base_dir: folder that relative *_file paths are resolved against
 */
Config parse_config(std::string_view text, const std::string& source, Role role,
                    const std::filesystem::path& base_dir = ".");

/**
 * weak_peer_warnings() - one line per IKE peer of @config whose proposals
 * name weak algorithms (allowed by its allow_weak = true), naming the peer
 * and them: the gateway logs them as warnings at start and at every reload,
 * `check` prints them.
 */
std::vector<std::string> weak_peer_warnings(const Config& config);

} // namespace esptun::conf
