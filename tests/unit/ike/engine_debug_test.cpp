// The engine's debug lines: one per message with its exchange, message ID,
// SPIs and payload names, never a key, nonce or KE value; and the budget
// that keeps a flood of messages from turning into a flood of lines.
#include "tests/unit/ike/engine_test_util.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

bool any_line_has(const std::vector<std::string>& lines, std::string_view needle) {
	return std::any_of(lines.begin(), lines.end(),
	                   [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

std::string hex_of(std::span<const uint8_t> b) { return esptun::test::to_hex(b.data(), b.size()); }

} // namespace

TEST_CASE("LogBudget: a burst, then one line per refill period, and the rest counted") {
	const LogBudget::Clock::time_point t0{seconds(1000)};
	LogBudget b(3, seconds(1), seconds(10));
	for (int i = 0; i < 3; i++)
		CHECK(b.take(t0));
	for (int i = 0; i < 100; i++)
		CHECK_FALSE(b.take(t0 + milliseconds(i)));
	CHECK(b.held_back() == 100);
	CHECK(b.take(t0 + milliseconds(1000)));
	CHECK_FALSE(b.take(t0 + milliseconds(1500)));
	CHECK(b.take(t0 + milliseconds(2000)));
	// A quiet minute refills the bucket to its burst, never past it.
	const auto later = t0 + seconds(60);
	for (int i = 0; i < 3; i++)
		CHECK(b.take(later));
	CHECK_FALSE(b.take(later));
}

TEST_CASE("LogBudget: the held-back count is reported once per period, then starts again") {
	const LogBudget::Clock::time_point t0{seconds(1000)};
	LogBudget b(1, seconds(1), seconds(10));
	CHECK(b.take(t0));
	CHECK(b.report_due(t0) == 0); // nothing held back
	for (int i = 0; i < 50; i++)
		CHECK_FALSE(b.take(t0 + milliseconds(i)));
	CHECK(b.report_due(t0 + seconds(5)) == 0); // not yet: ten seconds after the first
	CHECK(b.report_due(t0 + seconds(10)) == 50);
	CHECK(b.report_due(t0 + seconds(11)) == 0);
	CHECK(b.held_back() == 0);
}

TEST_CASE("LogBudget: a flood of any length costs burst + elapsed/refill lines") {
	const LogBudget::Clock::time_point t0{seconds(1000)};
	LogBudget b(20, seconds(1), seconds(10));
	int written = 0, reports = 0;
	// 100 messages a millisecond for a minute.
	for (int ms = 0; ms < 60000; ms++) {
		const auto t = t0 + milliseconds(ms);
		for (int i = 0; i < 100; i++)
			written += b.take(t);
		reports += b.report_due(t) != 0;
	}
	CHECK(written <= 20 + 60);
	CHECK(reports <= 6);
}

TEST_CASE("with debug on, each IKE_SA_INIT and IKE_AUTH message is one line naming its payloads") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.ha.debug = p.hb.debug = true;
	p.a->start(p.now);
	// The secrets that must not appear: the PSK, and the initiator's nonce and
	// KE value as they left in the first message.
	REQUIRE(p.ha.out.size() == 1);
	Message init;
	REQUIRE(parse_message(p.ha.out.front().bytes, init));
	const std::string ni = hex_of(init.find<NoncePayload>()->data);
	const std::string ke = hex_of(init.find<KePayload>()->data);
	p.pump();
	REQUIRE(p.state(*p.a) == "established");

	const auto& la = p.ha.debug_logs;
	const auto& lb = p.hb.debug_logs;
	CHECK(any_line_has(la, "sent IKE_SA_INIT request #0"));
	CHECK(any_line_has(la, "[SA KE No N(NAT_DETECTION_SOURCE_IP) N(NAT_DETECTION_DESTINATION_IP) "
	                       "N(FRAG_SUP) N(REDIR_SUP)] to 10.0.0.2:4500"));
	CHECK(any_line_has(lb, "received IKE_SA_INIT request #0"));
	CHECK(any_line_has(lb, "sent IKE_SA_INIT response #0"));
	CHECK(any_line_has(la, "received IKE_SA_INIT response #0"));
	CHECK(any_line_has(la, "peer b: sent IKE_AUTH request #1"));
	// Before its AUTH is checked the responder does not know the peer yet.
	CHECK(any_line_has(lb, "IKE from 10.0.0.1:4500: received IKE_AUTH request #1"));
	CHECK(any_line_has(lb, "peer a: sent IKE_AUTH response #1"));
	CHECK(any_line_has(lb, "IDi"));
	CHECK(any_line_has(lb, "AUTH"));
	CHECK(any_line_has(lb, "TSi TSr"));
	CHECK(any_line_has(la, "peer b: received IKE_AUTH response #1"));
	CHECK(any_line_has(la, "bytes: ["));

	std::vector<std::string> secrets = {kPsk, ni, ke};
	for (const auto& [spi, k] : p.ha.installed)
		for (const SecretBytes* key : {&k.enc_in, &k.enc_out, &k.auth_in, &k.auth_out})
			if (!key->empty()) secrets.push_back(hex_of(*key));
	for (const auto* lines : {&la, &lb})
		for (const std::string& l : *lines)
			for (const std::string& s : secrets) {
				CAPTURE(l);
				CHECK(l.find(s) == std::string::npos);
			}
}

TEST_CASE("with debug off, the engine writes no debug lines") {
	Pair p(policy("b", "a.example", "b.example"), policy("a", "b.example", "a.example"));
	p.a->start(p.now);
	p.pump();
	REQUIRE(p.state(*p.a) == "established");
	CHECK(p.ha.debug_logs.empty());
	CHECK(p.hb.debug_logs.empty());
}

TEST_CASE("a flood of messages from unknown sources gives a bounded number of debug lines") {
	FakeHost h;
	h.self = ep("10.0.0.2:4500");
	h.debug = true;
	Engine e({policy("a", "b.example", "a.example")}, h);
	const Clock::time_point now = Clock::now();
	// Garbage, and well-formed messages for IKE SAs that do not exist.
	std::vector<uint8_t> junk(80, 0x5a);
	Header hd;
	hd.spi_i = 0x1122334455667788;
	hd.spi_r = 0x99aabbccddeeff00;
	hd.exchange = Exchange::informational;
	hd.flags = kFlagInitiator;
	hd.message_id = 7;
	const std::vector<uint8_t> stray = build_message(hd, {});
	for (int i = 0; i < 5000; i++) {
		Endpoint from = ep("192.0.2.1:4500");
		from.addr.bytes[3] = uint8_t(i);
		e.receive(Port::natt, from,
		          (i % 2) ? std::span<const uint8_t>(junk) : std::span<const uint8_t>(stray), now);
	}
	// 20 at once, one a second after that: the loop takes well under the
	// few seconds that would add more.
	CHECK(h.debug_logs.size() >= 20);
	CHECK(h.debug_logs.size() <= 25);
	CHECK(any_line_has(h.debug_logs, "dropped INFORMATIONAL request #7, SPIs "
	                                 "1122334455667788/99aabbccddeeff00, 28 bytes from 192.0.2."));
	CHECK(any_line_has(h.debug_logs, ": no IKE SA with these SPIs"));
}
