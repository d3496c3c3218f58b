// ike/eap_mschapv2.cpp: the RFC 2759 and RFC 3079 known answers, then whole
// conversations between our server and our peer through the method
// interface (eap.hpp), then every malformed or out-of-order message the
// other side could send.
#include "ike/eap_mschapv2.hpp"

#include "base/bytes.hpp"
#include "tests/unit/support/bytes_test_util.hpp"

#include <doctest/doctest.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <map>
#include <stdexcept>
#include <string>

using namespace esptun;
using namespace esptun::ike::eap;
using esptun::test::Bytes;
using esptun::test::hex;
using esptun::test::to_hex;

namespace {

// RFC 2759 section 9.2.
constexpr std::string_view kUser = "User";
constexpr std::string_view kPassword = "clientPass";
const mschapv2::Challenge kAuthChallenge = [] {
	mschapv2::Challenge c{};
	const Bytes b = hex("5B5D7C7D7B3F2F3E3C2C602132262628");
	std::copy(b.begin(), b.end(), c.begin());
	return c;
}();
const mschapv2::Challenge kPeerChallenge = [] {
	mschapv2::Challenge c{};
	const Bytes b = hex("21402324255E262A28295F2B3A337C7E");
	std::copy(b.begin(), b.end(), c.begin());
	return c;
}();

/// A server and a peer over one users table, stepped by hand.
struct Conversation {
	std::map<std::string, std::string, std::less<>> users{{"alice", "s3cret pässword"},
	                                                      {"bob", "hunter2"}};
	std::vector<std::string> looked_up;
	std::unique_ptr<ServerMethod> server;
	std::unique_ptr<PeerMethod> peer;

	explicit Conversation(std::string user = "alice", std::string password = "s3cret pässword") {
		server = make_mschapv2_server(
		    [this](std::string_view u) -> std::optional<SecretBytes> {
			    looked_up.emplace_back(u);
			    const auto it = users.find(u);
			    if (it == users.end()) return std::nullopt;
			    return nt_password_hash(it->second);
		    },
		    "esptun-gw");
		peer = make_mschapv2_peer(std::move(user), SecretString(std::string_view(password)));
	}
};

/// A copy of @b with MS-Length set to its size (after a test changed it).
Bytes fix_length(Bytes b) {
	if (b.size() >= 4) store_be16(&b[2], uint16_t(b.size()));
	return b;
}

} // namespace

TEST_SUITE_BEGIN("eap");

TEST_CASE("MSCHAPv2: RFC 2759 section 9.2 vectors") {
	const SecretBytes hash = nt_password_hash(kPassword);
	CHECK(to_hex(hash) == "44ebba8d5312b8d611474411f56989ae");
	CHECK(to_hex(mschapv2::hash_nt_password_hash(hash)) == "41c00c584bd2d91c4017a2a12fa59f3f");
	CHECK(to_hex(mschapv2::challenge_hash(kPeerChallenge, kAuthChallenge, kUser)) == "d02e4386bce91226");
	const auto nt = mschapv2::generate_nt_response(kAuthChallenge, kPeerChallenge, kUser, hash);
	CHECK(to_hex(nt) == "82309ecd8d708b5ea08faa3981cd83544233114a3d85d6df");
	CHECK(to_hex(mschapv2::authenticator_response(hash, nt, kPeerChallenge, kAuthChallenge, kUser)) ==
	      "407a5589115fd0d6209f510fe9c04566932cda56");
	// The domain is not hashed (RFC 2759 section 4): "CORP\User" answers the same.
	CHECK(mschapv2::generate_nt_response(kAuthChallenge, kPeerChallenge, "CORP\\User", hash) == nt);
	CHECK(mschapv2::strip_domain("CORP\\User") == "User");
	CHECK(mschapv2::strip_domain("User") == "User");
	CHECK(mschapv2::strip_domain("A\\B\\C") == "B\\C");
}

