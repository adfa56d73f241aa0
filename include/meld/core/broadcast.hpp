// Numpy broadcasting: trailing dimensions align, and an extent of 1 stretches to match.
#pragma once

#include "shape.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// The shape that a and b broadcast to; throws shape_error naming `what` and both shapes. (Not
/// inlined: every node of an expression calls it, and one copy is enough.)
shape_t broadcast_shapes(const shape_t& a, const shape_t& b, const char* what);

/// True when `from` broadcasts to exactly `to` (numpy's broadcast_to rule).
inline bool broadcasts_to(const shape_t& from, const shape_t& to) {
  if (from.size() > to.size()) return false;
  for (int i = 0; i < from.size(); ++i) {
    const index_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

/// The strides with which an operand of (shape, strides) is read when broadcast to `to`:
/// missing leading axes and stretched axes get stride 0. Requires broadcasts_to(shape, to).
inline strides_t broadcast_strides(const shape_t& shape, const strides_t& strides,
                                   const shape_t& to) {
  strides_t out = dims::filled(to.size(), 0);
  const int lead = to.size() - shape.size();
  for (int i = 0; i < shape.size(); ++i)
    out[lead + i] = (shape[i] == 1 && to[lead + i] != 1) ? 0 : strides[i];
  return out;
}

/// @}

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "broadcast-inl.hpp"
#endif
