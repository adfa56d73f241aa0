// Indexing by tensors of indices and by masks: index_select, gather / take_along_axis,
// scatter_add, masked_select. These move elements by indices that only the data knows, so they
// are not elementwise expressions: each is one kernel over strided operands, run through the
// executor's host_kernel: directly on the backends whose kernels are CPU code (cpu<sync>,
// cpu<async>, sim<sync>, sim<async>; queued in stream order under async), on host copies of the
// operands under cuda<...> (backend/cuda/host_kernel.hpp). Indices are int32 or int64, and
// negative ones count from the end (numpy's rule); one out of range throws index_error naming
// it (under async, where the result is waited for).
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "tensor.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {

template <class I>
concept index_element = std::is_same_v<std::remove_const_t<I>, std::int32_t> ||
    std::is_same_v<std::remove_const_t<I>, std::int64_t>;

// A tensor or view (anything with a shared storage): what these operations take.
template <class X>
concept strided_operand = requires(const X& x) {
  typename X::storage_type;
  x.view();
};

// Calls f(coords) for every position of shape in row-major order (coords: index_t[max_rank]).
template <class F>
void for_each_position(const shape_t& shape, F&& f) {
  if (shape.product() == 0) return;
  index_t c[max_rank] = {};
  const int r = shape.size();
  for (;;) {
    f(static_cast<const index_t*>(c));
    int d = r - 1;
    for (; d >= 0; --d) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
    if (d < 0) return;
  }
}

// The element offset of coords in a view (host view inside a kernel).
template <class V>
index_t offset_of(const V& v, const index_t* c) {
  index_t o = 0;
  for (int d = 0; d < v.rank(); ++d) o += c[d] * v.strides()[d];
  return o;
}

// An index read from the data, resolved against an extent (negative counts from the end).
inline index_t resolve_index(index_t i, index_t n, const char* what, int axis) {
  const index_t k = i < 0 ? i + n : i;
  if (k < 0 || k >= n)
    raise<index_error>(what, ": index ", i, " is out of range for axis ", axis, " of extent ", n);
  return k;
}

// The rule of gather and scatter_add: the indices have the operand's rank, and along every axis
// but `axis` an extent no larger than the operand's.
inline void check_index_shape(const char* what, const char* operand, const shape_t& shape,
                              const shape_t& index, int axis, bool every_axis) {
  if (index.size() != shape.size())
    raise<shape_error>(what, ": indices of shape ", index, " for ", operand, " of shape ", shape,
                       ": the ranks must be equal");
  for (int d = 0; d < shape.size(); ++d)
    if ((every_axis || d != axis) && index[d] > shape[d])
      raise<shape_error>(what, ": indices of shape ", index, " exceed ", operand, " of shape ",
                         shape, " along axis ", d);
}

}  // namespace detail

/// The slices of x at the given positions along axis, as torch.index_select and numpy.take with
/// an axis: index_select(x, 0, {2, 0}) takes rows 2 and 0. indices is a rank-1 tensor or view
/// of int32 or int64 on x's backend; the result has x's shape with indices.size() along axis.
template <detail::strided_operand X, detail::strided_operand I>
auto index_select(const X& x, long axis, const I& indices) {
  using T = std::remove_const_t<value_t<X>>;
  using B = common_backend_t<backend_t<X>, backend_t<I>>;
  static_assert(detail::index_element<value_t<I>>,
                "meld::index_select: indices must be int32 "
                "or int64");
  const int a = normalize_axis(axis, x.rank(), "index_select");
  if (indices.rank() != 1)
    detail::raise<shape_error>("index_select: indices of shape ", indices.shape(),
                               " must have rank 1");
  shape_t out_shape = x.shape();
  out_shape[a] = indices.size();
  tensor<T, B> out(out_shape, uninitialized);
  if (out.size() == 0) return out;
  const tensor_view<const T, B> src = x.view();
  const tensor_view<const value_t<I>, B> idx = indices.view();
  executor<B>::host_kernel(
      [a](const auto& src_, const auto& idx_, const auto& out_) {
        const index_t n = src_.shape()[a];
        index_t s[max_rank];
        detail::for_each_position(out_.shape(), [&](const index_t* c) {
          for (int d = 0; d < out_.rank(); ++d) s[d] = c[d];
          s[a] = detail::resolve_index(idx_.raw_data()[c[a] * idx_.strides()[0]], n, "index_select",
                                       a);
          out_.raw_data()[detail::offset_of(out_, c)] = src_.raw_data()[detail::offset_of(src_, s)];
        });
      },
      src, idx, out.view());
  return out;
}

