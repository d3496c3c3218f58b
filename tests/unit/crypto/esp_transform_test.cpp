// The EspTransform contract over every suite: the suite table, key-length
// checks in make_esp_transform(), open(seal(x)) == x for many payload sizes
// with and without ESN, and rejection of any single-bit change, a wrong ESN
// high half, and malformed lengths.
#include "crypto/esp_transform.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <malloc.h>
#include <set>
#include <stdexcept>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/allocator_interface.h>
#define ESPTUN_TEST_ASAN 1
#endif
#endif

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

struct Pair {
	std::unique_ptr<EspTransform> tx, rx; // two SA ends with the same keys
};

Pair make_pair(const CipherSpec& spec, bool esn, std::mt19937_64& rng) {
	const Bytes enc = random_bytes(rng, spec.enc_key_len);
	const Bytes auth = random_bytes(rng, spec.auth_key_len);
	return {make_esp_transform(spec.id, enc, auth, esn), make_esp_transform(spec.id, enc, auth, esn)};
}

/// Heap bytes in use now (ASan keeps its own books; mallinfo2 does not see them).
size_t heap_in_use() {
#ifdef ESPTUN_TEST_ASAN
	return __sanitizer_get_current_allocated_bytes();
#else
	return mallinfo2().uordblks;
#endif
}

} // namespace

TEST_CASE("the suite table lists the six suites in enum order with their RFC sizes and xfrm names") {
	const auto all = all_ciphers();
	REQUIRE(all.size() == 6);
	for (size_t i = 0; i < all.size(); i++) {
		CHECK(static_cast<size_t>(all[i].id) == i);
		CHECK(&cipher_spec(all[i].id) == &all[i]);
		CHECK(find_cipher(all[i].name) == &all[i]);
		CHECK(all[i].xfrm_trunc_bits == all[i].icv_len * 8);
		CHECK(min_esp_len(all[i]) == 8 + all[i].iv_len + all[i].align + all[i].icv_len);
	}
	CHECK(find_cipher("aes128-gcm")->enc_key_len == 20);
	CHECK(find_cipher("aes256-gcm")->enc_key_len == 36);
	CHECK(find_cipher("aes128-gcm")->xfrm_enc == "rfc4106(gcm(aes))");
	CHECK(find_cipher("aes256-gcm")->aead);
	CHECK(find_cipher("aes128-gcm")->iv_len == 8);
	CHECK(find_cipher("aes128-gcm")->align == 4);
	CHECK(find_cipher("aes128-gcm")->xfrm_auth.empty());

	const CipherSpec* sha1 = find_cipher("aes256-cbc-hmac-sha1");
	REQUIRE(sha1);
	CHECK(sha1->enc_key_len == 32);
	CHECK(sha1->auth_key_len == 20);
	CHECK(sha1->icv_len == 12);
	CHECK(sha1->xfrm_trunc_bits == 96);
	CHECK(sha1->xfrm_enc == "cbc(aes)");
	CHECK(sha1->xfrm_auth == "hmac(sha1)");

	const CipherSpec* sha256 = find_cipher("aes128-cbc-hmac-sha256");
	REQUIRE(sha256);
	CHECK(sha256->enc_key_len == 16);
	CHECK(sha256->auth_key_len == 32);
	CHECK(sha256->icv_len == 16);
	CHECK(sha256->iv_len == 16);
	CHECK(sha256->align == 16);
	CHECK(sha256->xfrm_auth == "hmac(sha256)");

	CHECK(find_cipher("aes128-cbc-hmac-sha1") != nullptr);
	CHECK(find_cipher("aes256-cbc-hmac-sha256") != nullptr);
	CHECK(find_cipher("") == nullptr);
	CHECK(find_cipher("aes128-GCM") == nullptr);
	CHECK(find_cipher("aes192-gcm") == nullptr);
}

TEST_CASE("make_esp_transform rejects every wrong key length and accepts the right ones") {
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		const Bytes enc(spec.enc_key_len, 1), auth(spec.auth_key_len, 2);
		CHECK(make_esp_transform(spec.id, enc, auth, false)->spec().id == spec.id);
		for (size_t len : {size_t(0), spec.enc_key_len - 1, spec.enc_key_len + 1, size_t(16),
		                   size_t(20), size_t(24), size_t(32), size_t(36)}) {
			if (len == spec.enc_key_len) continue;
			CAPTURE(len);
			CHECK_THROWS_AS(make_esp_transform(spec.id, Bytes(len, 1), auth, false),
			                std::invalid_argument);
		}
		for (size_t len : {size_t(0), size_t(12), size_t(16), size_t(20), size_t(32), size_t(64)}) {
			if (len == spec.auth_key_len) continue;
			CAPTURE(len);
			CHECK_THROWS_AS(make_esp_transform(spec.id, enc, Bytes(len, 2), false),
			                std::invalid_argument);
		}
	}
	CHECK_THROWS_AS(make_esp_transform(static_cast<Cipher>(6), Bytes(16, 1), Bytes(20, 2), false),
	                std::invalid_argument);
}

