// OpenSSL ownership and error helpers shared by the IKE crypto files
// (keymat.cpp, dh.cpp). Internal to ike/: not part of keymat.hpp.
#pragma once

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string>

namespace esptun::ike::openssl_util {

/// Free - one deleter for every OpenSSL type this file owns.
struct Free {
	void operator()(EVP_PKEY* p) const noexcept { EVP_PKEY_free(p); }
	void operator()(EVP_PKEY_CTX* p) const noexcept { EVP_PKEY_CTX_free(p); }
	void operator()(EVP_MAC* p) const noexcept { EVP_MAC_free(p); }
	void operator()(EVP_MAC_CTX* p) const noexcept { EVP_MAC_CTX_free(p); }
	void operator()(EVP_CIPHER_CTX* p) const noexcept { EVP_CIPHER_CTX_free(p); }
	void operator()(BIGNUM* p) const noexcept { BN_clear_free(p); }
	void operator()(BN_CTX* p) const noexcept { BN_CTX_free(p); }
	void operator()(EC_GROUP* p) const noexcept { EC_GROUP_free(p); }
	void operator()(EC_POINT* p) const noexcept { EC_POINT_free(p); }
	void operator()(OSSL_PARAM_BLD* p) const noexcept { OSSL_PARAM_BLD_free(p); }
	void operator()(OSSL_PARAM* p) const noexcept { OSSL_PARAM_free(p); }
};
template <class T> using Owned = std::unique_ptr<T, Free>;

/**
 * fail() - throw std::runtime_error naming the failed step (@who: the part
 * of esptun, for the message's head) and OpenSSL's oldest queued error,
 * and empty the queue.
 */
[[noreturn]] inline void fail(const char* what, const char* who = "IKE crypto") {
	std::string msg = std::string(who) + ": " + what + " failed";
	if (const unsigned long e = ERR_get_error()) {
		std::array<char, 256> buf{};
		ERR_error_string_n(e, buf.data(), buf.size());
		msg += std::string(" (") + buf.data() + ")";
	}
	ERR_clear_error();
	throw std::runtime_error(msg);
}

/// check() - fail(@what) unless @ok (OpenSSL's "1 is success" convention).
inline void check(bool ok, const char* what) {
	if (!ok) fail(what);
}

/// Wipe - OPENSSL_cleanse a buffer of intermediate key material on scope exit.
template <class Buf> struct Wipe {
	Buf& buf;
	~Wipe() { OPENSSL_cleanse(buf.data(), buf.size()); }
};
template <class Buf> Wipe(Buf&) -> Wipe<Buf>;

} // namespace esptun::ike::openssl_util
