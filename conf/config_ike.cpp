// The config loader, IKE peers: pre-shared keys, identities, proposals and
// timers of a peer that negotiates its SAs with IKEv2 (see config.hpp).
#include "conf/checks.hpp"
#include "conf/loader.hpp"
#include "ike/eap_mschapv2.hpp"
#include "ike/engine.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace esptun::conf::detail {

namespace {
/// At most this many CA files in ca_dir, and CRL files in crl_files.
constexpr size_t kMaxCaFiles = 64;
/// users_file: at most this large, and this many users.
constexpr size_t kMaxUsersFile = 16u << 20;
constexpr size_t kMaxUsers = 100000;
/// A template's remote_id pattern: at most this long (as an identity).
constexpr size_t kMaxPatternLen = 255;

/// True when every bit of @a past the first @len is set.
bool host_bits_ones(const IpAddress& a, unsigned len) {
	for (unsigned i = len; i < a.max_prefix(); i++)
		if (!((a.bytes[i / 8] >> (7 - i % 8)) & 1)) return false;
	return true;
}
} // namespace

SecretString Loader::read_pem(const Found<std::string>& f, const std::string& what, bool secret,
                              size_t max_size) {
	if (f.value.empty() || f.value.find('\0') != std::string::npos)
		fail(f.line, what + " must name a file");
	const fs::path path = fs::path(f.value).is_absolute() ? fs::path(f.value) : base_dir_ / f.value;
	const std::string name = path.string();
	FileFacts st;
	if (auto err = files_.stat(path, st); !err.empty())
		fail(f.line, "cannot read " + what + " " + name + ": " + err + "; check the path");
	if (!S_ISREG(st.mode)) fail(f.line, what + " " + name + " is not a regular file");
	auto check_secret = [&](const FileFacts& facts) {
		if (!secret) return;
		if (auto err = check_secret_mode(what, name, facts.mode); !err.empty()) fail(f.line, err);
		if (facts.uid != 0 && facts.uid != ::geteuid())
			fail(f.line, what + " " + name + " is owned by uid " + std::to_string(facts.uid) +
			                 "; a private key must be owned by root (chown root " + name + ")");
	};
	check_secret(st);
	if (st.size > max_size)
		fail(f.line, what + " " + name + " is larger than " + std::to_string(max_size) + " bytes");
	SecretString text;
	if (auto err = files_.read(path, max_size, text, st); !err.empty())
		fail(f.line,
		     "cannot read " + what + " " + name + ": " + err + "; check its owner and permissions");
	check_secret(st); // again on the file actually opened (it may have been replaced)
	return text;
}

void Loader::parse_own_cert(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike) {
	constexpr std::string_view where = "[[peer]]";
	const std::string of = " of peer " + q(peer.name);
	auto cert = get_string(t, "cert_file", where);
	auto key = get_string(t, "private_key_file", where);
	auto chain = get_string(t, "cert_chain_file", where);
	if (!cert)
		fail(peer.line, "peer " + q(peer.name) + " (auth = " + q(ike_auth_name(ike.auth)) +
		                    ") needs cert_file: " +
		                    (ike.auth == IkeAuth::eap_tls && role_ == Role::client
		                         ? "our client certificate for EAP-TLS (PEM)"
		                         : "our certificate (PEM), with private_key_file"));
	if (!key)
		fail(cert->line,
		     "peer " + q(peer.name) +
		         " has cert_file but no private_key_file (the certificate's private key, PEM)");
	// Our own: the certificate, the chain sent after it, the private key.
	const SecretString cert_pem = read_pem(*cert, "cert_file" + of, false);
	const SecretString chain_pem =
	    chain ? read_pem(*chain, "cert_chain_file" + of, false) : SecretString();
	{
		const SecretString key_pem = read_pem(*key, "private_key_file" + of, true);
		std::string err;
		ike.credentials =
		    ike::Credentials::load(cert_pem.view(), key_pem.view(), chain_pem.view(), err);
		if (!ike.credentials)
			fail(err.find("private key") != std::string::npos ? key->line : cert->line,
			     "the certificate or key of peer " + q(peer.name) + ": " + err);
	}
	if (ike.auth == IkeAuth::eap_tls && role_ == Role::client) return; // used inside TLS, not IKE
	const std::optional<ike::Identity> local = ike::parse_identity(ike.local_id);
	if (!local)
		fail(cert->line, "peer " + q(peer.name) +
		                     " authenticates with a certificate, so it needs local_id (here or in "
		                     "[tunnel]): one of the certificate's subjectAltNames");
	if (!ike.credentials->certifies(*local))
		fail(cert->line, "local_id " + q(ike.local_id) + of + " is not in its certificate (" +
		                     ike.credentials->subject() +
		                     ") as a subjectAltName (or, for a DN, as the subject); the peer would "
		                     "refuse it");
}

