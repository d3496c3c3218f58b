// Peers keyed by IKEv2 in the config: what they accept, their defaults, and
// the errors for keys that belong to the other kind of peer.
#include "conf/config.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace esptun;
using namespace esptun::conf;

namespace {

const char* kGateway = R"([tunnel]
listen = "0.0.0.0:4500"
local_id = "gw.example"
address_pool = ["10.77.0.0/24"]
dns = ["10.77.0.53"]

[[peer]]
name = "alice"
allowed_ips = ["10.77.0.10/32", "192.168.9.0/24"]
psk = "alice-pre-shared-key-0123456789"
remote_id = "alice@example.com"
ike_proposals = ["aes256gcm16-prfsha384-ecp256", "aes128-sha256-modp2048"]
esp_proposals = ["aes128-sha1-noesn"]
rekey_time = 600
ike_rekey_time = 0
dpd_interval = 10
)";

/// The error text for @text as a gateway config, or "" if it parses.
std::string error_of(const std::string& text, Role role = Role::gateway) {
	try {
		parse_config(text, "t.toml", role);
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "";
}

std::string with(const std::string& base, const std::string& from, const std::string& to) {
	std::string s = base;
	const size_t at = s.find(from);
	REQUIRE(at != std::string::npos);
	return s.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("an IKE peer parses with its proposals, timers and identities") {
	Config c = parse_config(kGateway, "t.toml", Role::gateway);
	REQUIRE(c.peers.size() == 1);
	const PeerConfig& p = c.peers[0];
	REQUIRE(p.ike);
	CHECK(std::string(p.ike->psk.begin(), p.ike->psk.end()) == "alice-pre-shared-key-0123456789");
	CHECK(p.ike->remote_id == "alice@example.com");
	CHECK(p.ike->local_id == "gw.example"); // from [tunnel]
	REQUIRE(p.ike->ike_proposals.size() == 2);
	CHECK(p.ike->ike_proposals[0].dh == ike::DhGroup::ecp256);
	REQUIRE(p.ike->esp_proposals.size() == 1);
	CHECK(p.ike->esp_proposals[0].esn == ike::EsnOffer::no);
	CHECK(p.ike->rekey_time == 600);
	CHECK(p.ike->ike_rekey_time == 0);
	CHECK(p.ike->dpd_interval == 10);
	CHECK(!p.ike->initiate); // no endpoint: it waits for the client
	CHECK(c.tunnel.ike_port == 500);
	REQUIRE(c.tunnel.address_pool.size() == 1);
	CHECK(to_string(c.tunnel.dns.at(0)) == "10.77.0.53");
}

TEST_CASE("esp_proposals take a key exchange group for PFS, mixed with plain ones") {
	Config c =
	    parse_config(with(kGateway, "esp_proposals = [\"aes128-sha1-noesn\"]",
	                      "esp_proposals = [\"aes128gcm16-x25519\", \"aes256-sha256-modp2048-esn\", "
	                      "\"aes128gcm16-ecp256\", \"aes128gcm16\"]"),
	                 "t.toml", Role::gateway);
	const auto& esp = c.peers.at(0).ike->esp_proposals;
	REQUIRE(esp.size() == 4);
	CHECK(esp[0].pfs == ike::DhGroup::curve25519);
	CHECK(esp[1].pfs == ike::DhGroup::modp2048);
	CHECK(esp[1].esn == ike::EsnOffer::yes);
	CHECK(esp[2].pfs == ike::DhGroup::ecp256);
	CHECK(!esp[3].pfs);
	const std::string weak =
	    error_of(with(kGateway, "\"aes128-sha1-noesn\"", "\"aes128gcm16-modp1024\""));
	CAPTURE(weak);
	CHECK(weak.find("t.toml:13: esp_proposals entry 'aes128gcm16-modp1024': 'modp1024' is refused") !=
	      std::string::npos);
	CHECK(error_of(with(kGateway, "\"aes128-sha1-noesn\"", "\"aes128gcm16-modp1536\""))
	          .find("1536-bit MODP is too weak") != std::string::npos);
}

TEST_CASE("a client peer of a gateway with an address pool may leave allowed_ips out") {
	const std::string text =
	    with(kGateway, "allowed_ips = [\"10.77.0.10/32\", \"192.168.9.0/24\"]\n", "");
	Config c = parse_config(text, "t.toml", Role::gateway);
	CHECK(c.peers.at(0).allowed_ips.empty());
	// Without a pool it must have them, and the error says what else would do.
	const std::string no_pool =
	    with(with(text, "address_pool = [\"10.77.0.0/24\"]", ""), "dns = [\"10.77.0.53\"]", "");
	CHECK(error_of(no_pool).find("needs allowed_ips") != std::string::npos);
	CHECK(error_of(no_pool).find("an address_pool in [tunnel]") != std::string::npos);
}

TEST_CASE("IKE peer defaults: remote_id is the name, initiate follows the endpoint, psk in hex") {
	const std::string text = R"([tunnel]
[[peer]]
name = "hq"
endpoint = "192.0.2.1"
allowed_ips = ["10.1.0.0/16"]
psk = "0x00112233445566778899aabbccddeeff"
)";
	Config c = parse_config(text, "t.toml", Role::gateway);
	const IkePeerConfig& ike = *c.peers[0].ike;
	CHECK(ike.remote_id == "hq");
	CHECK(ike.initiate);
	CHECK(ike.psk.size() == 16);
	CHECK(ike.psk[15] == 0xff);
	CHECK(ike.ike_proposals == ike::default_ike_proposals());
	CHECK(ike.rekey_time == 3600);
}

TEST_CASE("config errors for IKE peers name the line and the fix") {
	CHECK(error_of(with(kGateway, "rekey_time = 600", "cipher = \"aes128-gcm\""))
	          .find("t.toml:14: 'cipher' is for a statically keyed peer") != std::string::npos);
	CHECK(
	    error_of(with(kGateway, "address_pool = [\"10.77.0.0/24\"]", "address_pool = [\"10.0.0.0/15\"]"))
	        .find("t.toml:4: address_pool entry '10.0.0.0/15' is larger than a /16") !=
	    std::string::npos);
	CHECK(error_of(with(kGateway, "address_pool = [\"10.77.0.0/24\"]",
	                    "address_pool = [\"10.77.0.0/24\", \"10.77.0.128/25\"]"))
	          .find("overlaps '10.77.0.0/24'") != std::string::npos);
	CHECK(error_of(with(kGateway, "address_pool = [\"10.77.0.0/24\"]", "address_pool = [\"fd77::/111\"]"))
	          .find("larger than a /112") != std::string::npos);
	CHECK(error_of(with(kGateway, "psk = \"alice-pre-shared-key-0123456789\"", "psk = \"short\""))
	          .find("is 5 bytes; use at least 16") != std::string::npos);
	CHECK(error_of(with(kGateway, "\"aes128-sha256-modp2048\"", "\"aes128-sha256-modp1024\""))
	          .find("'modp1024' is refused") != std::string::npos);
	CHECK(error_of(with(kGateway, "\"aes128-sha1-noesn\"", "\"aes128-md5\"")).find("'md5' is refused") !=
	      std::string::npos);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "initiate = true"))
	          .find("initiate = true needs an endpoint") != std::string::npos);
	CHECK(error_of(with(kGateway, "rekey_time = 600", "rekey_time = 2"))
	          .find("rekey_time 2 is out of range") != std::string::npos);
	CHECK(error_of(with(kGateway, "address_pool = [\"10.77.0.0/24\"]", "")).find("add address_pool") !=
	      std::string::npos);
	CHECK(
	    error_of(with(kGateway, "address_pool = [\"10.77.0.0/24\"]", "address_pool = [\"10.77.0.1/24\"]"))
	        .find("is not a network") != std::string::npos);
	CHECK(error_of(with(kGateway, "psk = \"alice-pre-shared-key-0123456789\"",
	                    "psk = \"alice-pre-shared-key-0123456789\"\npsk_file = \"x\""))
	          .find("not both") != std::string::npos);
	// IKE-only keys on a statically keyed peer.
	const std::string stat = R"([tunnel]
