// Reductions of variables: sum, mean, max and min, over every element (a rank-0 variable: a device
// scalar, never read on the host) or along one axis (keepdims as meld's). Found unqualified for
// variables and expressions of them (argument-dependent lookup prefers them to meld's).
//
// Gradients: sum broadcasts the output's gradient back over the reduced axis; mean also divides by
// the count; max and min send it to the elements equal to the extreme, split evenly among ties
// (as PyTorch's amax / amin).
#pragma once

#include <array>
#include <optional>
#include <utility>

#include "function.hpp"
#include "variable.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// A variable for a differentiable expression: the variable itself, or the expression evaluated.
template <class E>
auto as_variable(E&& e) {
  using V = variable<value_t<E>, backend_t<E>>;
  if constexpr (std::is_same_v<std::remove_cvref_t<E>, V>)
    return V(e);
  else
    return V(std::forward<E>(e));
}

template <class T, class B>
using tensor_pair = std::array<tensor<T, B>, 1>;

// sum or mean, over everything (no axis) or along one.
struct sum_function {
  static constexpr const char* name = "sum";
  std::optional<long> axis;
  bool keepdims = false;
  bool mean = false;
  shape_t in_shape;
  int ax = 0;
  index_t count = 1;

  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    in_shape = x.shape();
    if (!axis) {
      count = x.size();
      const auto flat = x.reshape({-1});
      if (mean) return tensor<T, B>(meld::mean(flat, 0));
      return tensor<T, B>(meld::sum(flat, 0));
    }
    ax = normalize_axis(*axis, x.rank(), mean ? "mean" : "sum");
    count = in_shape[ax];
    if (mean) return tensor<T, B>(meld::mean(x, ax, keepdims));
    return tensor<T, B>(meld::sum(x, ax, keepdims));
  }

  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>&, const tensor<T, B>& g) {
    const auto gk = (!axis || keepdims) ? g.view() : g.unsqueeze(ax);
    if (mean) return {tensor<T, B>(gk.broadcast_to(in_shape) * (T(1) / static_cast<T>(count)))};
    return {tensor<T, B>(gk.broadcast_to(in_shape))};
  }
};

// max (Max = true) or min, over everything or along one axis; ties share the gradient.
template <bool Max>
struct extreme_function {
  static constexpr const char* name = Max ? "max" : "min";
  std::optional<long> axis;
  bool keepdims = false;
  shape_t in_shape, reduced_shape;
  int ax = 0;

  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x) {
    in_shape = x.shape();
    const auto xs = axis ? x.view() : x.reshape({-1});
    ax = axis ? normalize_axis(*axis, x.rank(), name) : 0;
    tensor<T, B> m =
        Max ? tensor<T, B>(meld::max(xs, ax, true)) : tensor<T, B>(meld::min(xs, ax, true));
    ctx.save_for_backward(xs);
    ctx.save_for_backward(m);
    if (!axis) return tensor<T, B>(m.reshape(shape_t{}));
    if (keepdims) return m;
    return tensor<T, B>(m.squeeze(ax));
  }

  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& xs = ctx.saved(0);
    const auto& m = ctx.saved(1);
    const auto gk = !axis ? g.reshape(m.shape()) : keepdims ? g.view() : g.unsqueeze(ax);
    const tensor<T, B> ties = meld::sum(cast<T>(xs == m), ax, true);
    tensor<T, B> d(in_shape, uninitialized);
    d.reshape(xs.shape()) = where(xs == m, gk / ties, T(0));
    return {std::move(d)};
  }
};

}  // namespace detail

/// The sum of every element: a rank-0 variable.
template <expression E>
requires differentiable<E>
auto sum(E&& e) {
  detail::sum_function f;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}
/// The sum along an axis (negative counts from the end).
template <expression E>
requires differentiable<E>
auto sum(E&& e, long axis, bool keepdims = false) {
  detail::sum_function f;
  f.axis = axis;
  f.keepdims = keepdims;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}
/// The mean of every element: a rank-0 variable.
template <expression E>
requires differentiable<E>
auto mean(E&& e) {
  detail::sum_function f;
  f.mean = true;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}
/// The mean along an axis.
template <expression E>
requires differentiable<E>
auto mean(E&& e, long axis, bool keepdims = false) {
  detail::sum_function f;
  f.axis = axis;
  f.keepdims = keepdims;
  f.mean = true;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}
/// The largest element: a rank-0 variable (its gradient is shared by the elements that tie).
template <expression E>
requires differentiable<E>
auto max(E&& e) {
  return apply(detail::extreme_function<true>{}, detail::as_variable(std::forward<E>(e)));
}
/// The largest element along an axis.
template <expression E>
requires differentiable<E>
auto max(E&& e, long axis, bool keepdims = false) {
  detail::extreme_function<true> f;
  f.axis = axis;
  f.keepdims = keepdims;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}
/// The smallest element: a rank-0 variable.
template <expression E>
requires differentiable<E>
auto min(E&& e) {
  return apply(detail::extreme_function<false>{}, detail::as_variable(std::forward<E>(e)));
}
/// The smallest element along an axis.
template <expression E>
requires differentiable<E>
auto min(E&& e, long axis, bool keepdims = false) {
  detail::extreme_function<false> f;
  f.axis = axis;
  f.keepdims = keepdims;
  return apply(f, detail::as_variable(std::forward<E>(e)));
}

/// @}

}  // namespace meld::autograd
