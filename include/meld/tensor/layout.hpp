// Strided layouts and the view operations on them: each takes a shape and strides (in elements)
// and returns new ones plus an element offset, never touching the data.
#pragma once

#include <algorithm>
#include <optional>
#include <type_traits>
#include <variant>

#include "../core/broadcast.hpp"
#include "../core/checked.hpp"
#include "../core/shape.hpp"
#include "slice.hpp"

namespace meld {

struct layout {
  shape_t shape;
  strides_t strides;
  index_t offset = 0;  // element offset of index (0, ..., 0) from the parent's first element
};

namespace detail {

inline bool is_row_major(const shape_t& shape, const strides_t& strides) {
  index_t expected = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

// ---- slicing ----------------------------------------------------------------------------------

template <class S>
concept slice_spec = std::same_as<std::remove_cvref_t<S>, all_t> ||
    std::same_as<std::remove_cvref_t<S>, range> || std::integral<std::remove_cvref_t<S>>;

// offset + index * strides[axis], checked (a view of a valid layout cannot overflow here, but a
// layout made by hand can).
inline index_t slice_offset(index_t offset, index_t index, const shape_t& shape,
                            const strides_t& strides, int axis) {
  auto fail = [&] {
    return shape_error(cat("slice: the offset of index ", index, " on axis ", axis, " of shape ",
                           shape, " with strides ", strides, " overflows"));
  };
  index_t step = 0, out = 0;
  if (!mul_fits(index, strides[axis], step) || !add_fits(offset, step, out)) throw fail();
  return out;
}

template <class... Specs>
layout slice_layout(const shape_t& shape, const strides_t& strides, const Specs&... specs) {
  constexpr int given = sizeof...(Specs);
  if (given > shape.size())
    raise<shape_error>("slice: ", given, " indices given for a tensor of rank ", shape.size(), " ",
                       shape);
  layout out;
  int axis = 0;
  auto apply = [&](const auto& spec) {
    using S = std::remove_cvref_t<decltype(spec)>;
    const index_t n = shape[axis];
    if constexpr (std::is_same_v<S, all_t>) {
      out.shape.push_back(n);
      out.strides.push_back(strides[axis]);
    } else if constexpr (std::is_same_v<S, range>) {
      const resolved_range r = resolve(spec, n, axis);
      out.offset = slice_offset(out.offset, r.first, shape, strides, axis);
      out.shape.push_back(r.count);
      // (A step larger than the axis leaves one element, whose stride does not matter.)
      out.strides.push_back(r.count > 1
                                ? checked_mul(strides[axis], r.step, "slice", "the stride of axis ",
                                              axis, " in shape ", shape, " with strides ", strides,
                                              " times step ", r.step)
                                : strides[axis]);
    } else {
      const index_t i = static_cast<index_t>(spec) < 0 ? static_cast<index_t>(spec) + n
                                                       : static_cast<index_t>(spec);
      if (i < 0 || i >= n)
        raise<shape_error>("slice: index ", static_cast<index_t>(spec),
                           " is out of range for axis ", axis, " of extent ", n, " in shape ",
                           shape);
      out.offset = slice_offset(out.offset, i, shape, strides, axis);
    }
    ++axis;
  };
  (apply(specs), ...);
  for (; axis < shape.size(); ++axis) {
    out.shape.push_back(shape[axis]);
    out.strides.push_back(strides[axis]);
  }
  return out;
}

// ---- axes ---------------------------------------------------------------------------------------

inline layout permute_layout(const shape_t& shape, const strides_t& strides, const dims& axes) {
  const int r = shape.size();
  if (axes.size() != r)
    raise<shape_error>("permute: ", axes, " has ", axes.size(), " axes for a tensor of rank ", r);
  layout out;
  bool seen[max_rank] = {};
  for (int i = 0; i < r; ++i) {
    const int a = normalize_axis(axes[i], r, "permute");
    if (seen[a]) raise<shape_error>("permute: ", axes, " repeats axis ", axes[i]);
    seen[a] = true;
    out.shape.push_back(shape[a]);
    out.strides.push_back(strides[a]);
  }
  return out;
}

inline layout transpose_layout(const shape_t& shape, const strides_t& strides) {
  dims axes;
  for (int i = shape.size() - 1; i >= 0; --i) axes.push_back(i);
  return permute_layout(shape, strides, axes);
}

inline layout squeeze_layout(const shape_t& shape, const strides_t& strides,
                             std::optional<long> axis) {
  layout out;
  const int only = axis ? normalize_axis(*axis, shape.size(), "squeeze") : -1;
  if (axis && shape[only] != 1)
    raise<shape_error>("squeeze: axis ", *axis, " of shape ", shape, " has extent ", shape[only],
                       ", not 1");
  for (int i = 0; i < shape.size(); ++i) {
    if (axis ? i == only : shape[i] == 1) continue;
    out.shape.push_back(shape[i]);
    out.strides.push_back(strides[i]);
  }
  return out;
}

inline layout unsqueeze_layout(const shape_t& shape, const strides_t& strides, long axis) {
  const int a = normalize_axis(axis, shape.size() + 1, "unsqueeze");
  if (shape.size() >= max_rank)
    raise<shape_error>("unsqueeze: a tensor of shape ", shape, " already has rank ", max_rank);
  layout out{shape, strides, 0};
  const index_t stride =
      a < shape.size() ? checked_mul(strides[a], shape[a], "unsqueeze", "the stride before axis ",
                                     a, " of shape ", shape, " with strides ", strides)
                       : 1;
  out.shape.insert(a, 1);
  out.strides.insert(a, stride);
  return out;
}

inline layout broadcast_layout(const shape_t& shape, const strides_t& strides, const shape_t& to) {
  if (!broadcasts_to(shape, to))
    raise<shape_error>("broadcast_to: shape ", shape, " cannot be broadcast to ", to);
  checked_size(to, "broadcast_to");
  return layout{to, broadcast_strides(shape, strides, to), 0};
}

// ---- reshape ------------------------------------------------------------------------------------

// Resolves one -1 extent and checks that the element count is kept (and that the product of the
// given extents does not overflow: {4, 2^62 + 1} is not {4}).
inline shape_t resolve_reshape(const shape_t& from, const shape_t& to) {
  const index_t n = from.product();
  shape_t out = to;
  int infer = -1;
  index_t known = 1;  // the product of the nonzero extents given
  bool zero = false;
  for (int i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer >= 0) raise<shape_error>("reshape: ", to, " has more than one -1");
      infer = i;
    } else if (to[i] < 0) {
      raise<shape_error>("reshape: ", to, " has a negative extent");
    } else if (to[i] == 0) {
      zero = true;
    } else {
      known = checked_mul(known, to[i], "reshape", "the element count of shape ", to);
    }
  }
  if (zero) known = 0;
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      raise<shape_error>("reshape: cannot reshape ", from, " (", n, " elements) into ", to);
    out[infer] = n / known;
  } else if (known != n) {
    raise<shape_error>("reshape: cannot reshape ", from, " (", n, " elements) into ", to, " (",
                       known, " elements)");
  }
  return out;
}