TEST_CASE("MSCHAPv2: RFC 3079 section 3.5.3 master and 128-bit start keys, and the MSK built from them") {
	const SecretBytes hash = nt_password_hash(kPassword);
	const Bytes nt = hex("82309ECD8D708B5EA08FAA3981CD83544233114A3D85D6DF");
	mschapv2::NtResponse ntr{};
	std::copy(nt.begin(), nt.end(), ntr.begin());
	const SecretBytes master = mschapv2::master_key(mschapv2::hash_nt_password_hash(hash), ntr);
	CHECK(to_hex(master) == "fdece3717a8c838cb388e527ae3cdd31");
	// RFC 3079's SendStartKey128 is GetAsymmetricStartKey(..., IsSend, IsServer).
	const SecretBytes server_send = mschapv2::asymmetric_start_key(master, true, true);
	CHECK(to_hex(server_send) == "8b7cdc149b993a1ba118cb153f56dccb");
	// Mirrored: the server's send key is the client's receive key and the
	// other way round.
	CHECK(mschapv2::asymmetric_start_key(master, false, false) == server_send);
	const SecretBytes server_recv = mschapv2::asymmetric_start_key(master, false, true);
	CHECK(mschapv2::asymmetric_start_key(master, true, false) == server_recv);
	CHECK(server_recv != server_send);

	// MSK = MasterReceiveKey | MasterSendKey | 32 zeros on the server (what
	// strongSwan's eap_mschapv2 builds), the same bytes on the peer.
	const SecretBytes msk = mschapv2::msk(hash, ntr, true);
	REQUIRE(msk.size() == 64);
	CHECK(to_hex(std::span(msk).first(16)) == to_hex(server_recv));
	CHECK(to_hex(std::span(msk).subspan(16, 16)) == "8b7cdc149b993a1ba118cb153f56dccb");
	CHECK(to_hex(std::span(msk).last(32)) == std::string(64, '0'));
	CHECK(mschapv2::msk(hash, ntr, false) == msk);
}

TEST_CASE("MSCHAPv2: DES through 3DES with one key is single DES, weak keys included") {
	// An all-zero NT hash makes three all-zero (weak) DES keys; DES under the
	// zero key of the zero block is the classic 8CA64DE9C1B123A7.
	const std::array<uint8_t, 8> zero_block{};
	const Bytes zero_hash(16, 0);
	const auto r = mschapv2::challenge_response(zero_block, zero_hash);
	CHECK(to_hex(r) == "8ca64de9c1b123a78ca64de9c1b123a78ca64de9c1b123a7");
	CHECK_THROWS_AS(mschapv2::challenge_response(zero_block, Bytes(15, 0)), std::invalid_argument);
}

TEST_CASE("MSCHAPv2: MD4 comes from a private context; the default one is left as it was") {
	EVP_MD* before = EVP_MD_fetch(nullptr, "MD4", nullptr);
	const bool had = before != nullptr;
	EVP_MD_free(before);
	ERR_clear_error();
	(void)nt_password_hash("x");
	EVP_MD* after = EVP_MD_fetch(nullptr, "MD4", nullptr);
	CHECK((after != nullptr) == had);
	EVP_MD_free(after);
	ERR_clear_error();
}

TEST_CASE("MSCHAPv2: the NT hash takes UTF-8 through UTF-16LE and refuses what is not UTF-8") {
	CHECK(nt_password_hash("") != nt_password_hash("a"));
	CHECK_NOTHROW(nt_password_hash("p\xc3\xa4ss \xe2\x82\xac \xf0\x9f\x94\x91")); // ä, €, a non-BMP key
	CHECK(nt_password_hash("\xc3\xa4") != nt_password_hash("\xc3\x84"));
	for (std::string_view bad : {"\x80", "a\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
	                             "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xff", "\xc3\x28"}) {
		CAPTURE(to_hex(std::span(reinterpret_cast<const uint8_t*>(bad.data()), bad.size())));
		CHECK_THROWS_AS(nt_password_hash(bad), std::invalid_argument);
	}
}

