// IKEv2 messages (RFC 7296 section 3): the header, every payload esptun
// reads or writes, and the codec between them and bytes. Parsing is reachable
// before any authentication, so it trusts no length, count or type: anything
// malformed is reported as a ParseError, never a crash or an unbounded loop.
//
// Encrypted payloads (SK, section 3.14) are parsed as opaque: parse_message()
// records where the SK payload starts so ike/keymat.hpp can verify and
// decrypt it, and parse_payloads() then reads the decrypted inner chain.
#pragma once

#include "base/inet.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

namespace esptun::ike {

inline constexpr size_t kHeaderLen = 28;
inline constexpr size_t kGenericHeaderLen = 4;
/// Largest IKE message esptun accepts or builds (RFC 7296 section 2: at
/// least 1280 must work; 64 KiB is the UDP limit).
inline constexpr size_t kMaxMessageLen = 65535;
/// More payloads than this in one message (or one SK body) is malformed.
inline constexpr size_t kMaxPayloads = 64;

enum class Exchange : uint8_t {
	ike_sa_init = 34,
	ike_auth = 35,
	create_child_sa = 36,
	informational = 37,
};

enum class PayloadType : uint8_t {
	none = 0,
	sa = 33,
	ke = 34,
	idi = 35,
	idr = 36,
	cert = 37,
	certreq = 38,
	auth = 39,
	nonce = 40,
	notify = 41,
	del = 42,
	vendor = 43,
	tsi = 44,
	tsr = 45,
	sk = 46,
	cp = 47,
	eap = 48,
	skf = 53, ///< encrypted fragment, RFC 7383
};

/// Header flags (section 3.1).
inline constexpr uint8_t kFlagInitiator = 0x08;
inline constexpr uint8_t kFlagVersion = 0x10;
inline constexpr uint8_t kFlagResponse = 0x20;
inline constexpr uint8_t kVersion2 = 0x20; ///< major 2, minor 0

struct Header {
	uint64_t spi_i = 0;
	uint64_t spi_r = 0;
	PayloadType next = PayloadType::none; ///< first payload (filled in by build_message)
	uint8_t version = kVersion2;
	Exchange exchange = Exchange::ike_sa_init;
	uint8_t flags = 0;
	uint32_t message_id = 0;
	uint32_t length = 0; ///< whole message; filled in by build_message

