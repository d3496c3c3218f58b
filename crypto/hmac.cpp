// HMAC with precomputed ipad/opad hash states (see hmac.hpp).
//
// Why the low-level SHA1_*/SHA256_* functions, deprecated in OpenSSL 3.0:
// measured on this project's OpenSSL 3.0, every EVP route re-creates the
// provider's digest context per message: EVP_MAC_init(ctx, NULL, 0, NULL)
// costs 2 heap allocations per packet, EVP_MD_CTX_copy_ex (copying a
// precomputed ipad state) and EVP_DigestInit_ex 1 each. The plain SHA_CTX /
// SHA256_CTX structs copy by value, so a packet's HMAC is two struct copies
// plus the hashing: no allocation, and about 195 ns for a 64-byte message
// against 350 ns (EVP_MD_CTX_copy_ex) and 480 ns (EVP_MAC) here. They use the
// same SHA-NI/AVX block functions as EVP. The stitched AES-CBC+SHA routines
// also work on these raw states. The suppression stays in this one file.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "crypto/hmac.hpp"

#include "crypto/hmac_pads.hpp"

#include <algorithm>
#include <array>
#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace esptun::crypto {

namespace {

using detail::HmacPads;
using detail::Sha1Ops;
using detail::Sha256Ops;

// The pad states of one key plus the message in progress.
template <class Ctx> struct Pads : HmacPads<Ctx> { Ctx work; };

template <class Ops> void finish_mac(Pads<typename Ops::Ctx>& pads, std::span<uint8_t> out) noexcept {
	std::array<uint8_t, Ops::kLen> inner_hash;
	Ops::final(inner_hash.data(), &pads.work);
	pads.work = pads.outer;
	Ops::update(&pads.work, inner_hash.data(), inner_hash.size());
	std::array<uint8_t, Ops::kLen> mac;
	Ops::final(mac.data(), &pads.work);
	std::copy_n(mac.begin(), std::min(out.size(), mac.size()), out.begin());
	// No wipe of inner_hash/mac here: both are functions of public packet
	// bytes, and this runs per packet.
}

} // namespace

struct Hmac::State {
	Pads<SHA_CTX> sha1;
	Pads<SHA256_CTX> sha256;
};

Hmac::Hmac(HmacHash hash, std::span<const uint8_t> key) : hash_(hash), st_(std::make_unique<State>()) {
	if (hash_ == HmacHash::sha1)
		detail::set_hmac_pads<Sha1Ops>(st_->sha1, key);
	else
		detail::set_hmac_pads<Sha256Ops>(st_->sha256, key);
}

Hmac::~Hmac() {
	if (st_) OPENSSL_cleanse(st_.get(), sizeof *st_);
}

size_t Hmac::size() const noexcept { return hash_ == HmacHash::sha1 ? Sha1Ops::kLen : Sha256Ops::kLen; }

void Hmac::begin() noexcept {
	if (hash_ == HmacHash::sha1)
		st_->sha1.work = st_->sha1.inner;
	else
		st_->sha256.work = st_->sha256.inner;
}

void Hmac::update(std::span<const uint8_t> data) noexcept {
	if (data.empty()) return;
	if (hash_ == HmacHash::sha1)
		Sha1Ops::update(&st_->sha1.work, data.data(), data.size());
	else
		Sha256Ops::update(&st_->sha256.work, data.data(), data.size());
}

void Hmac::finish(std::span<uint8_t> out) noexcept {
	if (hash_ == HmacHash::sha1)
		finish_mac<Sha1Ops>(st_->sha1, out);
	else
		finish_mac<Sha256Ops>(st_->sha256, out);
}

} // namespace esptun::crypto
