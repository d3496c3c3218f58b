// EAP (RFC 3748) as IKEv2 carries it in IKE_AUTH (RFC 7296 section 2.16):
// the packet codec and the interface every method implements, for both
// roles. Pure: no I/O, no clock. The engine (engine_eap.cpp) runs the
// conversation: EAP-Identity first, then one method, then EAP-Success or
// EAP-Failure; a method only sees and produces its own type-data.
//
// Methods (each in its own file): EAP-MSCHAPv2 (eap_mschapv2.cpp) and
// EAP-TLS (eap_tls.cpp). Both derive a 64-byte MSK, which replaces the
// shared secret in the AUTH computation that follows EAP (section 2.15).
#pragma once

#include "base/secret.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace esptun::ike::eap {

enum class Code : uint8_t { request = 1, response = 2, success = 3, failure = 4 };

/// EAP method types (IANA "Method Types").
namespace type {
inline constexpr uint8_t identity = 1, notification = 2, nak = 3, tls = 13, mschapv2 = 26;
}

/// The longest EAP packet accepted or built (its 16-bit length field allows
/// 65535; an IKE message carrying it must still fit our IKE limits).
inline constexpr size_t kMaxPacket = 16384;

/// One EAP packet. Request and response carry a type and its data; success
/// and failure carry neither (type 0, data empty).
struct Packet {
	Code code = Code::request;
	uint8_t id = 0;
	uint8_t type = 0;
	std::vector<uint8_t> data; ///< type-data
	friend bool operator==(const Packet&, const Packet&) = default;
};

/// nullopt unless @bytes is exactly one well-formed packet: a known code,
/// the length field equal to the size, a type byte in requests and
/// responses, nothing after the header in success and failure, at most
/// kMaxPacket bytes.
std::optional<Packet> parse(std::span<const uint8_t> bytes) noexcept;
/// The wire form of @p (the length field filled in).
std::vector<uint8_t> encode(const Packet& p);

/// What a method wants next.
struct Step {
	enum class Kind : uint8_t {
		send,    ///< send @data as the type-data of our next message (same type)
		success, ///< server: the peer is authenticated, EAP-Success goes next
		failure, ///< server: EAP-Failure goes next; peer: give up, nothing is sent
	};
	Kind kind = Kind::send;
	std::vector<uint8_t> data;
	/// failure (either role), or a send that carries a refusal (an
	/// MSCHAPv2 failure packet): why, for the log line. Never a secret.
	std::string error;
};

/// The authenticator's side (the gateway) of one method for one user.
/// Every method on it is noexcept in effect: anything the peer sent that
/// does not fit is a Step::Kind::failure with a reason, never a throw.
class ServerMethod {
public:
	virtual ~ServerMethod() = default;
	virtual uint8_t type() const noexcept = 0;
	/// The type-data of the first request.
	virtual std::vector<uint8_t> start() = 0;
	/// The type-data of the peer's response (of our type): the next request,
	/// success or failure.
	virtual Step on_response(std::span<const uint8_t> data) = 0;
	/// After success: the MSK (64 bytes), wiped when the method is freed.
	virtual const SecretBytes& msk() const noexcept = 0;
	/// After success: who the method authenticated, for the log and status
	/// (the MSCHAPv2 user name, or the TLS client certificate's subject).
	virtual std::string authenticated_as() const = 0;
};

/// The peer's side (the client) of one method.
class PeerMethod {
public:
	virtual ~PeerMethod() = default;
	virtual uint8_t type() const noexcept = 0;
	/// The type-data of a request of our type: our response (send), or
	/// failure when the conversation cannot go on (nothing is sent).
	virtual Step on_request(std::span<const uint8_t> data) = 0;
	/// True once the method has finished on our side (MSCHAPv2: the server
	/// proved it knows the password; TLS: the handshake is done and the
	/// server's certificate verified). EAP-Success before that is refused.
	virtual bool finished() const noexcept = 0;
	/// After finished(): the MSK (64 bytes).
	virtual const SecretBytes& msk() const noexcept = 0;
};

} // namespace esptun::ike::eap
