// Key generation commands: see keygen.hpp.
//
// Everything printed is TOML the loader takes as it is: keys as "0x" and hex
// (the form conf/ requires), one line per key, so an operator pastes the
// block into [peer.out] / [peer.in] or writes it to a key file. Randomness
// comes from getrandom(2), the kernel's CSPRNG, and every buffer holding a
// key is a base/secret.hpp type, wiped when freed.
#include "apps/cli/keygen.hpp"

#include "base/secret.hpp"
#include "crypto/esp_transform.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <sys/random.h>

namespace esptun::cli {
namespace {

/// PSKs: 32 random bytes, as much as the strongest PRF (SHA-512's block aside)
/// can use; RFC 7296 section 2.15 asks for a key as strong as the PRF's.
constexpr size_t kPskBytes = 32;
/// SPIs below 256 are reserved by IANA (RFC 4303 section 2.1).
constexpr uint32_t kMinSpi = 0x100;

/// fill_random() - @n bytes from getrandom(2); throws when the kernel refuses
void fill_random(uint8_t* out, size_t n) {
	size_t done = 0;
	while (done < n) {
		const ssize_t r = ::getrandom(out + done, n - done, 0);
		if (r < 0) {
			if (errno == EINTR) continue;
			throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
		}
		done += size_t(r);
	}
}

/// hex_text() - "0x" and the bytes of @b in lower-case hex
SecretString hex_text(std::span<const uint8_t> b) {
	static constexpr char kDigits[] = "0123456789abcdef";
	SecretString s;
	s += "0x";
	s.reserve(2 + 2 * b.size());
	for (uint8_t v : b) {
		s += kDigits[v >> 4];
		s += kDigits[v & 15];
	}
	return s;
}

/// random_spi() - an SPI outside the reserved range, different from @avoid
uint32_t random_spi(uint32_t avoid = 0) {
	for (;;) {
		uint32_t v = 0;
		fill_random(reinterpret_cast<uint8_t*>(&v), sizeof v);
		if (v >= kMinSpi && v != avoid) return v;
	}
}

/// SaKeys - the key lines of one static SA, as TOML.
struct SaKeys {
	uint32_t spi = 0;
	SecretString lines; ///< `key = "0x.."` or `enc_key = ..` and `auth_key = ..`
};

/// make_sa_keys() - fresh keys of @spec's lengths as the TOML lines of one SA
void make_sa_keys(const crypto::CipherSpec& spec, SaKeys& out) {
	SecretBytes enc(spec.enc_key_len);
	fill_random(enc.data(), enc.size());
	const char* name = spec.aead ? "key" : "enc_key";
	out.lines.clear();
	out.lines.append(name).append(" = \"").append(hex_text(enc)).append("\"\n");
	if (!spec.aead) {
		SecretBytes auth(spec.auth_key_len);
		fill_random(auth.data(), auth.size());
		out.lines.append("auth_key = \"").append(hex_text(auth)).append("\"\n");
	}
}

/// spi_text() - @spi as the loader reads it ("0x3001")
std::string spi_text(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%x", spi);
	return buf;
}

/// print_block() - one [peer.out]/[peer.in] half with its SPI and key lines
void print_block(const char* table, const char* comment, const SaKeys& sa) {
	std::printf("  [%s]  # %s\n  spi = %s\n", table, comment, spi_text(sa.spi).c_str());
	// Indent every key line like the rest of the block.
	size_t at = 0;
	while (at < sa.lines.size()) {
		const size_t nl = sa.lines.find('\n', at);
		std::fwrite("  ", 1, 2, stdout);
		std::fwrite(sa.lines.data() + at, 1, nl - at + 1, stdout);
		at = nl + 1;
	}
}

/// genpair() - both ends of one static link: the SA A sends with is the one B
/// receives with, and the other way round, each with its own key and SPI
void genpair(const crypto::CipherSpec& spec) {
	SaKeys a_to_b, b_to_a;
	a_to_b.spi = random_spi();
	b_to_a.spi = random_spi(a_to_b.spi);
	make_sa_keys(spec, a_to_b);
	make_sa_keys(spec, b_to_a);
	std::printf("# Static SA pair, cipher %s. Paste the first block into end A's [[peer]]\n"
	            "# (the peer that is B) and the second into end B's; keep both secret\n"
	            "# (config mode 600) and never reuse these keys anywhere else.\n\n",
	            std::string(spec.name).c_str());
	std::printf("# --- end A\ncipher = \"%s\"\n", std::string(spec.name).c_str());
	print_block("peer.out", "A sends, B receives", a_to_b);
	print_block("peer.in", "B sends, A receives", b_to_a);
	std::printf("\n# --- end B\ncipher = \"%s\"\n", std::string(spec.name).c_str());
	print_block("peer.out", "B sends, A receives", b_to_a);
	print_block("peer.in", "A sends, B receives", a_to_b);
}

} // namespace

std::span<const KeygenCommand> keygen_commands() {
	static const KeygenCommand kCommands[] = {
	    {"genkey", "print a random key for suite C (--cipher C)", true},
	    {"genpair", "print both ends' keys of a static link (--cipher C)", true},
	    {"genpsk", "print a random pre-shared key for IKE", false},
	};
	return kCommands;
}

bool is_keygen_verb(const std::string& verb) {
	const auto all = keygen_commands();
	return std::any_of(all.begin(), all.end(), [&](const KeygenCommand& k) { return verb == k.name; });
}

std::vector<std::string> cipher_names() {
	std::vector<std::string> names;
	for (const crypto::CipherSpec& c : crypto::all_ciphers())
		names.emplace_back(c.name);
	return names;
}

int keygen(const std::string& verb, const std::string& cipher) {
	if (verb == "genpsk") {
		SecretBytes psk(kPskBytes);
		fill_random(psk.data(), psk.size());
		std::printf("psk = \"%s\"\n", hex_text(psk).c_str());
		return 0;
	}
	const crypto::CipherSpec* spec = crypto::find_cipher(cipher);
	if (!spec) throw std::runtime_error("unknown cipher '" + cipher + "'");
	if (verb == "genpair") {
		genpair(*spec);
	} else {
		SaKeys sa;
		make_sa_keys(*spec, sa);
		std::fputs(sa.lines.c_str(), stdout);
	}
	return 0;
}

} // namespace esptun::cli