void Loader::parse_trust(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike) {
	constexpr std::string_view where = "[[peer]]";
	const std::string of = " of peer " + q(peer.name);
	auto ca_dir = get_string(t, "ca_dir", where);
	int crl_line = 0;
	auto crls = get_strings(t, "crl_files", where, &crl_line);
	if (!ca_dir)
		fail(peer.line, "peer " + q(peer.name) + " (auth = " + q(ike_auth_name(ike.auth)) +
		                    ") needs ca_dir: a folder of PEM files with the CA certificates the " +
		                    (ike.auth == IkeAuth::cert ? "peer's certificate"
		                     : role_ == Role::client   ? "gateway's certificate"
		                                               : "EAP-TLS clients' certificates") +
		                    " must lead to");
	// The peer's side: the CAs its certificate must lead to, and CRLs.
	const fs::path dir =
	    fs::path(ca_dir->value).is_absolute() ? fs::path(ca_dir->value) : base_dir_ / ca_dir->value;
	std::vector<std::string> names;
	if (auto err = files_.list(dir, names); !err.empty())
		fail(ca_dir->line, "cannot list ca_dir" + of + " " + dir.string() + ": " + err);
	std::vector<SecretString> ca_texts;
	for (const std::string& n : names) {
		if (!n.ends_with(".pem") && !n.ends_with(".crt")) continue;
		if (ca_texts.size() >= kMaxCaFiles)
			fail(ca_dir->line,
			     "ca_dir" + of + " has more than " + std::to_string(kMaxCaFiles) + " CA files");
		const Found<std::string> f{(dir / n).string(), ca_dir->line};
		ca_texts.push_back(read_pem(f, "CA file", false));
		std::string err;
		const std::string_view one[] = {ca_texts.back().view()};
		if (!ike::TrustStore::load(one, {}, err))
			fail(ca_dir->line,
			     "CA file " + (dir / n).string() + " (ca_dir" + of + ")" + ": " + err);
	}
	if (ca_texts.empty())
		fail(ca_dir->line, "ca_dir" + of + " " + dir.string() +
		                       " holds no CA certificate (files ending in .pem or .crt)");
	if (crls.size() > kMaxCaFiles)
		fail(crl_line,
		     "crl_files" + of + " lists more than " + std::to_string(kMaxCaFiles) + " files");
	std::vector<SecretString> crl_texts;
	for (const auto& c : crls) {
		crl_texts.push_back(read_pem(c, "CRL file", false));
		std::string err;
		const std::string_view one_ca[] = {ca_texts.front().view()};
		const std::string_view one[] = {crl_texts.back().view()};
		if (!ike::TrustStore::load(one_ca, one, err))
			fail(c.line, "CRL file " + c.value + of + ": " + err);
	}
	std::vector<std::string_view> ca_views, crl_views;
	for (const auto& c : ca_texts)
		ca_views.push_back(c.view());
	for (const auto& c : crl_texts)
		crl_views.push_back(c.view());
	std::string err;
	ike.trust = ike::TrustStore::load(ca_views, crl_views, err);
	if (!ike.trust) fail(ca_dir->line, "ca_dir" + of + ": " + err);
}

static_assert(kDefaultIkeFragmentSize == ike::kDefaultFragmentSize);