TEST_CASE("MSCHAPv2: a whole conversation, both sides end with the same 64-byte MSK") {
	Conversation c;
	CHECK(c.server->type() == type::mschapv2);
	CHECK(c.peer->type() == type::mschapv2);
	const Bytes challenge = c.server->start();
	REQUIRE(challenge.size() == 4 + 1 + 16 + 9);
	CHECK(challenge[0] == 1);
	CHECK(load_be16(&challenge[2]) == challenge.size());
	CHECK(std::string(challenge.begin() + 21, challenge.end()) == "esptun-gw");

	const Step response = c.peer->on_request(challenge);
	REQUIRE(response.kind == Step::Kind::send);
	CHECK(response.error.empty());
	CHECK(response.data[0] == 2);
	CHECK(response.data[1] == challenge[1]); // MS-CHAPv2-ID echoed
	CHECK(c.peer->msk().empty());            // nothing before the server proved itself

	const Step success = c.server->on_response(response.data);
	REQUIRE(success.kind == Step::Kind::send);
	CHECK(success.error.empty());
	const std::string text(success.data.begin() + 4, success.data.end());
	CHECK(text.substr(0, 2) == "S=");
	CHECK(text.substr(42, 3) == " M=");
	CHECK(c.server->msk().empty()); // not before the peer's ack

	const Step ack = c.peer->on_request(success.data);
	REQUIRE(ack.kind == Step::Kind::send);
	CHECK(ack.data == Bytes{3});
	CHECK(c.peer->finished());

	const Step done = c.server->on_response(ack.data);
	CHECK(done.kind == Step::Kind::success);
	CHECK(c.server->authenticated_as() == "alice");
	REQUIRE(c.server->msk().size() == 64);
	CHECK(c.server->msk() == declassify(c.peer->msk()));
	CHECK(to_hex(std::span(c.server->msk()).last(32)) == std::string(64, '0'));
	CHECK(c.looked_up == std::vector<std::string>{"alice"});

	// Nothing after completion.
	const Step again = c.server->on_response(ack.data);
	CHECK(again.kind == Step::Kind::failure);
	CHECK(again.error.find("after the method completed") != std::string::npos);
	CHECK(c.peer->on_request(success.data).kind == Step::Kind::failure);
	// ...and a stray message does not take the result away.
	CHECK(c.server->msk().size() == 64);
	CHECK(c.server->authenticated_as() == "alice");
	CHECK(c.peer->finished());
	CHECK(c.peer->msk().size() == 64);
}

TEST_CASE("MSCHAPv2: a Windows-style DOMAIN\\user is looked up and hashed without the domain") {
	Conversation c("CORP\\bob", "hunter2");
	const Step r = c.peer->on_request(c.server->start());
	CHECK(std::string(r.data.end() - 8, r.data.end()) == "CORP\\bob"); // sent whole
	const Step s = c.server->on_response(r.data);
	REQUIRE(s.kind == Step::Kind::send);
	REQUIRE(c.peer->on_request(s.data).kind == Step::Kind::send);
	CHECK(c.server->on_response(Bytes{3}).kind == Step::Kind::success);
	CHECK(c.server->authenticated_as() == "bob");
	CHECK(c.looked_up == std::vector<std::string>{"bob"});
}

