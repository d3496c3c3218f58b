// libFuzzer target: SkCipher::open() (ike/keymat.hpp) on arbitrary
// bytes for every IKE SK suite. open() runs on every encrypted IKE message
// before the peer is authenticated, so it must never crash, read outside the
// message or throw. Then the same bytes as an inner chain: a sealed message
// must open back to them, and with any one bit flipped must not open.
//
// Input: [suite 1][SK offset 1][message ...]. The seeds in
// tests/fuzz/corpus/ike_sk_open/ are real SK messages sealed under the keys
// below by tests/data/ike/gen_crypto_vectors.py (same suite order).
#include "ike/keymat.hpp"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

using namespace esptun::ike;

namespace {

/// make_ciphers() - one SkCipher per suite; key material byte i = 0x40 + i,
/// integrity key all 0x24 (the generator uses the same).
std::vector<std::unique_ptr<SkCipher>> make_ciphers() {
	const IkeSuite suites[] = {
	    {EncrId::aes_cbc, 128, IntegId::hmac_sha256_128, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha384_192, PrfId::hmac_sha384, DhGroup::curve25519},
	    {EncrId::aes_cbc, 256, IntegId::hmac_sha512_256, PrfId::hmac_sha512, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 128, IntegId::none, PrfId::hmac_sha256, DhGroup::curve25519},
	    {EncrId::aes_gcm_16, 256, IntegId::none, PrfId::hmac_sha384, DhGroup::curve25519},
	};
	std::vector<std::unique_ptr<SkCipher>> out;
	for (const auto& s : suites) {
		std::vector<uint8_t> enc(encr_keymat_len(s.encr, s.key_bits)),
		    integ(integ_key_len(s.integ), 0x24);
		for (size_t i = 0; i < enc.size(); i++)
			enc[i] = uint8_t(0x40 + i);
		out.push_back(std::make_unique<SkCipher>(s, enc, integ));
	}
	return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	static const std::vector<std::unique_ptr<SkCipher>> ciphers = make_ciphers();
	if (size < 2) return 0;
	const SkCipher& c = *ciphers[data[0] % ciphers.size()];
	const size_t sk_offset = data[1];
	const std::vector<uint8_t> msg(data + 2, data + size); // exact-size copy: ASan sees any overread

	// 1. Arbitrary bytes: open() decides without crashing; what it returns
	//    is strictly shorter than the message.
	if (auto inner = c.open(msg, sk_offset); inner && inner->size() >= msg.size()) std::abort();

	// 2. The bytes as an inner chain behind a fixed IKE header (Next Payload = SK).
	std::vector<uint8_t> sealed = {1,  2,  3,  4,    5,  6,    7, 8, 9, 10, 11, 12, 13, 14,
	                               15, 16, 46, 0x20, 35, 0x08, 0, 0, 0, 1,  0,  0,  0,  28};
	try {
		c.seal(sealed, data[1], msg);
	} catch (const std::length_error&) {
		return 0; // larger than an IKE message may be
	}
	auto opened = c.open(sealed, 28);
	if (!opened || *opened != msg) std::abort();

	// 3. Any single bit flip, chosen by the input, must be refused.
	size_t h = size;
	for (size_t i = 0; i < size; i++)
		h = h * 131 + data[i];
	const size_t bit = h % (sealed.size() * 8);
	sealed[bit / 8] ^= uint8_t(1u << (bit % 8));
	if (c.open(sealed, 28)) std::abort();
	return 0;
}
