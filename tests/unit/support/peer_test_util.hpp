// Builders for an SA table's peers (tunnel::PeerParams): one keyed at run
// time, one keyed statically, and the aes128-gcm shorthand the data path and
// service tests use. No doctest here, so fuzz targets can include it too.
#pragma once

#include "base/inet.hpp"
#include "tunnel/sa.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace esptun::test {

/**
 * run_time_peer() - a peer that starts with no SAs; IKE installs them later
 * @name: the peer's name, as status and logs show it
 * @ep: where it is, or nullopt for a peer whose address is learnt
 * @allowed: the inner prefixes it may send from and is routed to
 *
 * Return: the peer, with keyed_statically false (cipher and keys unused).
 */
inline tunnel::PeerParams run_time_peer(std::string name, std::optional<Endpoint> ep,
                                        std::vector<IpPrefix> allowed) {
	tunnel::PeerParams p;
	p.name = std::move(name);
	p.endpoint = ep;
	p.allowed_ips = std::move(allowed);
	p.keyed_statically = false;
	return p;
}

/**
 * run_time_peer() - run_time_peer() with one allowed prefix written as text
 * @name: the peer's name
 * @ep: where it is
 * @allowed: one prefix such as "10.99.0.2/32"; it must parse
 *
 * Return: the peer, keyed at run time.
 */
inline tunnel::PeerParams run_time_peer(const char* name, Endpoint ep, const char* allowed) {
	return run_time_peer(name, ep, std::vector<IpPrefix>{*parse_prefix(allowed)});
}

/**
 * static_peer() - a peer whose SA pair is built with the table, as from a config
 * @name: the peer's name
 * @ep: where it is, or nullopt until it is learnt from the first datagram
 * @allowed: the inner prefixes it may send from and is routed to
 * @cipher: the suite of both SAs
 * @out: SPI and keys we send with (the peer's inbound SA)
 * @in: SPI and keys we receive on
 *
 * ESN and the replay window keep PeerParams' defaults; callers that test
 * them set the fields on the result.
 * Return: the peer, keyed statically.
 */
inline tunnel::PeerParams static_peer(std::string name, std::optional<Endpoint> ep,
                                      std::vector<IpPrefix> allowed, crypto::Cipher cipher,
                                      tunnel::SaParams out, tunnel::SaParams in) {
	tunnel::PeerParams p = run_time_peer(std::move(name), ep, std::move(allowed));
	p.keyed_statically = true;
	p.cipher = cipher;
	p.out = std::move(out);
	p.in = std::move(in);
	return p;
}

/**
 * gcm_peer() - a statically keyed aes128-gcm peer with one allowed prefix
 * @name: the peer's name
 * @ep: where it is
 * @allowed: one prefix as text; it must parse
 * @out_spi: the SPI we send with
 * @in_spi: the SPI we receive on
 * @k_out: key || salt (20 bytes) we send with
 * @k_in: key || salt (20 bytes) we receive with
 *
 * Two tables built with mirrored SPIs and keys talk to each other.
 * Return: the peer.
 */
inline tunnel::PeerParams gcm_peer(const char* name, Endpoint ep, const char* allowed, uint32_t out_spi,
                                   uint32_t in_spi, const std::vector<uint8_t>& k_out,
                                   const std::vector<uint8_t>& k_in) {
	return static_peer(name, ep, {*parse_prefix(allowed)}, crypto::Cipher::aes128_gcm,
	                   {out_spi, secret_copy(k_out), {}}, {in_spi, secret_copy(k_in), {}});
}

} // namespace esptun::test
