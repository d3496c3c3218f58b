// EAP-TLS (ike/eap_tls.hpp): our server and our peer talk through the
// method interface with RSA and ECDSA certificates; a plain OpenSSL client
// with its own framing checks the server and computes the MSK independently
// (TLS-PRF over the master secret, RFC 5216 section 2.3); each refusal, the
// fragment rules and every malformed message end in failure. All
// certificates are made at test time (cert_test_util.hpp).
#include "ike/eap_tls.hpp"
#include "tests/unit/ike/cert_test_util.hpp"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <map>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::eap;
using namespace esptun::ike::test;

namespace {

constexpr uint8_t kL = 0x80, kM = 0x40, kS = 0x20;

CertSpec client_spec(const char* cn = "alice", long serial = 100, long not_after = 86400) {
	CertSpec s;
	s.cn = cn;
	s.email = {std::string(cn) + "@example.com"};
	s.serial = serial;
	s.not_after_s = not_after;
	return s;
}

/// The PKIs, made once: key generation is the slow part.
struct Pki {
	Chain server_ec{KeyKind::p256, {}, KeyKind::p256, "Server Root"};
	Chain client_ec{KeyKind::p256, client_spec(), KeyKind::p256, "Client Root"};
	Chain server_rsa{KeyKind::rsa2048, {}, KeyKind::rsa2048, "Server RSA Root"};
	Chain client_rsa{KeyKind::rsa2048, client_spec("bob"), KeyKind::rsa2048, "Client RSA Root"};
	Chain stranger{KeyKind::p256, client_spec("mallory"), KeyKind::p256, "Stranger Root"};
};
const Pki& pki() {
	static const Pki p;
	return p;
}

std::shared_ptr<const TrustStore> trust_of(const TestCert& root, std::vector<std::string> crls = {}) {
	const std::string ca = root.pem();
	std::vector<std::string_view> cas{ca};
	std::vector<std::string_view> crl_views(crls.begin(), crls.end());
	std::string err;
	auto t = TrustStore::load(cas, crl_views, err);
	INFO(err);
	REQUIRE(t);
	return t;
}

Identity id(const char* text) { return *parse_identity(text); }

/// What one conversation did.
struct Run {
	enum class End { server_success, server_failure, peer_failure, too_long } end = End::too_long;
	std::string error;                           ///< the failure's reason
	std::vector<std::string> refusals;           ///< errors carried by send steps
	std::vector<std::vector<uint8_t>> requests;  ///< server type-data, in order
	std::vector<std::vector<uint8_t>> responses; ///< peer type-data, in order
};

/// converse() - @s and @p until one side ends; @tamper may replace a message
/// (index into the combined sequence: request 0, response 0, request 1, ...).
template <class Tamper> Run converse(ServerMethod& s, PeerMethod& p, Tamper tamper) {
	Run r;
	std::vector<uint8_t> req = s.start();
	size_t n = 0;
	for (int i = 0; i < 200; i++) {
		tamper(n++, req);
		r.requests.push_back(req);
		Step ps = p.on_request(req);
		if (ps.kind == Step::Kind::failure) {
			r.end = Run::End::peer_failure;
			r.error = ps.error;
			return r;
		}
		REQUIRE(ps.kind == Step::Kind::send);
		if (!ps.error.empty()) r.refusals.push_back(ps.error);
		tamper(n++, ps.data);
		r.responses.push_back(ps.data);
		Step ss = s.on_response(ps.data);
		if (ss.kind == Step::Kind::success) {
			r.end = Run::End::server_success;
			return r;
		}
		if (ss.kind == Step::Kind::failure) {
			r.end = Run::End::server_failure;
			r.error = ss.error;
			return r;
		}
		if (!ss.error.empty()) r.refusals.push_back(ss.error);
		req = ss.data;
	}
	return r;
}
Run converse(ServerMethod& s, PeerMethod& p) {
	return converse(s, p, [](size_t, std::vector<uint8_t>&) {});
}

bool is_ack(const std::vector<uint8_t>& d) { return d == std::vector<uint8_t>{0}; }

/// flights() - the TLS messages in a sequence of type-data, reassembled,
/// checking the fragment rules on the way (L and the total on the first of
/// several, M on all but the last, at most kFragmentLen of TLS data each).
/// Returns the number of fragments per message.
std::vector<size_t> flights(const std::vector<std::vector<uint8_t>>& msgs) {
	std::vector<size_t> out;
	size_t frags = 0, total = 0;
	std::optional<uint32_t> declared;
	for (const auto& m : msgs) {
		REQUIRE(!m.empty());
		if (is_ack(m) || m[0] == kS) continue;
		size_t pos = 1;
		if (m[0] & kL) {
			CHECK(frags == 0);
			declared = uint32_t(m[1]) << 24 | uint32_t(m[2]) << 16 | uint32_t(m[3]) << 8 | m[4];
			pos = 5;
		}
		CHECK(m.size() - pos <= kFragmentLen);
		frags++;
		total += m.size() - pos;
		if (m[0] & kM) {
			CHECK(declared.has_value()); // the first fragment carried L
			CHECK(m.size() - pos == kFragmentLen);
			continue;
		}
		if (frags > 1) CHECK(declared == total);
		if (frags == 1) CHECK(!declared); // an unfragmented message goes without L
		out.push_back(frags);
		frags = 0;
		total = 0;
		declared.reset();
	}
	CHECK(frags == 0);
	return out;
}

struct Pair {
	std::unique_ptr<ServerMethod> server;
	std::unique_ptr<PeerMethod> peer;
};
Pair pair_of(const Chain& server, const Chain& client, std::optional<Identity> server_id = std::nullopt,
             std::vector<std::string> crls = {}) {
	return {make_tls_server(server.credentials(), trust_of(client.root, std::move(crls))),
	        make_tls_peer(client.credentials(), trust_of(server.root), std::move(server_id))};
}

// ---- a plain OpenSSL client with its own EAP-TLS framing -------------------

/**
 * RawClient - a TLS 1.2 client written straight against libssl, sharing no
 * code with eap_tls.cpp: it sends L (with the total) on every message, as
 * strongSwan does, and cuts at 700 bytes.
 */
struct RawClient {
	SSL_CTX* ctx = nullptr;
	SSL* ssl = nullptr;
	BIO *rbio = nullptr, *wbio = nullptr;
	std::vector<uint8_t> in, out;
	size_t off = 0;

