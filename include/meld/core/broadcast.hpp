// Numpy broadcasting: trailing dimensions align, and an extent of 1 stretches to match.
#pragma once

#include "shape.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// The shape that a and b broadcast to; throws shape_error naming `what` and both shapes. (Not
/// inlined: every node of an expression calls it, and one copy is enough.)
MELD_ONCE MELD_RUNTIME shape_t broadcast_shapes(const shape_t& a, const shape_t& b,
                                                const char* what)
#if MELD_RUNTIME_DEFINITIONS
{
  if (a == b) return a;  // the common case
  const int rank = std::max(a.size(), b.size());
  shape_t out = dims::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.size() - rank + i, ib = b.size() - rank + i;
    const index_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      detail::raise<shape_error>(what, ": shapes ", a, " and ", b, " cannot be broadcast (axis ",
                                 i - rank, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  checked_size(out, what);  // {2^40, 1} and {1, 2^40} are fine alone, not together
  return out;
}
#else
    ;
#endif

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
