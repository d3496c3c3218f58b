// EAP-MSCHAPv2, both roles (eap_mschapv2.hpp). The file follows the
// conversation:
//   1. crypto: NtPasswordHash (MD4 through a private OpenSSL context), the
//      RFC 2759 responses and the RFC 3079 keys that make the MSK;
//   2. the MSCHAPv2 header inside the EAP type-data (draft-kamath-pppext-
//      eap-mschapv2-02 section 2): OpCode, MS-CHAPv2-ID, MS-Length;
//   3. the server: Challenge -> Response -> Success/Failure request -> ack;
//   4. the peer: the mirror image.
// Every field the other side sent is checked before use; a method never
// throws out of on_response()/on_request(), it fails with a reason.
#include "ike/eap_mschapv2.hpp"

#include "base/bytes.hpp"
#include "ike/keymat.hpp"
#include "ike/openssl_util.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace esptun::ike::eap {

namespace mschapv2 {

namespace {

using openssl_util::check;

// --- 1. crypto ---------------------------------------------------------------

/**
 * Md4 - MD4 fetched once from a private library context with the legacy
 * provider loaded (OpenSSL 3 moved MD4 there). The default context stays as
 * it was, so nothing else in the process can pick up a legacy algorithm by
 * accident. Built on first use; C++ makes that thread-safe.
 */
class Md4 {
public:
	static const Md4& get() {
		static const Md4 instance;
		return instance;
	}
	/// The digest, or a throw naming why it could not be loaded.
	const EVP_MD* md() const {
		if (!md_) throw std::runtime_error("EAP-MSCHAPv2 needs MD4: " + error_);
		return md_;
	}
	~Md4() {
		EVP_MD_free(md_);
		if (default_) OSSL_PROVIDER_unload(default_);
		if (legacy_) OSSL_PROVIDER_unload(legacy_);
		OSSL_LIB_CTX_free(ctx_);
	}
	Md4(const Md4&) = delete;
	Md4& operator=(const Md4&) = delete;

private:
	Md4() {
		ctx_ = OSSL_LIB_CTX_new();
		if (ctx_) legacy_ = OSSL_PROVIDER_load(ctx_, "legacy");
		if (legacy_) default_ = OSSL_PROVIDER_load(ctx_, "default");
		if (default_) md_ = EVP_MD_fetch(ctx_, "MD4", nullptr);
		if (!md_) {
			error_ =
			    !ctx_ ? "OSSL_LIB_CTX_new failed"
			    : !legacy_
			        ? "OpenSSL's legacy provider could not be loaded (is legacy.so installed "
			          "in OpenSSL's modules directory?)"
			    : !default_ ? "OpenSSL's default provider could not be loaded"
			                : "MD4 is not available from the legacy provider";
		}
		ERR_clear_error();
	}