	RawClient(const TestCert* ee, const TestCert* inter, const TestCert& server_root) {
		ctx = SSL_CTX_new(TLS_client_method());
		REQUIRE(ctx);
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
		if (ee) {
			REQUIRE(SSL_CTX_use_certificate(ctx, ee->x509.get()) == 1);
			REQUIRE(SSL_CTX_use_PrivateKey(ctx, ee->key.pkey.get()) == 1);
			if (inter) REQUIRE(SSL_CTX_add1_chain_cert(ctx, inter->x509.get()) == 1);
		}
		REQUIRE(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), server_root.x509.get()) == 1);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
		ssl = SSL_new(ctx);
		rbio = BIO_new(BIO_s_mem());
		wbio = BIO_new(BIO_s_mem());
		SSL_set_bio(ssl, rbio, wbio);
		SSL_set_connect_state(ssl);
	}
	~RawClient() {
		SSL_free(ssl);
		SSL_CTX_free(ctx);
	}

	std::vector<uint8_t> fragment() {
		const size_t n = std::min<size_t>(700, out.size() - off);
		std::vector<uint8_t> m{uint8_t(kL | (off + n < out.size() ? kM : 0)),
		                       uint8_t(out.size() >> 24), uint8_t(out.size() >> 16),
		                       uint8_t(out.size() >> 8), uint8_t(out.size())};
		m.insert(m.end(), out.begin() + long(off), out.begin() + long(off + n));
		off += n;
		return m;
	}
	void handshake() {
		SSL_do_handshake(ssl);
		char* p = nullptr;
		const long n = BIO_get_mem_data(wbio, &p);
		out.assign(p, p + std::max(n, 0L));
		(void)BIO_reset(wbio);
		off = 0;
	}
	/// The response to the server's type-data @d.
	std::vector<uint8_t> respond(const std::vector<uint8_t>& d) {
		REQUIRE(!d.empty());
		if (d[0] & kS) {
			handshake();
			return fragment();
		}
		if (off < out.size()) {
			REQUIRE(is_ack(d));
			return fragment();
		}
		const size_t pos = (d[0] & kL) ? 5 : 1;
		in.insert(in.end(), d.begin() + long(pos), d.end());
		if (d[0] & kM) return {0};
		BIO_write(rbio, in.data(), int(in.size()));
		in.clear();
		handshake();
		ERR_clear_error();
		return out.empty() ? std::vector<uint8_t>{0} : fragment();
	}
	/// RFC 5216 section 2.3, computed here with OpenSSL's TLS1-PRF KDF:
	/// PRF(master_secret, "client EAP encryption", client_random | server_random)[0..63].
	std::vector<uint8_t> msk() const {
		std::vector<uint8_t> master(48), cr(32), sr(32), seed;
		REQUIRE(SSL_SESSION_get_master_key(SSL_get_session(ssl), master.data(), master.size()) == 48);
		REQUIRE(SSL_get_client_random(ssl, cr.data(), cr.size()) == 32);
		REQUIRE(SSL_get_server_random(ssl, sr.data(), sr.size()) == 32);
		const std::string label = "client EAP encryption";
		seed.assign(label.begin(), label.end());
		seed.insert(seed.end(), cr.begin(), cr.end());
		seed.insert(seed.end(), sr.begin(), sr.end());
		const EVP_MD* md = SSL_CIPHER_get_handshake_digest(SSL_get_current_cipher(ssl));
		REQUIRE(md);
		EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "TLS1-PRF", nullptr);
		EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
		REQUIRE(kctx);
		std::string mdname = EVP_MD_get0_name(md);
		OSSL_PARAM params[] = {
		    OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, mdname.data(), 0),
		    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SECRET, master.data(), master.size()),
		    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SEED, seed.data(), seed.size()),
		    OSSL_PARAM_construct_end()};
		std::vector<uint8_t> key(64);
		REQUIRE(EVP_KDF_derive(kctx, key.data(), key.size(), params) == 1);
		EVP_KDF_CTX_free(kctx);
		EVP_KDF_free(kdf);
		return key;
	}
};

