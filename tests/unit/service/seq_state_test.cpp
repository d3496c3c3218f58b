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

/// One statically keyed aes128-gcm peer; its keys are fixed by @seed, not by name or SPI.
tunnel::PeerParams gcm(const char* name, uint32_t out_spi, uint8_t seed) {
	const std::vector<uint8_t> out_key(20, seed), in_key(20, uint8_t(seed + 0x40));
	return test::gcm_peer(name, *parse_endpoint("10.0.0.2:4500"), "10.99.0.2/32", out_spi,
	                      out_spi + 0x1000, out_key, in_key);
}

std::vector<tunnel::PeerParams> two_peers() {
	auto a = gcm("site-b", 0x1001, 7);
	auto b = gcm("site-c", 0x1002, 8);
	b.allowed_ips = {*parse_prefix("10.99.0.3/32")};
	b.esn = false;
	return {a, b};
}

/// The fingerprint site-b's key (seed 7) has in the file.
std::string fp_b() { return service::key_fingerprint(std::vector<uint8_t>(20, 7), {}); }
std::string fp_c() { return service::key_fingerprint(std::vector<uint8_t>(20, 8), {}); }

/// A SeqState for the static peers of @params, built into @table.
service::SeqState open(const std::string& path, tunnel::SaTable& table,
                       const std::vector<tunnel::PeerParams>& params, const std::string& legacy = "") {
	return service::SeqState(path, table, service::key_fingerprints(params), legacy);
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
	const auto params = two_peers();
	tunnel::SaTable table(params);
	service::SeqState st = open(dir.path + "/esptun.seq", table, params);
	CHECK(st.resumed_at("site-b") == 1);
	CHECK(peer(table, 0).out.next_seq == 1);
	CHECK(peer(table, 0).out.seq_limit.load() == service::SeqState::kMargin);
	const auto entries = service::parse_seq_state(read_file(st.path()));
	CHECK(entries.at(fp_b()) == service::SeqState::kMargin);
	CHECK(entries.at(fp_c()) == service::SeqState::kMargin);
	struct stat sb {};
	REQUIRE(stat(st.path().c_str(), &sb) == 0);
	CHECK((sb.st_mode & 0777) == 0600);
}

TEST_CASE("refresh extends a half-used reservation; a restart resumes above it") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	{
		const auto params = two_peers();
		tunnel::SaTable table(params);
		service::SeqState st = open(path, table, params);
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
	const auto params = two_peers();
	tunnel::SaTable table(params);
	service::SeqState st = open(path, table, params);
	CHECK(st.resumed_at("site-b") == service::SeqState::kMargin / 2 + 2 + service::SeqState::kMargin);
	CHECK(peer(table, 0).out.next_seq == service::SeqState::kMargin / 2 + 2 + service::SeqState::kMargin);
	CHECK(st.resumed_at("site-c") == service::SeqState::kMargin + 1);
}

TEST_CASE("save_exact after a clean stop: the restart skips nothing") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	{
		const auto params = two_peers();
		tunnel::SaTable table(params);
		service::SeqState st = open(path, table, params);
		peer(table, 0).out.last_seq.store(1234);
		peer(table, 1).out.last_seq.store(99);
		CHECK(st.save_exact());
	}
	const auto params = two_peers();
	tunnel::SaTable table(params);
	service::SeqState st = open(path, table, params);
	CHECK(peer(table, 0).out.next_seq == 1235);
	CHECK(peer(table, 1).out.next_seq == 100);
	CHECK(peer(table, 0).out.seq_limit.load() == 1234 + service::SeqState::kMargin);
}

TEST_CASE("a 32-bit SA's reservation never passes 2^32 - 1") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	{
		std::ofstream f(path);
		f << fp_c() << " " << (uint64_t(UINT32_MAX) - 10) << "\n";
	}
	const auto params = two_peers();
	tunnel::SaTable table(params);
	service::SeqState st = open(path, table, params);
	CHECK(peer(table, 1).out.next_seq == uint64_t(UINT32_MAX) - 9);
	CHECK(peer(table, 1).out.seq_limit.load() == UINT32_MAX);
}

