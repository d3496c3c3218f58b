// service/config_reader: a load through the root helper gives what a direct
// load_config() gives (the Config, or the ConfigError word for word), works
// after the endpoint has dropped to an unprivileged user under its seccomp
// filter, follows edits of the files, and refuses a malformed answer.
#include "service/config_reader.hpp"

#include "base/bytes.hpp"
#include "platform/privileges.hpp"
#include "tests/unit/conf/conf_test_util.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <pwd.h>
#include <regex>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace esptun::service {
namespace {

using conf::Config;
using conf::ConfigError;
using conf::Role;
using conf::test::TempDir;

const std::filesystem::path kExamples =
    std::filesystem::path(ESPTUN_TEST_DATA_DIR).parent_path().parent_path() / "docs" / "examples";

std::string read_text(const std::filesystem::path& p) {
	std::ifstream in(p);
	return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string hex(std::span<const uint8_t> b) {
	static const char digits[] = "0123456789abcdef";
	std::string s;
	for (uint8_t v : b) {
		s.push_back(digits[v >> 4]);
		s.push_back(digits[v & 15]);
	}
	return s;
}

/// describe() - the fields of @c that reload acts on, as text to compare
/// (test keys only: printing them on a failure gives nothing away).
std::string describe(const Config& c) {
	std::ostringstream o;
	const conf::TunnelConfig& t = c.tunnel;
	o << "source " << c.source << " role " << int(c.role) << " if " << t.interface << " listen "
	  << to_string(t.listen) << " mtu " << t.mtu << " user " << t.user << " drop " << t.drop_privileges
	  << " local_id " << t.local_id << " route_all " << t.route_all << " ike_port " << t.ike_port << "\n";
	for (const IpPrefix& p : t.addresses)
		o << " address " << to_string(p);
	for (const IpPrefix& p : t.address_pool)
		o << " pool " << to_string(p);
	for (const IpAddress& a : t.dns)
		o << " dns " << to_string(a);
	o << "\n";
	for (const conf::PeerConfig& p : c.peers) {
		o << "peer " << p.name << " line " << p.line << " endpoint "
		  << (p.endpoint ? to_string(*p.endpoint) : "-") << " cipher " << int(p.cipher) << " esn "
		  << p.esn << " window " << p.replay_window;
		for (const IpPrefix& a : p.allowed_ips)
			o << " allowed " << to_string(a);
		o << " out " << p.out.spi << ":" << hex(p.out.enc_key) << ":" << hex(p.out.auth_key);
		o << " in " << p.in.spi << ":" << hex(p.in.enc_key) << ":" << hex(p.in.auth_key);
		if (p.ike) {
			const conf::IkePeerConfig& k = *p.ike;
			o << " psk " << hex(k.psk) << " ids " << k.local_id << "/" << k.remote_id << " dpd "
			  << k.dpd_interval << " rekey " << k.rekey_time << "/" << k.ike_rekey_time << "/"
			  << k.rekey_bytes << "/" << k.rekey_packets << " initiate " << k.initiate;
			for (const auto& s : k.ike_proposals)
				o << " ike " << ike::ike_suite_name(s);
			for (const auto& s : k.esp_proposals)
				o << " esp " << ike::esp_suite_name(s);
			for (const IpPrefix& ts : k.local_ts)
				o << " ts " << to_string(ts);
		}
		o << "\n";
	}
	return o.str();
}

/// What loading through @reader gives: describe() of the Config or the error's what().
std::string outcome(ConfigReader& reader) {
	try {
		return describe(reader.load());
	} catch (const ConfigError& e) {
		return std::string("error: ") + e.what() + " (line " + std::to_string(e.line()) + ")";
	}
}

/// The same for a direct load_config().
std::string direct_outcome(const std::filesystem::path& path, Role role) {
	try {
		return describe(conf::load_config(path, role));
	} catch (const ConfigError& e) {
		return std::string("error: ") + e.what() + " (line " + std::to_string(e.line()) + ")";
	}
}

/// A reader with a helper: these tests need root, as the endpoint has it before the drop.
std::unique_ptr<ConfigReader> start_helper(const std::filesystem::path& path, Role role) {
	REQUIRE_MESSAGE(::geteuid() == 0,
	                "the config reader's helper keeps root: run the service tests as root");
	auto reader = ConfigReader::start(path, role);
	REQUIRE(reader->has_helper());
	return reader;
}

/// Checks that the helper and a direct load agree on @path, and returns the outcome.
std::string check_same(const std::filesystem::path& path, Role role) {
	auto reader = start_helper(path, role);
	const std::string direct = direct_outcome(path, role);
	const std::string through = outcome(*reader);
	CHECK(through == direct);
	return through;
}

/**
 * with_key_files() - @text with every inline key and PSK moved into a file
 * of its own in @dir (mode 0600), named relative to the config's folder.
 */
std::string with_key_files(const std::string& text, const TempDir& dir) {
	static const std::regex inline_secret(R"(^(\s*)(psk|key|enc_key|auth_key)\s*=\s*"([^"]*)\"(.*)$)");
	std::istringstream in(text);
	std::string out, line;
	int n = 0;
	while (std::getline(in, line)) {
		std::smatch m;
		if (std::regex_match(line, m, inline_secret)) {
			const std::string name = "secret" + std::to_string(++n) + ".key";
			dir.write(name, m[3].str() + "\n", 0600);
			line = m[1].str() + m[2].str() + "_file = \"" + name + "\"" + m[4].str();
		}
		out += line + "\n";
	}
	REQUIRE(n > 0);
	return out;
}

struct Example {
	const char* file;
	Role role;
};
constexpr Example kExampleFiles[] = {{"gateway.toml", Role::gateway},
                                     {"client.toml", Role::client},
                                     {"ike-gateway.toml", Role::gateway},
                                     {"ike-client.toml", Role::client}};

TEST_CASE("ConfigReader: each example loads through the helper as it loads directly") {
	for (const Example& ex : kExampleFiles) {
		INFO(ex.file);
		TempDir dir;
		const auto path = dir.write(ex.file, read_text(kExamples / ex.file), 0600);
		const std::string got = check_same(path, ex.role);
		CHECK(got.rfind("error", 0) != 0);
		CHECK(got.find("peer ") != std::string::npos);
	}
}

TEST_CASE("ConfigReader: the examples with their keys and PSKs in key files load the same") {
	for (const Example& ex : kExampleFiles) {
		INFO(ex.file);
		TempDir dir;
		const std::string text = with_key_files(read_text(kExamples / ex.file), dir);
		const auto path = dir.write(ex.file, text, 0600);
		const std::string got = check_same(path, ex.role);
		CHECK(got.rfind("error", 0) != 0);
		// The same keys as the inline original.
		TempDir inline_dir;
		const auto original = inline_dir.write(ex.file, read_text(kExamples / ex.file), 0600);
		std::string want = direct_outcome(original, ex.role);
		want.replace(want.find(original.string()), original.string().size(), path.string());
		CHECK(got == want);
	}
}

TEST_CASE("ConfigReader: a key file of mode 0644 gives the direct load's message, at its line") {
	TempDir dir;
	dir.write("out.key", conf::test::hex_key(16, 42), 0644);
	const auto path = dir.write(
	    "gw.toml", conf::test::gateway_lines().set(18, "enc_key_file = \"out.key\"").text(), 0600);
	const std::string got = check_same(path, Role::gateway);
	CHECK(got.rfind("error: " + path.string() + ":18: key file ", 0) == 0);
	CHECK(got.find("has mode 0644") != std::string::npos);
}

TEST_CASE("ConfigReader: syntax errors, missing key files and a loose config give the same messages") {
	TempDir dir;
	SUBCASE("a TOML syntax error keeps its line number") {
		const auto path =
		    dir.write("gw.toml", conf::test::gateway_lines().set(5, "mtu = = 1").text(), 0600);
		const std::string got = check_same(path, Role::gateway);
		CHECK(got.rfind("error: " + path.string() + ":5: ", 0) == 0);
		CHECK(got.find("(line 5)") != std::string::npos);
	}
	SUBCASE("a key file that is not there") {
		const auto path = dir.write(
		    "gw.toml", conf::test::gateway_lines().set(31, "key_file = \"gone.key\"").text(), 0600);
		const std::string got = check_same(path, Role::gateway);
		CHECK(got.find(":31: cannot read key file") != std::string::npos);
		CHECK(got.find("No such file or directory") != std::string::npos);
	}
	SUBCASE("a config with inline keys that others may read") {
		const auto path = dir.write("gw.toml", conf::test::gateway_lines().text(), 0640);
		const std::string got = check_same(path, Role::gateway);
		CHECK(got.find("config " + path.string() + " has mode 0640") != std::string::npos);
	}
	SUBCASE("no config at all, and a folder in its place") {
		CHECK(check_same(dir.path() / "none.toml", Role::gateway).find("No such file") !=
		      std::string::npos);
		CHECK(check_same(dir.path(), Role::gateway).find("not a regular file") != std::string::npos);
	}
	SUBCASE("the wrong role") {
		const auto path = dir.write("gw.toml", conf::test::gateway_lines().text(), 0600);
		CHECK(check_same(path, Role::client).rfind("error: ", 0) == 0);
	}
}

TEST_CASE("ConfigReader: the helper answers again after the config and a key file change") {
	TempDir dir;
	const std::string key1 = conf::test::hex_key(20, 1), key2 = conf::test::hex_key(20, 2);
	dir.write("in.key", key1, 0600);
	const auto path =
	    dir.write("gw.toml", conf::test::gateway_lines().set(34, "key_file = \"in.key\"").text(), 0600);
	auto reader = start_helper(path, Role::gateway);
	Config first = reader->load();
	CHECK(first.tunnel.mtu == 1400);
	CHECK(hex(first.peers[1].in.enc_key) == key1.substr(2));

	dir.write("in.key", key2, 0600);
	dir.write("gw.toml",
	          conf::test::gateway_lines().set(34, "key_file = \"in.key\"").set(5, "mtu = 1380").text(),
	          0600);
	Config second = reader->load();
	CHECK(second.tunnel.mtu == 1380);
	CHECK(hex(second.peers[1].in.enc_key) == key2.substr(2));

	// A broken edit is reported, and the next good one loads again.
	dir.write("gw.toml", "[tunnel\n", 0600);
	CHECK(outcome(*reader).rfind("error: " + path.string() + ":1: ", 0) == 0);
	dir.write("gw.toml", conf::test::gateway_lines().text(), 0600);
	CHECK(reader->load().tunnel.mtu == 1400);
}

TEST_CASE("ConfigReader: direct() has no helper and calls load_config() itself") {
	TempDir dir;
	const auto path = dir.write("gw.toml", conf::test::gateway_lines().text(), 0600);
	auto reader = ConfigReader::direct(path, Role::gateway);
	CHECK_FALSE(reader->has_helper());
	CHECK(outcome(*reader) == direct_outcome(path, Role::gateway));
}

/**
 * As the gateway runs: start the reader as root, then drop to `nobody`
 * with CAP_NET_ADMIN, no_new_privs and the seccomp allow-list
 * (platform::drop_to_user(), install_syscall_filter()), all in a child so
 * the test process keeps root. The child cannot open the 0600 config
 * itself, but loads it through the helper; a system call the filter lacks
 * would kill it with SIGSYS.
 */
TEST_CASE("ConfigReader: after the privilege drop and seccomp, the helper still reads a 0600 root config") {
	REQUIRE_MESSAGE(
	    ::geteuid() == 0,
	    "this test starts the helper as root and drops to nobody: run the service tests as root");
	const passwd* nobody = ::getpwnam("nobody");
	REQUIRE_MESSAGE(nobody != nullptr, "no user 'nobody' to drop to");
	const platform::RunAs who{"nobody", nobody->pw_uid, nobody->pw_gid};
	TempDir dir;
	// Others may enter the folder: the file's own mode 0600 is what stops nobody.
	REQUIRE(::chmod(dir.path().c_str(), 0711) == 0);
	dir.write("in.key", conf::test::hex_key(20, 6), 0600);
	const auto path =
	    dir.write("gw.toml", conf::test::gateway_lines().set(34, "key_file = \"in.key\"").text(), 0600);
	const std::string want = direct_outcome(path, Role::gateway);
	REQUIRE(want.rfind("error", 0) != 0);

	int report[2];
	REQUIRE(::pipe(report) == 0);
	const pid_t child = ::fork();
	REQUIRE(child >= 0);
	if (child == 0) {
		// No doctest macros here: the result goes to the parent as text.
		::close(report[0]);
		std::string result;
		try {
			auto reader = ConfigReader::start(path, Role::gateway);
			platform::drop_to_user(who);
			platform::install_syscall_filter();
			const std::string mine = direct_outcome(path, Role::gateway);
			if (mine.find("Permission denied") == std::string::npos)
				result = "the dropped process read the config itself: " + mine;
			else if (const std::string got = outcome(*reader); got != want)
				result = "through the helper: " + got;
			else
				result = "ok";
			reader.reset();
		} catch (const std::exception& e) {
			result = std::string("exception: ") + e.what();
		}
		[[maybe_unused]] ssize_t n = ::write(report[1], result.data(), result.size());
		::_exit(0);
	}
	::close(report[1]);
	std::string result;
	char buf[4096];
	for (ssize_t n; (n = ::read(report[0], buf, sizeof buf)) > 0;)
		result.append(buf, size_t(n));
	::close(report[0]);
	int status = 0;
	REQUIRE(::waitpid(child, &status, 0) == child);
	INFO("child status ", status, (WIFSIGNALED(status) ? " (killed by signal; SIGSYS = 31)" : ""));
	CHECK(WIFEXITED(status));
	CHECK(result == "ok");
}

// The decoder of the helper's answer, fed what a broken or hostile helper could send.

std::vector<conf::FileRecord> sample_records() {
	std::vector<conf::FileRecord> r(3);
	r[0].op = conf::FileRecord::Op::stat;
	r[0].path = "/etc/esptun/gw.toml";
	r[0].facts = {0100600, 1234, 0};
	r[1].op = conf::FileRecord::Op::read;
	r[1].path = "/etc/esptun/gw.toml";
	r[1].facts = {0100600, 5, 1000};
	r[1].data = SecretString(std::string_view("[tun]"));
	r[2].op = conf::FileRecord::Op::list; // a ca_dir
	r[2].path = "/etc/esptun/ca";
	r[2].data = SecretString(std::string_view("root.pem\nsub.crt\n"));
	return r;
}

std::span<const uint8_t> body_of(const SecretBytes& frame) {
	return std::span<const uint8_t>(frame).subspan(4);
}

std::string decode_error(std::span<const uint8_t> body) {
	try {
		config_answer::decode_body(body, "gw.toml");
	} catch (const ConfigError& e) {
		return e.what();
	}
	return "(decoded)";
}

TEST_CASE("config_answer: records survive encode and decode; an error comes back as the same ConfigError") {
	const SecretBytes frame = config_answer::encode_records(sample_records());
	std::array<uint8_t, 4> header{frame[0], frame[1], frame[2], frame[3]};
	CHECK(config_answer::body_length(header, "gw.toml") == frame.size() - 4);
	const auto back = config_answer::decode_body(body_of(frame), "gw.toml");
	REQUIRE(back.size() == 3);
	CHECK(back[0].op == conf::FileRecord::Op::stat);
	CHECK(back[0].facts.mode == 0100600);
	CHECK(back[0].facts.size == 1234);
	CHECK(back[1].path == "/etc/esptun/gw.toml");
	CHECK(back[1].data.view() == "[tun]");
	CHECK(back[1].facts.uid == 1000); // the loader checks a private key's owner
	CHECK(back[2].op == conf::FileRecord::Op::list);
	CHECK(back[2].data.view() == "root.pem\nsub.crt\n");

	const SecretBytes err = config_answer::encode_error(ConfigError("/etc/esptun/gw.toml", 7, "bad mtu"));
	try {
		config_answer::decode_body(body_of(err), "gw.toml");
		FAIL("no error");
	} catch (const ConfigError& e) {
		CHECK(std::string(e.what()) == "/etc/esptun/gw.toml:7: bad mtu");
		CHECK(e.line() == 7);
	}
}

TEST_CASE("config_answer: every truncation of an answer is refused as malformed") {
	for (const SecretBytes& frame : {config_answer::encode_records(sample_records()),
	                                 config_answer::encode_error(ConfigError("gw.toml", 3, "x"))}) {
		const auto body = body_of(frame);
		for (size_t len = 0; len < body.size(); len++) {
			INFO("length ", len);
			CHECK(decode_error(body.first(len)).find("malformed answer from the config reader") !=
			      std::string::npos);
		}
	}
}

TEST_CASE("config_answer: oversized lengths, unknown kinds and trailing bytes are refused") {
	std::array<uint8_t, 4> header{};
	CHECK_THROWS_WITH_AS(config_answer::body_length(header, "gw.toml"), doctest::Contains("empty"),
	                     ConfigError);
	store_be32(header.data(), uint32_t(config_answer::kMaxAnswer + 1));
	CHECK_THROWS_WITH_AS(config_answer::body_length(header, "gw.toml"), doctest::Contains("longer than"),
	                     ConfigError);
	store_be32(header.data(), 0xffffffff);
	CHECK_THROWS_AS(config_answer::body_length(header, "gw.toml"), ConfigError);

	SecretBytes frame = config_answer::encode_records(sample_records());
	SecretBytes body(frame.begin() + 4, frame.end());
	body.push_back(0);
	CHECK(decode_error(body).find("bytes after the end") != std::string::npos);

	body.assign(frame.begin() + 4, frame.end());
	body[0] = 'X';
	CHECK(decode_error(body).find("unknown kind") != std::string::npos);

	// A record count past the limit, a path length past PATH_MAX, a file past 16 MiB.
	body.assign(frame.begin() + 4, frame.end());
	store_be32(&body[1], uint32_t(config_answer::kMaxRecords + 1));
	CHECK(decode_error(body).find("too many files") != std::string::npos);
	body.assign(frame.begin() + 4, frame.end());
	store_be32(&body[6], 0xfffffff0);
	CHECK(decode_error(body).find("path too long") != std::string::npos);
	body.assign(frame.begin() + 4, frame.end());
	body[5] = 9; // the first record's operation
	CHECK(decode_error(body).find("unknown file operation") != std::string::npos);
}

TEST_CASE("config_answer: a file length past the loader's limit is refused before any allocation") {
	std::vector<conf::FileRecord> one(1);
	one[0].op = conf::FileRecord::Op::read;
	one[0].path = "k";
	one[0].data = SecretString(std::string_view("0x00"));
	SecretBytes frame = config_answer::encode_records(one);
	SecretBytes body(frame.begin() + 4, frame.end());
	// kind, count, op, path (4 + 1), error (4 + 0), mode, size (8), uid: the data length follows.
	const size_t data_len_at = 1 + 4 + 1 + 5 + 4 + 4 + 8 + 4;
	REQUIRE(load_be32(&body[data_len_at]) == 4);
	store_be32(&body[data_len_at], uint32_t(conf::kMaxConfigSize + 1));
	CHECK(decode_error(body).find("file too long") != std::string::npos);
}

} // namespace
} // namespace esptun::service
