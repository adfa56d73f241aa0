// Slice specifications for tensor::slice: meld::all, meld::range{start, stop, step}, or an index.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>

#include "../core/config.hpp"
#include "../core/error.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// Every element of an axis.
struct all_t {};
/// Selects every element of an axis: t.slice(meld::all, 0).
inline constexpr all_t all{};

/// Elements start, start + step, ... before stop, with Python's conventions: negative start / stop
/// count from the end, an absent start / stop means "from the first / through the last" in the
/// direction of step. Unlike Python, a start or stop outside the axis is an error, not clamped.
struct range {
  /// The first index (absent: the first in the direction of step).
  std::optional<index_t> start;
  /// The index to stop before (absent: through the last in the direction of step).
  std::optional<index_t> stop;
  /// The step; negative walks backwards, 0 is an error.
  index_t step = 1;

  range() = default;
  /// range(start, stop, step).
  range(index_t start_, std::optional<index_t> stop_ = std::nullopt, index_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
  /// range(start, stop, step) with any of start and stop absent.
  range(std::optional<index_t> start_, std::optional<index_t> stop_, index_t step_)
      : start(start_), stop(stop_), step(step_) {}

  /// All elements, every step-th; a negative step walks backwards from the last.
  static range every(index_t step) { return range(std::nullopt, std::nullopt, step); }
};

namespace detail {

// An axis after slicing: the first index, the count and the step.
struct resolved_range {
  index_t first = 0, count = 0, step = 1;
};

inline std::string describe(const range& r) {
  auto s = [](const std::optional<index_t>& v) {
    return v ? std::to_string(*v) : std::string(":");
  };
  return cat("range(", s(r.start), ", ", s(r.stop), ", ", r.step, ")");
}

inline resolved_range resolve(const range& r, index_t n, int axis) {
  if (r.step == 0) raise<shape_error>("slice: ", describe(r), " on axis ", axis, " has step 0");
  auto fail = [&] {
    raise<shape_error>("slice: ", describe(r), " is out of range for axis ", axis, " of extent ",
                       n);
  };
  // v + n for a negative v: never overflows (n >= 0); a v below -n is out of range either way.
  auto norm = [&](index_t v) { return v < 0 ? v + n : v; };
  // ceil(distance / |step|) for distance > 0, without overflow for any step (INT64_MAX and
  // INT64_MIN included: numpy gives range(0, 3, INT64_MAX) one element): |step| as unsigned.
  const std::uint64_t magnitude = r.step > 0
                                      ? static_cast<std::uint64_t>(r.step)
                                      : std::uint64_t(0) - static_cast<std::uint64_t>(r.step);
  auto count = [&](index_t distance) {
    return static_cast<index_t>((static_cast<std::uint64_t>(distance) - 1) / magnitude + 1);
  };
  resolved_range out;
  out.step = r.step;
  if (r.step > 0) {
    const index_t s = r.start ? norm(*r.start) : 0;
    const index_t e = r.stop ? norm(*r.stop) : n;
    if (s < 0 || s > n || e < 0 || e > n) fail();
    out.first = s;
    out.count = e > s ? count(e - s) : 0;
  } else {
    const index_t s = r.start ? norm(*r.start) : n - 1;
    const index_t e = r.stop ? norm(*r.stop) : -1;
    if (n > 0 && (s < 0 || s >= n || e < -1 || e >= n || (r.stop && *r.stop < -n))) fail();
    if (n == 0 && (r.start || r.stop)) fail();
    out.first = n > 0 ? s : 0;
    out.count = (n > 0 && s > e) ? count(s - e) : 0;
  }
  return out;
}

}  // namespace detail

/// @}

}  // namespace meld
