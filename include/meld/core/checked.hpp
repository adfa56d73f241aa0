// Overflow-checked index arithmetic for the code that builds shapes, strides and offsets. An
// extent, a stride or an offset that wraps around in int64 makes a view that reads and writes
// outside its buffer, so every such product and sum goes through these: the exact result, or
// shape_error naming the operation and the values.
#pragma once

#include <limits>

#include "config.hpp"
#include "error.hpp"

namespace meld::detail {

// a + b and a * b into `out`; false (out unspecified) when the exact result does not fit.
[[nodiscard]] constexpr bool add_fits(index_t a, index_t b, index_t& out) noexcept {
#if defined(_MSC_VER) && !defined(__clang__)
  if ((b > 0 && a > std::numeric_limits<index_t>::max() - b) ||
      (b < 0 && a < std::numeric_limits<index_t>::min() - b))
    return false;
  out = a + b;
  return true;
#else
  return !__builtin_add_overflow(a, b, &out);
#endif
}

[[nodiscard]] constexpr bool mul_fits(index_t a, index_t b, index_t& out) noexcept {
#if defined(_MSC_VER) && !defined(__clang__)
  constexpr index_t hi = std::numeric_limits<index_t>::max(),
                    lo = std::numeric_limits<index_t>::min();
  if (a != 0 && b != 0) {
    const bool fits =
        a > 0 ? (b > 0 ? a <= hi / b : b >= lo / a) : (b > 0 ? a >= lo / b : a >= hi / b);
    if (!fits) return false;
  }
  out = a * b;
  return true;
#else
  return !__builtin_mul_overflow(a, b, &out);
#endif
}

// a * b and a + b, or shape_error "<what>: <args...> overflows" (args describe the values, e.g.
// "the element count of shape ", shape).
template <class... Args>
index_t checked_mul(index_t a, index_t b, const char* what, const Args&... args) {
  index_t out = 0;
  if (!mul_fits(a, b, out)) raise<shape_error>(what, ": ", args..., " overflows");
  return out;
}

template <class... Args>
index_t checked_add(index_t a, index_t b, const char* what, const Args&... args) {
  index_t out = 0;
  if (!add_fits(a, b, out)) raise<shape_error>(what, ": ", args..., " overflows");
  return out;
}

}  // namespace meld::detail
