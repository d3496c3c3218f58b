// Unit tests for SkCipher (the SK payload, RFC 7296 section 3.14 and RFC 5282):
// what seal() writes is decoded here a second time with plain OpenSSL calls
// written from the RFC layout, every single-bit change and truncation of a
// sealed message is refused, and bad arguments leave the message alone.
// Messages sealed by an independent implementation are in crypto_vectors_test.cpp.
#include "tests/unit/ike/keymat_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>

#include <optional>

using namespace esptun::ike;
using namespace esptun::ike::crypto_test;

namespace {

const std::vector<IkeSuite>& all_suites() {
	static const std::vector<IkeSuite> s = {
	    {EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_cbc, 192, IntegId::hmac_sha384_192, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha512_256, PrfId::hmac_sha512, DhGroup::curve25519},
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 256, IntegId::none, PrfId::hmac_sha384, DhGroup::curve25519},
	};
	return s;
}

struct Keys {
	Bytes enc, integ;
};

Keys keys_for(const IkeSuite& s, uint8_t fill) {
	Keys k{Bytes(encr_keymat_len(s.encr, s.key_bits)), Bytes(integ_key_len(s.integ))};
	for (size_t i = 0; i < k.enc.size(); i++)
		k.enc[i] = uint8_t(fill + i);
	for (size_t i = 0; i < k.integ.size(); i++)
		k.integ[i] = uint8_t(fill ^ (i * 7));
	return k;
}

/// ike_header() - 28 bytes: SPIs, Next Payload = SK, version 2.0, IKE_AUTH, initiator, Message ID 1.
Bytes ike_header(uint8_t next = 46) {
	Bytes h = hex("0102030405060708 1112131415161718");
	h.insert(h.end(), {next, 0x20, 35, 0x08, 0, 0, 0, 1, 0, 0, 0, 28});
	return h;
}

Bytes pattern(size_t n, uint8_t seed) {
	Bytes b(n);
	for (size_t i = 0; i < n; i++)
		b[i] = uint8_t(seed + i * 31);
	return b;
}

uint32_t be32_at(const Bytes& b, size_t off) {
	return uint32_t(b[off]) << 24 | uint32_t(b[off + 1]) << 16 | uint32_t(b[off + 2]) << 8 | b[off + 3];
}

/**
 * rfc_decode() - a second reading of a sealed message, from the RFC layout
 * and raw OpenSSL calls: checks the lengths, the ICV (CBC: HMAC over header
 * through ciphertext, truncated; GCM: tag over the AAD of RFC 5282 section
 * 5.1 with nonce salt | IV), the padding rule documented in crypto.cpp
 * (CBC least padding to 16; GCM none), and returns the inner chain.
 * @fields: bytes between the generic header and the IV: 0 for SK, 4 for SKF
 * (Fragment Number, Total Fragments: RFC 7383 section 2.5 puts them in the
 * AAD with the generic header, and under the CBC ICV like everything else).
 */