[[peer]]
name = "s"
cipher = "aes128-gcm"
allowed_ips = ["10.1.0.0/16"]
remote_id = "x"
[peer.out]
spi = 0x1001
key = "0x00112233445566778899aabbccddeeff00112233"
[peer.in]
spi = 0x1002
key = "0x00112233445566778899aabbccddeeff00112233"
)";
	CHECK(error_of(stat).find("t.toml:6: 'remote_id' only applies to a peer keyed by IKEv2") !=
	      std::string::npos);
	// A client asks for its address; it does not hand any out.
	const std::string client = R"([tunnel]
address_pool = ["10.77.0.0/24"]
[[peer]]
name = "gw"
endpoint = "192.0.2.1"
allowed_ips = ["10.77.0.0/24"]
psk = "alice-pre-shared-key-0123456789"
)";
	CHECK(error_of(client, Role::client).find("address_pool and dns are for a gateway") !=
	      std::string::npos);
}

TEST_CASE("local_ts: what an IKE peer may reach, as networks; absent means any address") {
	Config c = parse_config(with(kGateway, "dpd_interval = 10",
	                             "dpd_interval = 10\nlocal_ts = [\"10.50.0.0/16\", \"fd50::/64\"]"),
	                        "t.toml", Role::gateway);
	const IkePeerConfig& ike = *c.peers.at(0).ike;
	REQUIRE(ike.local_ts.size() == 2);
	CHECK(ike.local_ts[0] == *parse_prefix("10.50.0.0/16"));
	CHECK(ike.local_ts[1] == *parse_prefix("fd50::/64"));
	CHECK(parse_config(kGateway, "t.toml", Role::gateway).peers.at(0).ike->local_ts.empty());
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "local_ts = []"))
	          .find("local_ts of peer 'alice' is empty") != std::string::npos);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "local_ts = [\"10.50.0.1/16\"]"))
	          .find("t.toml:16: local_ts entry '10.50.0.1/16' has host bits set; did you mean "
	                "'10.50.0.0/16'") != std::string::npos);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "local_ts = [\"10.50.0\"]"))
	          .find("is not an address or prefix") != std::string::npos);
}