	OSSL_LIB_CTX* ctx_ = nullptr;
	OSSL_PROVIDER* legacy_ = nullptr;
	OSSL_PROVIDER* default_ = nullptr;
	EVP_MD* md_ = nullptr;
	std::string error_;
};

struct MdCtxFree {
	void operator()(EVP_MD_CTX* p) const noexcept { EVP_MD_CTX_free(p); }
};

/// digest() - @md over the concatenation of @parts into @out (its size).
void digest(const EVP_MD* md, std::initializer_list<std::span<const uint8_t>> parts, std::span<uint8_t> out) {
	std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
	check(ctx != nullptr, "EVP_MD_CTX_new");
	check(EVP_DigestInit_ex(ctx.get(), md, nullptr) == 1, "digest init");
	for (auto p : parts)
		check(EVP_DigestUpdate(ctx.get(), p.data(), p.size()) == 1, "digest update");
	std::array<uint8_t, EVP_MAX_MD_SIZE> full{};
	openssl_util::Wipe wipe{full};
	unsigned int len = 0;
	check(EVP_DigestFinal_ex(ctx.get(), full.data(), &len) == 1, "digest final");
	check(len >= out.size(), "digest length");
	std::copy_n(full.begin(), out.size(), out.begin());
}

std::span<const uint8_t> text_bytes(std::string_view s) noexcept {
	return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

/**
 * des_encrypt() - single DES of one block under the 7 key bytes @key7.
 * OpenSSL 3 keeps single DES in the legacy provider; three-key 3DES with
 * K1 = K2 = K3 is the same function (E(K, D(K, E(K, x))) = E(K, x)) and is
 * in the default one. The parity bits of the expanded key are ignored by
 * DES; the default provider does no weak-key check, and NT hashes do make
 * weak keys now and then (the third key is mostly zero padding).
 */
void des_encrypt(std::span<const uint8_t> key7, std::span<const uint8_t, 8> in, std::span<uint8_t, 8> out) {
	std::array<uint8_t, 24> key{};
	openssl_util::Wipe wipe{key};
	// RFC 2759 DesEncrypt: spread 56 key bits over 8 bytes, 7 bits each,
	// leaving the low (parity) bit of each byte clear.
	uint64_t bits = 0;
	for (size_t i = 0; i < 7; i++)
		bits = bits << 8 | key7[i];
	for (size_t i = 0; i < 8; i++)
		key[i] = uint8_t((bits >> (49 - 7 * i)) << 1);
	secure_wipe(&bits, sizeof bits);
	std::copy_n(key.begin(), 8, key.begin() + 8);
	std::copy_n(key.begin(), 8, key.begin() + 16);
	openssl_util::Owned<EVP_CIPHER_CTX> ctx(EVP_CIPHER_CTX_new());
	check(ctx != nullptr, "EVP_CIPHER_CTX_new");
	check(EVP_EncryptInit_ex(ctx.get(), EVP_des_ede3_ecb(), nullptr, key.data(), nullptr) == 1,
	      "DES init");
	check(EVP_CIPHER_CTX_set_padding(ctx.get(), 0) == 1, "DES padding");
	int len = 0;
	check(EVP_EncryptUpdate(ctx.get(), out.data(), &len, in.data(), 8) == 1 && len == 8, "DES encrypt");
}

/// hex_upper() - @b as upper-case hex (RFC 2759's authenticator response).
std::string hex_upper(std::span<const uint8_t> b) {
	static constexpr char digits[] = "0123456789ABCDEF";
	std::string s;
	s.reserve(2 * b.size());
	for (uint8_t x : b) {
		s += digits[x >> 4];
		s += digits[x & 15];
	}
	return s;
}

int hex_value(char c) noexcept {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

// RFC 2759 section 8.7 and RFC 3079 section 3.4: the constant strings.
constexpr std::string_view kAuthMagic1 = "Magic server to client signing constant";
constexpr std::string_view kAuthMagic2 = "Pad to make it do more than one iteration";
constexpr std::string_view kKeyMagic1 = "This is the MPPE Master Key";
constexpr std::string_view kKeyMagic2 =
    "On the client side, this is the send key; on the server side, it is the receive key.";
constexpr std::string_view kKeyMagic3 =
    "On the client side, this is the receive key; on the server side, it is the send key.";

} // namespace

std::string_view strip_domain(std::string_view name) noexcept {
	const size_t slash = name.find('\\');
	return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

SecretBytes hash_nt_password_hash(std::span<const uint8_t> nt_hash) {
	SecretBytes out(kNtHashLen);
	digest(Md4::get().md(), {nt_hash}, out);
	return out;
}

std::array<uint8_t, 8> challenge_hash(const Challenge& peer, const Challenge& authenticator,
                                      std::string_view user) {
	std::array<uint8_t, 8> out{};
	digest(EVP_sha1(), {peer, authenticator, text_bytes(user)}, out);
	return out;
}

NtResponse challenge_response(std::span<const uint8_t, 8> challenge, std::span<const uint8_t> nt_hash) {
	if (nt_hash.size() != kNtHashLen)
		throw std::invalid_argument("EAP-MSCHAPv2: NT hash is not 16 bytes");
	std::array<uint8_t, 21> padded{}; // ZPasswordHash
	openssl_util::Wipe wipe{padded};
	std::copy(nt_hash.begin(), nt_hash.end(), padded.begin());
	NtResponse out{};
	for (size_t i = 0; i < 3; i++)
		des_encrypt(std::span(padded).subspan(7 * i, 7), challenge,
		            std::span<uint8_t, 8>(out.data() + 8 * i, 8));
	return out;
}

NtResponse generate_nt_response(const Challenge& authenticator, const Challenge& peer, std::string_view user,
                                std::span<const uint8_t> nt_hash) {
	const auto challenge = challenge_hash(peer, authenticator, strip_domain(user));
	return challenge_response(challenge, nt_hash);
}

std::array<uint8_t, 20> authenticator_response(std::span<const uint8_t> nt_hash,
                                               const NtResponse& nt_response, const Challenge& peer,
                                               const Challenge& authenticator, std::string_view user) {
	const SecretBytes hash_hash = hash_nt_password_hash(nt_hash);
	std::array<uint8_t, 20> first{};
	openssl_util::Wipe wipe{first};
	digest(EVP_sha1(), {hash_hash, nt_response, text_bytes(kAuthMagic1)}, first);
	const auto challenge = challenge_hash(peer, authenticator, strip_domain(user));
	std::array<uint8_t, 20> out{};
	digest(EVP_sha1(), {first, challenge, text_bytes(kAuthMagic2)}, out);
	return out;
}

SecretBytes master_key(std::span<const uint8_t> password_hash_hash, const NtResponse& nt_response) {
	SecretBytes out(16);
	digest(EVP_sha1(), {password_hash_hash, nt_response, text_bytes(kKeyMagic1)}, out);
	return out;
}

SecretBytes asymmetric_start_key(std::span<const uint8_t> master, bool is_send, bool is_server) {
	static constexpr std::array<uint8_t, 40> pad1{};
	std::array<uint8_t, 40> pad2{};
	pad2.fill(0xf2);
	// RFC 3079 section 3.4: the server sends with Magic3, receives with Magic2.
	const std::string_view magic = (is_send == is_server) ? kKeyMagic3 : kKeyMagic2;
	SecretBytes out(16);
	digest(EVP_sha1(), {master, pad1, text_bytes(magic), pad2}, out);
	return out;
}

SecretBytes msk(std::span<const uint8_t> nt_hash, const NtResponse& nt_response, bool is_server) {
	const SecretBytes hash_hash = hash_nt_password_hash(nt_hash);
	const SecretBytes master = master_key(hash_hash, nt_response);
	// Server: receive | send. Peer: send | receive (the same two keys).
	const SecretBytes first = asymmetric_start_key(master, !is_server, is_server);
	const SecretBytes second = asymmetric_start_key(master, is_server, is_server);
	SecretBytes out;
	out.reserve(64);
	out.insert(out.end(), first.begin(), first.end());
	out.insert(out.end(), second.begin(), second.end());
	out.resize(64, 0);
	return out;
}

} // namespace mschapv2

namespace {

/**
 * utf16le() - @utf8 as UTF-16LE, or nullopt when it is not well-formed
 * UTF-8 (truncated or stray continuation bytes, overlong forms, surrogates,
 * code points past U+10FFFF): a password that cannot be converted the way
 * Windows would must not be hashed some other way.
 */
std::optional<SecretBytes> utf16le(std::string_view utf8) {
	SecretBytes out;
	out.reserve(2 * utf8.size());
	auto put = [&out](uint32_t unit) {
		out.push_back(uint8_t(unit & 0xff));
		out.push_back(uint8_t(unit >> 8));
	};
	for (size_t i = 0; i < utf8.size();) {
		const uint8_t b = uint8_t(utf8[i]);
		size_t n = 0;
		uint32_t cp = 0, min = 0;
		if (b < 0x80) {
			n = 1, cp = b;
		} else if ((b & 0xe0) == 0xc0) {
			n = 2, cp = b & 0x1f, min = 0x80;
		} else if ((b & 0xf0) == 0xe0) {
			n = 3, cp = b & 0x0f, min = 0x800;
		} else if ((b & 0xf8) == 0xf0) {
			n = 4, cp = b & 0x07, min = 0x10000;
		} else {
			return std::nullopt;
		}
		if (n > utf8.size() - i) return std::nullopt;
		for (size_t k = 1; k < n; k++) {
			const uint8_t c = uint8_t(utf8[i + k]);
			if ((c & 0xc0) != 0x80) return std::nullopt;
			cp = cp << 6 | (c & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return std::nullopt;
		if (cp < 0x10000) {
			put(cp);
		} else {
			put(0xd800 + ((cp - 0x10000) >> 10));
			put(0xdc00 + ((cp - 0x10000) & 0x3ff));
		}
		i += n;
	}
	return out;
}

} // namespace

SecretBytes nt_password_hash(std::string_view utf8_password) {
	const std::optional<SecretBytes> unicode = utf16le(utf8_password);
	if (!unicode) throw std::invalid_argument("EAP-MSCHAPv2: the password is not valid UTF-8");
	SecretBytes out(mschapv2::kNtHashLen);
	mschapv2::digest(mschapv2::Md4::get().md(), {*unicode}, out);
	return out;
}

// --- 2. the MSCHAPv2 header inside the EAP type-data --------------------------

namespace {

using mschapv2::Challenge;
using mschapv2::kChallengeLen;
using mschapv2::kMaxNameLen;
using mschapv2::kNtResponseLen;
using mschapv2::NtResponse;

/// MSCHAPv2 OpCodes (draft-kamath-pppext-eap-mschapv2-02 section 2).
enum class Op : uint8_t { challenge = 1, response = 2, success = 3, failure = 4 };

/// OpCode, MS-CHAPv2-ID, MS-Length: the header of every request and of the
/// peer's Response. MS-Length counts from the OpCode to the end of the
/// type-data. The peer's Success and Failure responses are the OpCode alone.
constexpr size_t kMsHeaderLen = 4;
/// Value-Size of a Response: Peer-Challenge, 8 reserved bytes, NT-Response, Flags.
constexpr size_t kResponseValueLen = kChallengeLen + 8 + kNtResponseLen + 1;
/// The authenticator response as sent: "S=" and 40 hex digits.
constexpr size_t kAuthStringLen = 42;

/// One MSCHAPv2 packet taken apart: its header and what follows it.
struct MsPacket {
	Op op;
	uint8_t id;
	std::span<const uint8_t> body;
};

/// split() - the header of @data, or nullopt when it is shorter than a
/// header or MS-Length disagrees with the size.
std::optional<MsPacket> split(std::span<const uint8_t> data) noexcept {
	if (data.size() < kMsHeaderLen || load_be16(&data[2]) != data.size()) return std::nullopt;
	return MsPacket{Op(data[0]), data[1], data.subspan(kMsHeaderLen)};
}

/// build() - a packet with the header in front of @body.
std::vector<uint8_t> build(Op op, uint8_t id, std::span<const uint8_t> body) {
	std::vector<uint8_t> out(kMsHeaderLen + body.size());
	out[0] = uint8_t(op);
	out[1] = id;
	store_be16(&out[2], uint16_t(out.size()));
	std::copy(body.begin(), body.end(), out.begin() + kMsHeaderLen);
	return out;
}

/// printable() - @s for a log line: bytes outside printable ASCII become
/// '?', and at most @max of them are kept.
std::string printable(std::span<const uint8_t> s, size_t max = 64) {
	std::string out;
	for (size_t i = 0; i < s.size() && i < max; i++)
		out += (s[i] >= 0x20 && s[i] < 0x7f) ? char(s[i]) : '?';
	if (s.size() > max) out += "...";
	return out;
}

std::string printable(std::string_view s, size_t max = 64) { return printable(mschapv2::text_bytes(s), max); }

Step fail(std::string why) { return Step{Step::Kind::failure, {}, std::move(why)}; }
Step send(std::vector<uint8_t> data, std::string why = {}) {
	return Step{Step::Kind::send, std::move(data), std::move(why)};
}

std::string op_name(uint8_t op) {
	switch (Op(op)) {
	case Op::challenge:
		return "Challenge";
	case Op::response:
		return "Response";
	case Op::success:
		return "Success";
	case Op::failure:
		return "Failure";
	}
	return "unknown OpCode " + std::to_string(op);
}

Challenge random_challenge() {
	Challenge c{};
	random_bytes(c);
	return c;
}

uint8_t random_byte() {
	uint8_t b = 0;
	random_bytes(std::span(&b, 1));
	return b;
}

// --- 3. the server -------------------------------------------------------------

/// What the server says in the message part of its Success and Failure
/// requests. The Failure text is the same for an unknown user and a wrong
/// password, so a peer cannot tell which names exist.
constexpr std::string_view kSuccessMessage = " M=Welcome to esptun";
constexpr std::string_view kFailureMessage = " V=3 M=Authentication failed";

class Server final : public ServerMethod {
public:
	Server(NtHashLookup lookup, std::string_view name) : lookup_(std::move(lookup)), name_(name) {}

	uint8_t type() const noexcept override { return type::mschapv2; }

	/// start() - the Challenge: a fresh random challenge and our name.
	std::vector<uint8_t> start() override {
		reset();
		challenge_ = random_challenge();
		id_ = random_byte();
		std::vector<uint8_t> body;
		body.push_back(uint8_t(kChallengeLen));
		body.insert(body.end(), challenge_.begin(), challenge_.end());
		body.insert(body.end(), name_.begin(), name_.end());
		state_ = State::challenged;
		return build(Op::challenge, id_, body);
	}

	Step on_response(std::span<const uint8_t> data) override {
		// A finished method stays finished: a stray response is refused
		// without taking the MSK away from the engine.
		if (state_ == State::done) return fail("EAP-MSCHAPv2: response after the method completed");
		try {
			Step s = respond(data);
			if (s.kind == Step::Kind::failure) {
				state_ = State::over;
				msk_.clear();
			}
			return s;
		} catch (const std::exception& e) {
			state_ = State::over;
			msk_.clear();
			return fail(std::string("EAP-MSCHAPv2: internal error: ") + e.what());
		}
	}

	const SecretBytes& msk() const noexcept override { return state_ == State::done ? msk_ : empty_; }
	std::string authenticated_as() const override {
		return state_ == State::done ? user_ : std::string();
	}

private:
	enum class State : uint8_t { idle, challenged, sent_success, sent_failure, done, over };

	void reset() {
		msk_.clear();
		user_.clear();
		refusal_.clear();
	}

	Step respond(std::span<const uint8_t> data) {
		switch (state_) {
		case State::idle:
			return fail("EAP-MSCHAPv2: response before our challenge");
		case State::challenged:
			return on_challenge_answer(data);
		case State::sent_success:
			if (data.size() == 1 && data[0] == uint8_t(Op::success)) {
				state_ = State::done;
				return Step{Step::Kind::success, {}, {}};
			}
			return fail("EAP-MSCHAPv2: expected the peer's Success response, got " +
			            describe(data));
		case State::sent_failure:
			// Whatever comes back (the Failure response or not), the answer
			// is EAP-Failure, and the reason stays the one we found.
			return fail(refusal_);
		case State::done:
		case State::over:
			return fail("EAP-MSCHAPv2: response after the method completed");
		}
		return fail("EAP-MSCHAPv2: bad state");
	}

	static std::string describe(std::span<const uint8_t> data) {
		if (data.empty()) return "an empty packet";
		return "a " + op_name(data[0]) + " of " + std::to_string(data.size()) + " bytes";
	}

	/// on_challenge_answer() - the peer's Response: check its shape, find
	/// the user, check the NT-Response.
	Step on_challenge_answer(std::span<const uint8_t> data) {
		const std::optional<MsPacket> p = split(data);
		if (!data.empty() && data[0] == uint8_t(Op::failure) && data.size() == 1)
			return fail("EAP-MSCHAPv2: the peer gave up (Failure response to our challenge)");
		if (!p)
			return fail("EAP-MSCHAPv2: malformed response (" + describe(data) +
			            ", MS-Length wrong)");
		if (p->op != Op::response)
			return fail("EAP-MSCHAPv2: expected a Response, got " + describe(data));
		if (p->id != id_) return fail("EAP-MSCHAPv2: Response for another MS-CHAPv2-ID");
		const auto body = p->body;
		if (body.size() < 1 + kResponseValueLen || body[0] != kResponseValueLen)
			return fail("EAP-MSCHAPv2: malformed Response (Value-Size)");
		const auto value = body.subspan(1, kResponseValueLen);
		const auto name = body.subspan(1 + kResponseValueLen);
		if (name.empty()) return fail("EAP-MSCHAPv2: Response without a user name");
		if (name.size() > kMaxNameLen) return fail("EAP-MSCHAPv2: user name longer than 255 bytes");
		const std::string full(name.begin(), name.end());
		const std::string_view user = mschapv2::strip_domain(full);
		Challenge peer{};
		std::copy_n(value.begin(), kChallengeLen, peer.begin());
		NtResponse got{};
		std::copy_n(value.begin() + kChallengeLen + 8, kNtResponseLen, got.begin());

		const std::optional<SecretBytes> nt_hash = user.empty() ? std::nullopt : lookup_(user);
		if (!nt_hash || nt_hash->size() != mschapv2::kNtHashLen) {
			// Do the hashing a known user costs too, so the time to answer
			// says less about which names exist (the lookup itself may
			// still differ).
			static const std::array<uint8_t, mschapv2::kNtHashLen> dummy{};
			(void)mschapv2::generate_nt_response(challenge_, peer, user, dummy);
			return refuse("EAP-MSCHAPv2: user '" + printable(user) +
			              "' is not in the users file");
		}
		const NtResponse want = mschapv2::generate_nt_response(challenge_, peer, user, *nt_hash);
		if (CRYPTO_memcmp(want.data(), got.data(), want.size()) != 0)
			return refuse("EAP-MSCHAPv2: wrong password for user '" + printable(user) + "'");

		const auto auth = mschapv2::authenticator_response(*nt_hash, got, peer, challenge_, user);
		msk_ = mschapv2::msk(*nt_hash, got, true);
		user_ = std::string(user);
		const std::string text = "S=" + mschapv2::hex_upper(auth) + std::string(kSuccessMessage);
		state_ = State::sent_success;
		return send(build(Op::success, id_, mschapv2::text_bytes(text)));
	}

	/// refuse() - the Failure request (RFC 2759 section 6: E=691, no retry).
	Step refuse(std::string why) {
		refusal_ = std::move(why);
		const std::string text =
		    "E=691 R=0 C=" + mschapv2::hex_upper(random_challenge()) + std::string(kFailureMessage);
		state_ = State::sent_failure;
		return send(build(Op::failure, id_, mschapv2::text_bytes(text)), refusal_);
	}

	NtHashLookup lookup_;
	std::string name_;
	State state_ = State::idle;
	Challenge challenge_{};
	uint8_t id_ = 0;
	SecretBytes msk_;
	const SecretBytes empty_;
	std::string user_;
	std::string refusal_;
};

// --- 4. the peer ---------------------------------------------------------------

class Peer final : public PeerMethod {
public:
	Peer(std::string user, SecretBytes nt_hash) : user_(std::move(user)), nt_hash_(std::move(nt_hash)) {}

	uint8_t type() const noexcept override { return type::mschapv2; }

	Step on_request(std::span<const uint8_t> data) override {
		if (state_ == State::done) return fail("EAP-MSCHAPv2: request after the method completed");
		try {
			Step s = answer(data);
			if (s.kind == Step::Kind::failure) state_ = State::over;
			return s;
		} catch (const std::exception& e) {
			state_ = State::over;
			return fail(std::string("EAP-MSCHAPv2: internal error: ") + e.what());
		}
	}

	bool finished() const noexcept override { return state_ == State::done; }
	const SecretBytes& msk() const noexcept override { return state_ == State::done ? msk_ : empty_; }

private:
	enum class State : uint8_t { want_challenge, want_result, done, over };

	Step answer(std::span<const uint8_t> data) {
		if (state_ == State::over) return fail("EAP-MSCHAPv2: request after the method completed");
		const std::optional<MsPacket> p = split(data);
		if (!p) return fail("EAP-MSCHAPv2: malformed request (too short or MS-Length wrong)");
		if (state_ == State::want_challenge) {
			if (p->op != Op::challenge)
				return fail("EAP-MSCHAPv2: expected a Challenge, got a " +
				            op_name(uint8_t(p->op)));
			return on_challenge(*p);
		}
		if (p->id != id_) return fail("EAP-MSCHAPv2: request for another MS-CHAPv2-ID");
		if (p->op == Op::success) return on_success(p->body);
		if (p->op == Op::failure) return on_failure(p->body);
		return fail("EAP-MSCHAPv2: expected Success or Failure, got a " + op_name(uint8_t(p->op)));
	}

	/// on_challenge() - our Response, and what the server must prove next.
	Step on_challenge(const MsPacket& p) {
		const auto body = p.body;
		if (body.size() < 1 + kChallengeLen || body[0] != kChallengeLen)
			return fail("EAP-MSCHAPv2: malformed Challenge (Value-Size)");
		if (body.size() - 1 - kChallengeLen > kMaxNameLen)
			return fail("EAP-MSCHAPv2: server name longer than 255 bytes");
		Challenge server{};
		std::copy_n(body.begin() + 1, kChallengeLen, server.begin());
		const Challenge peer = random_challenge();
		const std::string_view user = mschapv2::strip_domain(user_);
		const NtResponse nt = mschapv2::generate_nt_response(server, peer, user, nt_hash_);
		expected_auth_ = mschapv2::authenticator_response(nt_hash_, nt, peer, server, user);
		msk_ = mschapv2::msk(nt_hash_, nt, false);
		id_ = p.id;

		std::vector<uint8_t> out;
		out.push_back(uint8_t(kResponseValueLen));
		out.insert(out.end(), peer.begin(), peer.end());
		out.insert(out.end(), 8, 0); // reserved
		out.insert(out.end(), nt.begin(), nt.end());
		out.push_back(0); // flags
		out.insert(out.end(), user_.begin(), user_.end());
		state_ = State::want_result;
		return send(build(Op::response, id_, out));
	}

	/// message_text() - the text of a Success or Failure request without
	/// trailing NULs (strongSwan counts the C string's terminator in).
	static std::string_view message_text(std::span<const uint8_t> body) {
		std::string_view s(reinterpret_cast<const char*>(body.data()), body.size());
		while (!s.empty() && s.back() == '\0')
			s.remove_suffix(1);
		return s;
	}

	/// on_success() - "S=<40 hex digits>" and optionally " M=<message>":
	/// the server proves it knows the password (RFC 2759 section 5).
	Step on_success(std::span<const uint8_t> body) {
		const std::string_view text = message_text(body);
		if (text.size() < kAuthStringLen || text.substr(0, 2) != "S=" ||
		    (text.size() > kAuthStringLen && text[kAuthStringLen] != ' '))
			return fail("EAP-MSCHAPv2: malformed Success request");
		std::array<uint8_t, 20> got{};
		for (size_t i = 0; i < got.size(); i++) {
			const int hi = mschapv2::hex_value(text[2 + 2 * i]),
			          lo = mschapv2::hex_value(text[3 + 2 * i]);
			if (hi < 0 || lo < 0)
				return fail("EAP-MSCHAPv2: malformed Success request (not hex)");
			got[i] = uint8_t(hi << 4 | lo);
		}
		if (CRYPTO_memcmp(got.data(), expected_auth_.data(), got.size()) != 0)
			return fail(
			    "EAP-MSCHAPv2: the server's authenticator response is wrong (it does not know "
			    "our password)");
		state_ = State::done;
		return send({uint8_t(Op::success)});
	}

	/// on_failure() - the server refused us: acknowledge with the Failure
	/// response (draft-kamath section 2) and say why, from its E= and M=.
	Step on_failure(std::span<const uint8_t> body) {
		const std::string_view text = message_text(body);
		std::string why = "EAP-MSCHAPv2: the server refused authentication";
		if (text.substr(0, 2) == "E=") {
			size_t n = 2;
			while (n < text.size() && n < 12 && text[n] >= '0' && text[n] <= '9')
				n++;
			if (n > 2) why += " (E=" + std::string(text.substr(2, n - 2)) + ")";
		}
		const size_t m = text.substr(0, 2) == "M=" ? 0 : text.find(" M=");
		if (m != std::string_view::npos)
			why += ": " + printable(text.substr(m + (m == 0 ? 2 : 3)), 128);
		msk_.clear();
		state_ = State::over;
		return send({uint8_t(Op::failure)}, why);
	}

	std::string user_;
	SecretBytes nt_hash_;
	State state_ = State::want_challenge;
	uint8_t id_ = 0;
	std::array<uint8_t, 20> expected_auth_{};
	SecretBytes msk_;
	const SecretBytes empty_;
};

} // namespace

std::unique_ptr<ServerMethod> make_mschapv2_server(NtHashLookup nt_hash_of, std::string_view server_name) {
	if (!nt_hash_of) throw std::invalid_argument("EAP-MSCHAPv2: no user lookup");
	if (server_name.empty() || server_name.size() > kMaxNameLen)
		throw std::invalid_argument("EAP-MSCHAPv2: the server name must be 1 to 255 bytes");
	return std::make_unique<Server>(std::move(nt_hash_of), server_name);
}

std::unique_ptr<PeerMethod> make_mschapv2_peer(std::string user, const SecretString& password) {
	if (user.empty() || user.size() > kMaxNameLen)
		throw std::invalid_argument("EAP-MSCHAPv2: the user name must be 1 to 255 bytes");
	SecretBytes hash = nt_password_hash(password.view());
	return std::make_unique<Peer>(std::move(user), std::move(hash));
}

} // namespace esptun::ike::eap