std::optional<Bytes> rfc_decode(const IkeSuite& s, const Keys& k, const Bytes& msg, size_t sk_off,
                                size_t fields = 0) {
	const bool gcm = s.encr == EncrId::aes_gcm_16;
	const size_t iv_len = gcm ? 8 : 16, icv_len = gcm ? 16 : integ_icv_len(s.integ);
	const size_t sk_len = msg.size() - sk_off;
	CHECK(be32_at(msg, 24) == msg.size());
	CHECK((size_t(msg[sk_off + 2]) << 8 | msg[sk_off + 3]) == sk_len);
	CHECK(msg[sk_off + 1] == 0);
	const size_t ct_len = sk_len - 4 - fields - iv_len - icv_len;
	const uint8_t* iv = msg.data() + sk_off + 4 + fields;
	const uint8_t* ct = iv + iv_len;
	const uint8_t* icv = ct + ct_len;
	Bytes pt(ct_len + 16);
	int n = 0, fin = 0;
	EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
	bool ok;
	if (gcm) {
		const size_t key_len = s.key_bits / 8u;
		Bytes nonce(k.enc.begin() + std::ptrdiff_t(key_len), k.enc.end());
		nonce.insert(nonce.end(), iv, iv + 8);
		ok = EVP_DecryptInit_ex(c, key_len == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr,
		                        k.enc.data(), nonce.data()) == 1 &&
		     EVP_DecryptUpdate(c, nullptr, &n, msg.data(), int(sk_off + 4 + fields)) == 1 &&
		     EVP_DecryptUpdate(c, pt.data(), &n, ct, int(ct_len)) == 1 &&
		     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, const_cast<uint8_t*>(icv)) == 1 &&
		     EVP_DecryptFinal_ex(c, pt.data() + n, &fin) == 1;
	} else {
		const char* md = s.integ == IntegId::hmac_sha256_128   ? "SHA256"
		                 : s.integ == IntegId::hmac_sha384_192 ? "SHA384"
		                                                       : "SHA512";
		Bytes mac(64);
		size_t mac_len = 0;
		REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, md, nullptr, k.integ.data(), k.integ.size(),
		                  msg.data(), msg.size() - icv_len, mac.data(), mac.size(),
		                  &mac_len) != nullptr);
		CHECK(to_hex(std::span(mac).first(icv_len)) == to_hex(std::span(icv, icv_len)));
		const EVP_CIPHER* cipher = s.key_bits == 128   ? EVP_aes_128_cbc()
		                           : s.key_bits == 192 ? EVP_aes_192_cbc()
		                                               : EVP_aes_256_cbc();
		ok = EVP_DecryptInit_ex(c, cipher, nullptr, k.enc.data(), iv) == 1 &&
		     EVP_CIPHER_CTX_set_padding(c, 0) == 1 &&
		     EVP_DecryptUpdate(c, pt.data(), &n, ct, int(ct_len)) == 1 &&
		     EVP_DecryptFinal_ex(c, pt.data() + n, &fin) == 1;
	}
	EVP_CIPHER_CTX_free(c);
	if (!ok) return std::nullopt;
	pt.resize(size_t(n + fin));
	const size_t pad = pt.back();
	if (gcm)
		CHECK(pad == 0);
	else
		CHECK(pad < 16);
	CHECK(pt.size() % (gcm ? 1 : 16) == 0);
	REQUIRE(pad + 1 <= pt.size());
	pt.resize(pt.size() - pad - 1);
	return pt;
}

} // namespace

TEST_CASE("seal() output follows the RFC layout, opens again, and overhead() predicts its size") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		CAPTURE(integ_name(s.integ));
		const Keys k = keys_for(s, 0x30);
		SkCipher tx(s, k.enc, k.integ), rx(s, k.enc, k.integ);
		for (size_t len : {0u, 1u, 14u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 1500u}) {
			CAPTURE(len);
			const Bytes inner = pattern(len, uint8_t(len));
			Bytes msg = ike_header();
			tx.seal(msg, 35, inner);
			CHECK(msg.size() == 28 + tx.overhead(len) + len);
			CHECK(msg[28] == 35); // the SK header's Next Payload is the first inner payload
			const auto decoded = rfc_decode(s, k, msg, 28);
			REQUIRE(decoded);
			CHECK(to_hex(*decoded) == to_hex(inner));
			const auto opened = rx.open(msg, 28);
			REQUIRE(opened);
			CHECK(to_hex(*opened) == to_hex(inner));
		}
	}
}

TEST_CASE("seal() keeps payloads in front of SK inside the authenticated part") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		const Keys k = keys_for(s, 0x51);
		SkCipher c(s, k.enc, k.integ);
		Bytes msg = ike_header(43); // a Vendor ID payload, then SK
		const Bytes vid = {46, 0, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8};
		msg.insert(msg.end(), vid.begin(), vid.end());
		const Bytes inner = pattern(40, 9);
		c.seal(msg, 41, inner);
		REQUIRE(rfc_decode(s, k, msg, 40));
		auto opened = c.open(msg, 40);
		REQUIRE(opened);
		CHECK(*opened == inner);
		msg[35] ^= 0x01; // inside the Vendor ID data
		CHECK_FALSE(c.open(msg, 40));
	}
}

TEST_CASE("open() refuses every single-bit change of a sealed message") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		CAPTURE(integ_name(s.integ));
		const Keys k = keys_for(s, 0x77);
		SkCipher c(s, k.enc, k.integ);
		Bytes msg = ike_header();
		c.seal(msg, 35, pattern(37, 3));
		REQUIRE(c.open(msg, 28));
		size_t accepted = 0;
		for (size_t bit = 0; bit < msg.size() * 8; bit++) {
			Bytes bad = msg;
			bad[bit / 8] ^= uint8_t(1u << (bit % 8));
			if (c.open(bad, 28)) accepted++;
		}
		CHECK(accepted == 0);
	}
}

