// Aliasing between the destination of an evaluation and what it reads, decided from byte ranges
// alone, the same way for every backend: a pass that writes dst while reading an operand that
// overlaps it in any way other than element for element (x = x + 1 is fine; x = x.transpose() is
// not) is evaluated through a temporary.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/broadcast.hpp"
#include "../core/shape.hpp"

namespace meld::detail {

// Where a strided operand lives: its first element, layout and element size.
struct leaf_info {
  const char* data = nullptr;
  shape_t shape;
  strides_t strides;
  std::size_t elem = 0;
};

struct byte_span {
  std::uintptr_t lo, hi;  // [lo, hi)
};

inline byte_span span_of(const char* data, const shape_t& shape, const strides_t& strides,
                         std::size_t elem) {
  index_t lo = 0, hi = 0;
  for (int d = 0; d < shape.size(); ++d) {
    const index_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const auto e = static_cast<index_t>(elem);
  return {base + static_cast<std::uintptr_t>(lo * e),
          base + static_cast<std::uintptr_t>((hi + 1) * e)};
}
inline byte_span span_of(const leaf_info& l) {
  return span_of(l.data, l.shape, l.strides, l.elem);
}

inline bool overlaps(const byte_span& a, const byte_span& b) {
  return a.lo < b.hi && b.lo < a.hi;
}

// Whether one pass that writes dst while reading the leaves could read an element it has already
// overwritten. Reading exactly the element being written (x = x + 1) is safe.
inline bool needs_temporary(const leaf_info& dst, const leaf_info* leaves, int count) {
  const byte_span d = span_of(dst);
  for (int i = 0; i < count; ++i) {
    const leaf_info& leaf = leaves[i];
    if (!overlaps(span_of(leaf), d)) continue;
    if (leaf.elem != dst.elem || leaf.data != dst.data) return true;
    const strides_t b = broadcast_strides(leaf.shape, leaf.strides, dst.shape);
    for (int a = 0; a < dst.shape.size(); ++a)
      if (dst.shape[a] != 1 && b[a] != dst.strides[a]) return true;
  }
  return false;
}

// Whether the destination overlaps any leaf at all (for operations that read every operand
// element several times, such as a matrix product or a reduction along an axis).
inline bool overlaps_any(const leaf_info& dst, const leaf_info* leaves, int count) {
  const byte_span d = span_of(dst);
  for (int i = 0; i < count; ++i)
    if (overlaps(span_of(leaves[i]), d)) return true;
  return false;
}

}  // namespace meld::detail
