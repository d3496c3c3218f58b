// Proposal strings, their SA payload form, and choosing between offers.
#include "ike/proposal.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;

TEST_CASE("IKE proposal strings parse into suites and print back the same") {
	std::string err;
	for (const char* text : {"aes128gcm16-prfsha256-x25519", "aes256gcm16-prfsha384-ecp256",
	                         "aes128-sha256-prfsha256-modp2048", "aes256-sha512-prfsha512-x25519"}) {
		CAPTURE(text);
		auto s = parse_ike_proposal(text, err);
		REQUIRE(s);
		CHECK(ike_suite_name(*s) == text);
	}
	auto cbc = parse_ike_proposal("aes256-sha384-ecp256", err);
	REQUIRE(cbc);
	CHECK(cbc->prf == PrfId::hmac_sha384); // the PRF follows the integrity hash
	CHECK(cbc->integ == IntegId::hmac_sha384_192);
	CHECK(cbc->key_bits == 256);
}

TEST_CASE("weak, unknown and incomplete IKE proposals are refused with the reason") {
	std::string err;
	CHECK(!parse_ike_proposal("aes128-sha1-modp2048", err));
	CHECK(err.find("'sha1' is refused") != std::string::npos);
	CHECK(!parse_ike_proposal("aes128-sha256-modp1024", err));
	CHECK(err.find("'modp1024' is refused") != std::string::npos);
	CHECK(!parse_ike_proposal("3des-sha256-modp2048", err));
	CHECK(err.find("64-bit block") != std::string::npos);
	CHECK(!parse_ike_proposal("aes128-sha256-blowfish", err));
	CHECK(err.find("'blowfish' is not an IKE algorithm") != std::string::npos);
	CHECK(!parse_ike_proposal("aes128-sha256", err));
	CHECK(err.find("no key exchange group") != std::string::npos);
	CHECK(!parse_ike_proposal("aes128-x25519", err));
	CHECK(err.find("without an integrity") != std::string::npos);
	CHECK(!parse_ike_proposal("aes128gcm16-sha256-x25519", err));
	CHECK(!parse_ike_proposal("", err));
}

TEST_CASE("ESP proposal strings name the six suites, with ESN choices") {
	std::string err;
	auto g = parse_esp_proposal("aes128gcm16", err);
	REQUIRE(g);
	CHECK(g->cipher == crypto::Cipher::aes128_gcm);
	CHECK(g->esn == EsnOffer::both);
	auto s = parse_esp_proposal("aes256-sha256-esn", err);
	REQUIRE(s);
	CHECK(s->cipher == crypto::Cipher::aes256_cbc_sha256);
	CHECK(s->esn == EsnOffer::yes);
	CHECK(parse_esp_proposal("aes128-sha1-noesn", err)->esn == EsnOffer::no);
	CHECK(!parse_esp_proposal("aes128-md5", err));
	CHECK(!parse_esp_proposal("aes192-sha1", err));
}

TEST_CASE("ESP proposal strings take a key exchange group for PFS, weak ones refused") {
	std::string err;
	auto x = parse_esp_proposal("aes128gcm16-x25519", err);
	REQUIRE(x);
	CHECK(x->cipher == crypto::Cipher::aes128_gcm);
	CHECK(x->pfs == DhGroup::curve25519);
	CHECK(esp_suite_name(*x) == "aes128gcm16-x25519");
	auto m = parse_esp_proposal("aes256-sha256-modp2048-esn", err);
	REQUIRE(m);
	CHECK(m->cipher == crypto::Cipher::aes256_cbc_sha256);
	CHECK(m->pfs == DhGroup::modp2048);
	CHECK(m->esn == EsnOffer::yes);
	CHECK(esp_suite_name(*m) == "aes256-sha256-modp2048-esn");
	auto e = parse_esp_proposal("aes128gcm16-noesn-ecp256", err); // either order, as strongSwan
	REQUIRE(e);
	CHECK(e->pfs == DhGroup::ecp256);
	CHECK(e->esn == EsnOffer::no);
	CHECK(!parse_esp_proposal("aes128gcm16", err)->pfs);
	CHECK(!parse_esp_proposal("aes128gcm16-modp1024", err));
	CHECK(err.find("'modp1024' is refused") != std::string::npos);
	CHECK(!parse_esp_proposal("aes128gcm16-x25519-ecp256", err));
	CHECK(err.find("two key exchange groups") != std::string::npos);
	CHECK(!parse_esp_proposal("aes128gcm16-ecp521", err));
	CHECK(err.find("perfect forward secrecy") != std::string::npos);
	CHECK(!parse_esp_proposal("x25519", err));
}

