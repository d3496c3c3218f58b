// A TCP bulk transfer through the tunnel: a receiver in one namespace, a
// sender in the other, both hashing the byte stream so corruption, loss or
// reordering that TCP did not repair shows up as a mismatch.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace esptun::bench::demo {

/**
 * StreamHash - a fast 64-bit hash of a byte stream (not cryptographic)
 *
 * Consumes 8-byte little-endian words with a multiply-xorshift step; bytes
 * that do not fill a word are carried to the next update(), so the result
 * depends only on the stream, not on how recv() split it.
 */
class StreamHash {
public:
	void update(std::span<const uint8_t> data) noexcept;
	/// digest() - the hash of everything so far, including its length
	uint64_t digest() const noexcept;

private:
	void mix(uint64_t word) noexcept;

	uint64_t h_ = 0x243f6a8885a308d3ull;
	uint64_t total_ = 0;
	uint64_t carry_ = 0;
	unsigned carry_len_ = 0;
};

/// One side's view of a transfer.
struct TransferSide {
	uint64_t bytes = 0;
	uint64_t hash = 0;
	double seconds = 0; ///< sender: connect to the receiver's final answer; receiver: accept to EOF

	std::string to_text() const;
	static TransferSide from_text(const std::string& text);
};

/**
 * TcpReceiver - a child process in namespace @netns listening on @addr:@port
 *
 * It accepts one connection, reads to EOF while hashing, answers with its
 * byte count so the sender can stop its clock, and reports a TransferSide
 * through result().
 */
class TcpReceiver {
public:
	/// TcpReceiver() - start the child and wait until it listens
	TcpReceiver(const std::string& netns, const std::string& addr, uint16_t port,
	            lab::Millis idle_timeout);
	/// result() - wait for the child's report; throws when it failed
	TransferSide result(lab::Millis timeout);

private:
	lab::Child child_;
	lab::Pipe pipe_;
};

/**
 * send_stream() - connect to @addr:@port and send @bytes pseudo-random bytes
 * @idle_timeout: give up when the connection makes no progress this long
 *
 * Runs in the caller's namespace (fork into the sender's namespace first).
 * Return: the sender's TransferSide. Throws on any socket error.
 */
TransferSide send_stream(const std::string& addr, uint16_t port, uint64_t bytes, lab::Millis idle_timeout);

} // namespace esptun::bench::demo
