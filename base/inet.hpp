// IP addresses, prefixes and UDP endpoints as plain values: shared by the
// config, the SA table (allowed_ips) and the platform layer. No <linux/*>.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace esptun {

enum class Family : uint8_t { v4 = 4, v6 = 6 };

/// An IPv4 or IPv6 address in network byte order. IPv4 uses bytes[0..3].
struct IpAddress {
	Family family = Family::v4;
	std::array<uint8_t, 16> bytes{};

	static IpAddress v4(uint32_t host_order);
	size_t size() const noexcept { return family == Family::v4 ? 4 : 16; }
	unsigned max_prefix() const noexcept { return family == Family::v4 ? 32 : 128; }
	bool is_unspecified() const noexcept;
	/// The same address with every bit past the first @len cleared.
	IpAddress masked(unsigned len) const noexcept;
	/// True when the first @len bits of both addresses are equal (same family).
	bool same_prefix(const IpAddress& other, unsigned len) const noexcept;
	friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

/// An address with a prefix length: "10.99.0.0/24" (a route) or
/// "10.99.0.1/24" (an interface address; host bits kept).
struct IpPrefix {
	IpAddress addr;
	uint8_t len = 0;

	bool contains(const IpAddress& a) const noexcept {
		return a.family == addr.family && addr.same_prefix(a, len);
	}
	/// True when the two prefixes share at least one address.
	bool overlaps(const IpPrefix& other) const noexcept;
	IpPrefix network() const noexcept { return {addr.masked(len), len}; }
	friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};

/// A UDP endpoint: address and port (host order).
struct Endpoint {
	IpAddress addr;
	uint16_t port = 0;
	friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

/// Parsers return nullopt on anything malformed; they never throw.
std::optional<IpAddress> parse_ip(std::string_view text);
/// "a.b.c.d/n" or "x::y/n"; a bare address means a host prefix (/32, /128).
std::optional<IpPrefix> parse_prefix(std::string_view text);
/// "a.b.c.d:port" or "[x::y]:port"; @default_port is used when the port is absent.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::optional<uint16_t> default_port = {});

std::string to_string(const IpAddress& a);
std::string to_string(const IpPrefix& p);
std::string to_string(const Endpoint& e); // "1.2.3.4:4500", "[::1]:4500"

} // namespace esptun