TEST_CASE("MSCHAPv2: a wrong password gets E=691, the peer acks and learns it was refused") {
	Conversation c("alice", "not her password");
	const Step r = c.peer->on_request(c.server->start());
	const Step f = c.server->on_response(r.data);
	REQUIRE(f.kind == Step::Kind::send);
	CHECK(f.error == "EAP-MSCHAPv2: wrong password for user 'alice'");
	CHECK(f.data[0] == 4);
	const std::string text(f.data.begin() + 4, f.data.end());
	CHECK(text.substr(0, 12) == "E=691 R=0 C=");
	CHECK(text.substr(44) == " V=3 M=Authentication failed");
	CHECK(c.server->msk().empty());

	const Step ack = c.peer->on_request(f.data);
	REQUIRE(ack.kind == Step::Kind::send);
	CHECK(ack.data == Bytes{4});
	CHECK(ack.error == "EAP-MSCHAPv2: the server refused authentication (E=691): Authentication failed");
	CHECK_FALSE(c.peer->finished());
	CHECK(c.peer->msk().empty());

	const Step end = c.server->on_response(ack.data);
	CHECK(end.kind == Step::Kind::failure);
	CHECK(end.error == "EAP-MSCHAPv2: wrong password for user 'alice'");
	CHECK(c.server->authenticated_as().empty());
	CHECK(c.server->msk().empty());
}

TEST_CASE("MSCHAPv2: an unknown user gets the same Failure request, the log reason differs") {
	Conversation c("mallory", "whatever");
	const Step r = c.peer->on_request(c.server->start());
	const Step f = c.server->on_response(r.data);
	REQUIRE(f.kind == Step::Kind::send);
	CHECK(f.error == "EAP-MSCHAPv2: user 'mallory' is not in the users file");
	CHECK(std::string(f.data.begin() + 4, f.data.begin() + 16) == "E=691 R=0 C=");
	// A peer that does not ack (strongSwan just stops) still ends in failure.
	const Step end = c.server->on_response(Bytes{2});
	CHECK(end.kind == Step::Kind::failure);
	CHECK(end.error == "EAP-MSCHAPv2: user 'mallory' is not in the users file");
}

TEST_CASE("MSCHAPv2: user names in reasons are made printable") {
	Conversation c(std::string("ev\x01l\nname"), "x");
	const Step f = c.server->on_response(c.peer->on_request(c.server->start()).data);
	CHECK(f.error == "EAP-MSCHAPv2: user 'ev?l?name' is not in the users file");
}

TEST_CASE("MSCHAPv2: the peer refuses a server that does not know the password") {
	Conversation c;
	const Step r = c.peer->on_request(c.server->start());
	// The Success request a server without the password would have to guess.
	Bytes forged = {3, r.data[1], 0, 0};
	const std::string text = "S=" + std::string(40, '0') + " M=hi";
	forged.insert(forged.end(), text.begin(), text.end());
	const Step p = c.peer->on_request(fix_length(forged));
	CHECK(p.kind == Step::Kind::failure);
	CHECK(p.error.find("authenticator response is wrong") != std::string::npos);
	CHECK_FALSE(c.peer->finished());
	CHECK(c.peer->msk().empty());
}

TEST_CASE("MSCHAPv2: the peer takes strongSwan's Success text with a trailing NUL and lower-case hex") {
	Conversation c;
	const Step r = c.peer->on_request(c.server->start());
	const Step s = c.server->on_response(r.data);
	REQUIRE(s.kind == Step::Kind::send);
	Bytes ss = s.data;
	// "S=<hex> M=Welcome2strongSwan\0" as strongSwan 5.9 sends it.
	ss.resize(4 + 42);
	for (size_t i = 6; i < ss.size(); i++)
		ss[i] = uint8_t(std::tolower(ss[i]));
	const std::string tail = " M=Welcome2strongSwan";
	ss.insert(ss.end(), tail.begin(), tail.end());
	ss.push_back(0);
	const Step ack = c.peer->on_request(fix_length(ss));
	CHECK(ack.kind == Step::Kind::send);
	CHECK(c.peer->finished());
}

TEST_CASE("MSCHAPv2: the peer acks strongSwan's retryable failure without retrying") {
	Conversation c;
	const Step r = c.peer->on_request(c.server->start());
	Bytes f = {4, r.data[1], 0, 0};
	const std::string text = "E=691 R=1 C=" + std::string(32, 'A');
	f.insert(f.end(), text.begin(), text.end());
	const Step ack = c.peer->on_request(fix_length(f));
	REQUIRE(ack.kind == Step::Kind::send);
	CHECK(ack.data == Bytes{4});
	CHECK(ack.error == "EAP-MSCHAPv2: the server refused authentication (E=691)");
	CHECK(c.peer->on_request(c.server->start()).kind == Step::Kind::failure);
}

