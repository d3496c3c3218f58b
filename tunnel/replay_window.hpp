// Anti-replay window with extended sequence number inference (RFC 4303
// section 3.4.3 and appendix A2), kept as a ring of 64-bit words that slides
// a word at a time (RFC 6479). Inbound path: check -> decrypt -> commit.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace esptun::tunnel {

class ReplayWindow {
public:
	/**
	 * ReplayWindow() - an empty window.
	 * @size: packets the window covers; 0 disables the replay check (sequence
	 *        numbers are still tracked so ESN high bits can be inferred)
	 * @esn:  64-bit extended sequence numbers; otherwise 32-bit
	 */
	ReplayWindow(uint32_t size, bool esn);

	/**
	 * check() - may a packet with this low sequence number be accepted?
	 * Return: the full 64-bit sequence number to authenticate with, or
	 * nullopt for a replay or a sequence number left of the window. Changes
	 * nothing: call commit() only once the ICV verified (RFC 4303 3.4.3).
	 */
	std::optional<uint64_t> check(uint32_t seq_lo) const noexcept;

	/**
	 * commit() - record an authenticated sequence number.
	 * Return: true when it became the new highest sequence number.
	 */
	bool commit(uint64_t seq) noexcept;

	uint64_t highest() const noexcept { return top_; }
	uint32_t size() const noexcept { return size_; }
	bool esn() const noexcept { return esn_; }

private:
	uint64_t infer(uint32_t seq_lo) const noexcept;

	std::vector<uint64_t> bits_; ///< ring of words; bit (seq % ring bits) marks seq as seen
	uint64_t ring_mask_ = 0;     ///< words in the ring - 1 (a power of two)
	uint64_t top_ = 0;           ///< highest authenticated sequence number, 0 = none yet
	uint32_t size_;
	bool esn_;
};

} // namespace esptun::tunnel
