// The IKE message codec against real messages from strongSwan 5.9
// (tests/data/ike/, captured by capture-strongswan.sh): every field checked
// against what the capture configured, the payload order against charon's own
// log lines (strongswan-log.txt), and re-encoding must give the same bytes.
#include "tests/unit/ike/message_test_util.hpp"

#include <openssl/evp.h>

#include <array>

namespace esptun::ike {
namespace {

using test::Bytes;
using test::read_vector;

Message parse_vector(const std::string& name) {
	Bytes b = read_vector(name);
	Message m;
	ParseResult r = parse_message(b, m);
	INFO(name, ": ", parse_error_name(r.error), " at payload type ", int(r.payload_type));
	REQUIRE(r);
	return m;
}

std::vector<PayloadType> types(const Message& m) {
	std::vector<PayloadType> v;
	for (const Payload& p : m.payloads)
		v.push_back(payload_type(p));
	return v;
}

std::vector<uint16_t> notify_types(const Message& m) {
	std::vector<uint16_t> v;
	for (const Payload& p : m.payloads)
		if (const auto* n = std::get_if<NotifyPayload>(&p)) v.push_back(n->type);
	return v;
}

constexpr auto encr = TransformType::encr;
constexpr auto prf = TransformType::prf;
constexpr auto integ = TransformType::integ;
constexpr auto dh = TransformType::dh;
// strongSwan's proposal keywords as transforms, in the order it writes them.
const std::vector<Transform> kAes128Sha256X25519 = {
    {encr, 12, 128}, {integ, 12, 0}, {prf, 5, 0}, {dh, 31, 0}};
const std::vector<Transform> kAes256GcmSha384Ecp256 = {{encr, 20, 256}, {prf, 6, 0}, {dh, 19, 0}};
const std::vector<Transform> kAes128Sha256Modp2048 = {
    {encr, 12, 128}, {integ, 12, 0}, {prf, 5, 0}, {dh, 14, 0}};

// strongSwan's names in its log line, as numbers (IANA "IKEv2 Notify Message Types").
constexpr uint16_t kFragSupported = 16430;
constexpr uint16_t kRedirectSupported = 16406;
constexpr uint16_t kChildlessSupported = 16418;
constexpr uint16_t kMultipleAuthSupported = 16404;

/**
 * nat_detection_hash() - SHA-1(SPIi | SPIr | IPv4 address | port), section
 * 2.23, computed here so the captured NAT_DETECTION_DESTINATION_IP can be
 * checked against the addresses capture-strongswan.sh used.
 */
Bytes nat_detection_hash(uint64_t spi_i, uint64_t spi_r, std::array<uint8_t, 4> ip, uint16_t port) {
	Bytes in = test::cat({test::be32(uint32_t(spi_i >> 32)), test::be32(uint32_t(spi_i)),
	                      test::be32(uint32_t(spi_r >> 32)), test::be32(uint32_t(spi_r)),
	                      Bytes(ip.begin(), ip.end()), test::be16(port)});
	Bytes out(EVP_MAX_MD_SIZE);
	unsigned len = 0;
	REQUIRE(EVP_Digest(in.data(), in.size(), out.data(), &len, EVP_sha1(), nullptr) == 1);
	out.resize(len);
	return out;
}

TEST_CASE("strongSwan IKE_SA_INIT request: header, three proposals, x25519 KE, nonce, notifies") {
	Message m = parse_vector("ike_sa_init_request.bin");
	const Header& h = m.header;
	CHECK(h.spi_i != 0);
	CHECK(h.spi_r == 0);
	CHECK(h.version == kVersion2);
	CHECK(h.exchange == Exchange::ike_sa_init);
	CHECK(h.flags == kFlagInitiator);
	CHECK(h.from_initiator());
	CHECK_FALSE(h.is_response());
	CHECK(h.message_id == 0);
	CHECK(h.length == 320);
	CHECK(h.next == PayloadType::sa);

	// charon: "generating IKE_SA_INIT request 0 [ SA KE No N(NATD_S_IP)
	// N(NATD_D_IP) N(FRAG_SUP) N(HASH_ALG) N(REDIR_SUP) ]"
	using PT = PayloadType;
	CHECK(types(m) == std::vector<PT>{PT::sa, PT::ke, PT::nonce, PT::notify, PT::notify, PT::notify,
	                                  PT::notify, PT::notify});
	CHECK(notify_types(m) ==
	      std::vector<uint16_t>{notify::nat_detection_source_ip, notify::nat_detection_destination_ip,
	                            kFragSupported, notify::signature_hash_algorithms, kRedirectSupported});

	// proposals = aes128-sha256-x25519, aes256gcm16-prfsha384-ecp256, aes128-sha256-modp2048
	const SaPayload* sa = m.find<SaPayload>();
	REQUIRE(sa);
	REQUIRE(sa->proposals.size() == 3);
	for (size_t i = 0; i < 3; i++) {
		CHECK(sa->proposals[i].number == i + 1);
		CHECK(sa->proposals[i].protocol == Protocol::ike);
		CHECK(sa->proposals[i].spi.empty());
	}
	CHECK(sa->proposals[0].transforms == kAes128Sha256X25519);
	CHECK(sa->proposals[1].transforms == kAes256GcmSha384Ecp256);
	CHECK(sa->proposals[2].transforms == kAes128Sha256Modp2048);

	const KePayload* ke = m.find<KePayload>();
	REQUIRE(ke);
	CHECK(ke->group == 31); // the first proposal's group
	CHECK(ke->data.size() == 32);
	const NoncePayload* nonce = m.find<NoncePayload>();
	REQUIRE(nonce);
	CHECK(nonce->data.size() == 32);

	for (uint16_t t : {notify::nat_detection_source_ip, notify::nat_detection_destination_ip}) {
		const NotifyPayload* n = m.find_notify(t);
		REQUIRE(n);
		CHECK(n->protocol == Protocol::none);
		CHECK(n->spi.empty());
		CHECK(n->data.size() == 20);
		CHECK_FALSE(n->is_error());
	}
	// The responder's address and port; the source hash is faked by
	// kernel-libipsec to force UDP encapsulation, so only this one is real.
	CHECK(m.find_notify(notify::nat_detection_destination_ip)->data ==
	      nat_detection_hash(h.spi_i, 0, {192, 168, 89, 2}, 500));
	// RFC 7427 hash algorithms: SHA2-256, SHA2-384, SHA2-512, Identity.
	CHECK(m.find_notify(notify::signature_hash_algorithms)->data ==
	      test::cat({test::be16(2), test::be16(3), test::be16(4), test::be16(5)}));
	CHECK(m.find_notify(notify::cookie) == nullptr);
}

TEST_CASE("strongSwan IKE_SA_INIT response: one chosen proposal keeps its number, responder SPI set") {
	Message req = parse_vector("ike_sa_init_request.bin");
	Message m = parse_vector("ike_sa_init_response.bin");
	const Header& h = m.header;
	CHECK(h.spi_i == req.header.spi_i);
	CHECK(h.spi_r != 0);
	CHECK(h.exchange == Exchange::ike_sa_init);
	CHECK(h.flags == kFlagResponse);
	CHECK(h.is_response());
	CHECK_FALSE(h.from_initiator());
	CHECK(h.message_id == 0);
	CHECK(h.length == 248);

	using PT = PayloadType;
	CHECK(types(m) == std::vector<PT>{PT::sa, PT::ke, PT::nonce, PT::notify, PT::notify, PT::notify,
	                                  PT::notify, PT::notify, PT::notify});
	CHECK(notify_types(m) == std::vector<uint16_t>{notify::nat_detection_source_ip,
	                                               notify::nat_detection_destination_ip, kFragSupported,
	                                               notify::signature_hash_algorithms, kChildlessSupported,
	                                               kMultipleAuthSupported});
	const SaPayload* sa = m.find<SaPayload>();
	REQUIRE(sa);
	REQUIRE(sa->proposals.size() == 1);
	CHECK(sa->proposals[0].number == 1);
	CHECK(sa->proposals[0].transforms == kAes128Sha256X25519);
	CHECK(m.find<KePayload>()->group == 31);
	CHECK(m.find<KePayload>()->data.size() == 32);
	CHECK(m.find<NoncePayload>()->data.size() == 32);
	CHECK(m.find_notify(notify::nat_detection_destination_ip)->data ==
	      nat_detection_hash(h.spi_i, h.spi_r, {192, 168, 89, 1}, 500));
}

TEST_CASE("strongSwan IKE_AUTH request and response: one SK payload from offset 28 to the end") {
	Message init = parse_vector("ike_sa_init_response.bin");
	struct Case {
		const char* file;
		uint8_t flags;
		PayloadType first_inner; // charon: "IKE_AUTH request 1 [ IDi ...", "response 1 [ IDr ..."
	};
	for (Case c : {Case{"ike_auth_request.bin", kFlagInitiator, PayloadType::idi},
	               Case{"ike_auth_response.bin", kFlagResponse, PayloadType::idr}}) {
		INFO(c.file);
		const size_t size = read_vector(c.file).size();
		Message m = parse_vector(c.file);
		CHECK(m.header.spi_i == init.header.spi_i);
		CHECK(m.header.spi_r == init.header.spi_r);
		CHECK(m.header.exchange == Exchange::ike_auth);
		CHECK(m.header.flags == c.flags);
		CHECK(m.header.message_id == 1);
		CHECK(m.header.next == PayloadType::sk);
		REQUIRE(m.payloads.size() == 1);
		const SkPayload* sk = m.find<SkPayload>();
		REQUIRE(sk);
		CHECK(sk->first_inner == c.first_inner);
		CHECK(sk->offset == kHeaderLen);
		CHECK(sk->length == size - kHeaderLen);
		// AES-CBC with HMAC-SHA256-128: IV 16, whole blocks, ICV 16.
		CHECK((sk->length - kGenericHeaderLen - 16 - 16) % 16 == 0);
	}
}

TEST_CASE("strongSwan INVALID_KE_PAYLOAD answer and the MODP-2048 retry it asks for") {
	Message first = parse_vector("modp_ike_sa_init_request.bin");
	Message nak = parse_vector("modp_invalid_ke_response.bin");
	CHECK(nak.header.spi_i == first.header.spi_i);
	CHECK(nak.header.spi_r == 0);
	CHECK(nak.header.flags == kFlagResponse);
	CHECK(nak.header.length == 38);
	REQUIRE(nak.payloads.size() == 1);
	const NotifyPayload* n = nak.find_notify(notify::invalid_ke_payload);
	REQUIRE(n);
	CHECK(n->is_error());
	CHECK(n->protocol == Protocol::none);
	CHECK(n->data == test::be16(14)); // the group the responder wants

	Message retry = parse_vector("modp_ike_sa_init_retry.bin");
	CHECK(retry.header.spi_i == first.header.spi_i);
	CHECK(retry.header.spi_r == 0);
	CHECK(retry.header.length == 544);
	const KePayload* ke = retry.find<KePayload>();
	REQUIRE(ke);
	CHECK(ke->group == 14);
	CHECK(ke->data.size() == 256);
	// strongSwan moves the proposal with the requested group to the front.
	const SaPayload* sa = retry.find<SaPayload>();
	REQUIRE(sa);
	REQUIRE(sa->proposals.size() == 3);
	CHECK(sa->proposals[0].transforms == kAes128Sha256Modp2048);
	CHECK(sa->proposals[1].transforms == kAes128Sha256X25519);
	CHECK(sa->proposals[2].transforms == kAes256GcmSha384Ecp256);

	Message resp = parse_vector("modp_ike_sa_init_response.bin");
	CHECK(resp.header.spi_r != 0);
	CHECK(resp.find<KePayload>()->group == 14);
	CHECK(resp.find<KePayload>()->data.size() == 256);
	REQUIRE(resp.find<SaPayload>()->proposals.size() == 1);
	CHECK(resp.find<SaPayload>()->proposals[0].transforms == kAes128Sha256Modp2048);
}

TEST_CASE("re-encoding every unencrypted captured message gives back its exact bytes") {
	for (const char* name : test::kVectors) {
		INFO(name);
		Bytes wire = read_vector(name);
		Message m = parse_vector(name);
		if (m.find<SkPayload>()) continue; // sealed by SkCipher, not build_message()
		CHECK(build_message(m.header, m.payloads) == wire);
	}
}

TEST_CASE("the payload chain of a captured message parses on its own with parse_payloads") {
	for (const char* name : test::kVectors) {
		INFO(name);
		Bytes wire = read_vector(name);
		Message m = parse_vector(name);
		if (m.find<SkPayload>()) continue;
		std::vector<Payload> chain;
		CHECK(parse_payloads(m.header.next, std::span(wire).subspan(kHeaderLen), chain));
		CHECK(chain == m.payloads);
		PayloadType first = PayloadType::none;
		CHECK(encode_payloads(chain, first) == Bytes(wire.begin() + kHeaderLen, wire.end()));
		CHECK(first == m.header.next);
	}
}

} // namespace
} // namespace esptun::ike
