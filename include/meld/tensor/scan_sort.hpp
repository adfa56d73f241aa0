// Operations along an axis that read a whole line of elements before writing: cumulative sums
// and products (cumsum, cumprod), and ordering (sort, argsort, topk). Each is one kernel over
// the lines of a strided operand, run through the executor's host_kernel: directly on the
// backends whose kernels are CPU code (cpu<sync>, cpu<async>, sim<sync>, sim<async>; queued in
// stream order under async), on host copies of the operands under cuda<...>. Sequential within
// a line: the same bits on every run, thread count and backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../expr/reduce.hpp"
#include "indexing.hpp"
#include "tensor.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {

// Calls f(coords) for the first element of every line along axis (coords[axis] == 0).
template <class F>
void for_each_line(const shape_t& shape, int axis, F&& f) {
  shape_t lines = shape;
  lines[axis] = 1;
  for_each_position(lines, f);
}

// A tensor or view as is; any other expression evaluated into a tensor first.
template <class X>
auto as_strided(const X& x) {
  if constexpr (strided_operand<X>)
    return x.view();
  else
    return tensor<value_t<X>, backend_t<X>>(x);
}

// numpy's order: NaN after every number (and equal to NaN).
template <class T>
bool sorts_before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a < b || (b != b && a == a);
  else
    return a < b;
}

template <class Op, class X>
auto scan(const X& x, long axis, const char* what) {
  using T = std::remove_const_t<value_t<X>>;
  using W = std::conditional_t<std::is_integral_v<T>, widened_t<T>, T>;
  using B = backend_t<X>;
  const auto src = as_strided(x);
  const int a = normalize_axis(axis, src.rank(), what);
  tensor<W, B> out(src.shape(), uninitialized);
  if (out.size() == 0) return out;
  const tensor_view<const T, B> in = src.view();
  executor<B>::host_kernel(
      [a](const auto& in_, const auto& out_) {
        const index_t n = in_.shape()[a], si = in_.strides()[a], so = out_.strides()[a];
        for_each_line(in_.shape(), a, [&](const index_t* c) {
          const auto* p = in_.raw_data() + offset_of(in_, c);
          auto* q = out_.raw_data() + offset_of(out_, c);
          W acc = static_cast<W>(p[0]);
          q[0] = acc;
          for (index_t i = 1; i < n; ++i) {
            acc = Op{}(acc, static_cast<W>(p[i * si]));
            q[i * so] = acc;
          }
        });
      },
      in, out.view());
  return out;
}

struct scan_plus {
  template <class W>
  W operator()(W a, W b) const {
    if constexpr (std::is_integral_v<W>)  // wraps modulo 2^64, as numpy's
      return static_cast<W>(static_cast<std::make_unsigned_t<W>>(a) +
                            static_cast<std::make_unsigned_t<W>>(b));
    else
      return a + b;
  }
};
struct scan_times {
  template <class W>
  W operator()(W a, W b) const {
    if constexpr (std::is_integral_v<W>)
      return static_cast<W>(static_cast<std::make_unsigned_t<W>>(a) *
                            static_cast<std::make_unsigned_t<W>>(b));
    else
      return a * b;
  }
};

}  // namespace detail

/// Running sums along an axis, as numpy.cumsum(x, axis): the result has x's shape; int32 gives
/// int64 (integer sums widen, as numpy's on 64-bit platforms), int64 wraps modulo 2^64. Summed
/// in order, one element after another.
template <expression X>
auto cumsum(const X& x, long axis) {
  return detail::scan<detail::scan_plus>(x, axis, "cumsum");
}

/// Running products along an axis, as numpy.cumprod(x, axis) (see cumsum).
template <expression X>
auto cumprod(const X& x, long axis) {
  return detail::scan<detail::scan_times>(x, axis, "cumprod");
}

/// x sorted along an axis (default the last), ascending, NaN last (numpy.sort).
template <expression X>
auto sort(const X& x, long axis = -1) {
  using T = std::remove_const_t<value_t<X>>;
  using B = backend_t<X>;
  const auto src = detail::as_strided(x);
  const int a = normalize_axis(axis, src.rank(), "sort");
  tensor<T, B> out(src);
  if (out.size() == 0) return out;
  executor<B>::host_kernel(
      [a](const auto& out_) {
        const index_t n = out_.shape()[a], s = out_.strides()[a];
        std::vector<T> line(static_cast<std::size_t>(n));
        detail::for_each_line(out_.shape(), a, [&](const index_t* c) {
          T* p = out_.raw_data() + detail::offset_of(out_, c);
          for (index_t i = 0; i < n; ++i) line[static_cast<std::size_t>(i)] = p[i * s];
          std::sort(line.begin(), line.end(), detail::sorts_before<T>);
          for (index_t i = 0; i < n; ++i) p[i * s] = line[static_cast<std::size_t>(i)];
        });
      },
      out.view());
  return out;
}