/// raw_converse() - our server against a RawClient; the server's final Step.
Step raw_converse(ServerMethod& s, RawClient& c) {
	std::vector<uint8_t> req = s.start();
	for (int i = 0; i < 100; i++) {
		Step st = s.on_response(c.respond(req));
		if (st.kind != Step::Kind::send) return st;
		req = st.data;
	}
	FAIL("the conversation does not end");
	return {};
}

} // namespace

TEST_CASE("eap-tls: our server and peer agree on a 64-byte MSK (ECDSA and RSA)") {
	for (bool rsa : {false, true}) {
		CAPTURE(rsa);
		const Chain& sc = rsa ? pki().server_rsa : pki().server_ec;
		const Chain& cc = rsa ? pki().client_rsa : pki().client_ec;
		Pair a = pair_of(sc, cc, id("gw.example.com"));
		CHECK(a.server->type() == type::tls);
		CHECK(a.peer->type() == type::tls);
		const Run r = converse(*a.server, *a.peer);
		INFO(r.error);
		REQUIRE(r.end == Run::End::server_success);
		CHECK(r.refusals.empty());
		CHECK(r.requests.front() == std::vector<uint8_t>{kS}); // the Start: S, nothing else
		CHECK(is_ack(r.responses.back())); // the peer's last word: an empty response
		CHECK(a.peer->finished());
		REQUIRE(a.server->msk().size() == 64);
		CHECK(a.server->msk() == declassify(a.peer->msk()));
		CHECK(a.server->authenticated_as() == cc.credentials()->subject());
		CHECK(a.server->authenticated_as() ==
		      (rsa ? "O=esptun test, CN=bob" : "O=esptun test, CN=alice"));

		// A second conversation between the same credentials: another MSK.
		Pair b = pair_of(sc, cc);
		REQUIRE(converse(*b.server, *b.peer).end == Run::End::server_success);
		CHECK(b.server->msk() == declassify(b.peer->msk()));
		CHECK_FALSE(b.server->msk() == declassify(a.server->msk()));
	}
}