TEST_CASE("open() refuses truncated messages, with or without fixed-up lengths") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		const Keys k = keys_for(s, 0x11);
		SkCipher c(s, k.enc, k.integ);
		Bytes msg = ike_header();
		c.seal(msg, 35, pattern(50, 1));
		for (size_t cut = 1; cut < msg.size(); cut++) {
			CAPTURE(cut);
			Bytes t(msg.begin(), msg.end() - std::ptrdiff_t(cut));
			CHECK_FALSE(c.open(t, 28));
			if (t.size() >= 32) { // the lengths say the truncated size: the ICV must still fail
				const size_t sk_len = t.size() - 28, total = t.size();
				t[30] = uint8_t(sk_len >> 8);
				t[31] = uint8_t(sk_len);
				t[26] = uint8_t(total >> 8);
				t[27] = uint8_t(total);
				CHECK_FALSE(c.open(t, 28));
			}
		}
	}
}

TEST_CASE("open() refuses offsets that do not put the SK payload after the IKE header") {
	const IkeSuite& s = all_suites().front();
	const Keys k = keys_for(s, 0x21);
	SkCipher c(s, k.enc, k.integ);
	Bytes msg = ike_header();
	c.seal(msg, 35, pattern(20, 1));
	for (size_t off : {size_t(0), size_t(4), size_t(27), size_t(29), msg.size() - 4, msg.size(),
	                   msg.size() + 1, size_t(-1)})
		CHECK_FALSE(c.open(msg, off));
	CHECK(c.open(msg, 28));
	CHECK_FALSE(c.open({}, 0));
	CHECK_FALSE(c.open(std::span(msg).first(28), 28));
}

TEST_CASE("open() refuses a message sealed under another key, and seal() uses fresh IVs") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		const Keys ki = keys_for(s, 0x01), kr = keys_for(s, 0x02);
		SkCipher i(s, ki.enc, ki.integ), r(s, kr.enc, kr.integ);
		Bytes a = ike_header(), b = ike_header();
		i.seal(a, 35, pattern(30, 5));
		i.seal(b, 35, pattern(30, 5));
		CHECK(a != b);
		CHECK(i.open(a, 28));
		CHECK_FALSE(r.open(a, 28));
		if (s.encr == EncrId::aes_gcm_16) { // the salt alone must matter too
			Bytes salt_only = ki.enc;
			salt_only.back() ^= 1;
			SkCipher other_salt(s, salt_only, ki.integ);
			CHECK_FALSE(other_salt.open(a, 28));
		} else {
			Bytes integ_only = ki.integ;
			integ_only[0] ^= 1;
			SkCipher other_integ(s, ki.enc, integ_only);
			CHECK_FALSE(other_integ.open(a, 28));
		}
	}
}

TEST_CASE("SkCipher refuses key material of the wrong length and suites it cannot run") {
	const IkeSuite gcm{EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519};
	const IkeSuite cbc{EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256,
	                   DhGroup::curve25519};
	CHECK_NOTHROW(SkCipher(gcm, Bytes(20), {}));
	CHECK_THROWS_AS(SkCipher(gcm, Bytes(16), {}), std::invalid_argument); // salt missing
	CHECK_THROWS_AS(SkCipher(gcm, Bytes(20), Bytes(32)), std::invalid_argument);
	CHECK_NOTHROW(SkCipher(cbc, Bytes(16), Bytes(32)));
	CHECK_THROWS_AS(SkCipher(cbc, Bytes(16), Bytes(16)), std::invalid_argument);
	CHECK_THROWS_AS(SkCipher(cbc, Bytes(32), Bytes(32)), std::invalid_argument);
	IkeSuite bad = cbc;
	bad.integ = IntegId::none;
	CHECK_THROWS_AS(SkCipher(bad, Bytes(16), {}), std::invalid_argument);
}

