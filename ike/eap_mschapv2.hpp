// EAP-MSCHAPv2 (draft-kamath-pppext-eap-mschapv2-02 framing around RFC 2759
// MS-CHAPv2), both roles, as the one password method of IKE_AUTH with EAP
// (RFC 7296 section 2.16). Pure: no I/O, no clock; random challenges come
// from RAND_bytes. The MSK is built the way strongSwan builds it (RFC 3079
// keys, see msk() below), so an esptun gateway and a strongSwan client (or
// the other way round) compute the same AUTH payloads.
#pragma once

#include "base/secret.hpp"
#include "ike/eap.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace esptun::ike::eap {

/// The server's user lookup: the NT password hash (16 bytes, see
/// nt_password_hash()) of @user, or nullopt when there is no such user.
/// @user is the MSCHAPv2 Name with any "DOMAIN\" prefix removed.
using NtHashLookup = std::function<std::optional<SecretBytes>(std::string_view user)>;

/**
 * make_mschapv2_server() - the gateway's side for one conversation.
 * @nt_hash_of: looks the user up by the Name in the peer's Response.
 * @server_name: the Name in our Challenge (1..255 bytes; the peer only logs it).
 *
 * The conversation: start() is the Challenge; a Response with the right
 * NT-Response gets the Success request (S=<authenticator response>), and
 * the peer's Success response then gives Step::Kind::success with the MSK.
 * An unknown user or a wrong password gets the Failure request
 * ("E=691 R=0 C=... V=3 M=..."; Step::error says which of the two it was,
 * the peer is not told), and whatever the peer answers to that gives
 * Step::Kind::failure with the same reason. There are no retries. Anything
 * malformed or out of order is Step::Kind::failure at once.
 * Throws std::invalid_argument for a bad @server_name.
 */
std::unique_ptr<ServerMethod> make_mschapv2_server(NtHashLookup nt_hash_of, std::string_view server_name);

/**
 * make_mschapv2_peer() - the client's side.
 * @user: sent as the Name in our Response, as is (1..255 bytes); a
 *        "DOMAIN\" prefix is left out of the challenge hash (RFC 2759 section 4).
 * @password: UTF-8; only its NT hash is kept.
 *
 * finished() turns true only after the server's Success request carried the
 * authenticator response that proves it knows the password. A Failure
 * request is answered with a Failure response (Step::Kind::send with
 * Step::error saying the server refused us).
 * Throws std::invalid_argument for a bad @user or a password that is not
 * UTF-8, std::runtime_error when MD4 is unavailable.
 */
std::unique_ptr<PeerMethod> make_mschapv2_peer(std::string user, const SecretString& password);

/**
 * nt_password_hash() - RFC 2759 NtPasswordHash: MD4 over the password in
 * UTF-16LE (16 bytes). MD4 comes from OpenSSL's legacy provider, loaded once
 * into a private library context, so the process's default context is not
 * changed. Throws std::invalid_argument when @utf8_password is not valid
 * UTF-8, std::runtime_error when MD4 cannot be loaded.
 */
SecretBytes nt_password_hash(std::string_view utf8_password);

/// The RFC 2759 / RFC 3079 computations, exposed for known-answer tests.
namespace mschapv2 {

inline constexpr size_t kChallengeLen = 16, kNtResponseLen = 24, kNtHashLen = 16;
inline constexpr size_t kMaxNameLen = 255;
using Challenge = std::array<uint8_t, kChallengeLen>;
using NtResponse = std::array<uint8_t, kNtResponseLen>;

/// The name RFC 2759 hashes: @name without a "DOMAIN\" prefix (up to the
/// first backslash, as strongSwan and Windows do it).
std::string_view strip_domain(std::string_view name) noexcept;

/// RFC 2759 HashNtPasswordHash: MD4 of the 16-byte NT hash.
SecretBytes hash_nt_password_hash(std::span<const uint8_t> nt_hash);
/// RFC 2759 ChallengeHash: SHA-1(peer | authenticator | user), first 8 bytes.
std::array<uint8_t, 8> challenge_hash(const Challenge& peer, const Challenge& authenticator,
                                      std::string_view user);
/// RFC 2759 ChallengeResponse: the 8-byte challenge under three DES keys
/// cut from the zero-padded NT hash.
NtResponse challenge_response(std::span<const uint8_t, 8> challenge, std::span<const uint8_t> nt_hash);
/// RFC 2759 GenerateNTResponse.
NtResponse generate_nt_response(const Challenge& authenticator, const Challenge& peer, std::string_view user,
                                std::span<const uint8_t> nt_hash);
/// RFC 2759 GenerateAuthenticatorResponse: the 20 bytes behind "S=".
std::array<uint8_t, 20> authenticator_response(std::span<const uint8_t> nt_hash,
                                               const NtResponse& nt_response, const Challenge& peer,
                                               const Challenge& authenticator, std::string_view user);
/// RFC 3079 section 3.4 GetMasterKey (16 bytes).
SecretBytes master_key(std::span<const uint8_t> password_hash_hash, const NtResponse& nt_response);
/// RFC 3079 section 3.4 GetAsymmetricStartKey for 128-bit keys (16 bytes).
SecretBytes asymmetric_start_key(std::span<const uint8_t> master_key, bool is_send, bool is_server);
/**
 * msk() - the 64-byte MSK: on the server MasterReceiveKey | MasterSendKey |
 * 32 zero bytes (RFC 2548's MS-MPPE-Recv-Key and -Send-Key as a RADIUS
 * server hands them to the authenticator, and what strongSwan's
 * eap_mschapv2 uses). The peer's keys are mirrored (its send key is the
 * server's receive key), so with @is_server false the same bytes come out
 * as MasterSendKey | MasterReceiveKey | zeros.
 */
SecretBytes msk(std::span<const uint8_t> nt_hash, const NtResponse& nt_response, bool is_server);

} // namespace mschapv2

} // namespace esptun::ike::eap
