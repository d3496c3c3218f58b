// Every validation rule: a config that breaks it fails with a ConfigError
// naming the right line and saying how to fix it.
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

constexpr Role gw = Role::gateway;
constexpr Role cl = Role::client;

TEST_CASE("ConfigError reads FILE:LINE: message and keeps the line") {
	ConfigError e("a.toml", 7, "bad thing; fix it");
	CHECK(std::string(e.what()) == "a.toml:7: bad thing; fix it");
	CHECK(e.line() == 7);
	CHECK(std::string(ConfigError("a.toml", 0, "unreadable").what()) == "a.toml: unreadable");
}

TEST_CASE("TOML syntax errors report toml++'s line and column") {
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = = 3"), gw, 5, "TOML syntax error at column");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "allowed_ips = [\"10.99.0.2/32\" 7]"), gw, 12,
	                   "TOML syntax error");
	CHECK_CONFIG_ERROR(gateway_lines().set(26, "name = \"site-b\"\nname = \"x\""), gw, 27,
	                   "TOML syntax error");
}

TEST_CASE("unknown keys are rejected with a did-you-mean suggestion") {
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "alowed_ips = [\"10.99.0.2/32\"]"), gw, 12,
	                   "unknown key 'alowed_ips' in [[peer]]; did you mean 'allowed_ips'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtuu = 1400"), gw, 5, "did you mean 'mtu'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(17, "sip = 0x1001"), gw, 17,
	                   "in [peer.out]; did you mean 'spi'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(34, "ky = \"0x00\""), gw, 34,
	                   "in [peer.in]; did you mean 'key'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(1, "[tunel]"), gw, 1, "did you mean 'tunnel'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(8, "colour = \"blue\""), gw, 8,
	                   "unknown key 'colour' in [tunnel]; known keys are interface, addresses");
}

TEST_CASE("values of the wrong type are rejected with the expected type") {
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = \"1400\""), gw, 5,
	                   "'mtu' in [tunnel] must be an integer, not a string");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 1400.0"), gw, 5, "not a floating-point number");
	CHECK_CONFIG_ERROR(gateway_lines().set(17, "spi = \"0x1001\""), gw, 17,
	                   "without quotes, e.g. spi = 0x1001");
	CHECK_CONFIG_ERROR(gateway_lines().set(14, "esn = \"yes\""), gw, 14, "write true or false");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = \"10.99.0.1/24\""), gw, 3, "must be an array");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "allowed_ips = [\"10.99.0.2/32\", 7]"), gw, 12,
	                   "every entry of 'allowed_ips' in [[peer]] must be a string, not an integer");
	CHECK_CONFIG_ERROR(gateway_lines().set(2, "interface = 5"), gw, 2, "put the value in double quotes");
	CHECK_CONFIG_ERROR(gateway_lines().set(1, "tunnel = 1").erase(2, 7), gw, 1, "[tunnel] header");
}

TEST_CASE("a single [peer] table instead of [[peer]] is explained") {
	auto lines = gateway_lines().erase(24, 34).set(9, "[peer]");
	CHECK_CONFIG_ERROR(lines, gw, 9, "write the header as [[peer]], with double brackets");
}

TEST_CASE("missing required peer keys are named with an example") {
	CHECK_CONFIG_ERROR(gateway_lines().set(10, ""), gw, 9, "[[peer]] has no name; add name = ");
	CHECK_CONFIG_ERROR(gateway_lines().set(13, ""), gw, 9, "has no cipher; add cipher = one of");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, ""), gw, 9, "needs allowed_ips");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "allowed_ips = []"), gw, 12, "needs allowed_ips");
	CHECK_CONFIG_ERROR(gateway_lines().set(17, ""), gw, 16, "[peer.out] of peer 'site-b' has no spi");
	CHECK_CONFIG_ERROR(gateway_lines().set(33, ""), gw, 32, "[peer.in] of peer 'road-1' has no spi");
	CHECK_CONFIG_ERROR(gateway_lines().set(18, ""), gw, 16,
	                   "[peer.out] has no 'enc_key'; add enc_key = \"0x...\"");
	CHECK_CONFIG_ERROR(gateway_lines().set(23, ""), gw, 20, "[peer.in] has no 'auth_key'");
	CHECK_CONFIG_ERROR(gateway_lines().set(34, ""), gw, 32, "or key_file = \"path\"");
	CHECK_CONFIG_ERROR(gateway_lines().erase(20, 23), gw, 9, "peer 'site-b' has no [peer.in] table");
	CHECK_CONFIG_ERROR(gateway_lines().erase(29, 31), gw, 25, "has no [peer.out] table");
}

