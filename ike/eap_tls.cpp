// EAP-TLS (RFC 5216) over OpenSSL's libssl with memory BIOs: see
// eap_tls.hpp for the conversation. In this file, in the order a message
// meets them:
//   1. parse_type_data(): the flags byte and the optional TLS message length;
//   2. Incoming: reassembly of fragments, bounded by kMaxTlsMessage;
//   3. Tls: one SSL object, fed a whole flight, asked for its answer;
//   4. Outgoing: our answer cut into kFragmentLen fragments;
//   5. TlsServer / TlsPeer: the state of one conversation in each role.
// Nothing the other side sends throws out of a method: every malformed,
// unexpected or refused message is a Step::Kind::failure with a reason.
#include "ike/eap_tls.hpp"

#include "base/bytes.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <array>
#include <climits>
#include <stdexcept>
#include <string>
#include <utility>

namespace esptun::ike::eap {

namespace {

// RFC 5216 section 3.2: the flags byte.
constexpr uint8_t kFlagLength = 0x80, kFlagMore = 0x40, kFlagStart = 0x20;
/// The label of RFC 5216 section 2.3 (TLS 1.2 and earlier).
constexpr std::string_view kMskLabel = "client EAP encryption";
constexpr size_t kMskLen = 64;

Step failure(std::string why) { return Step{Step::Kind::failure, {}, std::move(why)}; }
Step send(std::vector<uint8_t> data) { return Step{Step::Kind::send, std::move(data), {}}; }
/// An acknowledgement (section 2.1.5): flags 0, nothing else.
Step ack() { return send({0}); }

// ---- 1. type-data -----------------------------------------------------------

struct TypeData {
	uint8_t flags = 0;
	std::optional<uint32_t> length; ///< when L
	std::span<const uint8_t> tls;
	/// An empty message: what acknowledges a fragment (or ends the handshake).
	bool is_ack() const noexcept {
		return !(flags & (kFlagLength | kFlagMore | kFlagStart)) && tls.empty();
	}
};

/// parse_type_data() - nullopt (and @err) when @d is empty or L is set without four length bytes.
std::optional<TypeData> parse_type_data(std::span<const uint8_t> d, std::string& err) {
	if (d.empty()) {
		err = "an EAP-TLS message without its flags byte";
		return std::nullopt;
	}
	TypeData t;
	t.flags = d[0];
	size_t pos = 1;
	if (t.flags & kFlagLength) {
		if (d.size() < 5) {
			err = "an EAP-TLS message with the L flag and no room for the length";
			return std::nullopt;
		}
		t.length = load_be32(d.data() + 1);
		pos = 5;
	}
	t.tls = d.subspan(pos);
	return t;
}

// ---- 2. reassembly ----------------------------------------------------------

/// Incoming - the fragments of one TLS message (a flight) from the other side.
class Incoming {
public:
	/**
	 * add() - take one fragment
	 * @t:        the parsed type-data (not an acknowledgement)
	 * @complete: set when this fragment ends the message (M clear)
	 * Return: why the fragment is refused, or nullopt.
	 */
	std::optional<std::string> add(const TypeData& t, bool& complete) {
		complete = false;
		if (t.length) {
			if (*t.length > kMaxTlsMessage)
				return "a declared TLS message length of " + std::to_string(*t.length) +
				       " bytes (at most " + std::to_string(kMaxTlsMessage) + " are taken)";
			if (*t.length == 0) return "a declared TLS message length of 0";
			if (declared_ && *declared_ != *t.length)
				return "a TLS message length that changed between fragments";
			if (!declared_ && !buf_.empty())
				return "the L flag on a later fragment but not on the first";
			declared_ = *t.length;
		}
		if (t.tls.empty()) return "an EAP-TLS fragment without TLS data";
		if (t.tls.size() > kMaxTlsMessage - buf_.size())
			return "a TLS message longer than " + std::to_string(kMaxTlsMessage) + " bytes";
		if (declared_ && buf_.size() + t.tls.size() > *declared_)
			return "more TLS data than the declared length of " + std::to_string(*declared_) +
			       " bytes";
		buf_.insert(buf_.end(), t.tls.begin(), t.tls.end());
		if (t.flags & kFlagMore) return std::nullopt;
		if (declared_ && buf_.size() != *declared_)
			return "a TLS message of " + std::to_string(buf_.size()) + " bytes where " +
			       std::to_string(*declared_) + " were declared";
		complete = true;
		return std::nullopt;
	}
	/// take() - the whole message; empties the buffer for the next one.
	std::vector<uint8_t> take() {
		declared_.reset();
		return std::exchange(buf_, {});
	}

private:
	std::vector<uint8_t> buf_;
	std::optional<uint32_t> declared_;
};

// ---- 3. the TLS engine ------------------------------------------------------

struct SslFree {
	void operator()(SSL_CTX* p) const noexcept { SSL_CTX_free(p); }
	void operator()(SSL* p) const noexcept { SSL_free(p); }
	void operator()(X509* p) const noexcept { X509_free(p); }
	void operator()(X509_STORE* p) const noexcept { X509_STORE_free(p); }
	void operator()(BIO* p) const noexcept { BIO_free(p); }
};
template <class T> using Ssl = std::unique_ptr<T, SslFree>;

[[noreturn]] void setup_failed(const char* what) { openssl_util::fail(what, "EAP-TLS"); }

/// The reason of OpenSSL's oldest queued error ("tlsv1 alert unknown ca"), and an empty queue.
std::string openssl_reason() {
	std::string out;
	if (const unsigned long e = ERR_get_error()) {
		const char* r = ERR_reason_error_string(e);
		out = r ? r : "error " + std::to_string(ERR_GET_REASON(e));
	}
	ERR_clear_error();
	return out.empty() ? "unknown error" : out;
}

/**
 * Tls - one TLS 1.2 handshake, server or client, over two memory BIOs.
 * Its SSL_CTX is its own (the store, the chain and the verify callback
 * belong to this conversation alone).
 */
class Tls {
public:
	enum class Result { more, done, failed };