TEST_CASE("MSCHAPv2: every truncation of every message fails on the other side, never throws") {
	{
		Conversation c;
		const Bytes challenge = c.server->start();
		for (size_t n = 0; n < challenge.size(); n++) {
			Conversation fresh;
			CAPTURE(n);
			Step s;
			CHECK_NOTHROW(s = fresh.peer->on_request(std::span(challenge).first(n)));
			CHECK(s.kind == Step::Kind::failure);
			CHECK_FALSE(s.error.empty());
		}
	}
	Conversation c;
	const Bytes challenge = c.server->start();
	const Bytes response = c.peer->on_request(challenge).data;
	for (size_t n = 0; n < response.size(); n++) {
		CAPTURE(n);
		Conversation fresh;
		(void)fresh.server->start();
		Step s;
		CHECK_NOTHROW(s = fresh.server->on_response(std::span(response).first(n)));
		CHECK(s.kind == Step::Kind::failure);
		CHECK_FALSE(s.error.empty());
	}
	const Bytes success = c.server->on_response(response).data;
	REQUIRE(success[0] == 3);
	for (size_t n = 0; n < success.size(); n++) {
		CAPTURE(n);
		Conversation fresh;
		const Bytes ch = fresh.server->start();
		(void)fresh.peer->on_request(ch);
		Bytes cut(success.begin(), success.begin() + std::ptrdiff_t(n));
		if (cut.size() >= 2) cut[1] = ch[1]; // the right MS-CHAPv2-ID, so only the length is wrong
		const Step s = fresh.peer->on_request(cut);
		CHECK(s.kind == Step::Kind::failure);
		// And with MS-Length made to fit: a short S= string is still refused.
		Conversation fresh2;
		const Bytes ch2 = fresh2.server->start();
		(void)fresh2.peer->on_request(ch2);
		if (cut.size() >= 4) {
			cut[1] = ch2[1];
			CHECK(fresh2.peer->on_request(fix_length(cut)).kind == Step::Kind::failure);
		}
	}
	// The server's last step: only the one-byte Success response will do.
	for (const Bytes& bad : {Bytes{}, Bytes{3, 0}, Bytes{4}, Bytes{2}, Bytes{3, 1, 0, 5, 0}}) {
		Conversation fresh;
		const Bytes r = fresh.peer->on_request(fresh.server->start()).data;
		REQUIRE(fresh.server->on_response(r).data[0] == 3);
		const Step s = fresh.server->on_response(bad);
		CHECK(s.kind == Step::Kind::failure);
		CHECK(fresh.server->msk().empty());
		CHECK(fresh.server->authenticated_as().empty());
	}
}