IkePeerConfig Loader::parse_ike_peer(const toml::table& t, const PeerConfig& peer) {
	constexpr std::string_view where = "[[peer]]";
	IkePeerConfig ike;
	auto inline_psk = get_secret(t, "psk", where);
	auto file = get_string(t, "psk_file", where);
	if (inline_psk && file)
		fail(file->line, "give either 'psk' or 'psk_file' for peer " + q(peer.name) + ", not both");
	const bool certs = t.contains("cert_file");
	ike.auth = certs ? IkeAuth::cert : IkeAuth::psk;
	auto auth = get_string(t, "auth", where);
	if (auth) {
		bool known = false;
		for (IkeAuth a : {IkeAuth::psk, IkeAuth::cert, IkeAuth::eap_mschapv2, IkeAuth::eap_tls})
			if (auth->value == ike_auth_name(a)) {
				ike.auth = a;
				known = true;
			}
		if (!known)
			fail(auth->line,
			     "auth " + q(auth->value) + " of peer " + q(peer.name) +
			         " is unknown; use \"psk\", \"cert\", \"eap-mschapv2\" or \"eap-tls\"");
	}
	const int auth_line = auth ? auth->line : peer.line;
	const bool psk = ike.auth == IkeAuth::psk;
	auto remote = get_string(t, "remote_id", where);
	if (remote && remote->value.find('*') != std::string::npos) {
		check_template(t, peer, ike, *remote, auth_line);
		ike.remote_pattern = remote->value;
	}
	if (!psk && (inline_psk || file))
		fail(
		    (inline_psk ? inline_psk->line : file->line),
		    "peer " + q(peer.name) + " has both a pre-shared key and " +
		        (certs && !auth ? std::string("cert_file") : "auth = " + q(ike_auth_name(ike.auth))) +
		        "; give one way to authenticate");
	if (psk && !inline_psk && !file)
		fail(auth_line, "peer " + q(peer.name) +
		                    " has auth = \"psk\" but no pre-shared key; add psk = \"...\" or "
		                    "psk_file (esptun-gateway genpsk makes one)");
	if (psk && certs)
		fail(t.get("cert_file") ? line_of(*t.get("cert_file")) : auth_line,
		     "peer " + q(peer.name) +
		         " has auth = \"psk\" and cert_file; give one way to authenticate");
	int line = 0;
	std::filesystem::path path;
	if (psk) {
		const SecretString text =
		    secret_text(inline_psk, file, "'psk_file' of peer " + q(peer.name), line, path);
		// strongSwan's convention: "0x..." is hex, anything else is the key's bytes as written.
		if (text.starts_with("0x") || text.starts_with("0X")) {
			if (auto err = decode_hex_key(text.view(), ike.psk); !err.empty())
				fail(line, "the pre-shared key of peer " + q(peer.name) + " " + err);
		} else {
			ike.psk.assign(text.begin(), text.end());
		}
		if (ike.psk.size() < kMinPskLen)
			fail(line, "the pre-shared key of peer " + q(peer.name) + " is " +
			               std::to_string(ike.psk.size()) + " bytes; use at least " +
			               std::to_string(kMinPskLen) +
			               " (esptun-gateway genpsk makes one of 32 random bytes)");
	}

	auto identity = [&](std::string_view key, std::string fallback) {
		auto v = get_string(t, key, where);
		std::string id = v ? v->value : std::move(fallback);
		if (v && !ike::parse_identity(v->value))
			fail(v->line,
			     q(key) + " of peer " + q(peer.name) +
			         " is empty or not a valid distinguished name; write an FQDN "
			         "(\"gw.example.com\"), an e-mail style ID (\"alice@example.com\"), an IP "
			         "address or a DN (\"CN=gw.example.com, O=Example\")");
		return id;
	};
	ike.local_id = identity("local_id", config_.tunnel.local_id);
	if (ike.remote_pattern.empty()) ike.remote_id = identity("remote_id", peer.name);
	parse_ike_auth(t, peer, ike);

	if (auto v = get_bool(t, "allow_weak", where)) ike.allow_weak = v->value;
	int list_line = 0;
	auto ike_list = get_strings(t, "ike_proposals", where, &list_line);
	if (t.contains("ike_proposals")) {
		if (ike_list.empty())
			fail(list_line, "ike_proposals is empty; leave it out for the defaults");
		ike.ike_proposals.clear();
		for (const auto& e : ike_list) {
			std::string err;
			auto suite = ike::parse_ike_proposal(e.value, err, ike.allow_weak);
			if (!suite) fail(e.line, "ike_proposals entry " + q(e.value) + ": " + err);
			ike.ike_proposals.push_back(*suite);
		}
	}
	auto esp_list = get_strings(t, "esp_proposals", where, &list_line);
	if (t.contains("esp_proposals")) {
		if (esp_list.empty())
			fail(list_line, "esp_proposals is empty; leave it out for the defaults");
		ike.esp_proposals.clear();
		for (const auto& e : esp_list) {
			std::string err;
			auto suite = ike::parse_esp_proposal(e.value, err, ike.allow_weak);
			if (!suite) fail(e.line, "esp_proposals entry " + q(e.value) + ": " + err);
			ike.esp_proposals.push_back(*suite);
		}
	}
	// local_ts: our side of the peer's CHILD_SAs (RFC 7296 section 2.9
	// narrows the peer's TSr to it); inbound ESP to elsewhere is dropped.
	auto local_list = get_strings(t, "local_ts", where, &list_line);
	if (t.contains("local_ts") && local_list.empty())
		fail(list_line, "local_ts of peer " + q(peer.name) +
		                    " is empty; leave it out to let the peer reach any address");
	for (const auto& e : local_list) {
		auto p = parse_prefix(e.value);
		if (!p)
			fail(e.line, "local_ts entry " + q(e.value) +
			                 " is not an address or prefix; write e.g. \"10.0.0.0/24\"");
		if (p->network() != *p)
			fail(e.line, "local_ts entry " + q(e.value) + " has host bits set; did you mean " +
			                 q(to_string(p->network())) + "?");
		ike.local_ts.push_back(*p);
	}
	if (auto v = get_int(t, "dpd_interval", where)) {
		if (v->value < 0 || v->value > 86400)
			fail(
			    v->line,
			    "dpd_interval " + std::to_string(v->value) +
			        " is out of range; use seconds from 1 to 86400, or 0 for no liveness checks");
		ike.dpd_interval = static_cast<uint32_t>(v->value);
	}
	for (auto [key, field] :
	     {std::pair{"rekey_time", &ike.rekey_time}, std::pair{"ike_rekey_time", &ike.ike_rekey_time}}) {
		auto v = get_int(t, key, where);
		if (!v) continue;
		if (v->value != 0 && (v->value < 5 || v->value > 30 * 86400))
			fail(v->line,
			     std::string(key) + " " + std::to_string(v->value) +
			         " is out of range; use seconds from 5 to 2592000 (30 days), or 0 to leave "
			         "rekeying to the peer");
		*field = static_cast<uint32_t>(v->value);
	}
	// Rekeys by volume; without ESN the engine also rekeys before the
	// sequence numbers run out, whatever these say. A floor keeps a typo
	// from rekeying many times a second.
	for (auto [key, field, floor] : {std::tuple{"rekey_bytes", &ike.rekey_bytes, int64_t(1) << 20},
	                                 std::tuple{"rekey_packets", &ike.rekey_packets, int64_t(1000)}}) {
		auto v = get_int(t, key, where);
		if (!v) continue;
		if (v->value != 0 && v->value < floor)
			fail(v->line, std::string(key) + " " + std::to_string(v->value) +
			                  " is out of range; use " + std::to_string(floor) +
			                  " or more, or 0 for no limit");
		*field = static_cast<uint64_t>(v->value);
	}
	ike.fragment_size = parse_fragment_size(t, where, config_.tunnel.ike_fragment_size);
	ike.initiate = peer.endpoint.has_value();
	if (auto v = get_bool(t, "initiate", where)) {
		if (v->value && !peer.endpoint)
			fail(v->line,
			     "initiate = true needs an endpoint for peer " + q(peer.name) +
			         " (where to send IKE_SA_INIT); add endpoint = \"198.51.100.7:4500\"");
		ike.initiate = v->value;
	}
	return ike;
}

