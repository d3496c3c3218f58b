// libFuzzer target: CERT, CERTREQ, IDi and signature AUTH payloads inside
// IKE_AUTH at a gateway that authenticates peers by certificate (RFC 7296
// sections 3.6-3.8, RFC 7427; ike/cert.cpp, ike/engine_auth.cpp). Per
// input, a fresh responder Engine with two certificate peers and a RawPeer
// (tests/unit/ike/raw_peer_test_util.hpp) that completes IKE_SA_INIT; then
// the input is cut into IKE_AUTH requests the peer seals in valid SK
// payloads, so every byte reaches certificate parsing, chain and identity
// checks and signature verification as a keyed peer's message.
//
// One peer ("self") expects the identity gw.example.com, which the trusted
// certificate (its own CA, tests/fuzz/fuzz_ike_pki.hpp) certifies: an input
// that sends that certificate gets past the chain and identity checks to
// the signature check. The other ("carol") expects carol.example, which no
// trusted certificate names. After each message:
//  - nothing escaped Engine::receive() or Engine::tick(), and
//    counters().internal_errors is 0;
//  - nothing is established and no CHILD_SA installed: the fuzzer holds no
//    private key the trust store would accept, so an IKE SA coming up would
//    be an authentication bypass.
//
// Input: byte 0 bit 0 picks the identity sent by default (0 gw.example.com,
// 1 carol.example); then items, each [ctl 1][length 2, big-endian][bytes]:
//   ctl & 7 = 0: a CERT payload whose body is the bytes as they are
//             1: a CERT payload, X.509 signature encoding, holding the bytes as DER
//             2: a CERT payload with the trusted certificate (bytes unused)
//             3: a CERTREQ payload holding the bytes
//             4: an AUTH payload, digital signature (method 14), holding the bytes
//             5: an AUTH payload, method bytes[0], holding the rest
//             6: an IDi payload of ID type bytes[0] holding the rest (replaces the default)
//             7: send what was gathered as one IKE_AUTH (with SA and TS
//                payloads, so that success would need nothing else)
//   ctl >> 4: after sending, advance the clock by that many times 5 s and tick.
// What is left at the end is sent as a last request.
//
// Seeds: tests/fuzz/corpus/ike_cert/, written by this binary:
//   fuzz-ike_cert -write_seeds=DIR
#define DOCTEST_CONFIG_DISABLE // the shared test helpers' checks are not this program's
#include "tests/fuzz/fuzz_ike_oracle.hpp"
#include "tests/fuzz/fuzz_ike_pki.hpp"
#include "tests/fuzz/fuzz_seeds.hpp"
#include "tests/unit/ike/raw_peer_test_util.hpp"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <cstring>
#include <string>

using namespace esptun;
using namespace esptun::ike;
using namespace esptun::ike::test;

namespace {

constexpr size_t kMaxItems = 32;
constexpr size_t kMaxRequests = 6;

/// The trusted certificate as DER, from the PEM.
std::vector<uint8_t> trusted_der() {
	std::vector<uint8_t> der;
	BIO* bio = BIO_new_mem_buf(fuzz::kCertPem, -1);
	X509* x = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
	unsigned char* out = nullptr;
	const int len = x ? i2d_X509(x, &out) : -1;
	if (len > 0) der.assign(out, out + len);
	OPENSSL_free(out);
	X509_free(x);
	BIO_free(bio);
	if (der.empty()) {
		std::fprintf(stderr, "fuzz-ike_cert: cannot read the test certificate\n");
		std::abort();
	}
	return der;
}

struct Material : fuzz::GatewayPki {
	std::vector<uint8_t> cert_der = trusted_der();
	Material() : GatewayPki("fuzz-ike_cert") {}
};

const Material& material() {
	static const Material m;
	return m;
}

PeerPolicy cert_peer(const char* name, const char* remote) {
	PeerPolicy p = policy(name, "gw.example.com", remote);
	p.psk.clear();
	p.credentials = material().credentials;
	p.trust = material().trust;
	p.allowed_ips = {*parse_prefix(std::string(name) == "self" ? "10.9.1.0/24" : "10.9.2.0/24")};
	return p;
}

struct Bench {
	FakeHost host;
	std::unique_ptr<Engine> gw;
	Clock::time_point now = Clock::time_point{} + std::chrono::hours(1000);
	RawPeer m;

	explicit Bench(bool carol) {
		host.self = ep("10.0.0.2:4500");
		gw = std::make_unique<Engine>(std::vector<PeerPolicy>{cert_peer("self", "gw.example.com"),
		                                                      cert_peer("carol", "carol.example")},
		                              host);
		m.t = {gw.get(), &host, &now};
		m.psk.clear();
		m.id = *parse_identity(carol ? "carol.example" : "gw.example.com");
	}

	void check() const { fuzz::check_no_bypass(*gw, host, now, "without the certificate's key"); }

