// IP address, prefix and endpoint parsing and formatting (see inet.hpp). Used
// by the config loader and by messages; never on the packet path.
#include "base/inet.hpp"

#include <arpa/inet.h>
#include <charconv>
#include <netinet/in.h>

namespace esptun {

namespace {

/**
 * parse_decimal() - a plain decimal number: digits only, no sign, no leading
 * zero (except "0" itself), at most @max_digits digits.
 * Return: the value, or nullopt when @text is anything else.
 */
std::optional<unsigned> parse_decimal(std::string_view text, size_t max_digits) {
	if (text.empty() || text.size() > max_digits) return std::nullopt;
	if (text.size() > 1 && text[0] == '0') return std::nullopt;
	for (char c : text)
		if (c < '0' || c > '9') return std::nullopt;
	unsigned value = 0;
	auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
	if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
	return value;
}

/// A port 1..65535; 0 is not a usable UDP destination or listen port here.
std::optional<uint16_t> parse_port(std::string_view text) {
	auto v = parse_decimal(text, 5);
	if (!v || *v == 0 || *v > 65535) return std::nullopt;
	return static_cast<uint16_t>(*v);
}

} // namespace

IpAddress IpAddress::v4(uint32_t host_order) {
	IpAddress a;
	a.family = Family::v4;
	a.bytes[0] = static_cast<uint8_t>(host_order >> 24);
	a.bytes[1] = static_cast<uint8_t>(host_order >> 16);
	a.bytes[2] = static_cast<uint8_t>(host_order >> 8);
	a.bytes[3] = static_cast<uint8_t>(host_order);
	return a;
}

bool IpAddress::is_unspecified() const noexcept {
	for (size_t i = 0; i < size(); i++)
		if (bytes[i] != 0) return false;
	return true;
}

IpAddress IpAddress::masked(unsigned len) const noexcept {
	IpAddress out = *this;
	if (len >= max_prefix()) return out;
	size_t full = len / 8;
	unsigned rest = len % 8;
	size_t i = full;
	if (rest != 0) {
		out.bytes[i] = static_cast<uint8_t>(out.bytes[i] & (0xff00u >> rest));
		i++;
	}
	for (; i < out.bytes.size(); i++)
		out.bytes[i] = 0;
	return out;
}

bool IpAddress::same_prefix(const IpAddress& other, unsigned len) const noexcept {
	if (family != other.family) return false;
	return masked(len) == other.masked(len);
}

bool IpPrefix::overlaps(const IpPrefix& other) const noexcept {
	// Two prefixes share an address exactly when the shorter one contains the
	// other's network address.
	if (addr.family != other.addr.family) return false;
	unsigned shorter = len < other.len ? len : other.len;
	return addr.same_prefix(other.addr, shorter);
}

std::optional<IpAddress> parse_ip(std::string_view text) {
	// inet_pton wants a C string; anything longer than the longest textual
	// IPv6 address (with an embedded IPv4 part) is not an address.
	char buf[INET6_ADDRSTRLEN];
	if (text.empty() || text.size() >= sizeof(buf)) return std::nullopt;
	if (text.find('\0') != std::string_view::npos) return std::nullopt;
	text.copy(buf, text.size());
	buf[text.size()] = '\0';

	IpAddress a;
	if (text.find(':') != std::string_view::npos) {
		a.family = Family::v6;
		if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
	} else {
		// glibc's inet_pton takes only four decimal parts and rejects
		// leading zeros ("010.0.0.1"), unlike inet_aton.
		a.family = Family::v4;
		if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return std::nullopt;
	}
	return a;
}

std::optional<IpPrefix> parse_prefix(std::string_view text) {
	size_t slash = text.find('/');
	auto addr = parse_ip(text.substr(0, slash));
	if (!addr) return std::nullopt;
	IpPrefix p{*addr, static_cast<uint8_t>(addr->max_prefix())};
	if (slash == std::string_view::npos) return p;
	auto len = parse_decimal(text.substr(slash + 1), 3);
	if (!len || *len > addr->max_prefix()) return std::nullopt;
	p.len = static_cast<uint8_t>(*len);
	return p;
}

std::optional<Endpoint> parse_endpoint(std::string_view text, std::optional<uint16_t> default_port) {
	Endpoint e;
	std::string_view host;
	std::string_view rest; // ":port" or empty
	if (!text.empty() && text[0] == '[') {
		size_t close = text.find(']');
		if (close == std::string_view::npos) return std::nullopt;
		host = text.substr(1, close - 1);
		rest = text.substr(close + 1);
		auto a = parse_ip(host);
		if (!a || a->family != Family::v6) return std::nullopt;
		e.addr = *a;
	} else {
		// Unbracketed text must be IPv4: "fd00::1:4500" would be ambiguous.
		size_t colon = text.find(':');
		host = text.substr(0, colon);
		rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon);
		auto a = parse_ip(host);
		if (!a || a->family != Family::v4) return std::nullopt;
		e.addr = *a;
	}
	if (rest.empty()) {
		if (!default_port || *default_port == 0) return std::nullopt;
		e.port = *default_port;
		return e;
	}
	if (rest[0] != ':') return std::nullopt;
	auto port = parse_port(rest.substr(1));
	if (!port) return std::nullopt;
	e.port = *port;
	return e;
}

std::string to_string(const IpAddress& a) {
	char buf[INET6_ADDRSTRLEN];
	int af = a.family == Family::v4 ? AF_INET : AF_INET6;
	if (!inet_ntop(af, a.bytes.data(), buf, sizeof(buf))) return "?";
	return buf;
}

// Built by appending rather than with "literal" + std::string: GCC 12 at -O3
// reports a false -Wrestrict for that pattern (GCC bug 105329).
std::string to_string(const IpPrefix& p) {
	std::string s = to_string(p.addr);
	s.append("/").append(std::to_string(p.len));
	return s;
}

std::string to_string(const Endpoint& e) {
	std::string s;
	if (e.addr.family == Family::v6)
		s.append("[").append(to_string(e.addr)).append("]");
	else
		s = to_string(e.addr);
	s.append(":").append(std::to_string(e.port));
	return s;
}

} // namespace esptun