	Tls(bool server, const Credentials& ours, const TrustStore& trust, std::optional<Identity> expect)
	    : server_(server), expect_(std::move(expect)) {
		ctx_.reset(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
		if (!ctx_) setup_failed("SSL_CTX_new");
		SSL_CTX* c = ctx_.get();
		if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1 ||
		    SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION) != 1)
			setup_failed("setting the TLS version");
		SSL_CTX_set_security_level(c, 2);
		SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
		// strongSwan's TLS server (5.9) sends no renegotiation_info (RFC
		// 5746), which OpenSSL 3 refuses by default. What that extension
		// guards against is a renegotiation spliced onto another session;
		// here none happens at all (SSL_OP_NO_RENEGOTIATION), so a server
		// without it is let in.
		if (!server) SSL_CTX_set_options(c, SSL_OP_LEGACY_SERVER_CONNECT);
		SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
		if (SSL_CTX_use_certificate(c, static_cast<X509*>(CertAccess::cert(ours))) != 1)
			setup_failed("using our certificate");
		if (SSL_CTX_use_PrivateKey(c, static_cast<EVP_PKEY*>(CertAccess::key(ours))) != 1 ||
		    SSL_CTX_check_private_key(c) != 1)
			setup_failed("using our private key");
		const auto& ders = ours.certs_der();
		for (size_t i = 1; i < ders.size(); i++) {
			const unsigned char* p = ders[i].data();
			Ssl<X509> x(d2i_X509(nullptr, &p, long(ders[i].size())));
			if (!x || SSL_CTX_add1_chain_cert(c, x.get()) != 1) setup_failed("adding our chain");
		}
		X509_STORE* store = static_cast<X509_STORE*>(CertAccess::new_store(trust));
		if (!store) setup_failed("X509_STORE_new");
		SSL_CTX_set_cert_store(c, store); // the context owns it now
		SSL_CTX_set_verify(
		    c, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER,
		    &Tls::verify_cb);
		SSL_CTX_set_verify_depth(c, int(kMaxPeerCerts));
		ssl_.reset(SSL_new(c));
		if (!ssl_) setup_failed("SSL_new");
		BIO* rbio = BIO_new(BIO_s_mem());
		BIO* wbio = BIO_new(BIO_s_mem());
		if (!rbio || !wbio) {
			BIO_free(rbio);
			BIO_free(wbio);
			setup_failed("BIO_new");
		}
		SSL_set_bio(ssl_.get(), rbio, wbio); // the SSL owns both
		rbio_ = rbio;
		wbio_ = wbio;
		SSL_set_app_data(ssl_.get(), this);
		if (server)
			SSL_set_accept_state(ssl_.get());
		else
			SSL_set_connect_state(ssl_.get());
		ERR_clear_error();
	}
	Tls(const Tls&) = delete;
	Tls& operator=(const Tls&) = delete;

