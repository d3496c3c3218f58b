// libFuzzer target: differential check of the stitched and the two-pass
// AES-CBC + HMAC transforms. For fuzzer-chosen suite, keys, IV, sequence
// number, ESN, code path and payload, both seal to the same bytes, each
// opens the other's packet back to the payload, and the stitched open() of
// the raw input never crashes or reads outside it.
//
// Input: [selector 1][seq 8][iv 16][enc key 32][auth key 32][payload ...]
// selector bits 0-1: suite (the four CBC suites), bit 2: ESN,
// bits 3-4: code path (0 native, 1 no SHA-NI, 2 no SHA-NI/AVX2, 3 no SHA-NI/AVX).
#include "crypto/cbc_hmac.hpp"
#include "crypto/cbc_hmac_stitched.hpp"
#include "crypto/cpu_features.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

using namespace esptun::crypto;

namespace {

constexpr Cipher kSuites[] = {Cipher::aes128_cbc_sha1, Cipher::aes256_cbc_sha1, Cipher::aes128_cbc_sha256,
                              Cipher::aes256_cbc_sha256};
constexpr size_t kHeader = 1 + 8 + 16 + 32 + 32;

uint64_t load_be64(const uint8_t* p) {
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

cpu::ScopedCapMask::Clear path_mask(unsigned sel) {
	switch (sel & 3) {
	case 1:
		return {.sha = true};
	case 2:
		return {.sha = true, .avx2 = true};
	case 3:
		return {.sha = true, .avx = true};
	default:
		return {};
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	if (size < kHeader) return 0;
	const CipherSpec& spec = cipher_spec(kSuites[data[0] & 3]);
	const bool esn = data[0] & 4;
	cpu::ScopedCapMask mask(path_mask(data[0] >> 3));
	const bool sha256 = spec.xfrm_auth == "hmac(sha256)";
	if ((sha256 ? cpu::sha256_stitch_path() : cpu::sha1_stitch_path()) == cpu::StitchPath::none) return 0;

	uint64_t seq = load_be64(data + 1);
	if (!esn) seq &= 0xffffffffu;
	const std::span<const uint8_t, kCbcIvLen> iv(data + 9, kCbcIvLen);
	const std::span<const uint8_t> enc(data + 25, spec.enc_key_len), auth(data + 57, spec.auth_key_len);
	const uint8_t* payload = data + kHeader;
	const size_t payload_len = (size - kHeader) / 16 * 16;

	CbcHmacStitchedTransform st(spec, enc, auth, esn);
	CbcHmacTransform tp(spec, enc, auth, esn);

	// 1. Arbitrary bytes into the stitched open(): exact-size heap copy so
	//    ASan sees reads past the end by our code (guard pages cover the asm
	//    in the unit tests).
	std::vector<uint8_t> raw(payload, data + size);
	(void)st.open(raw, uint32_t(seq >> 32));

	// 2. Same IV, same bytes; each opens the other's packet.
	std::vector<uint8_t> a(8 + kCbcIvLen + payload_len + spec.icv_len, 0);
	for (int i = 0; i < 4; i++)
		a[size_t(4 + i)] = uint8_t(seq >> (24 - 8 * i));
	std::memcpy(a.data(), data + 1, 4); // SPI: any 4 input bytes
	std::memcpy(a.data() + 8 + kCbcIvLen, payload, payload_len);
	std::vector<uint8_t> b = a;
	st.seal_with_iv(a, seq, iv);
	tp.seal_with_iv(b, seq, iv);
	if (a != b) std::abort();
	const auto hi = uint32_t(seq >> 32);
	if (!tp.open(a, hi) || std::memcmp(a.data() + 8 + kCbcIvLen, payload, payload_len) != 0) std::abort();
	if (!st.open(b, hi) || std::memcmp(b.data() + 8 + kCbcIvLen, payload, payload_len) != 0) std::abort();
	return 0;
}