TEST_CASE("the same key resumes above its reservation: renamed peer, new SPI, new interface") {
	test::TempDir dir("esptun-seq");
	// The file depends on state_dir only: a new interface name finds the same file.
	const std::string path = service::seq_state_file(dir.path);
	CHECK(path == dir.path + "/esptun.seq");
	{
		const std::vector<tunnel::PeerParams> params{gcm("site-b", 0x1001, 7)};
		tunnel::SaTable table(params);
		service::SeqState st = open(path, table, params);
	}
	uint64_t floor = service::SeqState::kMargin;
	for (const auto& params : {std::vector<tunnel::PeerParams>{gcm("site-renamed", 0x1001, 7)},
	                           std::vector<tunnel::PeerParams>{gcm("site-b", 0x7777, 7)},
	                           std::vector<tunnel::PeerParams>{gcm("other", 0x4242, 7)}}) {
		tunnel::SaTable table(params);
		service::SeqState st = open(path, table, params);
		INFO(params[0].name);
		CHECK(peer(table, 0).out.next_seq == floor + 1);
		floor += service::SeqState::kMargin;
	}
	// Another key starts fresh, and the entries of keys not configured now are kept.
	const std::vector<tunnel::PeerParams> params{gcm("site-b", 0x1001, 9)};
	tunnel::SaTable table(params);
	service::SeqState st = open(path, table, params);
	CHECK(peer(table, 0).out.next_seq == 1);
	CHECK(service::parse_seq_state(read_file(path)).at(fp_b()) == floor);
}

TEST_CASE("the file never holds a key, only a labelled one-way fingerprint") {
	const std::vector<uint8_t> k(20, 7);
	const std::string fp = service::key_fingerprint(k, {});
	CHECK(fp.size() == 64);
	CHECK(fp.find("0707070707") == std::string::npos);
	CHECK(fp != service::key_fingerprint(std::vector<uint8_t>(19, 7), std::vector<uint8_t>(1, 7)));
	CHECK(fp != service::key_fingerprint(std::vector<uint8_t>(20, 8), {}));
	test::TempDir dir("esptun-seq");
	const auto params = two_peers();
	tunnel::SaTable table(params);
	service::SeqState st = open(dir.path + "/esptun.seq", table, params);
	CHECK(read_file(st.path()).find("0707070707") == std::string::npos);
}

TEST_CASE("two static SAs with one key are refused without naming it") {
	test::TempDir dir("esptun-seq");
	std::vector<tunnel::PeerParams> params = two_peers();
	params[1].out.enc_key = params[0].out.enc_key;
	tunnel::SaTable table(params);
	CHECK_THROWS_WITH_AS(open(dir.path + "/esptun.seq", table, params),
	                     doctest::Contains("peers site-b and site-c send with the same key"),
	                     std::runtime_error);
}

TEST_CASE("the old per-interface file is read once and its reservations kept") {
	test::TempDir dir("esptun-seq");
	const std::string legacy = service::legacy_seq_state_file(dir.path, "esp0");
	{
		std::ofstream f(legacy);
		f << "# old\nsite-b 0x00001001 500\nsite-c 0x00009999 77\n";
	}
	const auto params = two_peers();
	{
		tunnel::SaTable table(params);
		service::SeqState st = open(service::seq_state_file(dir.path), table, params, legacy);
		CHECK(peer(table, 0).out.next_seq == 501);
		CHECK(peer(table, 1).out.next_seq == 1); // another SPI: not this SA's entry
		CHECK(st.save_exact());
	}
	CHECK(!std::filesystem::exists(legacy));
	CHECK(std::filesystem::exists(legacy + ".migrated"));
	tunnel::SaTable table(params);
	service::SeqState st = open(service::seq_state_file(dir.path), table, params, legacy);
	CHECK(peer(table, 0).out.next_seq == 501);
}

TEST_CASE("a damaged file is refused with the line and safe advice") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	const std::string fp(64, 'a');
	for (const std::string& bad :
	     std::vector<std::string>{"garbage\n", fp + "\n", fp + " zz\n", fp + " -5\n", "site-b 0x1001 5\n",
	                              std::string(63, 'a') + " 5\n"}) {
		{
			std::ofstream f(path);
			f << "# ok\n" << bad;
		}
		const auto params = two_peers();
		tunnel::SaTable table(params);
		try {
			service::SeqState st = open(path, table, params);
			FAIL("a damaged file was accepted: " << bad);
		} catch (const std::runtime_error& e) {
			const std::string msg = e.what();
			INFO(msg);
			CHECK(msg.find("line 2") != std::string::npos);
			CHECK(msg.find("remove") == std::string::npos);
			CHECK(msg.find("delete") == std::string::npos);
			CHECK(msg.find("configure new keys") != std::string::npos);
		}
	}
}

TEST_CASE("an unwritable state folder is an error naming the file") {
	const auto params = two_peers();
	tunnel::SaTable table(params);
	CHECK_THROWS_WITH_AS(open("/proc/esptun-no-such-dir/esptun.seq", table, params),
	                     doctest::Contains("/proc/esptun-no-such-dir/esptun.seq"), std::runtime_error);
}