	/**
	 * step() - feed @in (a whole flight from the other side, or nothing to
	 * begin) and run the handshake as far as it goes
	 * @out: what we send next (our flight, or an alert on failure)
	 * @err: on failure, why
	 */
	Result step(std::span<const uint8_t> in, std::vector<uint8_t>& out, std::string& err) {
		ERR_clear_error();
		if (!in.empty() && BIO_write(rbio_, in.data(), int(in.size())) != int(in.size())) {
			err = "TLS: cannot buffer the input (" + openssl_reason() + ")";
			return Result::failed;
		}
		const int r = SSL_do_handshake(ssl_.get());
		drain(out);
		if (r == 1) {
			if (BIO_ctrl_pending(rbio_) != 0) {
				err = "TLS data after the other side's Finished message";
				return Result::failed;
			}
			return Result::done;
		}
		if (SSL_get_error(ssl_.get(), r) == SSL_ERROR_WANT_READ) {
			ERR_clear_error();
			return Result::more;
		}
		err = reason_.empty() ? "the TLS handshake failed: " + openssl_reason() : reason_;
		ERR_clear_error();
		return Result::failed;
	}

	/// msk() - the RFC 5216 MSK after the handshake (false if OpenSSL refuses).
	bool msk(SecretBytes& out) {
		out.assign(kMskLen, 0);
		if (SSL_export_keying_material(ssl_.get(), out.data(), out.size(), kMskLabel.data(),
		                               kMskLabel.size(), nullptr, 0, 0) != 1) {
			ERR_clear_error();
			out.clear();
			return false;
		}
		return true;
	}

	/// The subject of the other side's certificate ("" if it sent none).
	std::string peer_subject() const {
		const X509* x = SSL_get0_peer_certificate(ssl_.get());
		return x ? CertAccess::subject(x) : std::string();
	}

private:
	void drain(std::vector<uint8_t>& out) {
		char* p = nullptr;
		const long n = BIO_get_mem_data(wbio_, &p);
		if (n > 0) out.insert(out.end(), p, p + n);
		(void)BIO_reset(wbio_);
	}

