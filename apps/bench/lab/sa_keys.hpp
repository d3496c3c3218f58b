// Random key material for the SAs the bench commands set up: the demo's and
// the comparison's gateway configs, and the crypto benchmark's transforms.
#pragma once

#include "crypto/esp_transform.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace esptun::bench::lab {

/// Key material of one SA direction, random.
struct SaKeys {
	uint32_t spi = 0;
	std::vector<uint8_t> enc_key;  ///< GCM: key || salt
	std::vector<uint8_t> auth_key; ///< CBC-HMAC only
};

/**
 * random_bytes() - @n bytes from OpenSSL's CSPRNG (RAND_bytes)
 * Throws std::runtime_error when the generator fails.
 */
std::vector<uint8_t> random_bytes(size_t n);

/**
 * make_sa_keys() - a random SPI (0x100..0xffffffff, never @avoid) and keys
 * of the lengths @spec needs
 */
SaKeys make_sa_keys(const crypto::CipherSpec& spec, uint32_t avoid = 0);

/// hex_text() - two digits per byte (upper case when @upper), @sep between bytes when not 0
std::string hex_text(std::span<const uint8_t> bytes, char sep = 0, bool upper = false);

/// hex0x() - "0x" and two lower-case digits per byte: a key as configs write it
std::string hex0x(const std::vector<uint8_t>& bytes);

} // namespace esptun::bench::lab