	/// One IKE_AUTH: IDi (@idi, or our identity), the gathered payloads,
	/// then an ESP offer and traffic selectors.
	void send(const std::vector<Payload>& gathered, const std::optional<std::vector<uint8_t>>& idi) {
		std::vector<Payload> msg;
		if (idi)
			msg.push_back(IdPayload{true, IdType(idi->empty() ? 0 : (*idi)[0]),
			                        idi->empty()
			                            ? std::vector<uint8_t>{}
			                            : std::vector<uint8_t>(idi->begin() + 1, idi->end())});
		else
			msg.push_back(IdPayload{true, m.id.type, m.id.data});
		msg.insert(msg.end(), gathered.begin(), gathered.end());
		msg.push_back(esp_offer(default_esp_proposals(), 0xa0000001, ChildExchange::ike_auth));
		msg.push_back(TsPayload{true, {selector_of(*parse_prefix("10.9.1.0/24"))}});
		msg.push_back(TsPayload{false, {selector_of(*parse_prefix("0.0.0.0/0"))}});
		(void)m.request(Exchange::ike_auth, msg);
		check();
	}
};

/// Plausible IKE_AUTH requests: the trusted certificate with a signature
/// of each shape, a certificate that is not DER, a CERTREQ alone.
void write_seeds(const std::string& dir) {
	// RFC 7427 AUTH data: the AlgorithmIdentifier's length, the
	// AlgorithmIdentifier (ecdsa-with-SHA256), then the signature.
	std::vector<uint8_t> ecdsa_auth{12,   0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86,
	                                0x48, 0xce, 0x3d, 0x04, 0x03, 0x02};
	const std::vector<uint8_t> sig{0x30, 0x44, 0x02, 0x20};
	ecdsa_auth.insert(ecdsa_auth.end(), sig.begin(), sig.end());
	ecdsa_auth.resize(ecdsa_auth.size() + 34, 0x5a);
	std::vector<uint8_t> rsa_auth{1}; // method 1: RSA PKCS#1 v1.5 over SHA-1
	rsa_auth.resize(257, 0x33);
	std::vector<uint8_t> certreq{4};
	certreq.resize(21, 0x11); // one SHA-1 key hash
	std::vector<uint8_t> der = material().cert_der;
	der[der.size() / 2] ^= 0x40; // the trusted certificate with a flipped bit
	using fuzz::frame;
	const std::vector<fuzz::Seed> seeds = {
	    {"trusted_ecdsa", {{0}, frame(2), frame(3, certreq), frame(4, ecdsa_auth)}},
	    {"trusted_rsa_method", {{0}, frame(2), frame(5, rsa_auth)}},
	    {"flipped_cert", {{0}, frame(1, der), frame(4, ecdsa_auth)}},
	    {"not_der", {{0}, frame(1, {0x30, 0x82, 0xff, 0xff, 1, 2, 3}), frame(4, ecdsa_auth)}},
	    {"carol_trusted",
	     {{1}, frame(2), frame(4, ecdsa_auth), frame(0x17), frame(2), frame(4, ecdsa_auth)}},
	    {"certreq_only", {{0}, frame(3, certreq), frame(4, ecdsa_auth)}},
	    {"fqdn_idi",
	     {{1},
	      frame(6, {2, 'g', 'w', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'}),
	      frame(2),
	      frame(4, ecdsa_auth)}},
	};
	fuzz::write_seed_files(dir, seeds);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
	fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
	(void)material();
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	if (size < 1) return 0;
	Bench b((data[0] & 1) != 0);
	try {
		if (!b.m.init()) { // IKE_SA_INIT itself must work every time
			for (const std::string& line : b.host.logs)
				std::fprintf(stderr, "engine: %s\n", line.c_str());
			std::fprintf(stderr, "IKE_SA_INIT got no answer\n");
			std::abort();
		}
		b.check();
		std::vector<Payload> gathered;
		std::optional<std::vector<uint8_t>> idi;
		size_t off = 1, requests = 0;
		for (size_t n = 0; n < kMaxItems && requests < kMaxRequests && off + 3 <= size; n++) {
			const uint8_t ctl = data[off];
			const size_t len =
			    std::min<size_t>(size_t(data[off + 1]) << 8 | data[off + 2], size - off - 3);
			const std::vector<uint8_t> bytes(data + off + 3, data + off + 3 + len);
			off += 3 + len;
			switch (ctl & 7) {
			case 0:
				gathered.push_back(RawPayload{PayloadType::cert, false, bytes});
				break;
			case 1:
				gathered.push_back(RawPayload{PayloadType::cert, false, cert_body(bytes)});
				break;
			case 2:
				gathered.push_back(
				    RawPayload{PayloadType::cert, false, cert_body(material().cert_der)});
				break;
			case 3:
				gathered.push_back(RawPayload{PayloadType::certreq, false, bytes});
				break;
			case 4:
				gathered.push_back(AuthPayload{AuthMethod::digital_signature, bytes});
				break;
			case 5:
				gathered.push_back(AuthPayload{
				    bytes.empty() ? AuthMethod::rsa_sig : AuthMethod(bytes[0]),
				    bytes.empty() ? bytes
				                  : std::vector<uint8_t>(bytes.begin() + 1, bytes.end())});
				break;
			case 6:
				idi = bytes;
				break;
			case 7:
				b.send(gathered, idi);
				gathered.clear();
				idi.reset();
				requests++;
				if (ctl >> 4) {
					b.now += std::chrono::seconds(5 * (ctl >> 4));
					b.gw->tick(b.now);
					b.check();
				}
				break;
			}
		}
		if ((!gathered.empty() || idi) && requests < kMaxRequests) b.send(gathered, idi);
	} catch (const std::exception& e) {
		std::fprintf(stderr, "exception escaped the engine: %s\n", e.what());
		std::abort();
	}
	return 0;
}