/// The int64 positions that sort x along an axis (default the last): stable (equal elements keep
/// their order; numpy.argsort(kind="stable")), NaN last.
template <expression X>
auto argsort(const X& x, long axis = -1) {
  using T = std::remove_const_t<value_t<X>>;
  using B = backend_t<X>;
  const auto src = detail::as_strided(x);
  const int a = normalize_axis(axis, src.rank(), "argsort");
  tensor<std::int64_t, B> out(src.shape(), uninitialized);
  if (out.size() == 0) return out;
  const tensor_view<const T, B> in = src.view();
  executor<B>::host_kernel(
      [a](const auto& in_, const auto& out_) {
        const index_t n = in_.shape()[a], si = in_.strides()[a], so = out_.strides()[a];
        std::vector<std::int64_t> order(static_cast<std::size_t>(n));
        detail::for_each_line(in_.shape(), a, [&](const index_t* c) {
          const T* p = in_.raw_data() + detail::offset_of(in_, c);
          std::iota(order.begin(), order.end(), std::int64_t(0));
          std::stable_sort(order.begin(), order.end(), [&](std::int64_t i, std::int64_t j) {
            return detail::sorts_before(p[i * si], p[j * si]);
          });
          std::int64_t* q = out_.raw_data() + detail::offset_of(out_, c);
          for (index_t i = 0; i < n; ++i) q[i * so] = order[static_cast<std::size_t>(i)];
        });
      },
      in, out.view());
  return out;
}

/// The k largest (or, with largest = false, smallest) elements along an axis and their int64
/// positions, as torch.topk: values ordered from the largest (smallest) on, equal elements by
/// position, NaN counting as the largest. Throws shape_error unless 0 <= k <= the axis' extent.
template <class T, class B>
struct topk_result {
  tensor<T, B> values;              ///< the selected elements; the axis has extent k
  tensor<std::int64_t, B> indices;  ///< their positions along the axis
};

/// See topk_result.
template <expression X>
auto topk(const X& x, index_t k, long axis = -1, bool largest = true) {
  using T = std::remove_const_t<value_t<X>>;
  using B = backend_t<X>;
  const auto src = detail::as_strided(x);
  const int a = normalize_axis(axis, src.rank(), "topk");
  const index_t n = src.shape()[a];
  if (k < 0 || k > n)
    detail::raise<shape_error>("topk: k = ", k, " is out of range for axis ", a, " of shape ",
                               src.shape());
  shape_t shape = src.shape();
  shape[a] = k;
  topk_result<T, B> r{tensor<T, B>(shape, uninitialized),
                      tensor<std::int64_t, B>(shape, uninitialized)};
  if (r.values.size() == 0) return r;
  const tensor_view<const T, B> in = src.view();
  executor<B>::host_kernel(
      [a, k, largest](const auto& in_, const auto& val_, const auto& idx_) {
        const index_t len = in_.shape()[a], si = in_.strides()[a];
        const index_t sv = val_.strides()[a], sx = idx_.strides()[a];
        std::vector<std::int64_t> order(static_cast<std::size_t>(len));
        detail::for_each_line(in_.shape(), a, [&](const index_t* c) {
          const T* p = in_.raw_data() + detail::offset_of(in_, c);
          std::iota(order.begin(), order.end(), std::int64_t(0));
          auto before = [&](std::int64_t i, std::int64_t j) {
            return largest ? detail::sorts_before(p[j * si], p[i * si])
                           : detail::sorts_before(p[i * si], p[j * si]);
          };
          std::stable_sort(order.begin(), order.end(), before);
          T* v = val_.raw_data() + detail::offset_of(val_, c);
          std::int64_t* q = idx_.raw_data() + detail::offset_of(idx_, c);
          for (index_t i = 0; i < k; ++i) {
            q[i * sx] = order[static_cast<std::size_t>(i)];
            v[i * sv] = p[order[static_cast<std::size_t>(i)] * si];
          }
        });
      },
      in, r.values.view(), r.indices.view());
  return r;
}

/// @}

}  // namespace meld
