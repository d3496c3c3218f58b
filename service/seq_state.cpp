// SeqState: see seq_state.hpp. File format, one SA per line:
//   <peer name> <outbound SPI, hex> <reserved: last number that may be used>
// Lines starting with '#' are comments. Written atomically: a temporary file
// in the same folder, fsync, rename, fsync of the folder.
#include "service/seq_state.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace esptun::service {
namespace {

using Key = std::pair<std::string, uint32_t>;

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

} // namespace

std::map<Key, uint64_t> parse_seq_state(const std::string& text) {
	std::map<Key, uint64_t> out;
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

SeqState::SeqState(std::string path, tunnel::SaTable& table) : path_(std::move(path)), table_(table) {
	std::map<Key, uint64_t> stored;
	std::ifstream in(path_);
	if (in) {
		std::stringstream ss;
		ss << in.rdbuf();
		try {
			stored = parse_seq_state(ss.str());
		} catch (const std::exception& e) {
			throw std::runtime_error("sequence state " + path_ + ": " + e.what() +
			                         " (remove the file only if every peer restarts too)");
		}
	} else if (errno != ENOENT) {
		throw std::runtime_error("sequence state " + path_ + ": " + std::strerror(errno));
	}
	for (const auto& peer : table_.peers()) {
		if (!peer->keyed_statically) continue; // fresh keys, fresh numbers: nothing to resume
		tunnel::OutboundSa& sa = peer->out;
		const Key key{peer->name, sa.spi};
		const auto it = stored.find(key);
		const uint64_t last = it == stored.end() ? 0 : it->second;
		sa.next_seq = last + 1;
		sa.last_seq.store(last, std::memory_order_relaxed);
		resumed_[peer->name] = sa.next_seq;
		reserved_[key] = ahead(last, kMargin, sa.esn);
	}
	if (!write(reserved_)) throw std::runtime_error("sequence state " + path_ + ": " + error_);
	publish_limits();
}

void SeqState::publish_limits() {
	for (const auto& peer : table_.peers())
		if (peer->keyed_statically)
			peer->out.seq_limit.store(reserved_.at({peer->name, peer->out.spi}),
			                          std::memory_order_release);
}

bool SeqState::refresh() {
	std::map<Key, uint64_t> want = reserved_;
	bool grow = false;
	for (const auto& peer : table_.peers()) {
		if (!peer->keyed_statically) continue;
		const tunnel::OutboundSa& sa = peer->out;
		const uint64_t last = sa.last_seq.load(std::memory_order_relaxed);
		uint64_t& r = want[{peer->name, sa.spi}];
		if (r - std::min(r, last) < kMargin / 2 && ahead(last, kMargin, sa.esn) > r) {
			r = ahead(last, kMargin, sa.esn);
			grow = true;
		}
	}
	if (!grow) return true;
	if (!write(want)) return false; // durable first: only then may the data path go further
	reserved_ = std::move(want);
	publish_limits();
	return true;
}

bool SeqState::save_exact() {
	std::map<Key, uint64_t> exact;
	for (const auto& peer : table_.peers())
		if (peer->keyed_statically)
			exact[{peer->name, peer->out.spi}] =
			    peer->out.last_seq.load(std::memory_order_relaxed);
	return write(exact);
}

uint64_t SeqState::resumed_at(const std::string& peer) const {
	const auto it = resumed_.find(peer);
	return it == resumed_.end() ? 0 : it->second;
}

bool SeqState::write(const std::map<Key, uint64_t>& reserved) {
	std::string text = "# esptun outbound sequence numbers: <peer> <SPI> <last that may have been used>\n"
	                   "# Written by esptun; a restart resumes above these. Do not edit.\n";
	for (const auto& [key, seq] : reserved) {
		char spi[16];
		std::snprintf(spi, sizeof spi, "0x%08x", key.second);
		text += key.first + " " + spi + " " + std::to_string(seq) + "\n";
	}
	const std::string tmp = path_ + ".tmp";
	auto fail = [&](const char* what, int err) {
		error_ = std::string(what) + " " + tmp + ": " + std::strerror(err);
		::unlink(tmp.c_str());
		return false;
	};
	const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) return fail("open", errno);
	int err = write_all(fd, text);
	if (!err && ::fsync(fd) != 0) err = errno;
	if (::close(fd) != 0 && !err) err = errno;
	if (err) return fail("write", err);
	if (::rename(tmp.c_str(), path_.c_str()) != 0) return fail("rename to", errno);
	const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)::fsync(dfd); // the rename itself durable; best effort on odd file systems
		::close(dfd);
	}
	error_.clear();
	return true;
}

} // namespace esptun::service