TEST_CASE("open(seal(x)) == x for every suite, ESN on and off, payloads 0..9000 bytes") {
	std::mt19937_64 rng(4303);
	for (const auto& spec : all_ciphers()) {
		for (bool esn : {false, true}) {
			CAPTURE(spec.name);
			CAPTURE(esn);
			auto [tx, rx] = make_pair(spec, esn, rng);
			// Every aligned length up to 2048, then a sample up to 9000 (jumbo).
			std::vector<size_t> lens;
			for (size_t n = 0; n <= 2048; n += spec.align)
				lens.push_back(n);
			for (size_t n = 2048; n <= 9000; n += 8 * spec.align + spec.align)
				lens.push_back(n);
			lens.push_back(9000 - 9000 % spec.align);
			uint64_t seq = esn ? 0xfffffff0ull : 1; // with ESN, cross the 2^32 boundary
			for (size_t len : lens) {
				CAPTURE(len);
				CAPTURE(seq);
				const Bytes plain = random_bytes(rng, len);
				Bytes esp = esp_packet(spec, 0x01020304, seq, plain);
				tx->seal(esp, seq);
				if (len >= 16) CHECK(payload_of(spec, esp) != plain);
				REQUIRE(rx->open(esp, uint32_t(seq >> 32)));
				CHECK(payload_of(spec, esp) == plain);
				seq++;
			}
		}
	}
}

TEST_CASE("flipping any single bit of header, IV, ciphertext or ICV makes open() fail") {
	std::mt19937_64 rng(2406);
	for (const auto& spec : all_ciphers()) {
		for (bool esn : {false, true}) {
			CAPTURE(spec.name);
			CAPTURE(esn);
			auto [tx, rx] = make_pair(spec, esn, rng);
			const uint64_t seq = 0x0000000300000042ull;
			const Bytes plain = random_bytes(rng, 64);
			Bytes sealed = esp_packet(spec, 0xdeadbeef, seq, plain);
			tx->seal(sealed, seq);
			for (size_t bit = 0; bit < sealed.size() * 8; bit++) {
				Bytes esp = sealed;
				esp[bit / 8] ^= uint8_t(1u << (bit % 8));
				if (rx->open(esp, 3))
					FAIL_CHECK("accepted a packet with bit " << bit << " flipped");
			}
			Bytes esp = sealed;
			CHECK(rx->open(esp, 3)); // and the untouched packet still opens
		}
	}
}

TEST_CASE("with ESN a wrong high half of the sequence number fails; without ESN it is ignored") {
	std::mt19937_64 rng(3303);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		const uint64_t seq = 0x0000000500000001ull;
		{
			auto [tx, rx] = make_pair(spec, true, rng);
			Bytes sealed = esp_packet(spec, 7, seq, random_bytes(rng, 32));
			tx->seal(sealed, seq);
			for (uint32_t hi : {0u, 4u, 6u, 0x80000005u, 0xffffffffu}) {
				Bytes esp = sealed;
				CHECK_FALSE(rx->open(esp, hi));
			}
			Bytes esp = sealed;
			CHECK(rx->open(esp, 5));
		}
		{
			auto [tx, rx] = make_pair(spec, false, rng);
			Bytes sealed = esp_packet(spec, 7, 1, random_bytes(rng, 32));
			tx->seal(sealed, 1);
			for (uint32_t hi : {0u, 5u, 0xffffffffu}) {
				Bytes esp = sealed;
				CHECK(rx->open(esp, hi));
			}
		}
	}
}

TEST_CASE("a packet sealed under other keys, or for another SA's transform, does not open") {
	std::mt19937_64 rng(1);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		auto a = make_pair(spec, false, rng);
		auto b = make_pair(spec, false, rng);
		Bytes esp = esp_packet(spec, 9, 1, random_bytes(rng, 48));
		a.tx->seal(esp, 1);
		CHECK_FALSE(b.rx->open(esp, 0));
	}
}

TEST_CASE("CBC IVs differ between consecutive packets and GCM IVs are the sequence numbers") {
	std::mt19937_64 rng(3602);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		auto [tx, rx] = make_pair(spec, false, rng);
		std::set<Bytes> ivs;
		const Bytes plain(32, 0); // same plaintext every time
		for (uint64_t seq = 1; seq <= 2000; seq++) {
			Bytes esp = esp_packet(spec, 1, seq, plain);
			tx->seal(esp, seq);
			const Bytes iv(esp.begin() + 8, esp.begin() + 8 + ptrdiff_t(spec.iv_len));
			CHECK(ivs.insert(iv).second);
			if (spec.aead) {
				Bytes want(8, 0);
				for (int i = 0; i < 8; i++)
					want[size_t(7 - i)] = uint8_t(seq >> (8 * i));
				CHECK(iv == want);
			}
		}
	}
}

