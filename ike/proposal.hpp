// Algorithm proposals: the config spelling (strongSwan's keywords, e.g.
// "aes128gcm16-prfsha256-x25519" for IKE and "aes128-sha1-esn" for ESP),
// their SA payload form (RFC 7296 section 3.3), and choosing between the
// two sides' offers. Weak or unknown algorithms are refused with a message
// that names them.
#pragma once

#include "crypto/esp_transform.hpp"
#include "ike/keymat.hpp"
#include "ike/message.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace esptun::ike {

/// Which ESN settings a CHILD_SA proposal offers (transform type 5).
enum class EsnOffer : uint8_t { both, yes, no };

/// One ESP proposal: a cipher suite, the ESN settings offered with it, and
/// the key exchange group of CHILD_SA rekeys (perfect forward secrecy,
/// RFC 7296 section 1.3.1); none: rekeyed keys come from SK_d alone.
struct EspSuite {
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	EsnOffer esn = EsnOffer::both;
	std::optional<DhGroup> pfs;
	friend bool operator==(const EspSuite&, const EspSuite&) = default;
};

/// Where a CHILD_SA is negotiated. In IKE_AUTH its keys come from the IKE SA
/// and there is no key exchange: the groups of the proposals are left out of
/// our offer and ignored in the peer's (as strongSwan does). In
/// CREATE_CHILD_SA a proposal with a group needs a KE payload of that group.
enum class ChildExchange : uint8_t { ike_auth, create_child_sa };

/**
 * parse_ike_proposal() - "encr[-integ][-prf]-dh"; nullopt with @error set
 * (naming the token, and saying why when it is a weak algorithm).
 * @allow_weak: the peer's opt-in (allow_weak = true) to modp1024, sha1 and
 *              prfsha1; without it they are refused with a message that says
 *              how to opt in. Other weak algorithms (md5, 3des, ...) are
 *              refused either way: esptun does not implement them.
 */
std::optional<IkeSuite> parse_ike_proposal(std::string_view text, std::string& error,
                                           bool allow_weak = false);
/// parse_esp_proposal() - "encr[-integ][-group][-esn|-noesn]"; a group
/// (x25519, ecp256, ecp384, modp2048, modp3072, modp4096; modp1024 only with
/// @allow_weak) asks for PFS in CHILD_SA rekeys.
std::optional<EspSuite> parse_esp_proposal(std::string_view text, std::string& error,
                                           bool allow_weak = false);

/// The weak algorithms (weak_prf(), weak_integ(), weak_dh()) that @ike and
/// @esp name, each once, in config spelling ("modp1024", "prfsha1", "sha1");
/// for the warning a peer with allow_weak gets at start and reload.
std::vector<std::string_view> weak_algorithms(std::span<const IkeSuite> ike, std::span<const EspSuite> esp);

std::string ike_suite_name(const IkeSuite& s);
std::string esp_suite_name(const EspSuite& s);

/// What esptun offers and accepts when a peer sets no proposals.
std::vector<IkeSuite> default_ike_proposals();
std::vector<EspSuite> default_esp_proposals();

/// SA payload proposals for our offers, numbered from 1 in order.
SaPayload ike_offer(std::span<const IkeSuite> suites, std::span<const uint8_t> spi = {});
/// In IKE_AUTH the groups are stripped and proposals that then repeat an
/// earlier one are left out.
SaPayload esp_offer(std::span<const EspSuite> suites, uint32_t spi, ChildExchange ex);

/// A chosen IKE suite and the one-proposal SA payload that answers it.
struct IkeChoice {
	IkeSuite suite;
	Proposal reply;
};

/// A chosen CHILD_SA suite.
struct EspChoice {
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = false;
	std::optional<DhGroup> pfs; ///< CREATE_CHILD_SA: the key exchange group agreed on
	uint32_t peer_spi = 0;      ///< the SPI the other side receives with
	Proposal reply;             ///< the answer (the responder fills in its own SPI)
};

/**
 * choose_ike() - responder: the first of the initiator's proposals (its
 * order is its preference, RFC 7296 section 2.7) that one of @ours matches.
 */
std::optional<IkeChoice> choose_ike(const SaPayload& offered, std::span<const IkeSuite> ours);
std::optional<EspChoice> choose_esp(const SaPayload& offered, std::span<const EspSuite> ours,
                                    ChildExchange ex);

/**
 * accept_ike() - initiator: the responder's answer must be exactly one
 * proposal with one transform of each type, and one we offered.
 */
std::optional<IkeSuite> accept_ike(const SaPayload& reply, std::span<const IkeSuite> ours);
std::optional<EspChoice> accept_esp(const SaPayload& reply, std::span<const EspSuite> ours, ChildExchange ex);

/// The key exchange group a CHILD_SA rekey starts with: @current (the group
/// of the CHILD_SA being rekeyed) if one of @ours has it, else the group of
/// the first of @ours that has one; none when no proposal asks for PFS.
std::optional<DhGroup> rekey_group(std::span<const EspSuite> ours, std::optional<DhGroup> current);

/// The offered proposals in config spelling, for log lines ("aes128-sha1-modp1024, ...").
std::string describe_offer(const SaPayload& offered);

/**
 * implemented_ike_suite() - a suite of @offered that esptun can run, for the
 * log line that answers an offer with nothing in common: what to configure
 * to accept it. The first such suite with no weak algorithm, else the first
 * with one (weak_prf(), weak_integ(), weak_dh(): one a peer may use only
 * with allow_weak = true); nullopt when the offer has none (3DES only, say).
 * Linear in the size of the offer (it comes from an unauthenticated peer).
 */
std::optional<IkeSuite> implemented_ike_suite(const SaPayload& offered);

/// True when @s has an algorithm that needs the peer's allow_weak = true.
bool weak_suite(const IkeSuite& s) noexcept;

} // namespace esptun::ike
