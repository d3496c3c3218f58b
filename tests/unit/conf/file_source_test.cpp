// conf/file_source: a load recorded over the real files replays to the same
// Config, and a replay answers only the calls that were recorded.
#include "conf/file_source.hpp"

#include "conf/checks.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

using namespace esptun;
using namespace esptun::conf;
using namespace esptun::conf::test;

TEST_CASE("a recorded load keeps each stat and read with its facts, and replays to the same keys") {
	TempDir dir;
	const std::string key = hex_key(20, 6);
	dir.write("in.key", key + "\n", 0400);
	const auto path = dir.write("gw.toml", gateway_lines().set(34, "key_file = \"in.key\"").text(), 0600);
	RecordingFileSource recording(real_files());
	const Config first = load_config(path, Role::gateway, recording);
	const std::vector<FileRecord>& r = recording.records();
	REQUIRE(r.size() == 4); // the config: stat, read; the key file: stat, read
	CHECK(r[0].op == FileRecord::Op::stat);
	CHECK(r[1].op == FileRecord::Op::read);
	CHECK(r[1].path == path.string());
	CHECK((r[1].facts.mode & 07777) == 0600);
	CHECK(r[3].path == (dir.path() / "in.key").string());
	CHECK((r[3].facts.mode & 07777) == 0400);
	CHECK(r[3].data.view() == key + "\n");

	ReplayFileSource replay(recording.records());
	const Config again = load_config(path, Role::gateway, replay);
	CHECK(replay.used_up());
	CHECK(again.peers.at(1).in.enc_key == first.peers.at(1).in.enc_key);
	CHECK(again.peers.at(0).out.enc_key == first.peers.at(0).out.enc_key);
	CHECK(again.tunnel.mtu == first.tunnel.mtu);
}

TEST_CASE("a replay answers only the recorded calls, in order, and within the reader's limit") {
	std::vector<FileRecord> records(2);
	records[0].op = FileRecord::Op::stat;
	records[0].path = "a.key";
	records[0].facts = {0100600, 10};
	records[1].op = FileRecord::Op::read;
	records[1].path = "a.key";
	const std::string big(kKeyFileMax + 1, '0');
	records[1].data = SecretString(std::string_view(big));

	ReplayFileSource replay(records);
	FileFacts facts;
	SecretString out;
	CHECK(replay.read("a.key", 100, out, facts) == ReplayFileSource::kNotRecorded); // a stat comes first
	CHECK(replay.stat("b.key", facts) == ReplayFileSource::kNotRecorded);
	CHECK(replay.stat("a.key", facts).empty());
	CHECK(facts.size == 10);
	CHECK(replay.read("a.key", kKeyFileMax, out, facts) ==
	      "larger than " + std::to_string(kKeyFileMax) + " bytes");
	CHECK(out.empty());
	CHECK(replay.used_up());
	CHECK(replay.stat("a.key", facts) == ReplayFileSource::kNotRecorded);

	SecretString text;
	ReplayFileSource empty({});
	CHECK(read_key_file("a.key", text, empty) == std::string("cannot read key file a.key: ") +
	                                                 ReplayFileSource::kNotRecorded + "; check the path");
}
