// The gateway credentials the IKE fuzzers sign with and trust: a
// self-signed P-256 certificate for gw.example.com, made for the fuzzers
// only (the unit tests' certificate helpers need doctest's checks, which
// these programs disable). It is its own CA.
#pragma once

#include "ike/cert.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace esptun::fuzz {

constexpr const char* kCertPem = R"(-----BEGIN CERTIFICATE-----
MIIBzzCCAXWgAwIBAgITaLGJ1YTZmFowsF/3IzRh9SGwtTAKBggqhkjOPQQDAjAv
MRQwEgYDVQQKDAtlc3B0dW4gZnV6ejEXMBUGA1UEAwwOZ3cuZXhhbXBsZS5jb20w
IBcNMjYxMjAyMDUzNzIyWhgPMjEyNjExMDgwNTM3MjJaMC8xFDASBgNVBAoMC2Vz
cHR1biBmdXp6MRcwFQYDVQQDDA5ndy5leGFtcGxlLmNvbTBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABJC83c50Hj5VZRf5UEwYpedPO9i8fHDhVOwfGXz9GVL8U/TG
m3ZEZgju9zZxOAqmsEbTCgXnwFlAiBC5ukTQfZujbjBsMB0GA1UdDgQWBBSUrU+r
TtF7flBSDNMHhqrLVnNyqTAfBgNVHSMEGDAWgBSUrU+rTtF7flBSDNMHhqrLVnNy
qTAPBgNVHRMBAf8EBTADAQH/MBkGA1UdEQQSMBCCDmd3LmV4YW1wbGUuY29tMAoG
CCqGSM49BAMCA0gAMEUCIQDzYWTWGRqPrHFgePsIlmQKeDl0GNdJf6tg57re3e7H
UAIgMSq1PDAjhdpG5CSN7teN/YU8yckCF33nsYZ4DZk7btY=
-----END CERTIFICATE-----)";
constexpr const char* kKeyPem = R"(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgXEdiyEVVGPXxuBK9
MxH54y5lx0zgHKfkcjjADHbvVw+hRANCAASQvN3OdB4+VWUX+VBMGKXnTzvYvHxw
4VTsHxl8/RlS/FP0xpt2RGYI7vc2cTgKprBG0woF58BZQIgQubpE0H2b
-----END PRIVATE KEY-----)";

/// The gateway's credentials and a trust store holding its certificate as
/// the only CA. Aborts (naming @who) if OpenSSL refuses them.
struct GatewayPki {
	std::shared_ptr<const ike::Credentials> credentials;
	std::shared_ptr<const ike::TrustStore> trust;
	explicit GatewayPki(const char* who) {
		std::string err;
		credentials = ike::Credentials::load(kCertPem, kKeyPem, "", err);
		const std::string_view cas[] = {kCertPem};
		if (credentials) trust = ike::TrustStore::load(cas, {}, err);
		if (!credentials || !trust) {
			std::fprintf(stderr, "%s: test credentials: %s\n", who, err.c_str());
			std::abort();
		}
	}
};

} // namespace esptun::fuzz
