// Growing a vector ahead of appends that must not throw.
#pragma once

#include <algorithm>
#include <cstddef>

namespace esptun {

/**
 * reserve_room() - capacity for at least @n elements in @v, at least
 * doubling it when it grows. reserve(size() + 1) before each append
 * allocates exactly that much and so moves (or copies) every element on
 * every append; this keeps appends amortized O(1) while still taking the
 * allocation (and its possible failure) before the append.
 */
template <class Vector> void reserve_room(Vector& v, size_t n) {
	if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
}

} // namespace esptun