TEST_CASE("rekey_bytes and rekey_packets: off by default, with a floor against rekey storms") {
	const IkePeerConfig def = *parse_config(kGateway, "t.toml", Role::gateway).peers.at(0).ike;
	CHECK(def.rekey_bytes == 0);
	CHECK(def.rekey_packets == 0);
	const IkePeerConfig set = *parse_config(with(kGateway, "dpd_interval = 10",
	                                             "rekey_bytes = 4000000000\nrekey_packets = 1000"),
	                                        "t.toml", Role::gateway)
	                               .peers.at(0)
	                               .ike;
	CHECK(set.rekey_bytes == 4000000000u);
	CHECK(set.rekey_packets == 1000);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "rekey_bytes = 1000"))
	          .find("t.toml:16: rekey_bytes 1000 is out of range; use 1048576 or more, or 0") !=
	      std::string::npos);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "rekey_packets = -1"))
	          .find("rekey_packets -1 is out of range") != std::string::npos);
}

TEST_CASE("allow_weak: weak IKE algorithms are refused without it, with how to opt in") {
	const std::string weak_ike = with(kGateway, "\"aes128-sha256-modp2048\"", "\"aes256-sha1-modp1024\"");
	const std::string err = error_of(weak_ike);
	CAPTURE(err);
	CHECK(err.find("t.toml:12: ike_proposals entry 'aes256-sha1-modp1024': 'sha1' is refused") !=
	      std::string::npos);
	CHECK(err.find("set allow_weak = true in its [[peer]] table") != std::string::npos);
	CHECK(error_of(with(kGateway, "\"aes128-sha256-modp2048\"", "\"aes128gcm16-prfsha1-x25519\""))
	          .find("'prfsha1' is refused") != std::string::npos);

	// With the opt-in (written before or after the proposals: TOML has no order).
	for (const std::string& text :
	     {with(weak_ike, "dpd_interval = 10", "dpd_interval = 10\nallow_weak = true"),
	      with(weak_ike, "remote_id = ", "allow_weak = true\nremote_id = ")}) {
		Config c = parse_config(text, "t.toml", Role::gateway);
		const IkePeerConfig& ike = *c.peers.at(0).ike;
		CHECK(ike.allow_weak);
		REQUIRE(ike.ike_proposals.size() == 2);
		CHECK(ike.ike_proposals[1].dh == ike::DhGroup::modp1024);
		CHECK(ike.ike_proposals[1].prf == ike::PrfId::hmac_sha1);
		CHECK(ike.ike_proposals[1].integ == ike::IntegId::hmac_sha1_96);
	}
	// Off by default; a boolean; only for IKE peers; never opens what esptun lacks.
	CHECK_FALSE(parse_config(kGateway, "t.toml", Role::gateway).peers.at(0).ike->allow_weak);
	CHECK(error_of(with(kGateway, "dpd_interval = 10", "allow_weak = \"yes\"")).find("allow_weak") !=
	      std::string::npos);
	CHECK(error_of(with(with(kGateway, "dpd_interval = 10", "allow_weak = true"), "\"aes128-sha1-noesn\"",
	                    "\"aes128-md5\""))
	          .find("'md5' is refused") != std::string::npos);
	CHECK(error_of(with(with(kGateway, "dpd_interval = 10", "allow_weak = true"),
	                    "\"aes128-sha256-modp2048\"", "\"aes128-sha256-modp1536\""))
	          .find("1536-bit MODP is too weak") != std::string::npos);
}

TEST_CASE("the new groups parse in both proposal lists without any opt-in") {
	Config c = parse_config(with(with(kGateway, "\"aes128-sha256-modp2048\"",
	                                  "\"aes256-sha384-ecp384\", \"aes256gcm16-prfsha512-modp4096\", "
	                                  "\"aes128gcm16-prfsha256-modp3072\""),
	                             "\"aes128-sha1-noesn\"", "\"aes128gcm16-ecp384\""),
	                        "t.toml", Role::gateway);
	const IkePeerConfig& ike = *c.peers.at(0).ike;
	REQUIRE(ike.ike_proposals.size() == 4);
	CHECK(ike.ike_proposals[1].dh == ike::DhGroup::ecp384);
	CHECK(ike.ike_proposals[2].dh == ike::DhGroup::modp4096);
	CHECK(ike.ike_proposals[2].prf == ike::PrfId::hmac_sha512);
	CHECK(ike.ike_proposals[3].dh == ike::DhGroup::modp3072);
	CHECK(ike.esp_proposals.at(0).pfs == ike::DhGroup::ecp384);
}