TEST_CASE("MSCHAPv2: the server refuses Responses of the wrong shape") {
	Conversation c;
	const Bytes challenge = c.server->start();
	const Bytes good = c.peer->on_request(challenge).data;
	auto try_response = [](auto&& mutate) {
		Conversation fresh;
		const Bytes ch = fresh.server->start();
		Bytes r = fresh.peer->on_request(ch).data;
		mutate(r);
		return fresh.server->on_response(r);
	};
	CHECK(try_response([](Bytes& r) { r[0] = 1; }).kind == Step::Kind::failure);  // OpCode
	CHECK(try_response([](Bytes& r) { r[0] = 7; }).kind == Step::Kind::failure);  // Change-Password
	CHECK(try_response([](Bytes& r) { r[1] ^= 1; }).kind == Step::Kind::failure); // MS-CHAPv2-ID
	CHECK(try_response([](Bytes& r) { r[3] ^= 1; }).kind == Step::Kind::failure); // MS-Length
	CHECK(try_response([](Bytes& r) { r[4] = 48; }).kind == Step::Kind::failure); // Value-Size
	// A changed NT-Response is a wrong password: the Failure request, with the reason.
	const Step wrong = try_response([](Bytes& r) { r[30] ^= 1; });
	CHECK(wrong.kind == Step::Kind::send);
	CHECK(wrong.data.at(0) == 4);
	CHECK(wrong.error == "EAP-MSCHAPv2: wrong password for user 'alice'");
	// No name at all, and a name past 255 bytes.
	CHECK(try_response([](Bytes& r) { r = fix_length(Bytes(r.begin(), r.begin() + 54)); }).error ==
	      "EAP-MSCHAPv2: Response without a user name");
	CHECK(try_response([](Bytes& r) {
		      r.resize(54 + 256, 'a');
		      r = fix_length(r);
	      }).error == "EAP-MSCHAPv2: user name longer than 255 bytes");
	// The peer giving up at once.
	CHECK(try_response([](Bytes& r) { r = Bytes{4}; }).error.find("gave up") != std::string::npos);
	// A response before start().
	auto server = make_mschapv2_server([](std::string_view) { return std::nullopt; }, "gw");
	CHECK(server->on_response(good).kind == Step::Kind::failure);
	// Success on the untouched Response still works (the lambda is not broken).
	CHECK(try_response([](Bytes&) {}).kind == Step::Kind::send);
}

TEST_CASE("MSCHAPv2: the peer refuses Challenges of the wrong shape and requests out of order") {
	auto try_challenge = [](auto&& mutate) {
		Conversation fresh;
		Bytes ch = fresh.server->start();
		mutate(ch);
		return fresh.peer->on_request(ch);
	};
	CHECK(try_challenge([](Bytes&) {}).kind == Step::Kind::send);
	CHECK(try_challenge([](Bytes& b) { b[0] = 3; }).kind == Step::Kind::failure);
	CHECK(try_challenge([](Bytes& b) { b[4] = 8; }).kind == Step::Kind::failure);
	CHECK(try_challenge([](Bytes& b) { b[2] = 1; }).kind == Step::Kind::failure);
	CHECK(try_challenge([](Bytes& b) {
		      b.resize(21 + 256, 'n');
		      b = fix_length(b);
	      }).error == "EAP-MSCHAPv2: server name longer than 255 bytes");
	// A Success request with another MS-CHAPv2-ID, and a second Challenge.
	Conversation d;
	const Bytes ch2 = d.server->start();
	const Bytes r2 = d.peer->on_request(ch2).data;
	Bytes s2 = d.server->on_response(r2).data;
	s2[1] ^= 0x80;
	CHECK(d.peer->on_request(s2).error == "EAP-MSCHAPv2: request for another MS-CHAPv2-ID");
	Conversation e;
	const Bytes ch3 = e.server->start();
	(void)e.peer->on_request(ch3);
	CHECK(e.peer->on_request(ch3).kind == Step::Kind::failure);
}

TEST_CASE("MSCHAPv2: factories refuse bad names and passwords") {
	CHECK_THROWS_AS(make_mschapv2_peer("", SecretString(std::string_view("x"))), std::invalid_argument);
	CHECK_THROWS_AS(make_mschapv2_peer(std::string(256, 'u'), SecretString(std::string_view("x"))),
	                std::invalid_argument);
	CHECK_NOTHROW(make_mschapv2_peer(std::string(255, 'u'), SecretString(std::string_view("x"))));
	CHECK_THROWS_AS(make_mschapv2_peer("u", SecretString(std::string_view("\xff"))),
	                std::invalid_argument);
	auto none = [](std::string_view) -> std::optional<SecretBytes> { return std::nullopt; };
	CHECK_THROWS_AS(make_mschapv2_server(none, ""), std::invalid_argument);
	CHECK_THROWS_AS(make_mschapv2_server(none, std::string(256, 's')), std::invalid_argument);
	CHECK_THROWS_AS(make_mschapv2_server(nullptr, "gw"), std::invalid_argument);
}

TEST_SUITE_END();