/**
 * check_template() - the rules for a template peer: a gateway [[peer]]
 * whose remote_id (@pattern) has '*' and so serves every user whose IKE
 * identity matches it. Users connect to it (no endpoint, no initiate), each
 * gets an address from the pool and its own networks from users_file (none
 * in the [[peer]]), and no pre-shared key (every user would hold it).
 * Static keys cannot reach here: an IKE peer refuses [peer.out]/[peer.in].
 */
void Loader::check_template(const toml::table& t, const PeerConfig& peer, const IkePeerConfig& ike,
                            const Found<std::string>& pattern, int auth_line) {
	const std::string is =
	    "peer " + q(peer.name) + " is a template (remote_id " + q(pattern.value) + " has '*')";
	if (role_ != Role::gateway)
		fail(pattern.line, "remote_id " + q(pattern.value) + " of peer " + q(peer.name) +
		                       " has '*', which makes a template for many users, and only a "
		                       "gateway has templates; a client names its one gateway: write the "
		                       "gateway's identity in remote_id");
	if (pattern.value.size() > kMaxPatternLen)
		fail(pattern.line, "remote_id of peer " + q(peer.name) + " is longer than " +
		                       std::to_string(kMaxPatternLen) + " bytes; shorten the pattern");
	if (ike.auth == IkeAuth::psk)
		fail(auth_line, is + " with a pre-shared key: every user would know the key and could pose "
		                     "as the gateway; set auth to \"cert\", \"eap-mschapv2\" or \"eap-tls\"");
	if (const toml::node* n = t.get("endpoint"))
		fail(line_of(*n), is + " and has an endpoint, but its users connect to the gateway, "
		                       "never the other way; remove endpoint");
	if (auto v = get_bool(t, "initiate", "[[peer]]"); v && v->value)
		fail(v->line, is + ": its users connect to the gateway, which never initiates to them; "
		                   "remove initiate = true");
	if (const toml::node* n = t.get("allowed_ips"))
		fail(line_of(*n), is + " and has allowed_ips; a template has none of its own: each user "
		                       "gets an address from [tunnel] address_pool, and networks behind a "
		                       "user go in its allowed_ips in users_file; remove allowed_ips here");
	if (config_.tunnel.address_pool.empty())
		fail(pattern.line, is + ", but [tunnel] has no address_pool; each user gets its address "
		                        "from it: add address_pool = [\"10.77.0.0/24\"] to [tunnel]");
}

