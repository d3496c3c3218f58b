// The config loader's class, shared by the files that implement it
// (config.cpp, config_ike.cpp); internal to conf/. With config*.cpp, the only
// code that includes toml++.
#pragma once

#include "base/disjoint_prefixes.hpp"
#include "conf/config.hpp"
#include "conf/file_source.hpp"

#include <toml++/toml.h>

#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace esptun::conf::detail {

namespace fs = std::filesystem;

inline int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }
inline int line_of(const toml::key& k) { return static_cast<int>(k.source().begin.line); }

inline std::string_view type_name(toml::node_type t) {
	switch (t) {
	case toml::node_type::table:
		return "a table";
	case toml::node_type::array:
		return "an array";
	case toml::node_type::string:
		return "a string";
	case toml::node_type::integer:
		return "an integer";
	case toml::node_type::floating_point:
		return "a floating-point number";
	case toml::node_type::boolean:
		return "a boolean";
	case toml::node_type::date:
		return "a date";
	case toml::node_type::time:
		return "a time";
	case toml::node_type::date_time:
		return "a date-time";
	case toml::node_type::none:
		break;
	}
	return "nothing";
}

inline std::string q(std::string_view s) { return "'" + std::string(s) + "'"; }

/// A value found in a table together with the line it sits on.
template <typename T> struct Found {
	T value;
	int line;
};

/// Cross-peer bookkeeping: which peer (and line) already claimed a value.
struct Claim {
	std::string peer;
	int line;
};

class Loader {
public:
	/// @files: where key files are read (file_source.hpp)
	Loader(const std::string& source, Role role, const fs::path& base_dir,
	       FileSource& files = real_files())
	    : source_(source), role_(role), base_dir_(base_dir), files_(files) {}

	Config load(std::string_view text);
	/// The line of the first key or PSK written in the config itself (not
	/// in a key file); 0 when there is none. load_config() then requires
	/// the config's own mode to be private too.
	int inline_secret_line() const noexcept { return inline_secret_line_; }

private:
	[[noreturn]] void fail(int line, const std::string& message) const {
		throw ConfigError(source_, line, message);
	}

	void check_keys(const toml::table& t, std::span<const std::string_view> allowed,
	                std::string_view where);
	const toml::node* typed(const toml::table& t, std::string_view key, std::string_view where,
	                        toml::node_type want, std::string_view hint = {});
	std::optional<Found<std::string>> get_string(const toml::table& t, std::string_view key,
	                                             std::string_view where);
	/// get_secret() - get_string() for a key or PSK: the copy wipes itself,
	/// and the config counts as holding inline secrets (inline_secret_line()).
	std::optional<Found<SecretString>> get_secret(const toml::table& t, std::string_view key,
	                                              std::string_view where);
	/**
	 * secret_text() - a key or PSK given inline (@inline_value) or in a file
	 * (@file, relative to the config's folder, private: read_key_file())
	 * @file_desc: how messages name the file key, e.g. "'psk_file' of peer 'x'"
	 * @line:      set to the line that gave it
	 * @path:      set to the file read; empty when inline
	 * One of the two must be given; fails on an empty or unreadable file.
	 */
	SecretString secret_text(std::optional<Found<SecretString>>& inline_value,
	                         const std::optional<Found<std::string>>& file, const std::string& file_desc,
	                         int& line, std::filesystem::path& path);
	std::optional<Found<int64_t>> get_int(const toml::table& t, std::string_view key,
	                                      std::string_view where, std::string_view hint = {});
	std::optional<Found<bool>> get_bool(const toml::table& t, std::string_view key,
	                                    std::string_view where);
	std::vector<Found<std::string>> get_strings(const toml::table& t, std::string_view key,
	                                            std::string_view where, int* line);

	void parse_tunnel(const toml::table& t);
	void parse_peers(const toml::node& n);
	PeerConfig parse_peer(const toml::table& t);
	void parse_allowed_ips(const toml::table& t, PeerConfig& peer, bool may_be_empty);
	void parse_endpoint_key(const toml::table& t, PeerConfig& peer);
	IkePeerConfig parse_ike_peer(const toml::table& t, const PeerConfig& peer);
	void parse_ike_auth(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike);
	void parse_own_cert(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike);
	void parse_trust(const toml::table& t, const PeerConfig& peer, IkePeerConfig& ike);
	void check_template(const toml::table& t, const PeerConfig& peer, const IkePeerConfig& ike,
	                    const Found<std::string>& pattern, int auth_line);
	std::shared_ptr<const ike::Users> parse_users(const Found<std::string>& file, const PeerConfig& peer,
	                                              const IkePeerConfig& ike);
	void check_user_overlaps() const;
	/**
	 * read_pem() - a PEM file named by a config value, read now (before any
	 * privilege drop) through files_
	 * @file:   the value and its line; a relative path is taken from the config's folder
	 * @what:   what it is, for messages ("cert_file of peer \"b\"")
	 * @secret: a private key: mode 0600 or stricter, owned by root (or by
	 *          the user the loader runs as)
	 */
	SecretString read_pem(const Found<std::string>& file, const std::string& what, bool secret,
	                      size_t max_size = kPemFileMax);
	/// A certificate, chain, CA or CRL file larger than this is refused.
	static constexpr size_t kPemFileMax = 256 * 1024;

	/// ike_fragment_size in @t ([tunnel] or a [[peer]]), checked; @fallback when absent.
	uint32_t parse_fragment_size(const toml::table& t, std::string_view where, uint32_t fallback);
	SaConfig parse_sa(const toml::table& peer_table, const PeerConfig& peer, std::string_view dir,
	                  const crypto::CipherSpec& spec);
	SecretBytes parse_key(const toml::table& t, int table_line, std::string_view where,
	                      std::string_view name, size_t want_len, const crypto::CipherSpec& spec);
	/// check_key_reuse() - refuse a static key used by two SAs (or both
	/// directions), naming the peers and directions, never the key
	void check_key_reuse() const;
	void check_role(int top_line);
	/// parse_redirect() - the [redirect] table at @line (config_redirect.cpp);
	/// after the peers, since it needs an IKE peer to redirect.
	void parse_redirect(const toml::table& t, int line);

	const std::string& source_;
	Role role_;
	fs::path base_dir_;
	FileSource& files_;
	Config config_;
	bool has_ipv6_address_ = false;
	int tunnel_line_ = 0;
	int mtu_line_ = 0;
	int route_all_line_ = 0;
	int kill_switch_line_ = 0;
	int address_pool_line_ = 0;
	int dns_line_ = 0;
	int listen_line_ = 0;
	int inline_secret_line_ = 0;
	std::map<std::string, int> names_;
	std::map<uint32_t, Claim> in_spis_, out_spis_;
	std::vector<std::pair<IpPrefix, Claim>> routes_;
	DisjointPrefixes<size_t> route_index_; ///< routes_ by start address (the value: its index)
	/// A users_file read: its peer, path and the config line naming it.
	struct UserSource {
		std::string peer;
		std::string file;
		int line;
	};
	/// A user's fixed address (as a host prefix) or allowed_ips entry.
	struct UserClaim {
		IpPrefix prefix;
		std::string user;
		size_t source; ///< into user_sources_
		int line;      ///< in the users file
		bool address;  ///< from addresses, not allowed_ips
	};
	std::vector<UserSource> user_sources_;
	std::vector<UserClaim> user_claims_;
};

} // namespace esptun::conf::detail
