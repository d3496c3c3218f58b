// Config checks that need no TOML (see checks.hpp).
#include "conf/checks.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

namespace esptun::conf {

namespace {

constexpr size_t kIfNameMax = 15;       // IFNAMSIZ - 1
constexpr size_t kPeerNameMax = 64;     // keeps log lines and status output readable
constexpr int64_t kMinSpi = 256;        // RFC 4303 section 2.1: 1..255 reserved by IANA
constexpr int64_t kMaxSpi = 0xffffffff; // the SPI field is 32 bits

const IpAddress kV6Loopback{Family::v6, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};

bool is_printable_ascii(char c) { return c > ' ' && c < 0x7f; }

bool is_hex_digit(char c) {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

uint8_t hex_value(char c) {
	if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
	if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
	return static_cast<uint8_t>(c - 'A' + 10);
}

std::string octal_mode(mode_t mode) {
	char buf[8];
	std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
	return buf;
}

/// True when every bit of @a past the first @len bits is @bit (0 or 1).
bool host_bits_all(const IpAddress& a, unsigned len, bool bit) {
	for (unsigned i = len; i < a.max_prefix(); i++) {
		bool set = (a.bytes[i / 8] >> (7 - i % 8)) & 1;
		if (set != bit) return false;
	}
	return true;
}

} // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
	// Optimal string alignment distance: Levenshtein plus adjacent swaps, so
	// "alowed_ips" and "allowde_ips" are both one edit away.
	const size_t n = a.size(), m = b.size();
	std::vector<size_t> d((n + 1) * (m + 1));
	auto at = [&](size_t i, size_t j) -> size_t& { return d[i * (m + 1) + j]; };
	for (size_t i = 0; i <= n; i++)
		at(i, 0) = i;
	for (size_t j = 0; j <= m; j++)
		at(0, j) = j;
	for (size_t i = 1; i <= n; i++) {
		for (size_t j = 1; j <= m; j++) {
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t best = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
				best = std::min(best, at(i - 2, j - 2) + 1);
			at(i, j) = best;
		}
	}
	return at(n, m);
}

std::string_view closest_match(std::string_view word, std::span<const std::string_view> candidates) {
	// Long unknown words are not typos of short keys; also keeps the cost of
	// the table above bounded for fuzzed input.
	if (word.size() > 64) return {};
	size_t limit = word.size() <= 4 ? 1 : 2;
	std::string_view best;
	size_t best_dist = limit + 1;
	for (std::string_view c : candidates) {
		size_t dist = edit_distance(word, c);
		if (dist < best_dist) {
			best = c;
			best_dist = dist;
		}
	}
	return best;
}

std::string check_interface_name(std::string_view name) {
	if (name.empty()) return "interface name is empty; use a name such as \"esp0\"";
	if (name.size() > kIfNameMax)
		return "interface name is " + std::to_string(name.size()) +
		       " characters; Linux allows at most " + std::to_string(kIfNameMax) +
		       " (IFNAMSIZ), e.g. \"esp0\"";
	if (name == "." || name == "..") return "interface name cannot be \".\" or \"..\"; use e.g. \"esp0\"";
	for (char c : name) {
		if (!is_printable_ascii(c))
			return "interface name contains whitespace or a control character; use letters, "
			       "digits, "
			       "'-' or '_', e.g. \"esp0\"";
		// '/' and ':' are refused by the kernel (dev_valid_name); '%' would make
		// the kernel pick the number, and the name is needed up front.
		if (c == '/' || c == ':' || c == '%')
			return std::string("interface name contains '") + c +
			       "'; use letters, digits, '-' or '_', e.g. \"esp0\"";
	}
	return {};
}

std::string check_peer_name(std::string_view name) {
	if (name.empty()) return "peer name is empty; give each peer a short name such as \"site-b\"";
	if (name.size() > kPeerNameMax)
		return "peer name is longer than " + std::to_string(kPeerNameMax) +
		       " characters; use a shorter one";
	for (char c : name) {
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		          c == '.' || c == '_' || c == '-';
		if (!ok) return "peer name may only use letters, digits, '.', '_' and '-', e.g. \"site-b\"";
	}
	return {};
}

std::string check_spi(int64_t spi) {
	if (spi == 0) return "spi 0 is reserved (RFC 4303 section 2.1); use a value from 0x100 to 0xffffffff";
	if (spi > 0 && spi < kMinSpi)
		return "spi " + std::to_string(spi) +
		       " is in 1..255, reserved by IANA (RFC 4303 section 2.1); use a value from 0x100 to "
		       "0xffffffff";
	if (spi < 0 || spi > kMaxSpi) return "spi must fit in 32 bits: use a value from 0x100 to 0xffffffff";
	return {};
}

std::string check_interface_address(const IpPrefix& p) {
	const IpAddress& a = p.addr;
	std::string text = to_string(p);
	if (p.len == 0)
		return "address " + text +
		       " has prefix length 0; write the tunnel address with its subnet, e.g. " +
		       (a.family == Family::v4 ? "10.99.0.1/24" : "fd99::1/64");
	if (a.is_unspecified())
		return "address " + text + " is the unspecified address; use this host's tunnel address";
	bool v4 = a.family == Family::v4;
	if (v4 ? a.bytes[0] == 127 : a == kV6Loopback)
		return "address " + text + " is a loopback address; use this host's tunnel address";
	if (v4 ? (a.bytes[0] & 0xf0) == 0xe0 : a.bytes[0] == 0xff)
		return "address " + text + " is a multicast address; use this host's tunnel address";
	// Subnets with room for hosts: the all-zeros host part names the network
	// (IPv6: the subnet-router anycast address), all-ones is IPv4 broadcast.
	if (p.len + 2u <= a.max_prefix()) {
		IpAddress first = a.masked(p.len);
		first.bytes[a.size() - 1] = static_cast<uint8_t>(first.bytes[a.size() - 1] | 1);
		std::string hint = "; use a host address in it, e.g. " + to_string(IpPrefix{first, p.len});
		if (host_bits_all(a, p.len, false))
			return "address " + text + " is the network address of its subnet" + hint;
		if (v4 && host_bits_all(a, p.len, true))
			return "address " + text + " is the broadcast address of its subnet" + hint;
	}
	return {};
}

std::string decode_hex_key(std::string_view text, SecretBytes& out) {
	out.clear();
	// "0x" as `ip xfrm state` and strongSwan write keys, or the bare digits
	// that `openssl rand -hex` and `xxd -p` print.
	const bool prefixed = text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
	const std::string_view digits = prefixed ? text.substr(2) : text;
	if (digits.empty()) return prefixed ? "has no hex digits after 0x" : "is empty";
	for (size_t i = 0; i < digits.size(); i++)
		if (!is_hex_digit(digits[i]))
			return "has a character that is not a hex digit at position " +
			       std::to_string(i + (prefixed ? 3 : 1)) +
			       "; write the key as hex (0-9, a-f), optionally after 0x";
	if (digits.size() % 2 != 0)
		return "has an odd number of hex digits (" + std::to_string(digits.size()) +
		       "); each byte takes two digits";
	out.reserve(digits.size() / 2);
	for (size_t i = 0; i < digits.size(); i += 2)
		out.push_back(static_cast<uint8_t>(hex_value(digits[i]) << 4 | hex_value(digits[i + 1])));
	return {};
}

std::string check_secret_mode(std::string_view what, const std::string& name, unsigned mode) {
	if ((mode & 077) == 0) return {};
	return std::string(what) + " " + name + " has mode " + octal_mode(mode) +
	       ", so group or others may access it; run: chmod 600 " + name;
}

std::string read_file_wiped(const std::filesystem::path& path, size_t max, SecretString& out,
                            struct stat& st) {
	out.clear();
	// read(2) straight into wiping storage: an ifstream would leave a copy
	// of the secret in its own (unwiped) buffer. O_NONBLOCK: a FIFO swapped
	// in after the caller's stat() cannot block the open.
	const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) return std::strerror(errno);
	struct Closer {
		int fd;
		~Closer() { ::close(fd); }
	} closer{fd};
	if (::fstat(fd, &st) != 0) return std::strerror(errno);
	if (!S_ISREG(st.st_mode)) return "not a regular file";
	if (static_cast<uintmax_t>(st.st_size) > max) return "larger than " + std::to_string(max) + " bytes";
	out.resize(static_cast<size_t>(st.st_size) + 1); // one more: a file that grew shows
	size_t got = 0;
	while (got < out.size()) {
		const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0) return std::strerror(errno);
		if (n == 0) break;
		got += static_cast<size_t>(n);
	}
	if (got > max || got > static_cast<size_t>(st.st_size)) return "grew while being read";
	out.resize(got);
	return {};
}