TEST_CASE("PFS groups are left out in IKE_AUTH and must match in CREATE_CHILD_SA") {
	std::string err;
	std::vector<EspSuite> pfs{*parse_esp_proposal("aes128gcm16-x25519", err),
	                          *parse_esp_proposal("aes128gcm16", err)};
	std::vector<EspSuite> plain{*parse_esp_proposal("aes128gcm16", err)};
	// IKE_AUTH: no group in the offer, and the two collapse into one proposal.
	SaPayload auth = esp_offer(pfs, 0x1111, ChildExchange::ike_auth);
	REQUIRE(auth.proposals.size() == 1);
	CHECK(describe_offer(auth) == "aes128gcm16-esn/noesn");
	// A PFS-only offer (as strongSwan's IKE_AUTH would be if it kept groups)
	// is still fine in IKE_AUTH: the group is ignored there.
	std::vector<EspSuite> only_pfs{pfs[0]};
	SaPayload with_group = esp_offer(only_pfs, 0x2222, ChildExchange::create_child_sa);
	CHECK(describe_offer(with_group) == "aes128gcm16-x25519-esn/noesn");
	auto in_auth = choose_esp(with_group, plain, ChildExchange::ike_auth);
	REQUIRE(in_auth);
	CHECK(!in_auth->pfs);
	// CREATE_CHILD_SA: a PFS-only offer against a policy without PFS fails,
	// a mixed offer picks the PFS proposal for a PFS policy.
	CHECK(!choose_esp(with_group, plain, ChildExchange::create_child_sa));
	SaPayload mixed = esp_offer(pfs, 0x3333, ChildExchange::create_child_sa);
	REQUIRE(mixed.proposals.size() == 2);
	auto c = choose_esp(mixed, only_pfs, ChildExchange::create_child_sa);
	REQUIRE(c);
	CHECK(c->pfs == DhGroup::curve25519);
	CHECK(c->reply.number == 1);
	auto accepted = accept_esp(SaPayload{{c->reply}}, pfs, ChildExchange::create_child_sa);
	REQUIRE(accepted);
	CHECK(accepted->pfs == DhGroup::curve25519);
	auto np = choose_esp(mixed, plain, ChildExchange::create_child_sa);
	REQUIRE(np);
	CHECK(!np->pfs);
	CHECK(np->reply.number == 2);
	// Another group than ours does not match.
	std::vector<EspSuite> ecp{*parse_esp_proposal("aes128gcm16-ecp256", err)};
	CHECK(!choose_esp(with_group, ecp, ChildExchange::create_child_sa));
	CHECK(rekey_group(pfs, std::nullopt) == DhGroup::curve25519);
	CHECK(rekey_group(plain, DhGroup::ecp256) == std::nullopt);
	std::vector<EspSuite> two{pfs[0], ecp[0]};
	CHECK(rekey_group(two, DhGroup::ecp256) == DhGroup::ecp256);
}

TEST_CASE("a responder picks the initiator's first acceptable proposal") {
	std::string err;
	std::vector<IkeSuite> theirs{*parse_ike_proposal("aes256gcm16-prfsha384-ecp256", err),
	                             *parse_ike_proposal("aes128-sha256-x25519", err)};
	std::vector<IkeSuite> ours{*parse_ike_proposal("aes128-sha256-x25519", err),
	                           *parse_ike_proposal("aes256gcm16-prfsha384-ecp256", err)};
	auto c = choose_ike(ike_offer(theirs), ours);
	REQUIRE(c);
	CHECK(c->suite == theirs[0]);
	CHECK(c->reply.number == 1);
	CHECK(c->reply.transforms.size() == 3);
	// The answer is accepted by the initiator; a second proposal is not.
	SaPayload reply{{c->reply}};
	CHECK(accept_ike(reply, theirs) == theirs[0]);
	SaPayload two = ike_offer(theirs);
	CHECK(!accept_ike(two, theirs));
	CHECK(!choose_ike(ike_offer(std::span(&ours[0], 1)), std::span(&theirs[0], 1)));
}