TEST_CASE("eap-tls: the MSK is RFC 5216's TLS-PRF output, computed independently") {
	for (bool rsa : {false, true}) {
		CAPTURE(rsa);
		const Chain& sc = rsa ? pki().server_rsa : pki().server_ec;
		const Chain& cc = rsa ? pki().client_rsa : pki().client_ec;
		auto server = make_tls_server(sc.credentials(), trust_of(cc.root));
		RawClient c(&cc.ee, &cc.inter, sc.root);
		const Step st = raw_converse(*server, c);
		INFO(st.error);
		REQUIRE(st.kind == Step::Kind::success);
		CHECK(server->msk() == c.msk());
		CHECK(server->authenticated_as() == cc.credentials()->subject());
	}
}

TEST_CASE("eap-tls: an RSA chain is fragmented, each fragment acknowledged") {
	Pair a = pair_of(pki().server_rsa, pki().client_rsa, id("gw.example.com"));
	const Run r = converse(*a.server, *a.peer);
	INFO(r.error);
	REQUIRE(r.end == Run::End::server_success);
	// Server: Start; ServerHello..ServerHelloDone (two RSA certificates and an
	// RSA signature: three fragments); ChangeCipherSpec+Finished (one).
	const std::vector<size_t> server_flights = flights(r.requests);
	REQUIRE(server_flights.size() == 2);
	CHECK(server_flights[0] == 3);
	CHECK(server_flights[1] == 1);
	// Client: ClientHello (one); Certificate..Finished (two); the final ack.
	const std::vector<size_t> client_flights = flights(r.responses);
	REQUIRE(client_flights.size() == 2);
	CHECK(client_flights[0] == 1);
	CHECK(client_flights[1] == 2);
	// Every fragment but the last of a flight is acknowledged by the other side.
	const auto acks = [](const std::vector<std::vector<uint8_t>>& v) {
		return size_t(std::count_if(v.begin(), v.end(), is_ack));
	};
	CHECK(acks(r.responses) == (3 - 1) + 1); // the server's first flight, and the final ack
	CHECK(acks(r.requests) == 2 - 1);        // the client's second flight
	CHECK(r.requests.size() == 1 + 3 + 1 + 1);
}

TEST_CASE("eap-tls: the server takes strongSwan's framing (L on every message)") {
	// RawClient sends L and the total on unfragmented messages and on every
	// fragment: the server checks that they agree instead of refusing.
	auto server = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_rsa.root));
	RawClient c(&pki().client_rsa.ee, &pki().client_rsa.inter, pki().server_ec.root);
	const Step st = raw_converse(*server, c);
	INFO(st.error);
	CHECK(st.kind == Step::Kind::success);
}

TEST_CASE("eap-tls: the server refuses a client certificate it cannot trust") {
	SUBCASE("unknown CA") {
		Pair a = pair_of(pki().server_ec, pki().client_ec);
		a.server = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_ec.root));
		a.peer =
		    make_tls_peer(pki().stranger.credentials(), trust_of(pki().server_ec.root), std::nullopt);
		const Run r = converse(*a.server, *a.peer);
		CHECK(r.end == Run::End::server_failure);
		CHECK(r.error.find("client's certificate is refused") != std::string::npos);
		CHECK(r.error.find("unknown CA") != std::string::npos);
		// The server sent its alert (RFC 5216 2.1.3) and the peer answered it.
		REQUIRE(r.refusals.size() == 2);
		CHECK(r.refusals[1].find("unknown ca") != std::string::npos);
		CHECK_FALSE(a.peer->finished());
	}
	SUBCASE("revoked") {
		const Chain& cc = pki().client_ec;
		Pair a = pair_of(pki().server_ec, cc, std::nullopt,
		                 {cc.root.crl_pem({}), cc.inter.crl_pem({100})});
		const Run r = converse(*a.server, *a.peer);
		CHECK(r.end == Run::End::server_failure);
		CHECK(r.error.find("revoked") != std::string::npos);
	}
	SUBCASE("CRLs that do not list it: accepted") {
		const Chain& cc = pki().client_ec;
		Pair a =
		    pair_of(pki().server_ec, cc, std::nullopt, {cc.root.crl_pem({}), cc.inter.crl_pem({7})});
		const Run r = converse(*a.server, *a.peer);
		INFO(r.error);
		CHECK(r.end == Run::End::server_success);
	}
	SUBCASE("expired") {
		const Chain expired(KeyKind::p256, client_spec("old", 100, -60), KeyKind::p256,
		                    "Client Root");
		auto server = make_tls_server(pki().server_ec.credentials(), trust_of(expired.root));
		auto peer =
		    make_tls_peer(expired.credentials(), trust_of(pki().server_ec.root), std::nullopt);
		const Run r = converse(*server, *peer);
		CHECK(r.end == Run::End::server_failure);
		CHECK(r.error.find("expired") != std::string::npos);
	}
	SUBCASE("no client certificate") {
		auto server = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_ec.root));
		RawClient c(nullptr, nullptr, pki().server_ec.root);
		const Step st = raw_converse(*server, c);
		CHECK(st.kind == Step::Kind::failure);
		CHECK(st.error.find("certificate") != std::string::npos);
		CHECK(server->authenticated_as().empty());
	}
}

