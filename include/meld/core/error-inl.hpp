// The definitions of error.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by error.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "error.hpp"

namespace meld {
namespace detail {

[[gnu::cold]] MELD_NOINLINE MELD_RUNTIME std::string cat_list(const cat_arg* args, int count) {
  std::string out;
  char buffer[32];
  for (int k = 0; k < count; ++k) {
    const cat_arg& a = args[k];
    switch (a.kind) {
      case cat_arg::text:
        out.append(a.s, a.n);
        break;
      case cat_arg::signed_int:
        out += std::to_string(a.i);
        break;
      case cat_arg::unsigned_int:
        out += std::to_string(a.u);
        break;
      case cat_arg::floating:
        out.append(buffer, std::size_t(std::snprintf(buffer, sizeof(buffer), "%g", a.d)));
        break;
      case cat_arg::character:
        out += a.c;
        break;
      case cat_arg::other:
        a.append(out, a.p);
        break;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace meld