TEST_CASE("seal() refuses a short message or an oversized result and leaves the message as it was") {
	const IkeSuite& s = all_suites().back();
	const Keys k = keys_for(s, 0x42);
	SkCipher c(s, k.enc, k.integ);
	Bytes short_msg(27, 0xab);
	CHECK_THROWS_AS(c.seal(short_msg, 35, pattern(10, 1)), std::invalid_argument);
	CHECK(short_msg == Bytes(27, 0xab));
	Bytes msg = ike_header();
	const Bytes before = msg;
	CHECK_THROWS_AS(c.seal(msg, 35, Bytes(65535, 0)), std::length_error);
	CHECK(msg == before);
	// The largest chain that fits still works and opens.
	const size_t max_inner = 65535 - 28 - c.overhead(0);
	CHECK(c.overhead(max_inner) == c.overhead(0)); // GCM: no padding
	c.seal(msg, 35, Bytes(max_inner, 7));
	CHECK(msg.size() == 65535);
	auto opened = c.open(msg, 28);
	REQUIRE(opened);
	CHECK(opened->size() == max_inner);
}

TEST_CASE("overhead() is header + IV + least padding + Pad Length + ICV") {
	const IkeSuite cbc{EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256,
	                   DhGroup::curve25519};
	const IkeSuite gcm{EncrId::aes_gcm_16, 256, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519};
	SkCipher c(cbc, Bytes(16), Bytes(32)), g(gcm, Bytes(36), {});
	CHECK(c.overhead(0) == 4 + 16 + 15 + 1 + 16);
	CHECK(c.overhead(15) == 4 + 16 + 0 + 1 + 16);
	CHECK(c.overhead(16) == 4 + 16 + 15 + 1 + 16);
	CHECK(g.overhead(0) == 4 + 8 + 1 + 16);
	CHECK(g.overhead(1234) == 4 + 8 + 1 + 16);
}

TEST_CASE("seal_fragment(): the SKF layout of RFC 7383 section 2.5, its fields authenticated") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		CAPTURE(integ_name(s.integ));
		const Keys k = keys_for(s, 0x51);
		SkCipher tx(s, k.enc, k.integ), rx(s, k.enc, k.integ);
		for (size_t len : {0u, 1u, 15u, 16u, 17u, 500u}) {
			CAPTURE(len);
			const Bytes inner = pattern(len, uint8_t(len + 3));
			Bytes msg = ike_header(53);
			tx.seal_fragment(msg, 35, 2, 7, inner);
			CHECK(msg[28] == 35);
			CHECK(msg[29] == 0);
			CHECK(to_hex(std::span(msg).subspan(32, 4)) ==
			      "00020007"); // Fragment Number, Total Fragments
			const auto decoded = rfc_decode(s, k, msg, 28, 4);
			REQUIRE(decoded);
			CHECK(*decoded == inner);
			const auto opened = rx.open_fragment(msg, 28);
			REQUIRE(opened);
			CHECK(*opened == inner);
			// open() reads it as SK: the fields would be IV bytes, and it fails.
			CHECK(!rx.open(msg, 28));
			// Every bit of the fields and the generic header is covered.
			for (size_t byte = 28; byte < 36; byte++) {
				for (int bit = 0; bit < 8; bit++) {
					Bytes bad = msg;
					bad[byte] ^= uint8_t(1 << bit);
					CHECK_MESSAGE(!rx.open_fragment(bad, 28), byte, ":", bit);
				}
			}
		}
	}
}

TEST_CASE("fragment_capacity() is the most one SKF payload of that size carries") {
	for (const auto& s : all_suites()) {
		CAPTURE(encr_name(s.encr, s.key_bits));
		CAPTURE(integ_name(s.integ));
		const Keys k = keys_for(s, 0x11);
		SkCipher tx(s, k.enc, k.integ);
		for (size_t skf_len : {100u, 257u, 500u, 1100u, 1212u}) {
			CAPTURE(skf_len);
			const size_t cap = tx.fragment_capacity(skf_len);
			REQUIRE(cap > 0);
			Bytes fits = ike_header(53), over = ike_header(53);
			tx.seal_fragment(fits, 35, 1, 1, pattern(cap, 1));
			tx.seal_fragment(over, 35, 1, 1, pattern(cap + 1, 1));
			CHECK(fits.size() - 28 <= skf_len);
			CHECK(over.size() - 28 > skf_len);
		}
		CHECK(tx.fragment_capacity(20) == 0);
	}
}
