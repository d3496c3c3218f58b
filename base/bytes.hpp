// Bounds-checked big-endian loads and stores over packet and message memory:
// every wire access goes through these; nothing reinterpret_casts packets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace esptun {

inline uint16_t load_be16(const uint8_t* p) noexcept { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t load_be32(const uint8_t* p) noexcept {
	return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
inline uint64_t load_be64(const uint8_t* p) noexcept {
	return uint64_t(load_be32(p)) << 32 | load_be32(p + 4);
}
inline void store_be16(uint8_t* p, uint16_t v) noexcept {
	p[0] = uint8_t(v >> 8);
	p[1] = uint8_t(v);
}
inline void store_be32(uint8_t* p, uint32_t v) noexcept {
	p[0] = uint8_t(v >> 24);
	p[1] = uint8_t(v >> 16);
	p[2] = uint8_t(v >> 8);
	p[3] = uint8_t(v);
}
inline void store_be64(uint8_t* p, uint64_t v) noexcept {
	store_be32(p, uint32_t(v >> 32));
	store_be32(p + 4, uint32_t(v));
}

/// A cursor over received bytes. Every read checks the remaining length first;
/// a short buffer turns the reader "bad" and later reads return zero.
class ByteReader {
public:
	explicit ByteReader(std::span<const uint8_t> data) noexcept : data_(data) {}

	size_t remaining() const noexcept { return data_.size() - pos_; }
	bool ok() const noexcept { return ok_; }
	bool has(size_t n) const noexcept { return ok_ && remaining() >= n; }

	uint8_t u8() noexcept { return has(1) ? data_[pos_++] : fail<uint8_t>(1); }
	uint16_t be16() noexcept { return has(2) ? take(2, load_be16(&data_[pos_])) : fail<uint16_t>(2); }
	uint32_t be32() noexcept { return has(4) ? take(4, load_be32(&data_[pos_])) : fail<uint32_t>(4); }
	std::span<const uint8_t> bytes(size_t n) noexcept {
		if (!has(n)) return fail<std::span<const uint8_t>>(n);
		auto s = data_.subspan(pos_, n);
		pos_ += n;
		return s;
	}
	void skip(size_t n) noexcept { has(n) ? void(pos_ += n) : void(fail<int>(n)); }

private:
	template <class T> T take(size_t n, T v) noexcept {
		pos_ += n;
		return v;
	}
	template <class T> T fail(size_t) noexcept {
		ok_ = false;
		return T{};
	}
	std::span<const uint8_t> data_;
	size_t pos_ = 0;
	bool ok_ = true;
};

} // namespace esptun
