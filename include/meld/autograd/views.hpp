// Views of variables: reshape, permute / transpose, squeeze / unsqueeze and slice (with steps).
// A reshaped (squeezed, unsqueezed) variable shares its input's elements, as the gradient that
// flows back shares the output gradient's: a variable's value is a contiguous tensor, which other
// shapes of the same elements are. Permuted and sliced variables hold a copy of the viewed
// elements; their gradient is the output's gradient permuted back (a copy) or written into the
// sliced elements of a zero gradient.
#pragma once

#include <array>
#include <tuple>
#include <utility>

#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

struct reshape_function {
  static constexpr const char* name = "reshape";
  shape_t to, in_shape;
  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    in_shape = x.shape();
    return meld::detail::share_elements(x, to);
  }
  // g is the output's pending gradient, which the engine drops after this call: the input's
  // gradient may take its elements.
  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>&, const tensor<T, B>& g) {
    return {meld::detail::share_elements(g, in_shape)};
  }
};

struct permute_function {
  static constexpr const char* name = "permute";
  dims axes;
  dims inverse;
  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    tensor<T, B> out(x.permute(axes));  // checks the axes
    inverse = dims::filled(axes.size(), 0);
    for (int i = 0; i < axes.size(); ++i)
      inverse[normalize_axis(axes[i], axes.size(), "permute")] = i;
    return out;
  }
  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>&, const tensor<T, B>& g) {
    return {tensor<T, B>(g.permute(inverse))};
  }
};

template <class... S>
struct slice_function {
  static constexpr const char* name = "slice";
  std::tuple<S...> specs;
  shape_t in_shape;
  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    in_shape = x.shape();
    return std::apply([&](const auto&... s) { return tensor<T, B>(x.slice(s...)); }, specs);
  }
  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>&, const tensor<T, B>& g) {
    tensor<T, B> d(in_shape, uninitialized);
    d.fill(T(0));
    std::apply([&](const auto&... s) { d.slice(s...) = g; }, specs);
    return {std::move(d)};
  }
};

}  // namespace detail

/// The elements of x with another shape of the same count (one extent may be -1).
template <differentiable E>
auto reshape(E&& x, const shape_t& to) {
  detail::reshape_function f;
  f.to = to;
  return apply(f, detail::as_variable(std::forward<E>(x)));
}
/// Axis i of the result is axis axes[i] of x.
template <differentiable E>
auto permute(E&& x, const dims& axes) {
  detail::permute_function f;
  f.axes = axes;
  return apply(f, detail::as_variable(std::forward<E>(x)));
}
/// The axes reversed (a matrix transposed).
template <differentiable E>
auto transpose(E&& x) {
  auto v = detail::as_variable(std::forward<E>(x));
  dims axes;
  for (int i = v.rank() - 1; i >= 0; --i) axes.push_back(i);
  return permute(v, axes);
}
/// x without axis `axis`, which must have extent 1.
template <differentiable E>
auto squeeze(E&& x, long axis) {
  auto v = detail::as_variable(std::forward<E>(x));
  return reshape(v, v.value().squeeze(axis).shape());
}
/// x with an axis of extent 1 inserted before `axis` (-1 appends).
template <differentiable E>
auto unsqueeze(E&& x, long axis) {
  auto v = detail::as_variable(std::forward<E>(x));
  return reshape(v, v.value().unsqueeze(axis).shape());
}
/// The elements that tensor::slice(specs...) views (meld::all, meld::range with steps, indices).
template <differentiable E, meld::detail::slice_spec... S>
auto slice(E&& x, const S&... specs) {
  detail::slice_function<std::remove_cvref_t<S>...> f{{specs...}, {}};
  return apply(f, detail::as_variable(std::forward<E>(x)));
}

/// @}

}  // namespace meld::autograd