	/// verify_cb() - OpenSSL's chain verification, plus the identity the
	/// server's certificate must certify; the first refusal becomes reason_.
	static int verify_cb(int ok, X509_STORE_CTX* sctx) noexcept {
		SSL* ssl =
		    static_cast<SSL*>(X509_STORE_CTX_get_ex_data(sctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
		Tls* self = ssl ? static_cast<Tls*>(SSL_get_app_data(ssl)) : nullptr;
		if (!self) return 0;
		try {
			const char* whose = self->server_ ? "the client's certificate is refused: "
			                                  : "the server's certificate is refused: ";
			X509* x = X509_STORE_CTX_get_current_cert(sctx);
			if (!ok) {
				if (self->reason_.empty())
					self->reason_ = whose + CertAccess::verify_error(
					                            X509_STORE_CTX_get_error(sctx), x);
				return 0;
			}
			if (X509_STORE_CTX_get_error_depth(sctx) == 0 && self->expect_ && x &&
			    !CertAccess::certifies(x, *self->expect_)) {
				if (self->reason_.empty())
					self->reason_ = whose + std::string("it (") + CertAccess::subject(x) +
					                ") does not certify '" +
					                identity_text(*self->expect_) + "'";
				X509_STORE_CTX_set_error(sctx, X509_V_ERR_HOSTNAME_MISMATCH);
				return 0;
			}
			return 1;
		} catch (...) {
			return 0;
		}
	}

	bool server_;
	std::optional<Identity> expect_;
	Ssl<SSL_CTX> ctx_;
	Ssl<SSL> ssl_;
	BIO* rbio_ = nullptr; ///< owned by ssl_
	BIO* wbio_ = nullptr; ///< owned by ssl_
	std::string reason_;
};

// ---- 4. fragmentation -------------------------------------------------------

/// Outgoing - our TLS message, handed out one fragment per EAP message.
class Outgoing {
public:
	void set(std::vector<uint8_t> data) {
		data_ = std::move(data);
		off_ = 0;
	}
	/// Whether fragments are left, i.e. the one we sent last awaits an acknowledgement.
	bool pending() const noexcept { return off_ < data_.size(); }
	/// next() - the type-data of the next fragment (section 2.1.5).
	std::vector<uint8_t> next() {
		const size_t n = std::min(kFragmentLen, data_.size() - off_);
		const bool fragmented = data_.size() > kFragmentLen;
		std::vector<uint8_t> out;
		out.reserve(5 + n);
		uint8_t flags = 0;
		if (off_ + n < data_.size()) flags |= kFlagMore;
		if (off_ == 0 && fragmented) flags |= kFlagLength;
		out.push_back(flags);
		if (flags & kFlagLength) {
			out.resize(5);
			store_be32(out.data() + 1, uint32_t(data_.size()));
		}
		out.insert(out.end(), data_.begin() + long(off_), data_.begin() + long(off_ + n));
		off_ += n;
		if (!pending()) data_.clear();
		return out;
	}

private:
	std::vector<uint8_t> data_;
	size_t off_ = 0;
};

std::string rounds_exceeded() {
	return "more than " + std::to_string(kMaxTlsRounds) + " EAP-TLS messages in one conversation";
}

// ---- 5. the two roles -------------------------------------------------------

class TlsServer final : public ServerMethod {
public:
	TlsServer(std::shared_ptr<const Credentials> ours, std::shared_ptr<const TrustStore> ca)
	    : tls_(true, *ours, *ca, std::nullopt) {}

	uint8_t type() const noexcept override { return type::tls; }
	std::vector<uint8_t> start() override {
		state_ = State::handshake;
		return {kFlagStart};
	}
	Step on_response(std::span<const uint8_t> data) override {
		try {
			Step s = respond(data);
			if (s.kind != Step::Kind::send) state_ = State::over;
			return s;
		} catch (const std::exception& e) {
			state_ = State::over;
			return failure(std::string("EAP-TLS internal error: ") + e.what());
		}
	}
	const SecretBytes& msk() const noexcept override { return msk_; }
	std::string authenticated_as() const override { return subject_; }

private:
	enum class State { before_start, handshake, finished, refusing, over };

	Step respond(std::span<const uint8_t> data) {
		if (state_ == State::before_start) return failure("an EAP-TLS response before our Start");
		if (state_ == State::over) return failure("an EAP-TLS response after the conversation ended");
		if (++rounds_ > kMaxTlsRounds) return failure(rounds_exceeded());
		std::string err;
		const std::optional<TypeData> t = parse_type_data(data, err);
		if (!t) return failure(err);
		if (t->flags & kFlagStart) return failure("an EAP-TLS response with the Start flag");
		// We sent an alert: whatever comes back, the answer is EAP-Failure.
		if (state_ == State::refusing) return failure(refusal_);
		if (out_.pending()) {
			if (!t->is_ack())
				return failure("TLS data where the acknowledgement of our fragment was due");
			return send(out_.next());
		}
		if (state_ == State::finished) {
			if (!t->is_ack()) return failure("TLS data after the TLS handshake finished");
			return Step{Step::Kind::success, {}, {}};
		}
		if (t->is_ack()) return failure("an empty EAP-TLS response where TLS data was due");
		bool complete = false;
		if (auto why = in_.add(*t, complete)) return failure(*why);
		if (!complete) return ack();
		std::vector<uint8_t> out;
		switch (tls_.step(in_.take(), out, err)) {
		case Tls::Result::failed:
			if (out.empty()) return failure(err);
			// RFC 5216 section 2.1.3: the alert goes to the peer, then EAP-Failure.
			state_ = State::refusing;
			refusal_ = err;
			out_.set(std::move(out));
			return Step{Step::Kind::send, out_.next(), err};
		case Tls::Result::more:
			if (out.empty())
				return failure(
				    "the client's TLS flight ended before the handshake could go on");
			break;
		case Tls::Result::done:
			if (!tls_.msk(msk_)) return failure("TLS: exporting the MSK failed");
			subject_ = tls_.peer_subject();
			state_ = State::finished;
			if (out.empty()) return Step{Step::Kind::success, {}, {}};
			break;
		}
		out_.set(std::move(out));
		return send(out_.next());
	}

	Tls tls_;
	Incoming in_;
	Outgoing out_;
	State state_ = State::before_start;
	size_t rounds_ = 0;
	std::string refusal_, subject_;
	SecretBytes msk_;
};

class TlsPeer final : public PeerMethod {
public:
	TlsPeer(std::shared_ptr<const Credentials> ours, std::shared_ptr<const TrustStore> ca,
	        std::optional<Identity> server_id)
	    : tls_(false, *ours, *ca, std::move(server_id)) {}

	uint8_t type() const noexcept override { return type::tls; }
	Step on_request(std::span<const uint8_t> data) override {
		try {
			Step s = respond(data);
			if (s.kind != Step::Kind::send) state_ = State::over;
			return s;
		} catch (const std::exception& e) {
			state_ = State::over;
			return failure(std::string("EAP-TLS internal error: ") + e.what());
		}
	}
	bool finished() const noexcept override { return finished_; }
	const SecretBytes& msk() const noexcept override { return msk_; }

private:
	enum class State { before_start, handshake, finished, refusing, over };

	Step respond(std::span<const uint8_t> data) {
		if (state_ == State::over) return failure("an EAP-TLS request after the conversation ended");
		if (++rounds_ > kMaxTlsRounds) return failure(rounds_exceeded());
		std::string err;
		const std::optional<TypeData> t = parse_type_data(data, err);
		if (!t) return failure(err);
		if (t->flags & kFlagStart) {
			if (state_ != State::before_start) return failure("a second EAP-TLS Start");
			if (t->length || !t->tls.empty()) return failure("an EAP-TLS Start with data");
			state_ = State::handshake;
			std::vector<uint8_t> out;
			if (tls_.step({}, out, err) != Tls::Result::more || out.empty())
				return failure(err.empty() ? "TLS: no ClientHello" : err);
			out_.set(std::move(out));
			return send(out_.next());
		}
		if (state_ == State::before_start) return failure("an EAP-TLS request before the Start");
		// We sent an alert or gave up: the server should have ended with EAP-Failure.
		if (state_ == State::refusing) return failure(refusal_);
		if (out_.pending()) {
			if (!t->is_ack())
				return failure("TLS data where the acknowledgement of our fragment was due");
			return send(out_.next());
		}
		if (state_ == State::finished)
			return failure("an EAP-TLS request after the TLS handshake finished");
		if (t->is_ack()) return failure("an empty EAP-TLS request where TLS data was due");
		bool complete = false;
		if (auto why = in_.add(*t, complete)) return failure(*why);
		if (!complete) return ack();
		std::vector<uint8_t> out;
		switch (tls_.step(in_.take(), out, err)) {
		case Tls::Result::failed: {
			// RFC 5216 section 2.1.4: answer with our alert, or with an empty
			// response to the server's, so that it can send EAP-Failure.
			state_ = State::refusing;
			refusal_ = err;
			if (out.empty()) return Step{Step::Kind::send, {0}, err};
			out_.set(std::move(out));
			return Step{Step::Kind::send, out_.next(), err};
		}
		case Tls::Result::more:
			if (out.empty())
				return failure(
				    "the server's TLS flight ended before the handshake could go on");
			break;
		case Tls::Result::done:
			if (!tls_.msk(msk_)) return failure("TLS: exporting the MSK failed");
			state_ = State::finished;
			finished_ = true;
			if (out.empty()) return ack();
			break;
		}
		out_.set(std::move(out));
		return send(out_.next());
	}

	Tls tls_;
	Incoming in_;
	Outgoing out_;
	State state_ = State::before_start;
	size_t rounds_ = 0;
	bool finished_ = false;
	std::string refusal_;
	SecretBytes msk_;
};

} // namespace

std::unique_ptr<ServerMethod> make_tls_server(std::shared_ptr<const Credentials> ours,
                                              std::shared_ptr<const TrustStore> clients_ca) {
	if (!ours || !clients_ca)
		throw std::invalid_argument("EAP-TLS server: credentials and CAs are required");
	return std::make_unique<TlsServer>(std::move(ours), std::move(clients_ca));
}

std::unique_ptr<PeerMethod> make_tls_peer(std::shared_ptr<const Credentials> ours,
                                          std::shared_ptr<const TrustStore> server_ca,
                                          std::optional<Identity> server_id) {
	if (!ours || !server_ca)
		throw std::invalid_argument("EAP-TLS peer: credentials and CAs are required");
	return std::make_unique<TlsPeer>(std::move(ours), std::move(server_ca), std::move(server_id));
}

} // namespace esptun::ike::eap