TEST_CASE("open() rejects truncated and misaligned packets without touching memory past the span") {
	std::mt19937_64 rng(7);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		auto [tx, rx] = make_pair(spec, false, rng);
		Bytes sealed = esp_packet(spec, 1, 1, random_bytes(rng, 64));
		tx->seal(sealed, 1);
		for (size_t len = 0; len < sealed.size(); len++) {
			CAPTURE(len);
			// An exact-size heap copy so ASan sees any read past the end.
			Bytes esp(sealed.begin(), sealed.begin() + ptrdiff_t(len));
			CHECK_FALSE(rx->open(esp, 0));
		}
		Bytes longer = sealed;
		longer.push_back(0);
		CHECK_FALSE(rx->open(longer, 0));
	}
}

TEST_CASE("seal() on a malformed layout leaves no plaintext and produces a packet that does not open") {
	std::mt19937_64 rng(11);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		auto [tx, rx] = make_pair(spec, false, rng);
		// One byte more than an aligned payload: not a valid ESP layout.
		Bytes plain(spec.align + 1, 0xee);
		Bytes esp = esp_packet(spec, 1, 1, plain);
		tx->seal(esp, 1);
		CHECK(std::all_of(esp.begin() + 8, esp.end(), [](uint8_t b) { return b == 0; }));
		CHECK_FALSE(rx->open(esp, 0));
		Bytes tiny(5, 0xee);
		tx->seal(tiny, 1); // shorter than a header: must not crash
		CHECK_FALSE(rx->open(tiny, 0));
	}
}

TEST_CASE("for_another_worker(): the same SA for another thread, sharing the key material") {
	std::mt19937_64 rng(19);
	for (const auto& spec : all_ciphers()) {
		CAPTURE(spec.name);
		const Bytes enc = random_bytes(rng, spec.enc_key_len);
		const Bytes auth = random_bytes(rng, spec.auth_key_len);
		auto tx = make_esp_transform(spec.id, enc, auth, true, CryptoImpl::automatic);
		auto rx = make_esp_transform(spec.id, enc, auth, true, CryptoImpl::automatic);
		auto sib = tx->for_another_worker();
		const std::string impl(tx->impl_name());
		CAPTURE(impl);
		if (!sib) {
			// Only the implementations that keep all in OpenSSL contexts say no.
			CHECK((impl == "gcm-evp" || impl == "two-pass"));
			continue;
		}
		CHECK(sib->impl_name() == tx->impl_name());
		CHECK(&sib->spec() == &tx->spec());
		// Packets of either open with the other and with an SA end built
		// from the keys, both ways, ESN high half included.
		for (uint64_t seq : {uint64_t(7), (uint64_t(3) << 32) | 9}) {
			const Bytes plain = random_bytes(rng, 512);
			Bytes a = esp_packet(spec, 0x0a0b0c0d, seq, plain), b = a;
			tx->seal(a, seq);
			sib->seal(b, seq);
			if (spec.aead) {
				CHECK(a == b); // GCM: the IV is the sequence number, the key the same
			} else {
				CHECK(a != b); // CBC: each has its own IV generator
			}
			Bytes a2 = a, b2 = b;
			REQUIRE(sib->open(a, uint32_t(seq >> 32)));
			REQUIRE(rx->open(b, uint32_t(seq >> 32)));
			REQUIRE(tx->open(b2, uint32_t(seq >> 32)));
			CHECK(payload_of(spec, a) == plain);
			CHECK(payload_of(spec, b) == plain);
			CHECK(payload_of(spec, b2) == plain);
			(void)a2;
		}
		// The key lives as long as any sharer: the original gone, the copy works.
		tx.reset();
		const Bytes plain = random_bytes(rng, 64);
		Bytes p = esp_packet(spec, 0x0a0b0c0d, 42, plain);
		sib->seal(p, 42);
		REQUIRE(rx->open(p, 0));
		CHECK(payload_of(spec, p) == plain);
		// And the point of it: a copy costs a fraction of one built from keys
		// (a GCM copy about a tenth; a stitched CBC one about half, as it has
		// an IV generator of its own, so the bound leaves room for the
		// allocator's rounding, which differs between builds).
		constexpr int kN = 64;
		std::vector<std::unique_ptr<EspTransform>> fresh, copies;
		const size_t m0 = heap_in_use();
		for (int i = 0; i < kN; i++)
			fresh.push_back(make_esp_transform(spec.id, enc, auth, true, CryptoImpl::automatic));
		const size_t m1 = heap_in_use();
		for (int i = 0; i < kN; i++)
			copies.push_back(sib->for_another_worker());
		const size_t m2 = heap_in_use();
		MESSAGE(spec.name, ": ", (m1 - m0) / kN, " bytes from keys, ", (m2 - m1) / kN, " as a copy");
		CHECK(m2 - m1 < (m1 - m0) * 2 / 3);
	}
}
