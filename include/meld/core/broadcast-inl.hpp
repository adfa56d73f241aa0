// The definitions of broadcast.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by broadcast.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "broadcast.hpp"

namespace meld {

MELD_ONCE MELD_RUNTIME shape_t broadcast_shapes(const shape_t& a, const shape_t& b,
                                                const char* what) {
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

}  // namespace meld