/**
 * parse_ike_auth() - what each side needs for ike.auth, and nothing it
 * does not use:
 *   cert:          our certificate and key, and ca_dir for the peer's;
 *   EAP, gateway:  our certificate and key; users_file (MSCHAPv2) or
 *                  ca_dir for the clients' certificates (EAP-TLS);
 *   a template:    users_file may also be given with cert and EAP-TLS
 *                  (addresses and networks per user);
 *   rsa_pss:       where we sign AUTH with our certificate (cert, EAP
 *                  gateway), and only for an RSA key;
 *   EAP, client:   ca_dir for the gateway's certificate; eap_identity and
 *                  eap_password[_file] (MSCHAPv2) or our certificate and
 *                  key for TLS (EAP-TLS).
 */
void Loader::parse_ike_auth(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike) {
	constexpr std::string_view where = "[[peer]]";
	const bool gateway = role_ == Role::gateway;
	const bool eap = ike.auth == IkeAuth::eap_mschapv2 || ike.auth == IkeAuth::eap_tls;
	const std::string as = " with auth = " + q(ike_auth_name(ike.auth)) +
	                       (eap ? (gateway ? " on a gateway" : " on a client") : std::string());
	auto refuse = [&](std::string_view key, const std::string& why) {
		if (const toml::node* n = t.get(key))
			fail(line_of(*n),
			     q(key) + " of peer " + q(peer.name) + " is not used" + as + ": " + why);
	};
	const bool own_cert =
	    ike.auth == IkeAuth::cert || (eap && gateway) || (ike.auth == IkeAuth::eap_tls && !gateway);
	const bool trust = ike.auth == IkeAuth::cert || (eap && !gateway) || ike.auth == IkeAuth::eap_tls;
	if (!own_cert) {
		const char* why = ike.auth == IkeAuth::psk
		                      ? "a pre-shared key needs no certificate"
		                      : "the client proves itself with its EAP password, not a certificate";
		for (std::string_view k : {"cert_file", "private_key_file", "cert_chain_file"})
			refuse(k, why);
	}
	if (!trust) {
		const char* why =
		    ike.auth == IkeAuth::psk
		        ? "a pre-shared key needs no CA"
		        : "EAP-MSCHAPv2 clients prove themselves with passwords, not certificates";
		refuse("ca_dir", why);
		refuse("crl_files", why);
	}
	const bool tmpl = !ike.remote_pattern.empty();
	if (!(ike.auth == IkeAuth::eap_mschapv2 && gateway) && !tmpl)
		refuse("users_file", "it lists the EAP-MSCHAPv2 users a gateway accepts, or the users of "
		                     "a template peer (a gateway peer whose remote_id has '*')");
	if (!(eap && !gateway)) refuse("eap_identity", "it is a client's EAP user name");
	if (!(ike.auth == IkeAuth::eap_mschapv2 && !gateway)) {
		refuse("eap_password", "it is an EAP-MSCHAPv2 client's password");
		refuse("eap_password_file", "it is an EAP-MSCHAPv2 client's password");
	}
	// rsa_pss: how our RSA key signs AUTH, so only where we sign AUTH with
	// our certificate (an EAP-TLS client's key signs inside TLS instead).
	const bool sign_auth = ike.auth == IkeAuth::cert || (eap && gateway);
	if (!sign_auth)
		refuse("rsa_pss", ike.auth == IkeAuth::psk ? "a pre-shared key signs nothing"
		                  : ike.auth == IkeAuth::eap_tls
		                      ? "an EAP-TLS client signs inside TLS, not AUTH"
		                      : "the client signs no AUTH, the gateway does");
	if (own_cert) parse_own_cert(t, peer, ike);
	if (auto v = get_bool(t, "rsa_pss", where); v && sign_auth) {
		if (v->value && !ike.credentials->key_type().starts_with("RSA"))
			fail(v->line, "rsa_pss of peer " + q(peer.name) + " needs an RSA key; this key is " +
			                  ike.credentials->key_type() +
			                  ", which has no PSS form: remove rsa_pss");
		ike.rsa_pss = v->value;
	}
	if (trust) parse_trust(t, peer, ike);
	if ((ike.auth == IkeAuth::eap_mschapv2 && gateway) || tmpl) {
		auto users = get_string(t, "users_file", where);
		if (!users && ike.auth == IkeAuth::eap_mschapv2)
			fail(peer.line, "peer " + q(peer.name) + as +
			                    " needs users_file: a TOML file (mode 0600) of [[user]] tables "
			                    "with name and password");
		if (users) ike.users = parse_users(*users, peer, ike);
	}
	if (eap && !gateway) {
		auto id = get_string(t, "eap_identity", where);
		if (!id || id->value.empty() || id->value.size() > 255)
			fail(id ? id->line : peer.line,
			     "peer " + q(peer.name) + as +
			         " needs eap_identity: the user name to log in with (1 to 255 bytes)");
		ike.eap_identity = id->value;
	}
	if (ike.auth == IkeAuth::eap_mschapv2 && !gateway) {
		auto inline_pw = get_secret(t, "eap_password", where);
		auto pw_file = get_string(t, "eap_password_file", where);
		if (inline_pw && pw_file)
			fail(pw_file->line, "give either eap_password or eap_password_file for peer " +
			                        q(peer.name) + ", not both");
		if (!inline_pw && !pw_file)
			fail(peer.line, "peer " + q(peer.name) + as +
			                    " needs eap_password or eap_password_file (a file of mode 0600)");
		int line = 0;
		std::filesystem::path path;
		ike.eap_password = secret_text(inline_pw, pw_file,
		                               "'eap_password_file' of peer " + q(peer.name), line, path);
		while (!ike.eap_password.empty() &&
		       (ike.eap_password.back() == '\n' || ike.eap_password.back() == '\r'))
			ike.eap_password.pop_back();
		if (ike.eap_password.empty())
			fail(line, "the EAP password of peer " + q(peer.name) + " is empty");
		try {
			(void)ike::eap::nt_password_hash(ike.eap_password.view());
		} catch (const std::exception& e) {
			fail(line, "the EAP password of peer " + q(peer.name) + ": " + e.what());
		}
	}
}