// Strides that let (shape, strides) be read as `to` without copying, or nothing when the axes
// that `to` merges are not laid out contiguously among themselves.
inline std::optional<strides_t> reshape_strides(const shape_t& shape, const strides_t& strides,
                                                const shape_t& to) {
  if (shape.product() == 0) return row_major_strides(to);
  // Axes of extent 1 carry no layout information.
  index_t old_shape[max_rank] = {}, old_strides[max_rank] = {};
  int old_rank = 0;
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) {
      old_shape[old_rank] = shape[i];
      old_strides[old_rank++] = strides[i];
    }
  strides_t out = dims::filled(to.size(), 1);
  int oi = 0, ni = 0;
  while (ni < to.size() && oi < old_rank) {
    // Grow a group of old axes [oi, oj) and new axes [ni, nj) until their extents match.
    int oj = oi + 1, nj = ni + 1;
    index_t op = old_shape[oi], np = to[ni];
    while (op != np) {
      if (np < op) {
        if (nj >= to.size()) return std::nullopt;
        np *= to[nj++];
      } else {
        if (oj >= old_rank) return std::nullopt;
        op *= old_shape[oj++];
      }
    }
    for (int k = oi; k + 1 < oj; ++k)
      if (old_strides[k] != old_shape[k + 1] * old_strides[k + 1]) return std::nullopt;
    out[nj - 1] = old_strides[oj - 1];
    for (int k = nj - 1; k > ni; --k)
      out[k - 1] =
          checked_mul(out[k], to[k], "reshape", "the strides of ", to, " from strides ", strides);
    ni = nj;
    oi = oj;
  }
  // Remaining new axes have extent 1.
  for (; ni < to.size(); ++ni) out[ni] = ni > 0 ? out[ni - 1] : 1;
  return out;
}

inline layout reshape_layout(const shape_t& shape, const strides_t& strides, const shape_t& to) {
  const shape_t target = resolve_reshape(shape, to);
  auto s = reshape_strides(shape, strides, target);
  if (!s)
    raise<shape_error>("reshape: a view of shape ", shape, " with strides ", strides,
                       " cannot be reshaped to ", target,
                       " without copying; copy it into a tensor first");
  return layout{target, *s, 0};
}

}  // namespace detail
}  // namespace meld