TEST_CASE("ESP choice honours ESN offers and the SPI comes from the proposal") {
	std::vector<EspSuite> offer{{crypto::Cipher::aes128_cbc_sha1, EsnOffer::no, std::nullopt}};
	auto c = choose_esp(esp_offer(offer, 0xc0ffee01, ChildExchange::ike_auth), default_esp_proposals(),
	                    ChildExchange::ike_auth);
	REQUIRE(c);
	CHECK(c->cipher == crypto::Cipher::aes128_cbc_sha1);
	CHECK(!c->esn);
	CHECK(c->peer_spi == 0xc0ffee01);
	std::vector<EspSuite> yes{{crypto::Cipher::aes128_gcm, EsnOffer::yes, std::nullopt}};
	std::vector<EspSuite> no{{crypto::Cipher::aes128_gcm, EsnOffer::no, std::nullopt}};
	CHECK(!choose_esp(esp_offer(yes, 0x1234, ChildExchange::create_child_sa), no,
	                  ChildExchange::create_child_sa));
	auto both = choose_esp(esp_offer(default_esp_proposals(), 0x1234, ChildExchange::ike_auth), yes,
	                       ChildExchange::ike_auth);
	REQUIRE(both);
	CHECK(both->esn);
	CHECK(describe_offer(esp_offer(offer, 1, ChildExchange::ike_auth)) == "aes128-sha1-noesn");
}

namespace {

/// An IKE proposal with the given transforms, as a peer may send it.
Proposal raw_ike(std::initializer_list<Transform> transforms) {
	Proposal p;
	p.number = 1;
	p.protocol = Protocol::ike;
	p.transforms = transforms;
	return p;
}

constexpr uint16_t k3des = 3; // ENCR_3DES: not implemented here

} // namespace

TEST_CASE("implemented_ike_suite() finds what esptun could run in an offer, strong before weak") {
	const Transform sha1{TransformType::integ, uint16_t(IntegId::hmac_sha1_96), 0};
	const Transform prfsha1{TransformType::prf, uint16_t(PrfId::hmac_sha1), 0};
	const Transform modp1024{TransformType::dh, uint16_t(DhGroup::modp1024), 0};
	// Windows 10/11 built-in client: aes256-sha1-modp1024, 3des-sha1-modp1024.
	SaPayload windows;
	windows.proposals.push_back(
	    raw_ike({{TransformType::encr, uint16_t(EncrId::aes_cbc), 256}, prfsha1, sha1, modp1024}));
	windows.proposals.push_back(raw_ike({{TransformType::encr, k3des, 0}, prfsha1, sha1, modp1024}));
	auto s = implemented_ike_suite(windows);
	REQUIRE(s);
	CHECK(ike_suite_name(*s) == "aes256-sha1-prfsha1-modp1024");
	CHECK(weak_suite(*s));

	// 3DES alone: nothing esptun can run, with or without allow_weak.
	SaPayload des;
	des.proposals.push_back(windows.proposals[1]);
	CHECK_FALSE(implemented_ike_suite(des));

	// A strong suite later in the offer is named before the weak one; within
	// one proposal the strong choice of each type is taken.
	SaPayload mixed = windows;
	mixed.proposals.push_back(raw_ike({{TransformType::encr, uint16_t(EncrId::aes_cbc), 128},
	                                   prfsha1,
	                                   {TransformType::prf, uint16_t(PrfId::hmac_sha384), 0},
	                                   sha1,
	                                   {TransformType::integ, uint16_t(IntegId::hmac_sha256_128), 0},
	                                   modp1024,
	                                   {TransformType::dh, uint16_t(DhGroup::modp4096), 0}}));
	s = implemented_ike_suite(mixed);
	REQUIRE(s);
	CHECK(ike_suite_name(*s) == "aes128-sha256-prfsha384-modp4096");
	CHECK_FALSE(weak_suite(*s));

	// GCM with an integrity transform, or CBC without one, is no suite.
	SaPayload odd;
	odd.proposals.push_back(raw_ike({{TransformType::encr, uint16_t(EncrId::aes_gcm_16), 128},
	                                 {TransformType::prf, uint16_t(PrfId::hmac_sha256), 0},
	                                 {TransformType::integ, uint16_t(IntegId::hmac_sha256_128), 0},
	                                 {TransformType::dh, uint16_t(DhGroup::ecp256), 0}}));
	odd.proposals.push_back(raw_ike({{TransformType::encr, uint16_t(EncrId::aes_cbc), 128},
	                                 {TransformType::prf, uint16_t(PrfId::hmac_sha256), 0},
	                                 {TransformType::dh, uint16_t(DhGroup::ecp256), 0}}));
	CHECK_FALSE(implemented_ike_suite(odd));
}

TEST_CASE("the defaults accept what Apple's and hardened Windows' built-in clients lead with") {
	std::string err;
	auto apple = parse_ike_proposal("aes256-sha256-modp2048", err);
	REQUIRE(apple);
	CHECK(choose_ike(ike_offer(std::span(&*apple, 1)), default_ike_proposals()));
}