	bool from_initiator() const noexcept { return flags & kFlagInitiator; }
	bool is_response() const noexcept { return flags & kFlagResponse; }
	friend bool operator==(const Header&, const Header&) = default;
};

/// Protocol IDs in proposals, notifies and deletes (section 3.3.1).
enum class Protocol : uint8_t { none = 0, ike = 1, ah = 2, esp = 3 };

/// Transform types (section 3.3.2).
enum class TransformType : uint8_t { encr = 1, prf = 2, integ = 3, dh = 4, esn = 5 };

/// Attribute type 14: key length in bits (section 3.3.5), the only attribute defined.
inline constexpr uint16_t kAttrKeyLength = 14;

/// One transform (section 3.3.2). A received transform that carries an
/// attribute other than a TV Key Length is left out of its Proposal: section
/// 3.3.6 makes such a transform unacceptable, and leaving it out has exactly
/// that effect on negotiation.
struct Transform {
	TransformType type = TransformType::encr;
	uint16_t id = 0;
	uint16_t key_bits = 0; ///< the Key Length attribute; 0 = absent
	friend bool operator==(const Transform&, const Transform&) = default;
};

struct Proposal {
	uint8_t number = 1;
	Protocol protocol = Protocol::ike;
	std::vector<uint8_t> spi; ///< 0 bytes (IKE_SA_INIT), 8 (IKE rekey) or 4 (ESP)
	std::vector<Transform> transforms;
	friend bool operator==(const Proposal&, const Proposal&) = default;
};

struct SaPayload {
	std::vector<Proposal> proposals;
	friend bool operator==(const SaPayload&, const SaPayload&) = default;
};

struct KePayload {
	uint16_t group = 0;
	std::vector<uint8_t> data;
	friend bool operator==(const KePayload&, const KePayload&) = default;
};

/// ID types (section 3.5).
enum class IdType : uint8_t { ipv4 = 1, fqdn = 2, rfc822 = 3, ipv6 = 5, der_asn1_dn = 9, key_id = 11 };

struct IdPayload {
	bool initiator = true; ///< IDi (35) or IDr (36)
	IdType type = IdType::fqdn;
	std::vector<uint8_t> data;
	/// The payload body after the generic header (type, 3 reserved, data):
	/// what the AUTH computation hashes (section 2.15, "RestOfInitIDPayload").
	std::vector<uint8_t> body() const;
	friend bool operator==(const IdPayload&, const IdPayload&) = default;
};

/// Authentication methods (section 3.8 and RFC 7427).
enum class AuthMethod : uint8_t { rsa_sig = 1, psk = 2, dss_sig = 3, digital_signature = 14 };

struct AuthPayload {
	AuthMethod method = AuthMethod::psk;
	std::vector<uint8_t> data;
	friend bool operator==(const AuthPayload&, const AuthPayload&) = default;
};

struct NoncePayload {
	std::vector<uint8_t> data; ///< 16..256 bytes (section 3.9); checked by parse
	friend bool operator==(const NoncePayload&, const NoncePayload&) = default;
};

/// Notify message types esptun sends or acts on (section 3.10.1 and RFCs
/// 7383, 4555, 5685). Any other type is kept as a number.
namespace notify {
inline constexpr uint16_t unsupported_critical_payload = 1;
inline constexpr uint16_t invalid_ike_spi = 4;
inline constexpr uint16_t invalid_major_version = 5;
inline constexpr uint16_t invalid_syntax = 7;
inline constexpr uint16_t invalid_message_id = 9;
inline constexpr uint16_t invalid_spi = 11;
inline constexpr uint16_t no_proposal_chosen = 14;
inline constexpr uint16_t invalid_ke_payload = 17;
inline constexpr uint16_t authentication_failed = 24;
inline constexpr uint16_t single_pair_required = 34;
inline constexpr uint16_t no_additional_sas = 35;
inline constexpr uint16_t internal_address_failure = 36;
inline constexpr uint16_t failed_cp_required = 37;
inline constexpr uint16_t ts_unacceptable = 38;
inline constexpr uint16_t invalid_selectors = 39;
inline constexpr uint16_t temporary_failure = 43;
inline constexpr uint16_t child_sa_not_found = 44;
inline constexpr uint16_t initial_contact = 16384;
inline constexpr uint16_t set_window_size = 16385;
inline constexpr uint16_t additional_ts_possible = 16386;
inline constexpr uint16_t ipcomp_supported = 16387;
inline constexpr uint16_t nat_detection_source_ip = 16388;
inline constexpr uint16_t nat_detection_destination_ip = 16389;
inline constexpr uint16_t cookie = 16390;
inline constexpr uint16_t use_transport_mode = 16391;
inline constexpr uint16_t rekey_sa = 16393;
inline constexpr uint16_t esp_tfc_padding_not_supported = 16394;
inline constexpr uint16_t non_first_fragments_also = 16395;
inline constexpr uint16_t mobike_supported = 16396;
// RFC 5685 (IKE Redirect): the initiator supports it (IKE_SA_INIT), the
// gateway sends it elsewhere, and the initiator names where it came from.
inline constexpr uint16_t redirect_supported = 16406;
inline constexpr uint16_t redirect = 16407;
inline constexpr uint16_t redirected_from = 16408;
inline constexpr uint16_t ikev2_fragmentation_supported = 16430; ///< RFC 7383 section 2.3
inline constexpr uint16_t signature_hash_algorithms = 16431;
/// Types below this are errors (section 3.10.1).
inline constexpr uint16_t first_status = 16384;
} // namespace notify

struct NotifyPayload {
	Protocol protocol = Protocol::none;
	std::vector<uint8_t> spi;
	uint16_t type = 0;
	std::vector<uint8_t> data;
	bool is_error() const noexcept { return type < notify::first_status; }
	friend bool operator==(const NotifyPayload&, const NotifyPayload&) = default;
};

struct DeletePayload {
	Protocol protocol = Protocol::esp;
	/// ESP: 4-byte SPIs; IKE: none (the SA the message belongs to)
	std::vector<uint32_t> spis;
	friend bool operator==(const DeletePayload&, const DeletePayload&) = default;
};

/// Traffic selector types (section 3.13.1).
enum class TsType : uint8_t { ipv4_range = 7, ipv6_range = 8 };

struct TrafficSelector {
	uint8_t ip_protocol = 0; ///< 0 = any
	uint16_t start_port = 0;
	uint16_t end_port = 65535;
	IpAddress start; ///< the family gives the TS type
	IpAddress end;
	friend bool operator==(const TrafficSelector&, const TrafficSelector&) = default;
};

struct TsPayload {
	bool initiator = true; ///< TSi (44) or TSr (45)
	std::vector<TrafficSelector> selectors;
	friend bool operator==(const TsPayload&, const TsPayload&) = default;
};

/// Configuration payload types and attributes (section 3.15).
enum class CpType : uint8_t { request = 1, reply = 2, set = 3, ack = 4 };
namespace cp_attr {
inline constexpr uint16_t internal_ip4_address = 1;
inline constexpr uint16_t internal_ip4_netmask = 2;
inline constexpr uint16_t internal_ip4_dns = 3;
inline constexpr uint16_t internal_ip6_address = 8;
inline constexpr uint16_t internal_ip6_dns = 10;
inline constexpr uint16_t internal_ip4_subnet = 13;
} // namespace cp_attr

struct CpAttribute {
	uint16_t type = 0; ///< 15 bits; the high bit must be 0
	std::vector<uint8_t> value;
	friend bool operator==(const CpAttribute&, const CpAttribute&) = default;
};

struct CpPayload {
	CpType type = CpType::request;
	std::vector<CpAttribute> attributes;
	friend bool operator==(const CpPayload&, const CpPayload&) = default;
};

/// The encrypted payload (SK, 46) as received: opaque until decrypted.
struct SkPayload {
	PayloadType first_inner = PayloadType::none; ///< the generic header's Next Payload
	size_t offset = 0;                           ///< where its generic header starts in the message
	size_t length = 0;                           ///< generic header + IV + ciphertext + ICV
	friend bool operator==(const SkPayload&, const SkPayload&) = default;
};

/// Payloads esptun does not interpret (VID, CERT, CERTREQ, EAP, SKF, and
/// unknown non-critical types): type and body kept as they came. SKF, like
/// SK, ends the chain and must run to the end of the message.
struct RawPayload {
	PayloadType type = PayloadType::vendor;
	bool critical = false;
	std::vector<uint8_t> body;
	/// SKF only: its generic header's Next Payload (the first inner payload
	/// type in fragment 1, none in the others, RFC 7383 section 2.5); none otherwise.
	PayloadType first_inner = PayloadType::none;
	friend bool operator==(const RawPayload&, const RawPayload&) = default;
};

using Payload = std::variant<SaPayload, KePayload, IdPayload, AuthPayload, NoncePayload, NotifyPayload,
                             DeletePayload, TsPayload, CpPayload, SkPayload, RawPayload>;

/// The payload type a Payload value is written as.
PayloadType payload_type(const Payload& p) noexcept;

struct Message {
	Header header;
	std::vector<Payload> payloads;