TEST_CASE("eap-tls: the peer refuses a server certificate") {
	SUBCASE("not for the expected identity") {
		Pair a = pair_of(pki().server_ec, pki().client_ec, id("other.example.com"));
		const Run r = converse(*a.server, *a.peer);
		CHECK(r.end == Run::End::server_failure);
		REQUIRE_FALSE(r.refusals.empty());
		CHECK(r.refusals[0].find("server's certificate is refused") != std::string::npos);
		CHECK(r.refusals[0].find("other.example.com") != std::string::npos);
		CHECK_FALSE(a.peer->finished());
	}
	SUBCASE("a DN identity matches the subject") {
		Pair a = pair_of(pki().server_ec, pki().client_ec, id("O=esptun test, CN=gw.example.com"));
		CHECK(converse(*a.server, *a.peer).end == Run::End::server_success);
	}
	SUBCASE("unknown CA") {
		auto server = make_tls_server(pki().stranger.credentials(), trust_of(pki().client_ec.root));
		auto peer = make_tls_peer(pki().client_ec.credentials(), trust_of(pki().server_ec.root),
		                          std::nullopt);
		const Run r = converse(*server, *peer);
		CHECK(r.end == Run::End::server_failure);
		REQUIRE_FALSE(r.refusals.empty());
		CHECK(r.refusals[0].find("unknown CA") != std::string::npos);
		CHECK_FALSE(peer->finished());
	}
}

TEST_CASE("eap-tls: a malformed message at any step ends the conversation") {
	const std::vector<std::vector<uint8_t>> bad = {
	    {},                              // no flags byte
	    {kL, 0, 0},                      // L without room for the length
	    {kL, 0, 1, 0, 1, 0x16},          // a declared length over kMaxTlsMessage
	    {kL, 0, 0, 0, 0},                // a declared length of 0
	    {kL, 0, 0, 0, 9, 0x16, 3, 3},    // less than declared, M clear
	    {kM},                            // a fragment without data
	    {kS},                            // Start in the middle (or in a response)
	    {0, 0x16, 3, 3, 0, 2, 1, 0},     // TLS data that is not a whole handshake message
	    {0x1f, 0x15, 3, 3, 0, 2, 2, 40}, // reserved bits and a fatal alert
	};
	// Both certificates RSA: every conversation has the same shape (ECDSA
	// signatures vary in length, and with them the number of fragments).
	size_t fired = 0;
	for (size_t at = 0;; at++) {
		bool reached = false;
		for (size_t k = 0; k < bad.size(); k++) {
			CAPTURE(at);
			CAPTURE(k);
			if (at == 0 && k == 6) continue; // the Start itself
			Pair a = pair_of(pki().server_rsa, pki().client_rsa);
			bool hit = false;
			const Run r = converse(*a.server, *a.peer, [&](size_t n, std::vector<uint8_t>& m) {
				if (n != at) return;
				m = bad[k];
				hit = true;
			});
			if (!hit) {
				CHECK(r.end == Run::End::server_success);
				continue;
			}
			reached = true;
			fired++;
			CHECK(r.end != Run::End::too_long);
			if (at % 2 == 1) {
				// A response: the server refuses it.
				CHECK(r.end == Run::End::server_failure);
				CHECK_FALSE(r.error.empty());
			} else {
				// A request: the peer gives up, or answers with its refusal.
				// (After our Finished went out, the server cannot tell that
				// empty answer from the final acknowledgement and may report
				// success; the peer, not finished, then refuses EAP-Success.)
				CHECK_FALSE(a.peer->finished());
				CHECK((r.end == Run::End::peer_failure || !r.refusals.empty()));
			}
		}
		if (!reached) break;
	}
	CHECK(fired >= 9 * 10);
}

