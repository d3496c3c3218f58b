// Anti-replay window: see replay_window.hpp.
#include "tunnel/replay_window.hpp"

#include <bit>

namespace esptun::tunnel {

ReplayWindow::ReplayWindow(uint32_t size, bool esn) : size_(size), esn_(esn) {
	// One spare word beyond the window so that sliding by a partial word
	// never clears bits still inside it (RFC 6479 section 2).
	uint64_t words = std::bit_ceil(uint64_t(size) / 64 + 2);
	bits_.assign(words, 0);
	ring_mask_ = words - 1;
}

/**
 * infer() - the full sequence number for a received low half.
 *
 * Without ESN the low half is the sequence number. With ESN this is RFC 4303
 * appendix A2.2: the window's bottom decides whether the packet belongs to
 * the current 2^32 subspace, the previous one (window straddles a wrap) or the
 * next. A disabled window has no bottom, so the candidate closest to the
 * highest sequence number wins.
 */
uint64_t ReplayWindow::infer(uint32_t seq_lo) const noexcept {
	if (!esn_) return seq_lo;
	uint32_t th = uint32_t(top_ >> 32);
	uint32_t tl = uint32_t(top_);
	uint32_t seq_hi;
	if (size_ == 0) {
		// Distance forward from tl wraps modulo 2^32: up to 2^31 ahead counts
		// as ahead, otherwise behind.
		uint32_t ahead = seq_lo - tl;
		if (ahead < 0x80000000u)
			seq_hi = (seq_lo < tl) ? th + 1 : th;
		else
			seq_hi = (seq_lo > tl && th > 0) ? th - 1 : th;
	} else {
		uint32_t bottom = tl - (size_ - 1); // wraps when the window straddles 2^32
		if (tl >= size_ - 1)                // case A: window inside one subspace
			seq_hi = (seq_lo >= bottom) ? th : th + 1;
		else // case B: window straddles the wrap; a fresh SA (th == 0) has no previous subspace
			seq_hi = (seq_lo >= bottom && th > 0) ? th - 1 : th;
	}
	return uint64_t(seq_hi) << 32 | seq_lo;
}

std::optional<uint64_t> ReplayWindow::check(uint32_t seq_lo) const noexcept {
	uint64_t seq = infer(seq_lo);
	if (seq == 0) return std::nullopt; // sequence numbers start at 1 (RFC 4303 3.3.3)
	if (size_ == 0 || seq > top_) return seq;
	if (top_ - seq >= size_) return std::nullopt; // left of the window
	uint64_t bit = seq & 63;
	uint64_t word = (seq >> 6) & ring_mask_;
	if (bits_[word] >> bit & 1) return std::nullopt;
	return seq;
}

bool ReplayWindow::commit(uint64_t seq) noexcept {
	bool newest = seq > top_;
	if (newest) {
		// Clear the words the window slides over, at most the whole ring.
		uint64_t old_word = top_ >> 6;
		uint64_t new_word = seq >> 6;
		uint64_t n = new_word - old_word;
		if (n > ring_mask_) n = ring_mask_ + 1;
		for (uint64_t i = 1; i <= n; i++)
			bits_[(old_word + i) & ring_mask_] = 0;
		top_ = seq;
	}
	bits_[(seq >> 6) & ring_mask_] |= uint64_t(1) << (seq & 63);
	return newest;
}

} // namespace esptun::tunnel
