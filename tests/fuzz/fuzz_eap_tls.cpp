// libFuzzer target for EAP-TLS (ike/eap_tls.hpp), the first code that sees
// a client's TLS bytes in IKE_AUTH with EAP, before it is authenticated.
// Per input, our server and our peer (P-256 certificates made once at
// start-up) hold a live conversation; at each message the next record of the
// input either lets the genuine message through or replaces it, so the
// fuzzer reaches every state of both roles with arbitrary type-data.
//
// Input: a sequence of records [ctl 1][length 2, big-endian][data, length bytes];
// ctl bit 0 clear: deliver the genuine message (the data is ignored); set:
// deliver the data instead. A short length takes what is left; when the
// records run out, the genuine messages go through.
//
// Traps when: an exception leaves a method; the conversation does not end
// within 2 * kMaxTlsRounds + 2 messages; the server reports success while the
// peer is not finished though no request was replaced (see converse()), or
// with an MSK that is not the finished peer's 64 bytes.
//
// Seeds: tests/fuzz/corpus/eap_tls/.
#include "ike/eap_tls.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::eap;

[[noreturn]] void fail(const char* what) {
	std::fprintf(stderr, "fuzz-eap-tls: %s\n", what);
	__builtin_trap();
}

void need(bool ok, const char* what) {
	if (!ok) fail(what);
}

/// A P-256 key and a certificate for it named @cn, with subjectAltName
/// @san (none when empty), signed by @issuer (self-signed when nullptr).
/// cert_test_util.hpp does this for the unit tests, but its checks are
/// doctest's, which a fuzzer cannot run.
struct Cert {
	EVP_PKEY* key = nullptr;
	X509* x = nullptr;
	Cert(const char* cn, const char* san, const Cert* issuer) {
		key = EVP_EC_gen("P-256");
		x = X509_new();
		need(key && x, "key generation");
		X509_set_version(x, 2);
		ASN1_INTEGER_set(X509_get_serialNumber(x), issuer ? 100 : 1);
		X509_gmtime_adj(X509_getm_notBefore(x), -3600);
		X509_gmtime_adj(X509_getm_notAfter(x), 86400);
		X509_NAME* name = X509_get_subject_name(x);
		X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
		                           reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
		X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->x) : name);
		need(X509_set_pubkey(x, key) == 1, "X509_set_pubkey");
		X509V3_CTX ctx;
		X509V3_set_ctx_nodb(&ctx);
		X509V3_set_ctx(&ctx, issuer ? issuer->x : x, x, nullptr, nullptr, 0);
		const auto add = [&](int nid, const char* value) {
			X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
			need(e && X509_add_ext(x, e, -1) == 1, "an extension");
			X509_EXTENSION_free(e);
		};
		add(NID_basic_constraints, issuer ? "CA:FALSE" : "critical,CA:TRUE");
		if (!issuer) add(NID_key_usage, "critical,keyCertSign,cRLSign");
		add(NID_subject_key_identifier, "hash");
		if (*san) add(NID_subject_alt_name, san);
		need(X509_sign(x, issuer ? issuer->key : key, EVP_sha256()) > 0, "X509_sign");
	}
	~Cert() {
		X509_free(x);
		EVP_PKEY_free(key);
	}
	Cert(const Cert&) = delete;
	Cert& operator=(const Cert&) = delete;
	std::string pem() const {
		return text([&](BIO* b) { return PEM_write_bio_X509(b, x); });
	}
	std::string key_pem() const {
		return text([&](BIO* b) {
			return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
		});
	}
	template <class Write> static std::string text(Write write) {
		BIO* b = BIO_new(BIO_s_mem());
		need(b && write(b) == 1, "PEM");
		char* data = nullptr;
		const long len = BIO_get_mem_data(b, &data);
		std::string out(data, size_t(len));
		BIO_free(b);
		return out;
	}
	std::shared_ptr<const Credentials> credentials() const {
		std::string err;
		auto c = Credentials::load(pem(), key_pem(), "", err);
		need(c != nullptr, "Credentials::load");
		return c;
	}
	std::shared_ptr<const TrustStore> trust() const {
		const std::string ca = pem();
		std::vector<std::string_view> cas{ca};
		std::string err;
		auto t = TrustStore::load(cas, {}, err);
		need(t != nullptr, "TrustStore::load");
		return t;
	}
};

struct Setup {
	Cert server_root{"Server Root", "", nullptr};
	Cert server{"gw.example.com", "DNS:gw.example.com", &server_root};
	Cert client_root{"Client Root", "", nullptr};
	Cert client{"alice", "email:alice@example.com", &client_root};
	std::shared_ptr<const Credentials> server_creds = server.credentials();
	std::shared_ptr<const Credentials> client_creds = client.credentials();
	std::shared_ptr<const TrustStore> server_ca = server_root.trust();
	std::shared_ptr<const TrustStore> client_ca = client_root.trust();
	Identity server_id = *parse_identity("gw.example.com");
};

/// Records - the input, one record per message of the conversation.
struct Records {
	std::span<const uint8_t> in;
	/// next() - replace the genuine message @m when the record says so; whether it did.
	bool next(std::vector<uint8_t>& m) {
		if (in.size() < 3) {
			in = {};
			return false;
		}
		const uint8_t ctl = in[0];
		const size_t len = std::min<size_t>(size_t(in[1]) << 8 | in[2], in.size() - 3);
		const std::span<const uint8_t> data = in.subspan(3, len);
		in = in.subspan(3 + len);
		if (!(ctl & 1)) return false;
		m.assign(data.begin(), data.end());
		return true;
	}
};

void converse(const Setup& s, std::span<const uint8_t> input) {
	auto server = make_tls_server(s.server_creds, s.client_ca);
	auto peer = make_tls_peer(s.client_creds, s.server_ca, s.server_id);
	Records records{input};
	std::vector<uint8_t> msg = server->start();
	bool request_replaced = false;
	for (size_t n = 0; n < kMaxTlsRounds + 1; n++) {
		request_replaced = records.next(msg) || request_replaced;
		const Step ps = peer->on_request(msg);
		if (ps.kind == Step::Kind::failure) return;
		if (ps.kind != Step::Kind::send) fail("the peer answered neither send nor failure");
		msg = ps.data;
		records.next(msg);
		const Step ss = server->on_response(msg);
		if (ss.kind == Step::Kind::failure) return;
		if (ss.kind == Step::Kind::success) {
			// A replaced request plays a lying server: its own success then
			// proves nothing about the peer (an acknowledgement of a fragment
			// or the peer's empty refusal looks like the final one), and the
			// peer, not finished, refuses EAP-Success. With genuine requests,
			// success means the peer finished with the same MSK.
			if (!peer->finished() && !request_replaced)
				fail("server success with genuine requests while the peer is not finished");
			if (!peer->finished()) return;
			if (server->msk().size() != 64 || !(server->msk() == declassify(peer->msk())))
				fail("server success with an MSK that is not the peer's");
			return;
		}
		msg = ss.data;
	}
	fail("the conversation does not end within the round bound");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	try {
		static const Setup setup;
		converse(setup, std::span<const uint8_t>(data, size));
	} catch (const std::exception& e) {
		std::fprintf(stderr, "fuzz-eap-tls: exception: %s\n", e.what());
		__builtin_trap();
	}
	return 0;
}
