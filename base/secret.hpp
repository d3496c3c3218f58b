// Storage for secret bytes (keys, pre-shared keys, DH shared secrets, the
// text they were parsed from) that wipes itself when freed, so a key does not
// outlive its use in freed heap memory that a later allocation, a core dump
// or a read of /proc/PID/mem could see (issue 16, key hygiene). The wipe is
// glibc's explicit_bzero(), which the compiler may not drop as a dead store;
// base/ stays free of OpenSSL (OPENSSL_cleanse does the same in crypto/).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string.h>
#include <string>
#include <vector>

namespace esptun {

/// secure_wipe() - overwrite @n bytes at @p with zeros; never optimised away.
inline void secure_wipe(void* p, size_t n) noexcept {
	if (p && n) ::explicit_bzero(p, n);
}

/**
 * WipingAllocator - an allocator that zeroes every block before handing it
 * back to @Upstream. A container using it wipes each buffer it gives up: on
 * destruction, and also the old buffer when it grows (a plain vector would
 * leave that copy behind in the heap). @Upstream is std::allocator except in
 * tests, which put a checking allocator there.
 */
template <class T, class Upstream = std::allocator<T>> struct WipingAllocator {
	using value_type = T;
	template <class U> struct rebind {
		using other =
		    WipingAllocator<U, typename std::allocator_traits<Upstream>::template rebind_alloc<U>>;
	};

	WipingAllocator() noexcept = default;
	template <class U, class V> WipingAllocator(const WipingAllocator<U, V>&) noexcept {}

	/// allocate() - @n objects from @Upstream.
	T* allocate(size_t n) { return Upstream().allocate(n); }
	/// deallocate() - wipe the whole block (not just the part in use), then free it.
	void deallocate(T* p, size_t n) noexcept {
		secure_wipe(p, n * sizeof(T));
		Upstream().deallocate(p, n);
	}
	template <class U, class V> bool operator==(const WipingAllocator<U, V>&) const noexcept {
		return true;
	}
};

/// Secret bytes: a vector whose buffers are wiped when freed. Converts to
/// std::span<const uint8_t> like any vector; copy with assign() or the range
/// constructor from plain bytes.
using SecretBytes = std::vector<uint8_t, WipingAllocator<uint8_t>>;

/// The same bytes from any contiguous range (e.g. a std::vector returned by a test helper).
inline SecretBytes secret_copy(std::span<const uint8_t> b) { return SecretBytes(b.begin(), b.end()); }

/// declassify() - plain bytes from secret ones that are public by design (a
/// cookie, a MAC sent on the wire); the explicit name marks the decision.
inline std::vector<uint8_t> declassify(std::span<const uint8_t> b) { return {b.begin(), b.end()}; }

/// Equality with plain bytes (found by argument-dependent lookup, since the
/// allocator lives in this namespace); for tests and known-answer checks, not
/// for comparing MACs (use a constant-time comparison there).
inline bool operator==(const SecretBytes& a, const std::vector<uint8_t>& b) noexcept {
	return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

/**
 * SecretString - text that holds a secret (a hex key or PSK as written in a
 * config or key file). Heap buffers are wiped through the allocator; the
 * destructor also wipes the small-string buffer inside the object, which
 * short strings use without allocating and which no allocator sees.
 */
class SecretString : public std::basic_string<char, std::char_traits<char>, WipingAllocator<char>> {
	using Base = std::basic_string<char, std::char_traits<char>, WipingAllocator<char>>;

public:
	using Base::Base;
	SecretString() = default;
	/// A copy of @s (the caller wipes or drops its own copy).
	explicit SecretString(std::string_view s) : Base(s.data(), s.size()) {}
	SecretString(const SecretString&) = default;
	SecretString(SecretString&&) noexcept = default;
	SecretString& operator=(const SecretString&) = default;
	SecretString& operator=(SecretString&&) noexcept = default;
	/// ~SecretString() - wipe the characters wherever they live (capacity
	/// covers the in-object buffer too); the allocator wipes a heap block again.
	~SecretString() { secure_wipe(Base::data(), Base::capacity()); }

	std::string_view view() const noexcept { return {Base::data(), Base::size()}; }
	std::span<const uint8_t> bytes() const noexcept {
		return {reinterpret_cast<const uint8_t*>(Base::data()), Base::size()};
	}
};

/**
 * WipeOnExit - wipes a std::string someone else owns when the scope ends,
 * for text that must pass through an interface taking std::string (e.g. a
 * whole config file read into memory before parsing).
 */
class WipeOnExit {
public:
	explicit WipeOnExit(std::string& s) noexcept : s_(s) {}
	~WipeOnExit() { secure_wipe(s_.data(), s_.capacity()); }
	WipeOnExit(const WipeOnExit&) = delete;
	WipeOnExit& operator=(const WipeOnExit&) = delete;

private:
	std::string& s_;
};

} // namespace esptun