/// out[i][j][k] = x[i][indices[i][j][k]][k] for axis 1 (and so on for other axes), as
/// torch.gather: the result has the shape of indices, which has x's rank and along the other
/// axes extents no larger than x's. int32 or int64 indices on x's backend.
template <detail::strided_operand X, detail::strided_operand I>
auto gather(const X& x, long axis, const I& indices) {
  using T = std::remove_const_t<value_t<X>>;
  using B = common_backend_t<backend_t<X>, backend_t<I>>;
  static_assert(detail::index_element<value_t<I>>, "meld::gather: indices must be int32 or int64");
  const int a = normalize_axis(axis, x.rank(), "gather");
  detail::check_index_shape("gather", "a tensor", x.shape(), indices.shape(), a, false);
  tensor<T, B> out(indices.shape(), uninitialized);
  if (out.size() == 0) return out;
  const tensor_view<const T, B> src = x.view();
  const tensor_view<const value_t<I>, B> idx = indices.view();
  executor<B>::host_kernel(
      [a](const auto& src_, const auto& idx_, const auto& out_) {
        const index_t n = src_.shape()[a];
        index_t s[max_rank];
        detail::for_each_position(out_.shape(), [&](const index_t* c) {
          for (int d = 0; d < out_.rank(); ++d) s[d] = c[d];
          s[a] = detail::resolve_index(idx_.raw_data()[detail::offset_of(idx_, c)], n, "gather", a);
          out_.raw_data()[detail::offset_of(out_, c)] = src_.raw_data()[detail::offset_of(src_, s)];
        });
      },
      src, idx, out.view());
  return out;
}

/// numpy.take_along_axis(x, indices, axis): gather with numpy's argument order.
template <detail::strided_operand X, detail::strided_operand I>
auto take_along_axis(const X& x, const I& indices, long axis) {
  return gather(x, axis, indices);
}

/// dst[i][indices[i][j][k]][k] += src[i][j][k] for axis 1 (and so on), as torch.scatter_add_,
/// in place on dst (a tensor or a view of mutable elements). indices has src's rank and extents
/// no larger than src's, nor than dst's along the other axes. Deterministic: the additions run in
/// the row-major order of the indices on one thread, so that repeated indices give the same bits
/// on every run and for every thread count.
template <class D, detail::strided_operand I, detail::strided_operand S>
requires detail::strided_operand<std::remove_cvref_t<D>>
void scatter_add(D&& dst, long axis, const I& indices, const S& src) {
  using DT = std::remove_cvref_t<D>;
  using T = std::remove_const_t<value_t<DT>>;
  using B = common_backend_t<backend_t<DT>, backend_t<I>, backend_t<S>>;
  static_assert(detail::index_element<value_t<I>>,
                "meld::scatter_add: indices must be int32 or int64");
  static_assert(std::is_same_v<T, std::remove_const_t<value_t<S>>>,
                "meld::scatter_add: src and dst have different element types; convert src with "
                "meld::cast<T> first");
  const int a = normalize_axis(axis, dst.rank(), "scatter_add");
  detail::check_index_shape("scatter_add", "src", src.shape(), indices.shape(), a, true);
  detail::check_index_shape("scatter_add", "dst", dst.shape(), indices.shape(), a, false);
  if (indices.size() == 0) return;
  const tensor_view<T, B> out = dst.view();
  const tensor_view<const value_t<I>, B> idx = indices.view();
  const tensor_view<const T, B> from = src.view();
  executor<B>::host_kernel(
      [a](const auto& idx_, const auto& from_, const auto& out_) {
        const index_t n = out_.shape()[a];
        index_t s[max_rank];
        detail::for_each_position(idx_.shape(), [&](const index_t* c) {
          for (int d = 0; d < idx_.rank(); ++d) s[d] = c[d];
          s[a] = detail::resolve_index(idx_.raw_data()[detail::offset_of(idx_, c)], n,
                                       "scatter_add", a);
          out_.raw_data()[detail::offset_of(out_, s)] +=
              from_.raw_data()[detail::offset_of(from_, c)];
        });
      },
      idx, from, out);
}

/// The elements of x where mask is nonzero (true), in row-major order, as a rank-1 tensor:
/// numpy's x[mask] and torch.masked_select. mask is any expression that broadcasts to x's shape
/// (masked_select(x, x > 0)). The result's length depends on the data: under async this waits
/// for the mask's count, as PyTorch does.
template <detail::strided_operand X, expression M>
auto masked_select(const X& x, const M& mask) {
  using T = std::remove_const_t<value_t<X>>;
  using B = common_backend_t<backend_t<X>, backend_t<M>>;
  const shape_t mshape = mask.shape();
  if (!broadcasts_to(mshape, x.shape()))
    detail::raise<shape_error>("masked_select: a mask of shape ", mshape,
                               " does not broadcast to shape ", x.shape());
  tensor<std::int64_t, B> m(x.shape(), uninitialized);
  if (m.size() == 0) return tensor<T, B>(shape_t{0});
  m.view() = where(mask, std::int64_t(1), std::int64_t(0));
  const auto total = sum(m);
  index_t count = 0;
  if constexpr (requires { total.get(); })
    count = static_cast<index_t>(total.get());
  else
    count = static_cast<index_t>(total);
  tensor<T, B> out(shape_t{count}, uninitialized);
  if (count == 0) return out;
  const tensor_view<const T, B> src = x.view();
  const tensor_view<const std::int64_t, B> keep = m.view();
  executor<B>::host_kernel(
      [](const auto& src_, const auto& keep_, const auto& out_) {
        index_t k = 0;
        const std::int64_t* flags = keep_.raw_data();  // contiguous, row-major
        index_t i = 0;
        detail::for_each_position(src_.shape(), [&](const index_t* c) {
          if (flags[i++]) out_.raw_data()[k++] = src_.raw_data()[detail::offset_of(src_, c)];
        });
      },
      src, keep, out.view());
  return out;
}

/// @}

}  // namespace meld
