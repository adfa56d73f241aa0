// Joining and splitting along an axis: concatenate, stack (new tensors, each part evaluated
// straight into its place in the result, so that parts that are expressions are never
// materialized on their own) and split (views, no copies). Every backend: these are assignments
// to views and views, which each backend evaluates.
#pragma once

#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "tensor.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {

// The view of v's elements [first, first + count) along axis.
template <class V>
V axis_slice(const V& v, int axis, index_t first, index_t count) {
  layout l{v.shape(), v.strides(), first * v.strides()[axis]};
  l.shape[axis] = count;
  return V(v.storage_ptr(), v.raw_data(), l);
}

template <class... E>
using joined_value_t = std::common_type_t<value_t<E>...>;

template <class... E>
constexpr void check_join_types(const char* what) {
  static_assert((std::is_same_v<value_t<E>, joined_value_t<E...>> && ...),
                "meld::concatenate / meld::stack: the parts have different element types; convert "
                "them to one with meld::cast<T>(part) first (joining never converts silently)");
  (void)what;
}

// The shapes of the parts, each checked to match the first's everywhere but along `axis`
// (concatenate) or everywhere (stack).
inline void check_join_shapes(const char* what, const std::vector<shape_t>& shapes, int axis,
                              bool same_everywhere) {
  const shape_t& first = shapes[0];
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    const shape_t& s = shapes[i];
    bool ok = s.size() == first.size();
    for (int a = 0; ok && a < s.size(); ++a)
      ok = s[a] == first[a] || (!same_everywhere && a == axis);
    if (!ok) {
      if (same_everywhere)
        raise<shape_error>(what, ": part ", i, " has shape ", s, " and part 0 ", first,
                           ": stacked parts must have one shape");
      raise<shape_error>(what, ": part ", i, " has shape ", s, " and part 0 ", first,
                         ": they must match on every axis but ", axis);
    }
  }
}

template <class T, class B, class Part>
void assign_part(const tensor_view<T, B>& dst, const Part& part) {
  if (dst.size()) detail::assign_checked(dst, part);
}

}  // namespace detail

/// The parts joined along an existing axis (negative counts from the end), as numpy.concatenate:
/// meld::concatenate(1, a, b) for a {2, 3} and b {2, 4} is {2, 7}. Parts are tensors, views or
/// expressions of one element type and backend; each is evaluated directly into its place in the
/// result. Throws shape_error when ranks or the other extents differ, or parts are of rank 0.
template <expression... E>
requires(sizeof...(E) >= 1) auto concatenate(long axis, const E&... parts) {
  using T = detail::joined_value_t<E...>;
  using B = common_backend_t<backend_t<E>...>;
  detail::check_join_types<E...>("concatenate");
  const std::vector<shape_t> shapes{parts.shape()...};
  if (shapes[0].size() == 0)
    detail::raise<shape_error>("concatenate: parts of rank 0 have no axis to join along");
  const int a = normalize_axis(axis, shapes[0].size(), "concatenate");
  detail::check_join_shapes("concatenate", shapes, a, false);
  shape_t out_shape = shapes[0];
  out_shape[a] = 0;
  for (const shape_t& s : shapes) out_shape[a] += s[a];
  tensor<T, B> out(out_shape, uninitialized);
  const auto v = out.view();
  index_t at = 0;
  std::size_t i = 0;
  auto place = [&](const auto& part) {
    const index_t n = shapes[i++][a];
    detail::assign_part(detail::axis_slice(v, a, at, n), part);
    at += n;
  };
  (place(parts), ...);
  return out;
}

