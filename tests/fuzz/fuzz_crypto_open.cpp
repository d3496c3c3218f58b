// libFuzzer target: EspTransform::open() on arbitrary bytes for every suite,
// ESN on and off. It must never crash or read outside the packet, and a
// packet sealed from the same input must always open back to its payload.
//
// Input: [selector 1][seq_hi 4][packet ...]. The selector picks the suite
// (low bits) and ESN (bit 3).
#include "crypto/esp_transform.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

using namespace esptun::crypto;

namespace {

struct Sa {
	std::unique_ptr<EspTransform> tx, rx;
};

std::vector<Sa> make_sas() {
	std::vector<Sa> sas;
	for (bool esn : {false, true}) {
		for (const auto& spec : all_ciphers()) {
			std::vector<uint8_t> enc(spec.enc_key_len, 0x42), auth(spec.auth_key_len, 0x24);
			sas.push_back({make_esp_transform(spec.id, enc, auth, esn),
			               make_esp_transform(spec.id, enc, auth, esn)});
		}
	}
	return sas;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	static std::vector<Sa> sas = make_sas();
	if (size < 5) return 0;
	const size_t n_suites = all_ciphers().size();
	Sa& sa = sas[(data[0] & 7) % n_suites + ((data[0] & 8) ? n_suites : 0)];
	const uint32_t seq_hi =
	    uint32_t(data[1]) << 24 | uint32_t(data[2]) << 16 | uint32_t(data[3]) << 8 | data[4];
	data += 5;
	size -= 5;

	// 1. Arbitrary bytes: open() decides, without touching memory past the span
	//    (exact-size heap copy so ASan catches any overread).
	std::vector<uint8_t> esp(data, data + size);
	(void)sa.rx->open(esp, seq_hi);

	// 2. The same bytes as a payload: seal, then open must give them back.
	const CipherSpec& spec = sa.tx->spec();
	const size_t payload = size - size % spec.align;
	std::vector<uint8_t> pkt(8 + spec.iv_len + payload + spec.icv_len, 0);
	const uint64_t seq = uint64_t(seq_hi) << 32 | 1;
	pkt[7] = 1;
	std::memcpy(pkt.data() + 8 + spec.iv_len, data, payload);
	sa.tx->seal(pkt, seq);
	if (!sa.rx->open(pkt, seq_hi) || std::memcmp(pkt.data() + 8 + spec.iv_len, data, payload) != 0)
		std::abort();
	return 0;
}