TEST_CASE("peer names must be unique and plain") {
	CHECK_CONFIG_ERROR(gateway_lines().set(26, "name = \"site-b\""), gw, 26,
	                   "'site-b' is already used on line 10");
	CHECK_CONFIG_ERROR(gateway_lines().set(26, "name = \"\""), gw, 26, "peer name is empty");
	CHECK_CONFIG_ERROR(gateway_lines().set(26, "name = \"road 1\""), gw, 26, "letters, digits");
}

TEST_CASE("unknown ciphers are rejected with the supported list and a suggestion") {
	auto name = cipher_name(crypto::Cipher::aes128_cbc_sha1);
	std::string typo = name.substr(0, name.size() - 1);
	CHECK_CONFIG_ERROR(gateway_lines().set(13, "cipher = \"" + typo + "\""), gw, 13,
	                   "did you mean '" + name + "'?");
	CHECK_CONFIG_ERROR(gateway_lines().set(13, "cipher = \"rot13\""), gw, 13, "(supported: ");
}

TEST_CASE("keys of the wrong length say the expected bytes and hex digits") {
	const auto& cbc = crypto::cipher_spec(crypto::Cipher::aes128_cbc_sha1);
	const auto& gcm = crypto::cipher_spec(crypto::Cipher::aes128_gcm);
	CHECK_CONFIG_ERROR(gateway_lines().set(18, "enc_key = \"" + hex_key(cbc.enc_key_len - 1, 1) + "\""),
	                   gw, 18,
	                   "needs " + std::to_string(cbc.enc_key_len) + " bytes (0x followed by " +
	                       std::to_string(cbc.enc_key_len * 2) + " hex digits)");
	CHECK_CONFIG_ERROR(gateway_lines().set(23, "auth_key = \"" + hex_key(cbc.auth_key_len + 4, 1) + "\""),
	                   gw, 23, "needs " + std::to_string(cbc.auth_key_len) + " bytes");
	// A GCM key without its salt is the usual mistake.
	CHECK_CONFIG_ERROR(gateway_lines().set(31, "key = \"" + hex_key(gcm.enc_key_len - 4, 1) + "\""), gw,
	                   31, "then the 4-byte salt");
}

TEST_CASE("key names must match the cipher kind") {
	const auto& cbc = crypto::cipher_spec(crypto::Cipher::aes128_cbc_sha1);
	CHECK_CONFIG_ERROR(gateway_lines().set(31, "enc_key = \"" + hex_key(16, 1) + "\""), gw, 31,
	                   "'enc_key' is for CBC ciphers");
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(34, "auth_key = \"" + hex_key(20, 1) + "\""), gw, 35,
	                   "takes one 'key'");
	CHECK_CONFIG_ERROR(gateway_lines().set(18, "key = \"" + hex_key(cbc.enc_key_len, 1) + "\""), gw, 18,
	                   "'key' is for GCM ciphers");
}

TEST_CASE("a key given both inline and as a file is rejected") {
	CHECK_CONFIG_ERROR(gateway_lines().insert_after(18, "enc_key_file = \"k.hex\""), gw, 19,
	                   "give either 'enc_key' or 'enc_key_file' in [peer.out], not both");
}