TEST_CASE("a clean stop of a second process does not lower another's reservation") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	const auto params = two_peers();
	tunnel::SaTable first_table(params);
	service::SeqState first = open(path, first_table, params);
	peer(first_table, 0).out.last_seq.store(service::SeqState::kMargin / 2 + 1);
	{
		// A second process with the same keys: it reserves above the first and
		// on its stop lowers only what it reserved itself.
		tunnel::SaTable table(params);
		service::SeqState second = open(path, table, params);
		CHECK(peer(table, 0).out.next_seq == service::SeqState::kMargin + 1);
		// The first extends site-b's reservation; the file keeps the second's
		// higher number and marks it changed, so the second leaves it alone.
		CHECK(first.refresh());
		CHECK(second.save_exact());
	}
	const auto entries = service::parse_seq_state(read_file(path));
	CHECK(entries.at(fp_b()) == 2 * service::SeqState::kMargin + 1);
	CHECK(entries.at(fp_c()) == service::SeqState::kMargin); // second's exact stop: its last used
}

TEST_CASE("peers keyed at run time are left out of the state file and keep no limit") {
	test::TempDir dir("esptun-seq");
	std::vector<tunnel::PeerParams> params = two_peers();
	params.push_back(test::run_time_peer("site-ike", std::nullopt, {*parse_prefix("10.99.0.9/32")}));
	tunnel::SaTable table(params);
	service::SeqState st = open(dir.path + "/esptun.seq", table, params);
	CHECK(st.refresh());
	CHECK(st.save_exact());
	const auto entries = service::parse_seq_state(read_file(st.path()));
	CHECK(entries.size() == 2);
	CHECK(st.resumed_at("site-ike") == 0);
	// An SA installed later has fresh keys, counts from 1 and is not limited.
	tunnel::ChildSaKeys k;
	k.spi = 0x4242;
	k.enc_key = SecretBytes(20, 1);
	tunnel::OutboundSa* sa = table.install_outbound(peer(table, 2), k);
	CHECK(sa->next_seq == 1);
	CHECK(sa->seq_limit.load() == UINT64_MAX);
	CHECK(st.refresh());
	CHECK(service::parse_seq_state(read_file(st.path())).size() == 2);
}

TEST_CASE("a reload's new static peer resumes above its key's reservation before it is published") {
	test::TempDir dir("esptun-seq");
	const std::string path = dir.path + "/esptun.seq";
	{ // an earlier run used site-c's key
		const std::vector<tunnel::PeerParams> params{two_peers()[1]};
		tunnel::SaTable table(params);
		service::SeqState st = open(path, table, params);
	}
	const std::vector<tunnel::PeerParams> first{two_peers()[0]};
	tunnel::SaTable table(first);
	service::SeqState st = open(path, table, first);
	const std::vector<tunnel::PeerParams> added{two_peers()[1]};
	tunnel::PeerChange change = table.prepare_peers({}, added);
	const std::vector<tunnel::Peer*> fresh = change.added();
	st.adopt(fresh, service::key_fingerprints(added), {});
	// Its 32-bit SA (esn = false) continues above the earlier run's reservation.
	CHECK(fresh[0]->out.next_seq == service::SeqState::kMargin + 1);
	CHECK(fresh[0]->out.seq_limit.load() == 2 * service::SeqState::kMargin);
	CHECK(st.resumed_at("site-c") == service::SeqState::kMargin + 1);
	table.commit_peers(std::move(change));
	CHECK(st.refresh());
	CHECK(st.save_exact());
	CHECK(service::parse_seq_state(read_file(path)).at(fp_c()) == service::SeqState::kMargin);
}

TEST_CASE("a reload's peer sending with a running peer's key is refused; its replacement is not") {
	test::TempDir dir("esptun-seq");
	const std::vector<tunnel::PeerParams> first{two_peers()[0]};
	tunnel::SaTable table(first);
	service::SeqState st = open(dir.path + "/esptun.seq", table, first);
	auto copy = gcm("site-x", 0x3001, 7); // site-b's key under another name
	copy.allowed_ips = {*parse_prefix("10.99.0.9/32")};
	const std::vector<tunnel::PeerParams> added{copy};
	tunnel::PeerChange change = table.prepare_peers({}, added);
	CHECK_THROWS_WITH(st.adopt(change.added(), service::key_fingerprints(added), {}),
	                  doctest::Contains("same key"));
	CHECK(change.added()[0]->out.seq_limit.load() == UINT64_MAX); // untouched: not to be published
	// site-b changed (say, a new allowed_ips) but keeps its key: not shared with itself.
	auto changed = gcm("site-b", 0x1001, 7);
	changed.allowed_ips = {*parse_prefix("10.99.0.8/32")};
	const std::vector<tunnel::PeerParams> again{changed};
	const std::vector<std::string> replacing{"site-b"};
	tunnel::PeerChange change2 = table.prepare_peers(replacing, again);
	st.adopt(change2.added(), service::key_fingerprints(again), replacing);
	// It continues above everything the old site-b may still send with.
	CHECK(change2.added()[0]->out.next_seq.load() > peer(table, 0).out.seq_limit.load());
}
