// The things `esptun-bench crypto` measures: esptun's ESP transforms and
// OpenSSL's EVP ciphers as the ceiling, behind one Subject interface
// (crypto_bench.cpp times them; subjects.cpp builds them).
#pragma once

#include "tunnel/esp_wire.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace esptun::bench::crypto_bench {

inline constexpr size_t kMinSize = tunnel::esp::kIpv4HeaderMin; // the inner packet is an IPv4 packet
inline constexpr size_t kMaxSize = 65519;                       // the TLS record length field holds 16 + size
inline constexpr uint64_t kFirstSeq = (uint64_t(1) << 32) + 1;  // ESN high half 1: it enters every ICV

/// Keeps the optimiser from dropping or merging the copies of a loop.
inline void clobber(const void* p) noexcept { asm volatile("" : : "r"(p) : "memory"); }

/// ESP payload bytes (inner packet, padding, trailer) for @align (tunnel/esp.cpp step 3).
inline size_t esp_payload_len(size_t inner, size_t align) noexcept {
	return (inner + tunnel::esp::kTrailerLen + align - 1) / align * align;
}

/**
 * Subject - one thing measured: an esptun transform or an EVP ceiling.
 *
 * A subject holds one prepared packet at a time. seal() runs @n seals;
 * copy_open() @n times copies the pristine sealed packet to the work buffer
 * and opens it; copy() only copies. Failures (an open that does not verify,
 * an EVP call that fails) are counted, never silent.
 */
class Subject {
public:
	Subject(std::string group, std::string suite, std::string impl, bool ceiling, bool primary)
	    : group_(std::move(group)), suite_(std::move(suite)), impl_(std::move(impl)), ceiling_(ceiling),
	      primary_(primary) {}
	virtual ~Subject() = default;
	Subject(const Subject&) = delete;
	Subject& operator=(const Subject&) = delete;

	virtual void prepare(size_t size) = 0;
	virtual void seal(uint64_t n) noexcept = 0;
	virtual bool can_open() const noexcept { return false; }
	virtual void copy_open(uint64_t) noexcept {}
	void copy(uint64_t n) noexcept {
		for (uint64_t i = 0; i < n; i++) {
			std::memcpy(work_.data() + off_, pristine_.data() + off_, len_);
			clobber(work_.data());
		}
	}

	/// "aes128-cbc-hmac-sha1" etc.: esptun rows compare to the primary ceiling of their group.
	const std::string& group() const noexcept { return group_; }
	const std::string& suite() const noexcept { return suite_; }
	const std::string& impl() const noexcept { return impl_; }
	bool ceiling() const noexcept { return ceiling_; }
	bool primary_ceiling() const noexcept { return ceiling_ && primary_; }
	uint64_t failures() const noexcept { return failures_; }

protected:
	std::string group_, suite_, impl_;
	bool ceiling_, primary_;
	uint64_t failures_ = 0;
	std::vector<uint8_t> pristine_, work_; ///< same size and offsets: same alignment
	size_t off_ = 0, len_ = 0;             ///< the packet inside both
};

/// make_subjects() - every esptun suite and implementation, then the ceilings.
std::vector<std::unique_ptr<Subject>> make_subjects();

} // namespace esptun::bench::crypto_bench
