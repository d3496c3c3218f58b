// Tests for base/secret.hpp: every buffer a SecretBytes or SecretString gives
// up is zero by the time it is freed (issue 16, key hygiene). The checks look
// at memory the test owns: an upstream allocator that inspects each block as
// it is handed back, or storage the object was placement-new'd into.
#include "base/secret.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

using namespace esptun;

namespace {

/// What CheckingUpstream saw: blocks freed, and how many were not all zero.
struct FreeLog {
	int freed = 0;
	int dirty = 0;
};
FreeLog g_log;

/// An upstream allocator that checks each block's bytes before freeing it.
template <class T> struct CheckingUpstream {
	using value_type = T;
	CheckingUpstream() noexcept = default;
	template <class U> CheckingUpstream(const CheckingUpstream<U>&) noexcept {}
	T* allocate(size_t n) { return std::allocator<T>().allocate(n); }
	void deallocate(T* p, size_t n) noexcept {
		const auto* b = reinterpret_cast<const unsigned char*>(p);
		g_log.freed++;
		if (!std::all_of(b, b + n * sizeof(T), [](unsigned char c) { return c == 0; })) g_log.dirty++;
		std::allocator<T>().deallocate(p, n);
	}
	template <class U> bool operator==(const CheckingUpstream<U>&) const noexcept { return true; }
};

using CheckedSecret = std::vector<uint8_t, WipingAllocator<uint8_t, CheckingUpstream<uint8_t>>>;

/// True when @needle occurs anywhere in @hay.
bool contains(std::span<const unsigned char> hay, std::string_view needle) {
	return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

} // namespace

TEST_CASE("SecretBytes' allocator zeroes the buffer before freeing it") {
	g_log = {};
	{
		CheckedSecret k(48, 0xa5);
		CHECK(k[47] == 0xa5);
	}
	CHECK(g_log.freed == 1);
	CHECK(g_log.dirty == 0);
}

TEST_CASE("a growing SecretBytes wipes each buffer it outgrows, not only the last") {
	g_log = {};
	{
		CheckedSecret k;
		for (int i = 0; i < 1000; i++)
			k.push_back(uint8_t(i | 1)); // never zero, so a missed wipe shows
		CHECK(k.size() == 1000);
	}
	CHECK(g_log.freed > 3); // several reallocations happened
	CHECK(g_log.dirty == 0);
}

TEST_CASE("the checking allocator does see bytes that are not wiped") {
	// The control for the two cases above: without WipingAllocator the same
	// upstream reports the block dirty, so those checks can fail.
	g_log = {};
	{ std::vector<uint8_t, CheckingUpstream<uint8_t>> plain(48, 0xa5); }
	CHECK(g_log.freed == 1);
	CHECK(g_log.dirty == 1);
}

TEST_CASE("SecretString wipes a short secret kept inside the object") {
	// Short strings live in the object's own buffer and never reach the
	// allocator: the destructor must wipe them. Storage we own shows what is left.
	alignas(SecretString) unsigned char storage[sizeof(SecretString)];
	auto* s = new (storage) SecretString(std::string_view("k3y!s3cr"));
	REQUIRE(s->capacity() < 16); // really the in-object buffer
	CHECK(contains(storage, "k3y!s3cr"));
	s->~SecretString();
	CHECK_FALSE(contains(storage, "k3y!s3cr"));
}

TEST_CASE("SecretString keeps its text and converts to bytes") {
	SecretString s(std::string_view("0x00112233445566778899aabbccddeeff"));
	CHECK(s.view() == "0x00112233445566778899aabbccddeeff");
	CHECK(s.bytes().size() == 34);
	SecretString moved = std::move(s);
	CHECK(moved.view().size() == 34);
}

TEST_CASE("WipeOnExit zeroes a std::string's whole buffer at scope end") {
	std::string text = "psk = \"correct horse battery staple, but longer than SSO\"";
	const size_t cap = text.capacity();
	{ WipeOnExit guard(text); }
	CHECK(text.capacity() == cap);
	CHECK(std::all_of(text.data(), text.data() + cap, [](char c) { return c == 0; }));
}

TEST_CASE("SecretBytes compares equal to plain bytes with the same content") {
	SecretBytes a = secret_copy(std::vector<uint8_t>{1, 2, 3});
	CHECK(a == std::vector<uint8_t>{1, 2, 3});
	CHECK_FALSE(a == std::vector<uint8_t>{1, 2});
	CHECK_FALSE(a == std::vector<uint8_t>{1, 2, 4});
}