/// concatenate over a list known at run time (views of one type, such as split returns).
template <class T, class B>
tensor<std::remove_const_t<T>, B> concatenate(long axis,
                                              const std::vector<tensor_view<T, B>>& parts) {
  if (parts.empty()) detail::raise<shape_error>("concatenate: no parts");
  std::vector<shape_t> shapes;
  for (const auto& p : parts) shapes.push_back(p.shape());
  if (shapes[0].size() == 0)
    detail::raise<shape_error>("concatenate: parts of rank 0 have no axis to join along");
  const int a = normalize_axis(axis, shapes[0].size(), "concatenate");
  detail::check_join_shapes("concatenate", shapes, a, false);
  shape_t out_shape = shapes[0];
  out_shape[a] = 0;
  for (const shape_t& s : shapes) out_shape[a] += s[a];
  tensor<std::remove_const_t<T>, B> out(out_shape, uninitialized);
  const auto v = out.view();
  index_t at = 0;
  for (const auto& p : parts) {
    detail::assign_part(detail::axis_slice(v, a, at, p.shape()[a]), p);
    at += p.shape()[a];
  }
  return out;
}

/// The parts, of one shape, stacked along a new axis (in [-(rank + 1), rank]), as numpy.stack:
/// meld::stack(0, a, b) for a, b of shape {3} is {2, 3}. Each part is evaluated directly into its
/// place. Throws shape_error when the shapes differ.
template <expression... E>
requires(sizeof...(E) >= 1) auto stack(long axis, const E&... parts) {
  using T = detail::joined_value_t<E...>;
  using B = common_backend_t<backend_t<E>...>;
  detail::check_join_types<E...>("stack");
  const std::vector<shape_t> shapes{parts.shape()...};
  const int a = normalize_axis(axis, shapes[0].size() + 1, "stack");
  detail::check_join_shapes("stack", shapes, a, true);
  shape_t out_shape = shapes[0];
  out_shape.insert(a, static_cast<index_t>(sizeof...(E)));
  tensor<T, B> out(out_shape, uninitialized);
  const auto v = out.view();
  index_t at = 0;
  auto place = [&](const auto& part) {
    detail::assign_part(detail::axis_slice(v, a, at++, 1).squeeze(a), part);
  };
  (place(parts), ...);
  return out;
}

/// Views of x split along axis into `sections` parts of equal extent, as numpy.split (no copies:
/// writing a view of a tensor writes the tensor). Throws shape_error when the extent is not
/// divisible by sections (or sections < 1).
template <class X>
requires requires {
  typename std::remove_cvref_t<X>::storage_type;
}
auto split(X&& x, index_t sections, long axis = 0) {
  const int a = normalize_axis(axis, x.rank(), "split");
  const index_t n = x.shape()[a];
  if (sections < 1 || n % sections != 0)
    detail::raise<shape_error>("split: axis ", a, " of shape ", x.shape(), " (extent ", n,
                               ") does not split into ", sections, " equal parts");
  const auto v = x.view();
  std::vector<std::remove_const_t<decltype(v)>> out;
  for (index_t i = 0; i < sections; ++i)
    out.push_back(detail::axis_slice(v, a, i * (n / sections), n / sections));
  return out;
}

/// Views of x split along axis before each of the given increasing positions, as numpy.split
/// with a list: split(x, {2, 5}) gives [0, 2), [2, 5), [5, n). Positions beyond the extent give
/// empty parts, as numpy's. Throws shape_error for decreasing or negative positions.
template <class X>
requires requires {
  typename std::remove_cvref_t<X>::storage_type;
}
auto split(X&& x, const std::vector<index_t>& positions, long axis = 0) {
  const int a = normalize_axis(axis, x.rank(), "split");
  const index_t n = x.shape()[a];
  const auto v = x.view();
  std::vector<std::remove_const_t<decltype(v)>> out;
  index_t at = 0;
  for (index_t p : positions) {
    if (p < at)
      detail::raise<shape_error>("split: the positions must be nonnegative and increasing; ", p,
                                 " follows ", at);
    const index_t end = p < n ? p : n;
    out.push_back(detail::axis_slice(v, a, at < n ? at : n, end - (at < n ? at : n)));
    at = p;
  }
  out.push_back(detail::axis_slice(v, a, at < n ? at : n, n - (at < n ? at : n)));
  return out;
}

/// @}

}  // namespace meld
