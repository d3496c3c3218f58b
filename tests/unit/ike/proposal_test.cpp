// Proposal strings, their SA payload form, and choosing between offers.
#include "tunnel/ike/proposal.hpp"

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
	CHECK(!parse_esp_proposal("aes128gcm16-x25519", err));
	CHECK(err.find("perfect forward secrecy") != std::string::npos);
	CHECK(!parse_esp_proposal("aes192-sha1", err));
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
	std::vector<EspSuite> offer{{crypto::Cipher::aes128_cbc_sha1, EsnOffer::no}};
	auto c = choose_esp(esp_offer(offer, 0xc0ffee01), default_esp_proposals());
	REQUIRE(c);
	CHECK(c->cipher == crypto::Cipher::aes128_cbc_sha1);
	CHECK(!c->esn);
	CHECK(c->peer_spi == 0xc0ffee01);
	std::vector<EspSuite> yes{{crypto::Cipher::aes128_gcm, EsnOffer::yes}};
	std::vector<EspSuite> no{{crypto::Cipher::aes128_gcm, EsnOffer::no}};
	CHECK(!choose_esp(esp_offer(yes, 0x1234), no));
	auto both = choose_esp(esp_offer(default_esp_proposals(), 0x1234), yes);
	REQUIRE(both);
	CHECK(both->esn);
	CHECK(describe_offer(esp_offer(offer, 1)) == "aes128-sha1-noesn");
}