TEST_CASE("malformed hex keys are rejected without echoing the key") {
	std::string secret = "0x" + std::string(31, 'a') + "z";
	std::string msg = error_of(gateway_lines().set(18, "enc_key = \"" + secret + "\"").text());
	CHECK(msg.rfind("test.toml:18: ", 0) == 0);
	CHECK(msg.find("not a hex digit at position 34") != std::string::npos);
	CHECK(msg.find(secret) == std::string::npos);
	// The bare digits are taken as well (as `openssl rand -hex` prints them).
	CHECK(error_of(gateway_lines().set(18, "enc_key = \"" + hex_key(16, 1).substr(2) + "\"").text()) ==
	      "(no error)");
	CHECK_CONFIG_ERROR(gateway_lines().set(18, "enc_key = \"0x123\""), gw, 18,
	                   "odd number of hex digits");
	CHECK_CONFIG_ERROR(gateway_lines().set(18, "enc_key = \"0x\""), gw, 18, "no hex digits after 0x");
}

TEST_CASE("reserved and oversized SPIs are rejected citing RFC 4303") {
	CHECK_CONFIG_ERROR(gateway_lines().set(17, "spi = 0"), gw, 17,
	                   "spi 0 is reserved (RFC 4303 section 2.1)");
	CHECK_CONFIG_ERROR(gateway_lines().set(21, "spi = 255"), gw, 21,
	                   "reserved by IANA (RFC 4303 section 2.1)");
	CHECK_CONFIG_ERROR(gateway_lines().set(21, "spi = 1"), gw, 21,
	                   "use a value from 0x100 to 0xffffffff");
	CHECK_CONFIG_ERROR(gateway_lines().set(17, "spi = 0x100000000"), gw, 17, "must fit in 32 bits");
	CHECK_CONFIG_ERROR(gateway_lines().set(17, "spi = -4097"), gw, 17, "must fit in 32 bits");
	CHECK(error_of(gateway_lines().set(17, "spi = 0xffffffff").text()) == "(no error)");
	CHECK(error_of(gateway_lines().set(17, "spi = 256").text()) == "(no error)");
}

TEST_CASE("SPIs must be unique across peers in each direction") {
	CHECK_CONFIG_ERROR(
	    gateway_lines().set(33, "spi = 0x2001"), gw, 33,
	    "spi 0x2001 in [peer.in] is already used by peer 'site-b' (line 21); every inbound SPI");
	CHECK_CONFIG_ERROR(gateway_lines().set(30, "spi = 0x1001"), gw, 30,
	                   "every outbound SPI must be unique");
	// The same value in opposite directions is fine: they live on different hosts.
	CHECK(error_of(gateway_lines().set(30, "spi = 0x2001").set(33, "spi = 0x1001").text()) ==
	      "(no error)");
}

TEST_CASE("bad tunnel addresses are rejected with an example") {
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"10.99.0.300/24\"]"), gw, 3,
	                   "e.g. \"10.99.0.1/24\"");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"10.99.0.1/0\"]"), gw, 3, "prefix length 0");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"10.99.0.0/24\"]"), gw, 3,
	                   "network address of its subnet; use a host address in it, e.g. 10.99.0.1/24");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"10.99.0.255/24\"]"), gw, 3,
	                   "broadcast address");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"fd99::/64\"]"), gw, 3, "e.g. fd99::1/64");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"127.0.0.2/8\"]"), gw, 3, "loopback");
	CHECK_CONFIG_ERROR(gateway_lines().set(3, "addresses = [\"10.99.0.1/24\", \"10.99.0.1/24\"]"), gw, 3,
	                   "listed twice");
	CHECK(error_of(gateway_lines().set(3, "addresses = [\"10.99.0.1/32\", \"10.99.1.1/31\"]").text()) ==
	      "(no error)");
}

TEST_CASE("bad listen and endpoint addresses are rejected with the expected form") {
	CHECK_CONFIG_ERROR(gateway_lines().set(4, "listen = \"0.0.0.0:0\""), gw, 4,
	                   "the port defaults to 4500, 1..65535");
	CHECK_CONFIG_ERROR(gateway_lines().set(4, "listen = \"fd00::1:4500\""), gw, 4, "IPv6 in brackets");
	CHECK_CONFIG_ERROR(gateway_lines().set(11, "endpoint = \"10.201.0.2:99999\""), gw, 11,
	                   "is not a UDP address");
	CHECK_CONFIG_ERROR(gateway_lines().set(11, "endpoint = \"vpn.example.com:4500\""), gw, 11,
	                   "198.51.100.7:4500");
	CHECK_CONFIG_ERROR(gateway_lines().set(11, "endpoint = \"0.0.0.0:4500\""), gw, 11,
	                   "unspecified address");
	CHECK_CONFIG_ERROR(gateway_lines().set(11, "endpoint = \"[2001:db8::2]:4500\""), gw, 11,
	                   "set listen = \"[::]:4500\"");
}

