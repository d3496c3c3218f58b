// Set-up helpers shared by the EVP-based transforms (see evp_util.hpp).
//
// Why EVP_CIPHER_meth_dup, deprecated in OpenSSL 3.0: a cipher fetched from
// the default provider takes every per-packet call through the provider
// boundary. Setting the IV asks the context for its IV length and passing
// the GCM tag builds an OSSL_PARAM array, and the provider looks each
// parameter up by name (strcmp); measured in a profile of the gateway that
// was ~7.5% of all CPU time in bulk TCP (docs/throughput.md). A duplicate of
// the built-in method table is a "method" cipher (EVP_ORIG_METH), which EVP
// drives with direct calls into OpenSSL's own AES code (crypto/evp/e_aes.c,
// the same AES-NI and stitched AES-GCM assembly), without the parameter
// round trips: on this machine 160-410 ns less per AES-GCM packet
// (`esptun-bench crypto` shows both, docs/crypto-bench.md). The unit
// tests check every suite's output against the provider's ciphers.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "crypto/evp_util.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace esptun::crypto::detail {

namespace {

struct MethFree {
	void operator()(EVP_CIPHER* c) const noexcept { EVP_CIPHER_meth_free(c); }
};

} // namespace

const EVP_CIPHER* direct_cipher(const EVP_CIPHER* cipher) {
	// One duplicate per cipher for the life of the process (a handful of
	// AES modes); contexts only point at it.
	static std::mutex mu;
	static std::map<int, std::unique_ptr<EVP_CIPHER, MethFree>> dups;
	const std::lock_guard lock(mu);
	const int nid = EVP_CIPHER_get_nid(cipher);
	auto it = dups.find(nid);
	if (it == dups.end()) {
		std::unique_ptr<EVP_CIPHER, MethFree> dup(EVP_CIPHER_meth_dup(cipher));
		if (!dup) throw std::runtime_error("EVP_CIPHER_meth_dup failed");
		it = dups.emplace(nid, std::move(dup)).first;
	}
	return it->second.get();
}

CipherCtx new_cipher_ctx(const EVP_CIPHER* cipher, const uint8_t* key, bool encrypt) {
	CipherCtx ctx(EVP_CIPHER_CTX_new());
	if (!ctx) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
	if (EVP_CipherInit_ex2(ctx.get(), direct_cipher(cipher), key, nullptr, encrypt ? 1 : 0, nullptr) != 1)
		throw std::runtime_error("EVP_CipherInit_ex2 failed");
	// ESP does its own padding (RFC 4303 section 2.4): the caller hands us
	// whole blocks, and OpenSSL must neither add nor strip anything.
	if (EVP_CIPHER_CTX_set_padding(ctx.get(), 0) != 1)
		throw std::runtime_error("EVP_CIPHER_CTX_set_padding failed");
	return ctx;
}

} // namespace esptun::crypto::detail
