// SeqState: outbound sequence numbers reserved in a file, resumed on restart.
#include "service/seq_state.hpp"
#include "tests/unit/support/runtime_test_util.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>

using namespace esptun;

namespace {

std::vector<tunnel::PeerParams> two_peers() {
	const std::vector<uint8_t> k(20, 7);
	auto a =
	    test::gcm_peer("site-b", *parse_endpoint("10.0.0.2:4500"), "10.99.0.2/32", 0x1001, 0x2001, k, k);
	auto b =
	    test::gcm_peer("site-c", *parse_endpoint("10.0.0.3:4500"), "10.99.0.3/32", 0x1002, 0x2002, k, k);
	b.esn = false;
	return {a, b};
}

std::string read_file(const std::string& path) {
	std::ifstream in(path);
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

tunnel::Peer& peer(tunnel::SaTable& t, size_t i) { return *t.peers()[i]; }

} // namespace

TEST_CASE("a fresh state starts at 1, reserves kMargin ahead, and writes the file 0600") {
	test::TempDir dir("esptun-seq");
	tunnel::SaTable table(two_peers());
	service::SeqState st(dir.path + "/esp0.seq", table);
	CHECK(st.resumed_at("site-b") == 1);
	CHECK(peer(table, 0).out.next_seq == 1);
	CHECK(peer(table, 0).out.seq_limit.load() == service::SeqState::kMargin);
	const auto entries = service::parse_seq_state(read_file(st.path()));
	CHECK(entries.at({"site-b", 0x1001}) == service::SeqState::kMargin);
	CHECK(entries.at({"site-c", 0x1002}) == service::SeqState::kMargin);
	struct stat sb {};
	REQUIRE(stat(st.path().c_str(), &sb) == 0);
	CHECK((sb.st_mode & 0777) == 0600);
}

TEST_CASE("refresh extends a half-used reservation; a restart resumes above it") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esp0.seq";
	{
		tunnel::SaTable table(two_peers());
		service::SeqState st(path, table);
		// The data path used numbers up to just under half the reservation: nothing to do.
		peer(table, 0).out.last_seq.store(service::SeqState::kMargin / 2 - 1);
		CHECK(st.refresh());
		CHECK(peer(table, 0).out.seq_limit.load() == service::SeqState::kMargin);
		// One more: less than half is left, the reservation moves kMargin ahead of it.
		peer(table, 0).out.last_seq.store(service::SeqState::kMargin / 2 + 1);
		CHECK(st.refresh());
		CHECK(peer(table, 0).out.seq_limit.load() ==
		      service::SeqState::kMargin / 2 + 1 + service::SeqState::kMargin);
		CHECK(peer(table, 1).out.seq_limit.load() == service::SeqState::kMargin); // untouched
		// A crash here: nothing else is written.
	}
	tunnel::SaTable table(two_peers());
	service::SeqState st(path, table);
	CHECK(st.resumed_at("site-b") == service::SeqState::kMargin / 2 + 2 + service::SeqState::kMargin);
	CHECK(peer(table, 0).out.next_seq == service::SeqState::kMargin / 2 + 2 + service::SeqState::kMargin);
	CHECK(st.resumed_at("site-c") == service::SeqState::kMargin + 1);
}

TEST_CASE("save_exact after a clean stop: the restart skips nothing") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esp0.seq";
	{
		tunnel::SaTable table(two_peers());
		service::SeqState st(path, table);
		peer(table, 0).out.last_seq.store(1234);
		peer(table, 1).out.last_seq.store(99);
		CHECK(st.save_exact());
	}
	tunnel::SaTable table(two_peers());
	service::SeqState st(path, table);
	CHECK(peer(table, 0).out.next_seq == 1235);
	CHECK(peer(table, 1).out.next_seq == 100);
	CHECK(peer(table, 0).out.seq_limit.load() == 1234 + service::SeqState::kMargin);
}

TEST_CASE("a 32-bit SA's reservation never passes 2^32 - 1") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esp0.seq";
	{
		std::ofstream f(path);
		f << "site-c 0x00001002 " << (uint64_t(UINT32_MAX) - 10) << "\n";
	}
	tunnel::SaTable table(two_peers());
	service::SeqState st(path, table);
	CHECK(peer(table, 1).out.next_seq == uint64_t(UINT32_MAX) - 9);
	CHECK(peer(table, 1).out.seq_limit.load() == UINT32_MAX);
}

TEST_CASE("an SA whose SPI changed starts fresh; malformed files are refused with the line") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esp0.seq";
	{
		std::ofstream f(path);
		f << "# comment\nsite-b 0x00009999 500\n";
	}
	{
		tunnel::SaTable table(two_peers());
		service::SeqState st(path, table);
		CHECK(peer(table, 0).out.next_seq == 1);
		CHECK(read_file(path).find("0x00009999") == std::string::npos); // dropped
	}
	for (const char* bad : {"site-b 0x1001\n", "site-b zz 5\n", "site-b 0x1001 -5\n",
	                        "site-b 0x1001 5 6\n", "site-b 0x0 5\n"}) {
		{
			std::ofstream f(path);
			f << "# ok\n" << bad;
		}
		tunnel::SaTable table(two_peers());
		CHECK_THROWS_WITH_AS(service::SeqState(path, table), doctest::Contains("line 2"),
		                     std::runtime_error);
	}
}

TEST_CASE("an unwritable state folder is an error naming the file") {
	tunnel::SaTable table(two_peers());
	CHECK_THROWS_WITH_AS(service::SeqState("/proc/esptun-no-such-dir/esp0.seq", table),
	                     doctest::Contains("/proc/esptun-no-such-dir/esp0.seq"), std::runtime_error);
}

TEST_CASE("peers keyed at run time are left out of the state file and keep no limit") {
	test::TempDir dir("esptun-seq");
	std::vector<tunnel::PeerParams> params = two_peers();
	params.push_back(test::run_time_peer("site-ike", std::nullopt, {*parse_prefix("10.99.0.9/32")}));
	tunnel::SaTable table(params);
	service::SeqState st(dir.path + "/esp0.seq", table);
	CHECK(st.refresh());
	CHECK(st.save_exact());
	const auto entries = service::parse_seq_state(read_file(st.path()));
	CHECK(entries.size() == 2);
	CHECK(read_file(st.path()).find("site-ike") == std::string::npos);
	CHECK(st.resumed_at("site-ike") == 0);
	// An SA installed later has fresh keys, counts from 1 and is not limited.
	tunnel::ChildSaKeys k;
	k.spi = 0x4242;
	k.enc_key = std::vector<uint8_t>(20, 1);
	tunnel::OutboundSa* sa = table.install_outbound(peer(table, 2), k);
	CHECK(sa->next_seq == 1);
	CHECK(sa->seq_limit.load() == UINT64_MAX);
	CHECK(st.refresh());
	CHECK(service::parse_seq_state(read_file(st.path())).size() == 2);
}
