// EAP-TLS (RFC 5216) in both roles, as an EAP method of IKE_AUTH (RFC 7296
// section 2.16): the gateway is the TLS server, the client the TLS client,
// and both prove themselves with certificates. Pure: OpenSSL's libssl runs
// the handshake over memory BIOs; no socket, no clock.
//
// One conversation, as the EAP type-data of each side (RFC 5216 section 2.1):
//   server  S                       (start(): the EAP-TLS Start)
//   peer        ClientHello
//   server  ServerHello, Certificate, ServerKeyExchange, CertificateRequest,
//           ServerHelloDone         (usually in several fragments, each
//                                    acknowledged by an empty response)
//   peer        Certificate, ClientKeyExchange, CertificateVerify,
//               ChangeCipherSpec, Finished
//   server  ChangeCipherSpec, Finished
//   peer        (empty: acknowledges; the peer is finished())
//   server  -> Step::success: EAP-Success goes next.
// A side that refuses the other's certificate sends the TLS alert OpenSSL
// made (a send step carrying the reason in Step::error), and the
// conversation then ends in failure.
//
// Type-data: a flags byte (L 0x80: a 4-byte TLS message length follows;
// M 0x40: more fragments follow; S 0x20: Start), the length when L, then TLS
// records. Outgoing TLS data longer than kFragmentLen is cut into fragments
// of kFragmentLen bytes, the first with L and the total length, all but the
// last with M (section 2.1.5); a message that fits goes whole, without L.
// Incoming fragments are acknowledged by an empty message (flags 0) and
// reassembled up to kMaxTlsMessage bytes; L on an unfragmented message
// (strongSwan always sends it) and on later fragments is accepted when it
// agrees with what arrives.
//
// TLS: 1.2 only (RFC 5216; strongSwan 5.9's default maximum). OpenSSL's
// default TLS 1.2 cipher list at security level 2 (ECDHE/DHE with AES-GCM,
// ChaCha20-Poly1305 and AES-CBC; RSA, ECDSA and Ed25519 certificates; RSA
// keys of 2048 bits or more), no session resumption, tickets or
// renegotiation. MSK = the first 64 bytes of
// TLS-PRF(master_secret, "client EAP encryption", client_random | server_random)
// (section 2.3), which is OpenSSL's RFC 5705 exporter with that label and
// no context. TLS 1.3 (RFC 9190) is not offered.
#pragma once

#include "ike/cert.hpp"
#include "ike/eap.hpp"
#include "ike/engine.hpp"

#include <cstddef>
#include <memory>
#include <optional>

namespace esptun::ike::eap {

/// TLS data per outgoing EAP-TLS message: with the flags, the length, the
/// EAP header and the IKE, SK and EAP payload headers, the IKE message stays
/// near 1100 bytes (strongSwan's own EAP packets are at most 1024 bytes).
inline constexpr size_t kFragmentLen = 1000;
/// A TLS message (one flight, reassembled) longer than this is refused, and
/// so is a declared length above it.
inline constexpr size_t kMaxTlsMessage = 65536;
/// At most this many EAP-TLS messages from the other side in one
/// conversation (fragments and acknowledgements included); one more is a
/// failure. A full handshake with a 10 KB chain takes about 15.
inline constexpr size_t kMaxTlsRounds = 64;

/**
 * make_tls_server() - the gateway's side of EAP-TLS
 * @ours:       our certificate, its chain and key (the TLS server's)
 * @clients_ca: the CAs (and CRLs) a client's certificate must lead to; the
 *              client must send a certificate, its chain, validity and
 *              revocation (when the store has CRLs) are checked, and its
 *              keyUsage / extendedKeyUsage must allow a TLS client
 * Return: the method; authenticated_as() is the client certificate's subject
 * ("CN=alice, O=Example", as Credentials::subject() writes it). Throws
 * std::runtime_error if OpenSSL cannot set up a context (out of memory, or
 * our key is refused at security level 2).
 */
std::unique_ptr<ServerMethod> make_tls_server(std::shared_ptr<const Credentials> ours,
                                              std::shared_ptr<const TrustStore> clients_ca);

/**
 * make_tls_peer() - the client's side of EAP-TLS
 * @ours:      our certificate, its chain and key (sent when the server asks)
 * @server_ca: the CAs (and CRLs) the server's certificate must lead to
 * @server_id: when set, the server's certificate must certify it (a
 *             subjectAltName of its kind, or the subject for a DN: the same
 *             match as Credentials::certifies())
 * Throws std::runtime_error as make_tls_server().
 */
std::unique_ptr<PeerMethod> make_tls_peer(std::shared_ptr<const Credentials> ours,
                                          std::shared_ptr<const TrustStore> server_ca,
                                          std::optional<Identity> server_id);

} // namespace esptun::ike::eap
