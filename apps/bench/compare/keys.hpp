// `esptun-bench compare`: fresh key material for the peers under test, made
// with OpenSSL's libcrypto (no key tool has to be installed): WireGuard
// X25519 key pairs, self-signed certificates for OpenVPN's TLS mode and its
// static key file. Everything is random per run and lives in the run's
// private temp folder.
#pragma once

#include <string>

namespace esptun::bench::compare {

/// WgKeyPair - a WireGuard key pair, both halves base64 as `wg` prints them.
struct WgKeyPair {
	std::string private_b64, public_b64;
};

/// make_wg_keys() - a fresh X25519 key pair. Throws on an OpenSSL error.
WgKeyPair make_wg_keys();

/**
 * make_self_signed() - a P-256 key and a self-signed certificate for @cn,
 * valid for two days, written as PEM to @cert_path and @key_path (0600)
 * Return: the certificate's SHA-256 fingerprint as OpenVPN's
 * `peer-fingerprint` wants it ("AB:CD:...").
 */
std::string make_self_signed(const std::string& cn, const std::string& cert_path,
                             const std::string& key_path);

/// openvpn_static_key() - the text of a random 2048-bit OpenVPN static key file
std::string openvpn_static_key();

/// random_hex() - @bytes random bytes as lowercase hex
std::string random_hex(size_t bytes);

} // namespace esptun::bench::compare