/**
 * parse_users() - users_file: [[user]] tables, read as a private key is
 * (mode 0600, owned by root). Keys of a user:
 *   name:        required, 1 to 255 bytes: what the peer's users are known
 *                by (ike/users.hpp);
 *   password:    required with auth = eap-mschapv2, refused otherwise; only
 *                its NT hash is kept, the text is wiped;
 *   addresses:   fixed virtual addresses, at most one per family (template);
 *   allowed_ips: networks behind the user (template).
 * Addresses and networks are collected in user_claims_ for
 * check_user_overlaps(), which runs once every peer is known.
 */
std::shared_ptr<const ike::Users> Loader::parse_users(const Found<std::string>& f, const PeerConfig& peer,
                                                      const IkePeerConfig& ike) {
	const std::string what = "users_file of peer " + q(peer.name);
	const SecretString text = read_pem(f, what, true, kMaxUsersFile);
	toml::table doc;
	// The parsed document holds the passwords in toml++'s own strings: wipe
	// them however this function ends.
	struct WipePasswords {
		toml::table& doc;
		~WipePasswords() {
			if (toml::array* list = doc["user"].as_array())
				for (toml::node& n : *list)
					if (toml::table* u = n.as_table())
						if (toml::value<std::string>* pw =
						        (*u)["password"].as_string())
							OPENSSL_cleanse(pw->get().data(), pw->get().size());
		}
	} wipe{doc};
	try {
		doc = toml::parse(text.view());
	} catch (const toml::parse_error& e) {
		fail(f.line, what + " (" + f.value + ") line " + std::to_string(e.source().begin.line) +
		                 ": " + std::string(e.description()));
	}
	auto at = [&](const toml::node& n) {
		return what + " (" + f.value + ") line " + std::to_string(n.source().begin.line);
	};
	for (auto&& [k, v] : doc)
		if (k.str() != "user")
			fail(f.line, at(v) + ": unknown key " + q(std::string(k.str())) +
			                 "; the file holds only [[user]] tables");
	auto users = std::make_shared<ike::Users>();
	const toml::array* list = doc["user"].as_array();
	const bool mschap = ike.auth == IkeAuth::eap_mschapv2;
	const bool tmpl = !ike.remote_pattern.empty();
	if (!list || list->empty())
		fail(f.line, what + " (" + f.value + ") lists no users; add [[user]] tables with " +
		                 (mschap ? "name = \"...\" and password = \"...\"" : "name = \"...\""));
	if (list->size() > kMaxUsers)
		fail(f.line, what + " lists more than " + std::to_string(kMaxUsers) + " users");
	const size_t source = user_sources_.size();
	user_sources_.push_back({peer.name, f.value, f.line});
	for (const toml::node& n : *list) {
		const toml::table* u = n.as_table();
		if (!u) fail(f.line, at(n) + ": each user is a [[user]] table");
		for (auto&& [k, v] : *u)
			if (k.str() != "name" && k.str() != "password" && k.str() != "addresses" &&
			    k.str() != "allowed_ips")
				fail(f.line,
				     at(v) + ": unknown key " + q(std::string(k.str())) +
				         " in [[user]] (it takes name, password, addresses and allowed_ips)");
		const auto name = (*u)["name"].value<std::string>();
		if (!name || name->empty() || name->size() > 255)
			fail(f.line, at(n) + ": [[user]] needs name = \"...\" (1 to 255 bytes)");
		const std::string who = "user " + q(*name);
		ike::User user;
		const toml::node* pw = u->get("password");
		if (mschap) {
			if (!pw || !pw->is_string() || pw->as_string()->get().empty())
				fail(f.line, at(n) + ": " + who + " needs password = \"...\"");
			try {
				user.nt_hash = ike::eap::nt_password_hash(pw->as_string()->get());
			} catch (const std::exception& e) {
				fail(f.line, at(n) + ": the password of " + who + ": " + e.what());
			}
		} else if (pw) {
			fail(f.line, at(*pw) + ": " + who + " has a password, but peer " + q(peer.name) +
			                 " has auth = " + q(ike_auth_name(ike.auth)) +
			                 ": only EAP-MSCHAPv2 users have passwords; remove it");
		}
		// Each entry of an array of strings, with the line it is on.
		auto strings = [&](std::string_view key) {
			std::vector<std::pair<std::string, const toml::node*>> out;
			const toml::node* a = u->get(key);
			if (!a) return out;
			if (!tmpl)
				fail(f.line,
				     at(*a) + ": " + who + " has " + std::string(key) + ", but peer " +
				         q(peer.name) +
				         " is not a template (a remote_id with '*'), so it is one peer "
				         "whose addresses are its own allowed_ips; remove " +
				         std::string(key) + " or make the peer a template");
			if (!a->is_array())
				fail(f.line, at(*a) + ": " + std::string(key) + " of " + who +
				                 " must be a list in brackets, e.g. " + std::string(key) +
				                 " = [\"10.77.0.5\"]");
			for (const toml::node& e : *a->as_array()) {
				if (!e.is_string())
					fail(f.line, at(e) + ": every entry of " + std::string(key) + " of " +
					                 who + " must be a string in double quotes");
				out.emplace_back(e.as_string()->get(), &e);
			}
			return out;
		};
		for (const auto& [value, node] : strings("addresses")) {
			const std::optional<IpAddress> ip = parse_ip(value);
			if (!ip)
				fail(f.line, at(*node) + ": addresses entry " + q(value) + " of " + who +
				                 " is not an IP address; write one address without a prefix "
				                 "length, e.g. \"10.77.0.5\" or \"fd77::5\"");
			for (const IpAddress& other : user.addresses)
				if (other.family == ip->family)
					fail(f.line, at(*node) + ": " + who + " has two " +
					                 (ip->family == Family::v4 ? "IPv4" : "IPv6") +
					                 " addresses (" + q(to_string(other)) + " and " +
					                 q(value) +
					                 "); a user has at most one of each family");
			// The pool never leases an IPv4 subnet's network and broadcast
			// addresses (tunnel/address_pool.cpp); nor may a user have them.
			for (const IpPrefix& pool : config_.tunnel.address_pool) {
				if (!pool.contains(*ip) || ip->family != Family::v4 || pool.len > 30)
					continue;
				const bool network = *ip == pool.addr;
				const bool broadcast = host_bits_ones(*ip, pool.len);
				if (network || broadcast)
					fail(
					    f.line,
					    at(*node) + ": address " + q(value) + " of " + who + " is the " +
					        (network ? "network" : "broadcast") +
					        " address of [tunnel] address_pool entry " +
					        q(to_string(pool)) +
					        "; a fixed address is a host address inside the pool, or any "
					        "address outside every pool network");
			}
			user.addresses.push_back(*ip);
			user_claims_.push_back({IpPrefix{*ip, static_cast<uint8_t>(ip->max_prefix())}, *name,
			                        source, static_cast<int>(node->source().begin.line), true});
		}
		for (const auto& [value, node] : strings("allowed_ips")) {
			const std::optional<IpPrefix> p = parse_prefix(value);
			if (!p)
				fail(f.line,
				     at(*node) + ": allowed_ips entry " + q(value) + " of " + who +
				         " is not an address or prefix; write e.g. \"192.168.60.0/24\"");
			if (p->network() != *p)
				fail(f.line, at(*node) + ": allowed_ips entry " + q(value) + " of " + who +
				                 " has host bits set; did you mean " +
				                 q(to_string(p->network())) + "?");
			user.allowed_ips.push_back(*p);
			user_claims_.push_back(
			    {*p, *name, source, static_cast<int>(node->source().begin.line), false});
		}
		if (!users->emplace(*name, std::move(user)).second)
			fail(f.line, at(n) + ": " + who + " is listed twice");
	}
	return users;
}