TEST_CASE("allowed_ips must be networks: host bits set suggests the network form") {
	CHECK_CONFIG_ERROR(
	    gateway_lines().set(12, "allowed_ips = [\"192.168.50.1/24\"]"), gw, 12,
	    "has host bits set; did you mean '192.168.50.0/24' (the network) or '192.168.50.1/32'");
	CHECK_CONFIG_ERROR(gateway_lines().set(27, "allowed_ips = [\"fd99::3/64\"]"), gw, 27, "'fd99::/64'");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "allowed_ips = [\"10.0.0.0/33\"]"), gw, 12,
	                   "is not an address or prefix");
}

TEST_CASE("allowed_ips may not overlap between peers or within one peer") {
	CHECK_CONFIG_ERROR(gateway_lines().set(27, "allowed_ips = [\"10.99.0.3/32\", \"192.168.50.128/25\"]"),
	                   gw, 27, "overlaps '192.168.50.0/24' of peer 'site-b' (line 12)");
	CHECK_CONFIG_ERROR(gateway_lines().set(12, "allowed_ips = [\"10.99.0.2/32\", \"10.99.0.0/24\"]"), gw,
	                   12, "overlaps '10.99.0.2/32' of this same peer (line 12)");
	CHECK_CONFIG_ERROR(gateway_lines().set(27, "allowed_ips = [\"0.0.0.0/0\"]"), gw, 27,
	                   "remove or narrow one");
}

TEST_CASE("replay_window, mtu, tun_io and interface are range checked") {
	CHECK_CONFIG_ERROR(gateway_lines().set(15, "replay_window = 70000"), gw, 15, "up to 65536");
	CHECK_CONFIG_ERROR(gateway_lines().set(15, "replay_window = -1"), gw, 15, "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 100"), gw, 5,
	                   "use 0 (derive it from the underlay and cipher) or 576..65535");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 65536"), gw, 5, "out of range");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 1000"), gw, 5,
	                   "the IPv6 minimum (RFC 8200 section 5)");
	CHECK(error_of(gateway_lines()
	                   .set(5, "mtu = 1000")
	                   .set(3, "addresses = [\"10.99.0.1/24\"]")
	                   .set(27, "allowed_ips = [\"10.99.0.3/32\"]")
	                   .text()) == "(no error)");
	CHECK_CONFIG_ERROR(gateway_lines().set(6, "tun_io = \"fast\""), gw, 6,
	                   "use \"auto\", \"vhost\" or \"direct\"");
	CHECK_CONFIG_ERROR(gateway_lines().set(2, "interface = \"esptunnel-site-b1\""), gw, 2,
	                   "at most 15 (IFNAMSIZ)");
	CHECK_CONFIG_ERROR(gateway_lines().set(2, "interface = \"esp/0\""), gw, 2, "contains '/'");
	CHECK_CONFIG_ERROR(gateway_lines().set(2, "interface = \"esp 0\""), gw, 2, "whitespace");
	CHECK_CONFIG_ERROR(gateway_lines().set(2, "interface = \"\""), gw, 2, "interface name is empty");
	CHECK_CONFIG_ERROR(gateway_lines().set(7, "control_socket = \"run/esp0.sock\""), gw, 7,
	                   "absolute path");
}

TEST_CASE("a gateway needs at least one peer and may not use route_all") {
	CHECK_CONFIG_ERROR(gateway_lines().erase(9, 34), gw, 1,
	                   "a gateway config needs at least one [[peer]]");
	CHECK_CONFIG_ERROR(gateway_lines().set(8, "route_all = true"), gw, 8,
	                   "route_all is only for a client");
}

