// The table of ESP cipher suites: sizes the packet path reserves and the names
// the config and `ip xfrm` use. Looked up once per SA, never per packet.
#include "crypto/esp_transform.hpp"

#include <array>

namespace esptun::crypto {
namespace {

// Sizes per suite, with the RFC that fixes each number:
//   GCM (RFC 4106): key || 4-byte salt (section 8.1), 8-byte explicit IV
//     (section 3.1), 16-byte ICV (section 6: full length MUST be supported),
//     payload aligned to 4 (RFC 4303 section 2.4, no block-size requirement).
//   CBC (RFC 3602): 16-byte IV, payload a multiple of the 16-byte block.
//   HMAC-SHA1-96 (RFC 2404): 20-byte key, 12-byte ICV.
//   HMAC-SHA256-128 (RFC 4868 section 2.1): 32-byte key, 16-byte ICV.
constexpr std::array<CipherSpec, 6> kSpecs{{
    {.id = Cipher::aes128_gcm,
     .name = "aes128-gcm",
     .aead = true,
     .enc_key_len = 16 + 4,
     .auth_key_len = 0,
     .iv_len = 8,
     .align = 4,
     .icv_len = 16,
     .xfrm_enc = "rfc4106(gcm(aes))",
     .xfrm_auth = "",
     .xfrm_trunc_bits = 128},
    {.id = Cipher::aes256_gcm,
     .name = "aes256-gcm",
     .aead = true,
     .enc_key_len = 32 + 4,
     .auth_key_len = 0,
     .iv_len = 8,
     .align = 4,
     .icv_len = 16,
     .xfrm_enc = "rfc4106(gcm(aes))",
     .xfrm_auth = "",
     .xfrm_trunc_bits = 128},
    {.id = Cipher::aes128_cbc_sha1,
     .name = "aes128-cbc-hmac-sha1",
     .aead = false,
     .enc_key_len = 16,
     .auth_key_len = 20,
     .iv_len = 16,
     .align = 16,
     .icv_len = 12,
     .xfrm_enc = "cbc(aes)",
     .xfrm_auth = "hmac(sha1)",
     .xfrm_trunc_bits = 96},
    {.id = Cipher::aes256_cbc_sha1,
     .name = "aes256-cbc-hmac-sha1",
     .aead = false,
     .enc_key_len = 32,
     .auth_key_len = 20,
     .iv_len = 16,
     .align = 16,
     .icv_len = 12,
     .xfrm_enc = "cbc(aes)",
     .xfrm_auth = "hmac(sha1)",
     .xfrm_trunc_bits = 96},
    {.id = Cipher::aes128_cbc_sha256,
     .name = "aes128-cbc-hmac-sha256",
     .aead = false,
     .enc_key_len = 16,
     .auth_key_len = 32,
     .iv_len = 16,
     .align = 16,
     .icv_len = 16,
     .xfrm_enc = "cbc(aes)",
     .xfrm_auth = "hmac(sha256)",
     .xfrm_trunc_bits = 128},
    {.id = Cipher::aes256_cbc_sha256,
     .name = "aes256-cbc-hmac-sha256",
     .aead = false,
     .enc_key_len = 32,
     .auth_key_len = 32,
     .iv_len = 16,
     .align = 16,
     .icv_len = 16,
     .xfrm_enc = "cbc(aes)",
     .xfrm_auth = "hmac(sha256)",
     .xfrm_trunc_bits = 128},
}};

// all_ciphers() promises enum order; cipher_spec() indexes by the enum.
constexpr bool table_in_enum_order() {
	for (size_t i = 0; i < kSpecs.size(); i++)
		if (static_cast<size_t>(kSpecs[i].id) != i) return false;
	return true;
}
static_assert(table_in_enum_order(), "kSpecs must list the suites in enum order");

constexpr bool limits_cover_table() {
	for (const auto& s : kSpecs)
		if (s.iv_len > kMaxIvLen || s.icv_len > kMaxIcvLen || s.align > kMaxAlign) return false;
	return true;
}
static_assert(limits_cover_table(), "kMaxIvLen/kMaxIcvLen/kMaxAlign must cover every suite");

} // namespace

std::span<const CipherSpec> all_ciphers() noexcept { return kSpecs; }

const CipherSpec& cipher_spec(Cipher c) noexcept {
	const auto i = static_cast<size_t>(c);
	// An out-of-range enum value is a caller bug; answer with the first suite
	// rather than reading past the table.
	return i < kSpecs.size() ? kSpecs[i] : kSpecs[0];
}

const CipherSpec* find_cipher(std::string_view name) noexcept {
	for (const auto& s : kSpecs)
		if (s.name == name) return &s;
	return nullptr;
}

} // namespace esptun::crypto