/**
 * check_user_overlaps() - every inner address belongs to one peer or user:
 * the fixed addresses and allowed_ips of the users of all peers must not
 * overlap each other, a peer's allowed_ips or the gateway's own [tunnel]
 * addresses. Prefixes either nest or are apart, so after sorting them by
 * start (shorter first) a stack of the prefixes holding the current one
 * finds every overlap in O(n log n); overlaps between the non-user sides
 * are left to their own checks.
 */
void Loader::check_user_overlaps() const {
	if (user_claims_.empty()) return;
	struct Item {
		IpPrefix prefix;
		int kind;     // 0: a user's claim, 1: a peer's allowed_ips, 2: a [tunnel] address
		size_t index; // into user_claims_, routes_ or config_.tunnel.addresses
	};
	std::vector<Item> items;
	items.reserve(user_claims_.size() + routes_.size() + config_.tunnel.addresses.size());
	for (size_t i = 0; i < user_claims_.size(); i++)
		items.push_back({user_claims_[i].prefix, 0, i});
	for (size_t i = 0; i < routes_.size(); i++)
		items.push_back({routes_[i].first, 1, i});
	for (size_t i = 0; i < config_.tunnel.addresses.size(); i++) {
		const IpAddress& a = config_.tunnel.addresses[i].addr;
		items.push_back({IpPrefix{a, static_cast<uint8_t>(a.max_prefix())}, 2, i});
	}
	auto key = [](const Item& x) {
		return std::tuple(x.prefix.addr.family, x.prefix.addr.bytes, x.prefix.len, x.kind, x.index);
	};
	std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) { return key(a) < key(b); });
	auto describe = [&](const Item& x) {
		switch (x.kind) {
		case 0: {
			const UserClaim& c = user_claims_[x.index];
			const UserSource& s = user_sources_[c.source];
			return (c.address ? "address " + q(to_string(c.prefix.addr))
			                  : "allowed_ips entry " + q(to_string(c.prefix))) +
			       " of user " + q(c.user) + " (users_file " + q(s.file) + " line " +
			       std::to_string(c.line) + ", peer " + q(s.peer) + ")";
		}
		case 1: {
			const auto& [prefix, claim] = routes_[x.index];
			return "allowed_ips entry " + q(to_string(prefix)) + " of peer " + q(claim.peer) +
			       " (line " + std::to_string(claim.line) + ")";
		}
		default:
			return "the gateway's own address " +
			       q(to_string(config_.tunnel.addresses[x.index].addr)) + " ([tunnel] addresses)";
		}
	};
	std::vector<const Item*> open; // nested: each holds the next
	for (const Item& x : items) {
		while (!open.empty() && !open.back()->prefix.contains(x.prefix.addr))
			open.pop_back();
		const Item* other = nullptr;
		if (x.kind == 0 && !open.empty()) {
			other = open.back();
		} else {
			for (auto it = open.rbegin(); it != open.rend() && !other; ++it)
				if ((*it)->kind == 0) other = *it;
		}
		if (other) {
			const Item& user = x.kind == 0 ? x : *other;
			const Item& them = x.kind == 0 ? *other : x;
			fail(user_sources_[user_claims_[user.index].source].line,
			     describe(user) + " overlaps " + describe(them) +
			         "; each inner address must belong to exactly one peer or user, so remove "
			         "or narrow one");
		}
		open.push_back(&x);
	}
}