TEST_CASE("eap-tls: a fragment flood ends within the bounds") {
	SUBCASE("server: endless one-byte fragments") {
		auto server = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_ec.root));
		server->start();
		Step st;
		size_t n = 0;
		for (; n < 1000; n++) {
			st = server->on_response(std::vector<uint8_t>{kM, 0x16});
			if (st.kind != Step::Kind::send) break;
			CHECK(st.data == std::vector<uint8_t>{0}); // acknowledged until the bound
		}
		CHECK(st.kind == Step::Kind::failure);
		CHECK(n == kMaxTlsRounds);
		CHECK(st.error.find("more than 64") != std::string::npos);
		// And it stays over.
		CHECK(server->on_response(std::vector<uint8_t>{0}).kind == Step::Kind::failure);
	}
	SUBCASE("server: large fragments past kMaxTlsMessage without L") {
		auto server = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_ec.root));
		server->start();
		std::vector<uint8_t> frag(16000, 0x16);
		frag[0] = kM;
		Step st;
		size_t n = 0;
		for (; n < 10; n++) {
			st = server->on_response(frag);
			if (st.kind != Step::Kind::send) break;
		}
		CHECK(st.kind == Step::Kind::failure);
		CHECK(n == kMaxTlsMessage / (frag.size() - 1));
		CHECK(st.error.find("longer than 65536") != std::string::npos);
	}
	SUBCASE("peer: endless one-byte fragments after the Start") {
		auto peer = make_tls_peer(pki().client_ec.credentials(), trust_of(pki().server_ec.root),
		                          std::nullopt);
		REQUIRE(peer->on_request(std::vector<uint8_t>{kS}).kind == Step::Kind::send);
		Step st;
		size_t n = 1;
		for (; n < 1000; n++) {
			st = peer->on_request(std::vector<uint8_t>{kM, 0x16});
			if (st.kind != Step::Kind::send) break;
		}
		CHECK(st.kind == Step::Kind::failure);
		CHECK(n == kMaxTlsRounds);
		CHECK_FALSE(peer->finished());
	}
}

TEST_CASE("eap-tls: the peer keeps to the order of the conversation") {
	auto fresh = [] {
		return make_tls_peer(pki().client_ec.credentials(), trust_of(pki().server_ec.root),
		                     std::nullopt);
	};
	SUBCASE("TLS data before the Start") {
		auto p = fresh();
		CHECK(p->on_request(std::vector<uint8_t>{0, 0x16, 3, 3}).kind == Step::Kind::failure);
	}
	SUBCASE("a Start with data") {
		auto p = fresh();
		CHECK(p->on_request(std::vector<uint8_t>{kS, 0x16}).kind == Step::Kind::failure);
	}
	SUBCASE("two Starts") {
		auto p = fresh();
		REQUIRE(p->on_request(std::vector<uint8_t>{kS}).kind == Step::Kind::send);
		const Step st = p->on_request(std::vector<uint8_t>{kS});
		CHECK(st.kind == Step::Kind::failure);
		CHECK(st.error == "a second EAP-TLS Start");
	}
	SUBCASE("a request after the handshake finished") {
		Pair a = pair_of(pki().server_ec, pki().client_ec);
		REQUIRE(converse(*a.server, *a.peer).end == Run::End::server_success);
		REQUIRE(a.peer->finished());
		CHECK(a.peer->on_request(std::vector<uint8_t>{0}).kind == Step::Kind::failure);
		CHECK(a.peer->finished()); // what was established stays
	}
	SUBCASE("a server response before its Start, and after success") {
		auto s = make_tls_server(pki().server_ec.credentials(), trust_of(pki().client_ec.root));
		CHECK(s->on_response(std::vector<uint8_t>{0}).kind == Step::Kind::failure);
		Pair a = pair_of(pki().server_ec, pki().client_ec);
		REQUIRE(converse(*a.server, *a.peer).end == Run::End::server_success);
		CHECK(a.server->on_response(std::vector<uint8_t>{0}).kind == Step::Kind::failure);
	}
}
