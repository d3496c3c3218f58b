// A TCP bulk transfer through the tunnel: a receiver in one namespace, a
// sender in the other, both hashing the byte stream so corruption, loss or
// reordering that TCP did not repair shows up as a mismatch.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace esptun::bench::lab {

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
	/// The receiver notes the time (steady clock, ns) each time another
	/// kProgressStep bytes have arrived, so a caller can tell when the
	/// stream moved and when it stood still.
	static constexpr uint64_t kProgressStep = 1 << 20;
	/// Notes kept at most (a 100 GiB transfer's worth).
	static constexpr size_t kMaxProgress = 100000;

	uint64_t bytes = 0;
	uint64_t hash = 0;
	double seconds = 0; ///< sender: connect to the receiver's final answer; receiver: accept to EOF
	/// receiver: (steady clock ns, bytes so far) at every kProgressStep
	std::vector<std::pair<int64_t, uint64_t>> progress;

	/// bytes_by() - what the receiver's notes say had arrived by @t (0 before the first)
	uint64_t bytes_by(Clock::time_point t) const noexcept;
	/// note_time() - @t as the notes' clock writes it (steady clock, ns)
	static int64_t note_time(Clock::time_point t) noexcept;

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
	TcpReceiver(const std::string& netns, const std::string& addr, uint16_t port, Millis idle_timeout);
	/// result() - wait for the child's report; throws when it failed
	TransferSide result(Millis timeout);
	pid_t pid() const noexcept { return child_.pid(); }

private:
	Child child_;
	Pipe pipe_;
};

/// How send_stream() sends, beyond the defaults.
struct SendOptions {
	/// SO_MAX_PACING_RATE: at most this many bytes a second (TCP paces
	/// itself); 0: as fast as TCP goes
	uint64_t pace_bytes_per_s = 0;
	/// stop early, at a chunk's end, once this descriptor is readable (a
	/// pipe the caller writes to or closes); -1: send every byte
	int stop_fd = -1;
	/// the local address to send from (an IPv4 address); "": the route's
	std::string from;
	/// TCP_CONGESTION, e.g. "cubic"; "": the namespace's default
	std::string congestion;
};

/**
 * send_stream() - connect to @addr:@port and send @bytes pseudo-random bytes
 * (fewer when @opt.stop_fd says stop)
 * @idle_timeout: give up when the connection makes no progress this long
 *
 * Runs in the caller's namespace (fork into the sender's namespace first).
 * Return: the sender's TransferSide (bytes: what it sent). Throws on any
 * socket error, and when the receiver counted other than what was sent.
 */
TransferSide send_stream(const std::string& addr, uint16_t port, uint64_t bytes, Millis idle_timeout,
                         const SendOptions& opt = {});

/**
 * TcpSender - send_stream() in a child process inside namespace @netns,
 * running beside the caller until it has sent @bytes or is told to stop
 */
class TcpSender {
public:
	/// TcpSender() - start the child (it connects at once)
	/// @opt: as for send_stream(); its stop_fd is the sender's own
	TcpSender(const std::string& netns, const std::string& addr, uint16_t port, uint64_t bytes,
	          Millis idle_timeout, SendOptions opt = {});
	/// stop() - have it finish at its current chunk's end: a byte, not the
	/// pipe's end, since other children forked meanwhile hold copies of it
	void stop() noexcept;
	/// result() - stop() and wait for its report; throws when it failed
	TransferSide result(Millis timeout);
	pid_t pid() const noexcept { return child_.pid(); }

private:
	Pipe stop_, report_;
	Child child_;
};

} // namespace esptun::bench::lab
