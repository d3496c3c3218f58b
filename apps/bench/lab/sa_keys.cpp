// Random SPIs and keys, from OpenSSL's generator: see sa_keys.hpp.
#include "apps/bench/lab/sa_keys.hpp"

#include <openssl/rand.h>
#include <stdexcept>

namespace esptun::bench::lab {

std::vector<uint8_t> random_bytes(size_t n) {
	std::vector<uint8_t> out(n);
	if (n > 0 && RAND_bytes(out.data(), static_cast<int>(n)) != 1)
		throw std::runtime_error("RAND_bytes failed: no random numbers for the keys");
	return out;
}

SaKeys make_sa_keys(const crypto::CipherSpec& spec, uint32_t avoid) {
	SaKeys sa;
	do {
		auto b = random_bytes(4);
		sa.spi = uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
	} while (sa.spi < 0x100 || sa.spi == avoid); // 1..255 are reserved (RFC 4303 section 2.1)
	sa.enc_key = random_bytes(spec.enc_key_len);
	sa.auth_key = random_bytes(spec.auth_key_len);
	return sa;
}

std::string hex_text(std::span<const uint8_t> bytes, char sep, bool upper) {
	const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	std::string s;
	s.reserve(bytes.size() * (sep ? 3 : 2));
	for (size_t i = 0; i < bytes.size(); i++) {
		if (i && sep) s += sep;
		s += digits[bytes[i] >> 4];
		s += digits[bytes[i] & 15];
	}
	return s;
}

std::string hex0x(const std::vector<uint8_t>& bytes) { return "0x" + hex_text(bytes); }

} // namespace esptun::bench::lab