std::string read_key_file(const std::filesystem::path& path, SecretString& text, FileSource& files) {
	text.clear();
	const std::string name = path.string();
	// stat() before opening: only regular files are opened, so a path to a
	// FIFO or a device can neither block nor touch hardware.
	FileFacts st;
	if (auto err = files.stat(path, st); !err.empty())
		return "cannot read key file " + name + ": " + err + "; check the path";
	if (!S_ISREG(st.mode)) return "key file " + name + " is not a regular file";
	if (auto err = check_secret_mode("key file", name, st.mode); !err.empty()) return err;
	if (st.size > kKeyFileMax)
		return "key file " + name + " is larger than " + std::to_string(kKeyFileMax) +
		       " bytes; it should hold one 0x... hex key";

	SecretString data;
	if (auto err = files.read(path, kKeyFileMax, data, st); !err.empty())
		return "cannot read key file " + name + ": " + err + "; check its owner and permissions";
	// Checked again on the file actually opened (it may have been replaced).
	if (auto err = check_secret_mode("key file", name, st.mode); !err.empty()) return err;

	auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
	size_t b = 0, e = data.size();
	while (b < e && is_space(data[b]))
		b++;
	while (e > b && is_space(data[e - 1]))
		e--;
	text.assign(data, b, e - b);
	return {};
}

} // namespace esptun::conf
