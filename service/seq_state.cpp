// SeqState: see seq_state.hpp. File format, one key per line:
//   <key fingerprint, 64 hex digits> <reserved: last number that may be used>
// Lines starting with '#' are comments. Every write holds an exclusive flock
// on the folder while it reads, merges and replaces the file: a temporary
// file in the same folder, fsync, rename, fsync of the folder.
#include "service/seq_state.hpp"

#include "crypto/hmac.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

namespace esptun::service {
namespace {

/// What to do about a state file esptun cannot trust. Never "delete it": an
/// empty file would start every static key at 1 again.
constexpr const char* kDamagedAdvice =
    "; esptun cannot tell which sequence numbers its static keys have used, so it does not send "
    "with them: restore the file from a backup, or configure new keys (and SPIs) for every "
    "static peer, on both ends";
constexpr const char* kAccessAdvice = " (give the service read and write access to [tunnel] state_dir)";

/// The HMAC key that makes a fingerprint mean "a key in esptun's state file" only.
constexpr char kFingerprintLabel[] = "esptun seq-state key fingerprint v1";

std::string dir_of(const std::string& path) {
	const size_t slash = path.rfind('/');
	return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

/// write_all() - the whole of @text to @fd. Return: 0 or errno.
int write_all(int fd, const std::string& text) {
	for (size_t off = 0; off < text.size();) {
		const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
		if (n < 0) {
			if (errno == EINTR) continue;
			return errno;
		}
		off += size_t(n);
	}
	return 0;
}

/// The next sequence number an SA may not exceed, @margin ahead of @last.
uint64_t ahead(uint64_t last, uint64_t margin, bool esn) {
	const uint64_t cap = esn ? UINT64_MAX - 1 : uint64_t(UINT32_MAX);
	return last >= cap - margin ? cap : last + margin;
}

/// read_text() - the file at @path into @out. Return: 0, or errno (ENOENT: none).
int read_text(const std::string& path, std::string& out) {
	std::ifstream in(path);
	if (!in) return errno ? errno : EIO;
	std::stringstream ss;
	ss << in.rdbuf();
	out = ss.str();
	return 0;
}

/// DirLock - an exclusive flock on a folder, so writers of one state file
/// (several endpoints with one state_dir) take turns.
class DirLock {
public:
	explicit DirLock(const std::string& dir)
	    : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
		if (fd_ < 0) return;
		while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {}
	}
	~DirLock() {
		if (fd_ >= 0) ::close(fd_); // releases the lock
	}
	DirLock(const DirLock&) = delete;
	DirLock& operator=(const DirLock&) = delete;
	int fd() const noexcept { return fd_; }

private:
	int fd_;
};

std::runtime_error damaged(const std::string& path, const std::string& what) {
	return std::runtime_error("sequence state " + path + ": " + what + kDamagedAdvice);
}

} // namespace

std::string key_fingerprint(std::span<const uint8_t> enc_key, std::span<const uint8_t> auth_key) {
	const auto* label = reinterpret_cast<const uint8_t*>(kFingerprintLabel);
	crypto::Hmac mac(crypto::HmacHash::sha256, {label, sizeof kFingerprintLabel - 1});
	mac.begin();
	for (std::span<const uint8_t> part : {enc_key, auth_key}) {
		// Each key behind its length, so (enc, auth) pairs cannot be shifted into each other.
		const std::array<uint8_t, 4> len{uint8_t(part.size() >> 24), uint8_t(part.size() >> 16),
		                                 uint8_t(part.size() >> 8), uint8_t(part.size())};
		mac.update(len);
		mac.update(part);
	}
	std::array<uint8_t, 32> out{};
	mac.finish(out);
	std::string hex;
	for (uint8_t b : out) {
		char two[3];
		std::snprintf(two, sizeof two, "%02x", b);
		hex += two;
	}
	return hex;
}

KeyFingerprints key_fingerprints(const std::vector<tunnel::PeerParams>& params) {
	KeyFingerprints out;
	for (const auto& p : params)
		if (p.keyed_statically) out[p.name] = key_fingerprint(p.out.enc_key, p.out.auth_key);
	return out;
}

std::string seq_state_file(const std::string& state_dir) { return state_dir + "/esptun.seq"; }

std::string legacy_seq_state_file(const std::string& state_dir, const std::string& interface) {
	return state_dir + "/" + interface + ".seq";
}

std::map<std::string, uint64_t> parse_seq_state(const std::string& text) {
	std::map<std::string, uint64_t> out;
	std::istringstream in(text);
	int line_no = 0;
	for (std::string line; std::getline(in, line);) {
		line_no++;
		if (line.empty() || line[0] == '#') continue;
		const std::string at = "line " + std::to_string(line_no) + ": ";
		std::istringstream ls(line);
		std::string fp, seq_text, extra;
		if (!(ls >> fp >> seq_text))
			throw std::runtime_error(at + "want \"<key fingerprint> <sequence number>\"");
		if (ls >> extra)
			throw std::runtime_error(at + "an entry of the old \"<peer> <SPI> <number>\" format, "
			                              "which belongs in <interface>.seq, not here");
		if (fp.size() != 64 || !std::all_of(fp.begin(), fp.end(), [](char c) {
			    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
		    }))
			throw std::runtime_error(at + "bad key fingerprint (want 64 hex digits)");
		char* end = nullptr;
		errno = 0;
		const unsigned long long seq = std::strtoull(seq_text.c_str(), &end, 10);
		if (*end || errno || seq_text[0] == '-')
			throw std::runtime_error(at + "bad sequence number " + seq_text);
		out[fp] = seq;
	}
	return out;
}

std::map<std::pair<std::string, uint32_t>, uint64_t> parse_legacy_seq_state(const std::string& text) {
	std::map<std::pair<std::string, uint32_t>, uint64_t> out;
	std::istringstream in(text);
	int line_no = 0;
	for (std::string line; std::getline(in, line);) {
		line_no++;
		if (line.empty() || line[0] == '#') continue;
		std::istringstream ls(line);
		std::string name, spi_text, seq_text, extra;
		if (!(ls >> name >> spi_text >> seq_text) || (ls >> extra))
			throw std::runtime_error("line " + std::to_string(line_no) +
			                         ": want \"<peer> <spi> <sequence number>\"");
		char* end = nullptr;
		errno = 0;
		const unsigned long long spi = std::strtoull(spi_text.c_str(), &end, 16);
		if (*end || errno || spi == 0 || spi > UINT32_MAX)
			throw std::runtime_error("line " + std::to_string(line_no) + ": bad SPI " + spi_text);
		const unsigned long long seq = std::strtoull(seq_text.c_str(), &end, 10);
		if (*end || errno || seq_text[0] == '-')
			throw std::runtime_error("line " + std::to_string(line_no) +
			                         ": bad sequence number " + seq_text);
		out[{name, uint32_t(spi)}] = seq;
	}
	return out;
}

namespace {

/// read_entries() - the entries of the state file @path (none when it does
/// not exist yet); the caller holds the folder's lock. Throws runtime_error
/// with advice when the file is damaged or unreadable.
std::map<std::string, uint64_t> read_entries(const std::string& path) {
	std::string text;
	if (const int err = read_text(path, text); err == 0) {
		try {
			return parse_seq_state(text);
		} catch (const std::exception& e) {
			throw damaged(path, e.what());
		}
	} else if (err != ENOENT) {
		throw std::runtime_error("sequence state " + path + ": " + std::strerror(err) +
		                         kAccessAdvice);
	}
	return {};
}

/**
 * claim_key() - @name's key fingerprint in @keys, recorded in @owner
 * (fingerprint -> peer). Return: @name. Throws runtime_error when @keys has
 * none for it, or another peer in @owner already sends with that key.
 */
const std::string& claim_key(std::map<std::string, std::string>& owner, const KeyFingerprints& keys,
                             const std::string& name) {
	const auto fp = keys.find(name);
	if (fp == keys.end()) throw std::runtime_error("sequence state: no key fingerprint for peer " + name);
	if (auto [it, fresh] = owner.emplace(fp->second, name); !fresh)
		throw std::runtime_error("peers " + it->second + " and " + name +
		                         " send with the same key; give each SA its own key");
	return name;
}

} // namespace

SeqState::SeqState(std::string path, tunnel::SaTable& table, KeyFingerprints keys, const std::string& legacy)
    : path_(std::move(path)), table_(table), keys_(std::move(keys)) {
	std::map<std::string, uint64_t> stored;
	std::map<std::pair<std::string, uint32_t>, uint64_t> old;
	{
		DirLock lock(dir_of(path_));
		stored = read_entries(path_);
		std::string text;
		if (!legacy.empty()) {
			if (const int err = read_text(legacy, text); err == 0) {
				try {
					old = parse_legacy_seq_state(text);
				} catch (const std::exception& e) {
					throw damaged(legacy, e.what());
				}
			} else if (err != ENOENT) {
				throw std::runtime_error("sequence state " + legacy + ": " +
				                         std::strerror(err) + kAccessAdvice);
			}
		}
	}
	std::map<std::string, std::string> owner; // fingerprint -> peer, to catch a shared key
	for (const auto& peer : table_.peers()) {
		if (!peer->keyed_statically) continue; // fresh keys, fresh numbers: nothing to resume
		const auto fp = keys_.find(claim_key(owner, keys_, peer->name));
		tunnel::OutboundSa& sa = peer->out;
		const auto s = stored.find(fp->second);
		const auto o = old.find({peer->name, sa.spi});
		const uint64_t last =
		    std::max(s == stored.end() ? 0 : s->second, o == old.end() ? 0 : o->second);
		sa.next_seq = last + 1;
		sa.last_seq.store(last, std::memory_order_relaxed);
		resumed_[peer->name] = sa.next_seq;
		reserved_[fp->second] = ahead(last, kMargin, sa.esn);
	}
	if (!write(reserved_, Merge::raise))
		throw std::runtime_error("sequence state " + path_ + ": " + error_);
	// Read once: from now on the reservations live in the new file only.
	if (!legacy.empty() && !old.empty()) (void)::rename(legacy.c_str(), (legacy + ".migrated").c_str());
	publish_limits();
}

void SeqState::adopt(std::span<tunnel::Peer* const> peers, const KeyFingerprints& keys,
                     std::span<const std::string> replacing) {
	std::map<std::string, uint64_t> stored;
	{
		DirLock lock(dir_of(path_));
		stored = read_entries(path_);
	}
	auto replaced = [&](const std::string& name) {
		return std::find(replacing.begin(), replacing.end(), name) != replacing.end();
	};
	std::map<std::string, std::string> owner; // fingerprint -> peer, to catch a shared key
	for (const auto& [name, fp] : keys_)
		if (!replaced(name)) owner.emplace(fp, name);
	std::map<std::string, uint64_t> want, next_at;
	for (tunnel::Peer* peer : peers) {
		if (!peer->keyed_statically) continue;
		const auto fp = keys.find(claim_key(owner, keys, peer->name));
		const auto s = stored.find(fp->second);
		const uint64_t last = s == stored.end() ? 0 : s->second;
		next_at[peer->name] = last + 1;
		want[fp->second] = ahead(last, kMargin, peer->out.esn);
	}
	if (want.empty()) return;
	if (!write(want, Merge::raise)) throw std::runtime_error("sequence state " + path_ + ": " + error_);
	// Written: from here on nothing throws, and the peers may be published.
	for (tunnel::Peer* peer : peers) {
		if (!peer->keyed_statically) continue;
		const std::string& fp = keys.at(peer->name);
		tunnel::OutboundSa& sa = peer->out;
		const uint64_t first = next_at.at(peer->name);
		sa.next_seq = first;
		sa.last_seq.store(first - 1, std::memory_order_relaxed);
		sa.seq_limit.store(want.at(fp), std::memory_order_release);
		keys_[peer->name] = fp;
		reserved_[fp] = want.at(fp);
		resumed_[peer->name] = first;
	}
}

void SeqState::forget(std::span<const std::string> names) {
	for (const std::string& name : names) {
		keys_.erase(name);
		resumed_.erase(name);
	}
}

void SeqState::publish_limits() {
	for (const auto& peer : table_.peers())
		if (peer->keyed_statically)
			peer->out.seq_limit.store(reserved_.at(keys_.at(peer->name)),
			                          std::memory_order_release);
}

bool SeqState::refresh() {
	std::map<std::string, uint64_t> want = reserved_;
	std::map<std::string, uint64_t> grown; // only these are written: the rest is unchanged
	for (const auto& peer : table_.peers()) {
		if (!peer->keyed_statically) continue;
		const tunnel::OutboundSa& sa = peer->out;
		const uint64_t last = sa.last_seq.load(std::memory_order_relaxed);
		uint64_t& r = want[keys_.at(peer->name)];
		if (r - std::min(r, last) < kMargin / 2 && ahead(last, kMargin, sa.esn) > r) {
			r = ahead(last, kMargin, sa.esn);
			grown[keys_.at(peer->name)] = r;
		}
	}
	if (grown.empty()) return true;
	if (!write(grown, Merge::raise))
		return false; // durable first: only then may the data path go further
	reserved_ = std::move(want);
	publish_limits();
	return true;
}

bool SeqState::save_exact() {
	std::map<std::string, uint64_t> exact;
	for (const auto& peer : table_.peers())
		if (peer->keyed_statically)
			exact[keys_.at(peer->name)] = peer->out.last_seq.load(std::memory_order_relaxed);
	return write(exact, Merge::exact);
}

uint64_t SeqState::resumed_at(const std::string& peer) const {
	const auto it = resumed_.find(peer);
	return it == resumed_.end() ? 0 : it->second;
}

bool SeqState::write(const std::map<std::string, uint64_t>& mine, Merge how) {
	const std::string tmp = path_ + ".tmp";
	auto fail = [&](const std::string& what, int err) {
		error_ = what + ": " + std::strerror(err) + kAccessAdvice;
		::unlink(tmp.c_str());
		return false;
	};
	DirLock lock(dir_of(path_));
	if (lock.fd() < 0) return fail("open folder " + dir_of(path_), errno);
	std::map<std::string, uint64_t> all;
	std::string text;
	if (const int err = read_text(path_, text); err == 0) {
		try {
			all = parse_seq_state(text);
		} catch (const std::exception& e) {
			error_ = std::string(e.what()) + kDamagedAdvice;
			return false;
		}
	} else if (err != ENOENT) {
		return fail("read " + path_, err);
	}
	for (const auto& [fp, seq] : mine) {
		auto [it, fresh] = all.emplace(fp, seq);
		if (fresh) continue;
		if (how == Merge::raise) {
			// Another process got further with this key: keep its number, and
			// change it by one so its save_exact() sees it is no longer alone.
			if (seq > it->second)
				it->second = seq;
			else if (seq < it->second)
				it->second++;
		} else {
			// Lower to the exact number only where the file still holds our
			// own reservation: anything else was raised by another process.
			const auto ours = reserved_.find(fp);
			if (ours != reserved_.end() && it->second == ours->second) it->second = seq;
		}
	}
	text = "# esptun outbound sequence numbers of static SAs: <key fingerprint> <last that may have "
	       "been used>\n# Written by esptun; a restart resumes above these. Do not edit.\n";
	for (const auto& [fp, seq] : all)
		text += fp + " " + std::to_string(seq) + "\n";
	const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) return fail("open " + tmp, errno);
	int err = write_all(fd, text);
	if (!err && ::fsync(fd) != 0) err = errno;
	if (::close(fd) != 0 && !err) err = errno;
	if (err) return fail("write " + tmp, err);
	if (::rename(tmp.c_str(), path_.c_str()) != 0) return fail("rename " + tmp + " to " + path_, errno);
	(void)::fsync(lock.fd()); // the rename itself durable; best effort on odd file systems
	error_.clear();
	return true;
}

} // namespace esptun::service