TEST_CASE("a client has exactly one peer, with an endpoint") {
	auto two = client_lines();
	for (size_t n = 6; n <= 18; n++)
		two.lines.push_back(two.lines[n - 1]);
	two.set(20, "name = \"gw2\"").set(22, "allowed_ips = [\"172.16.0.0/12\"]");
	two.set(4, "")
	    .set(9, "allowed_ips = [\"10.1.0.0/16\"]")
	    .set(25, "spi = 0x2002")
	    .set(29, "spi = 0x1002");
	CHECK_CONFIG_ERROR(two, cl, 19, "a client config has exactly one [[peer]] (its gateway)");
	CHECK_CONFIG_ERROR(client_lines().erase(6, 18), cl, 1, "a client config needs exactly one [[peer]]");
	CHECK_CONFIG_ERROR(client_lines().set(8, ""), cl, 6, "a client must know where its gateway is");
	// The same text is a valid gateway config: the gateway learns endpoints.
	CHECK(error_of(client_lines().set(8, "").set(4, "").text(), gw) == "(no error)");
}

TEST_CASE("route_all needs the default routes in the peer's allowed_ips") {
	CHECK_CONFIG_ERROR(client_lines().set(9, "allowed_ips = [\"10.0.0.0/8\"]"), cl, 4,
	                   "must accept it: add \"0.0.0.0/0\" to its allowed_ips");
	CHECK_CONFIG_ERROR(client_lines().set(3, "addresses = [\"10.99.0.2/24\", \"fd99::2/64\"]"), cl, 4,
	                   "add \"::/0\" to its allowed_ips");
	CHECK(error_of(client_lines()
	                   .set(3, "addresses = [\"10.99.0.2/24\", \"fd99::2/64\"]")
	                   .set(9, "allowed_ips = [\"0.0.0.0/0\", \"::/0\"]")
	                   .text(),
	               cl) == "(no error)");
	CHECK(error_of(
	          client_lines().set(4, "route_all = false").set(9, "allowed_ips = [\"10.0.0.0/8\"]").text(),
	          cl) == "(no error)");
}

TEST_CASE("non-ASCII text is refused outside whole-line comments, avoiding toml++ 3.3's Unicode UB") {
	CHECK_CONFIG_ERROR(gateway_lines().set(10, "name = \"Z\xc3\xbcrich\""), gw, 10,
	                   "non-ASCII character at column 10");
	CHECK_CONFIG_ERROR(gateway_lines().set(8, "\"\xc2\xa7\" = 1"), gw, 8, "plain ASCII");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 1400 # B\xc3\xbcro"), gw, 5,
	                   "whole-line # comments");
	// libFuzzer's first find: toml++ reached __builtin_unreachable() on this.
	CHECK(error_of("80=0a09\xce\x9c"
	               "C0d0f0n =\"\"\n")
	          .rfind("test.toml:1: non-ASCII", 0) == 0);
	CHECK(error_of("s = \"\"\"\\\n\xc2\xa7\"\"\"\n").rfind("test.toml:2: non-ASCII", 0) == 0);
	CHECK_CONFIG_ERROR(gateway_lines().set(8, "# \\\xc2\xa7"), gw, 8, "non-ASCII");
	CHECK(error_of(gateway_lines().set(8, "  # B\xc3\xbcro Z\xc3\xbcrich").text()) == "(no error)");
	CHECK(error_of("\xEF\xBB\xBF" + gateway_lines().text()) == "(no error)");
}

TEST_CASE("control characters are refused before toml++ sees them") {
	// libFuzzer's find (fuzz-config, a build with assertions on): a backspace
	// and a NUL in a table header failed an assertion inside toml++'s
	// parse_key(). TOML 1.0 allows no control character but tab and line ends.
	using namespace std::string_literals;
	CHECK(error_of("[\x08\0nnel]\ninterface = \"esp0\"\n"s)
	          .rfind("test.toml:1: control character 0x08", 0) == 0);
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 1400 # \x01"), gw, 5, "control character 0x01");
	CHECK_CONFIG_ERROR(gateway_lines().set(5, "mtu = 1400\x7f"), gw, 5, "control character 0x7f");
	// A tab stays valid.
	CHECK(error_of("\t" + gateway_lines().text()) == "(no error)");
}