/**
 * parse_fragment_size() - ike_fragment_size: the largest IP datagram an
 * IKE fragment may make (RFC 7383 section 2.5.1 leaves it to the sender).
 * At least ike::kMinFragmentSize, at most the largest IP datagram.
 */
uint32_t Loader::parse_fragment_size(const toml::table& t, std::string_view where, uint32_t fallback) {
	auto v = get_int(t, "ike_fragment_size", where);
	if (!v) return fallback;
	if (v->value < ike::kMinFragmentSize || v->value > 65535)
		fail(v->line, "ike_fragment_size " + std::to_string(v->value) +
		                  " is out of range; use bytes from " +
		                  std::to_string(ike::kMinFragmentSize) +
		                  " to 65535 (the default 1280 passes any path that takes IPv6)");
	return static_cast<uint32_t>(v->value);
}

} // namespace esptun::conf::detail

namespace esptun::conf {

std::string_view ike_auth_name(IkeAuth a) noexcept {
	switch (a) {
	case IkeAuth::psk:
		return "psk";
	case IkeAuth::cert:
		return "cert";
	case IkeAuth::eap_mschapv2:
		return "eap-mschapv2";
	case IkeAuth::eap_tls:
		return "eap-tls";
	}
	return "?";
}

std::vector<std::string> weak_peer_warnings(const Config& config) {
	std::vector<std::string> out;
	for (const PeerConfig& p : config.peers) {
		if (!p.ike) continue;
		const std::vector<std::string_view> weak =
		    ike::weak_algorithms(p.ike->ike_proposals, p.ike->esp_proposals);
		if (weak.empty()) continue;
		std::string names;
		for (std::string_view w : weak)
			names += (names.empty() ? "" : ", ") + std::string(w);
		out.push_back("peer " + p.name + " uses weak algorithms (" + names +
		              ") by its allow_weak = true: RFC 8247 advises against them; move the peer "
		              "to stronger ones when it can");
	}
	return out;
}

} // namespace esptun::conf