	/// The first payload of type T, or nullptr.
	template <class T> const T* find() const noexcept {
		for (const Payload& p : payloads)
			if (const T* t = std::get_if<T>(&p)) return t;
		return nullptr;
	}
	/// The first notify of @type, or nullptr.
	const NotifyPayload* find_notify(uint16_t type) const noexcept;
	friend bool operator==(const Message&, const Message&) = default;
};

enum class ParseError : uint8_t {
	ok,
	truncated,            ///< shorter than a header or a length field says
	bad_length,           ///< a length field that does not fit (too small, past the end)
	bad_version,          ///< major version not 2 (answer INVALID_MAJOR_VERSION)
	too_many_payloads,    ///< more than kMaxPayloads
	unsupported_critical, ///< an unknown payload with the critical bit (answer
	                      ///< UNSUPPORTED_CRITICAL_PAYLOAD)
	malformed_payload,    ///< a known payload whose body does not follow its format
	sk_not_last,          ///< the SK payload must be the last one (section 3.14)
};
std::string_view parse_error_name(ParseError e) noexcept;

struct ParseResult {
	ParseError error = ParseError::ok;
	/// unsupported_critical: the offending payload type (for the notify data);
	/// malformed_payload, bad_length, truncated: the payload being read, if any
	uint8_t payload_type = 0;
	explicit operator bool() const noexcept { return error == ParseError::ok; }
};

/// parse_header() - the fixed header only (the length field must match @bytes.size()).
ParseResult parse_header(std::span<const uint8_t> bytes, Header& out) noexcept;

/**
 * parse_message() - header and the unencrypted payload chain.
 * An SK payload ends the chain and is returned as an SkPayload. @out is
 * overwritten; on an error its contents are unspecified.
 */
ParseResult parse_message(std::span<const uint8_t> bytes, Message& out);

/**
 * parse_payloads() - a payload chain that starts with @first, e.g. the
 * plaintext of an SK payload. Appends to @out (nothing on an error). The
 * chain must end exactly at the end of @bytes; an SK or SKF payload in it is
 * malformed_payload (they are only valid in a message, see parse_message()).
 */
ParseResult parse_payloads(PayloadType first, std::span<const uint8_t> bytes, std::vector<Payload>& out);

/**
 * encode_payloads() - the chain for @payloads (generic headers linked, the
 * last one's next = none). SkPayload values cannot be encoded (seal them with
 * ike/keymat.hpp). Returns the bytes; @first gets the first type.
 * Throws std::invalid_argument for values parse_payloads() would reject (a
 * bug in the caller, never the peer's input): a nonce outside 16..256 bytes,
 * an SPI of the wrong size for its protocol, a length that does not fit its
 * field, more than kMaxPayloads payloads, and so on. The one exception: a
 * RawPayload of an unknown type with the critical bit is written as given.
 */
std::vector<uint8_t> encode_payloads(std::span<const Payload> payloads, PayloadType& first);

/// encode_header() - 28 bytes at @out (header.next and header.length as given).
void encode_header(const Header& header, uint8_t* out) noexcept;

/**
 * build_message() - an unencrypted message: header (next and length filled
 * in) followed by the payload chain. Throws std::invalid_argument like
 * encode_payloads(), and for a message longer than kMaxMessageLen or a
 * header whose major version is not 2.
 */
std::vector<uint8_t> build_message(Header header, std::span<const Payload> payloads);

} // namespace esptun::ike
