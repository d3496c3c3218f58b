// The status JSON's peers: a statically keyed peer keeps the fields the
// netns tests read (sa_out, sa_in), and a peer keyed at run time lists what
// it has installed, including both inbound SAs during a rekey.
#include "crypto/aes_gcm.hpp"
#include "service/service.hpp"

#include "tests/unit/support/runtime_test_util.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace esptun;

namespace {

bool has(const std::string& s, const std::string& part) {
	if (s.find(part) != std::string::npos) return true;
	MESSAGE("missing: " << part);
	return false;
}

tunnel::PeerParams ike_peer() {
	return test::run_time_peer("ike", *parse_endpoint("10.0.0.9:4500"), "10.99.0.9/32");
}

tunnel::ChildSaKeys gcm_keys(uint32_t spi) {
	tunnel::ChildSaKeys k;
	k.spi = spi;
	k.cipher = crypto::Cipher::aes128_gcm;
	k.enc_key = SecretBytes(20, 0x5a);
	return k;
}

} // namespace

TEST_CASE("status JSON: static peers keep sa_out and sa_in, run-time peers list their SAs") {
	const std::vector<uint8_t> k(20, 7);
	tunnel::SaTable table(
	    {test::gcm_peer("site-b", *parse_endpoint("10.0.0.2:4500"), "10.99.0.2/32", 0x1001, 0x2001, k, k),
	     ike_peer()});
	service::ServiceInfo info;
	DataPathStats stats;
	stats.drop(Drop::no_sa);
	std::string s = service::render_status(info, stats, table);
	CHECK(has(s, R"("no_endpoint":0,"no_sa":1,"seq_exhausted":0,)"));
	CHECK(has(s, std::string(R"("keying":"static","cipher":"aes128-gcm","crypto_impl":"gcm-)") +
	                 std::string(crypto::gcm_variant()) + R"(","esn":true,)"));
	CHECK(has(s, R"("sa_out":{"spi":4097,"spi_hex":"0x00001001","packets":0,"bytes":0,"last_seq":0,)"
	             R"("cipher":"aes128-gcm","esn":true})"));
	CHECK(has(
	    s,
	    R"("sa_in":{"spi":8193,"spi_hex":"0x00002001","packets":0,"bytes":0,"highest_seq":0,)"
	    R"("replay_window":1024,"reordered":0,"cipher":"aes128-gcm","esn":true},"sas_in":[{"spi":8193,)"));
	CHECK(has(s, R"("keying":"dynamic","cipher":null,"crypto_impl":null,"esn":null,)"));
	CHECK(has(s, R"("sa_out":null,"sa_in":null,"sas_in":[],"totals":{"tx_packets":0,"tx_bytes":0,)"
	             R"("rx_packets":0,"rx_bytes":0},"sas_retiring":0,"drops":{)"));

	// A rekey in progress: two inbound SAs, the newest shown as sa_in.
	tunnel::Peer& ike = *table.peers()[1];
	const uint32_t old_spi = table.allocate_spi();
	table.install_inbound(ike, gcm_keys(old_spi));
	const uint32_t new_spi = table.allocate_spi();
	table.install_inbound(ike, gcm_keys(new_spi));
	table.install_outbound(ike, gcm_keys(0x7777));
	s = service::render_status(info, stats, table);
	CHECK(has(s, R"("keying":"dynamic","cipher":"aes128-gcm",)"));
	CHECK(has(s, R"("sa_out":{"spi":30583,)"));
	CHECK(has(s, R"("sa_in":{"spi":)" + std::to_string(new_spi) + ","));
	CHECK(has(s, R"("sas_in":[{"spi":)" + std::to_string(old_spi) + R"(,)"));
	CHECK(has(s, R"(},{"spi":)" + std::to_string(new_spi) + ","));
}

TEST_CASE("status JSON: each peer's drops, every reason a peer can have, field by field") {
	const std::vector<uint8_t> k(20, 7);
	tunnel::SaTable table(
	    {test::gcm_peer("site-b", *parse_endpoint("10.0.0.2:4500"), "10.99.0.2/32", 0x1001, 0x2001, k, k),
	     ike_peer()});
	tunnel::Peer& b = *table.peers()[0];
	b.drops[size_t(Drop::replay)].add(3);
	b.drops[size_t(Drop::auth_failed)].add(2);
	b.drops[size_t(Drop::malformed)].add(1);
	table.peers()[1]->drops[size_t(Drop::no_sa)].add(5);
	service::ServiceInfo info;
	DataPathStats stats;
	const std::string s = service::render_status(info, stats, table);
	CHECK(has(s, R"("name":"site-b",)"));
	CHECK(has(s, R"("sas_retiring":0,"drops":{"malformed":1,"auth_failed":2,"replay":3,"policy":0,)"
	             R"("dest_policy":0,"padding":0,"no_endpoint":0,"no_sa":0,"seq_exhausted":0,)"
	             R"("seq_not_saved":0}})"));
	CHECK(has(s, R"("sas_retiring":0,"drops":{"malformed":0,"auth_failed":0,"replay":0,"policy":0,)"
	             R"("dest_policy":0,"padding":0,"no_endpoint":0,"no_sa":5,"seq_exhausted":0,)"
	             R"("seq_not_saved":0}})"));
	// Reasons no peer can have are not in a peer's object.
	const std::string peers = s.substr(s.find(R"("peers":)"));
	for (Drop d :
	     {Drop::unknown_spi, Drop::no_route, Drop::too_big, Drop::tun_write_error, Drop::udp_send_error})
		CHECK(peers.find("\"" + std::string(drop_name(d)) + "\"") == std::string::npos);
}
