// linear(x, w[, b]): y = x w^T + b, with w of shape {out, in} (PyTorch's layout, nn::linear's) and
// x of shape {..., in}, as one primitive node rather than matmul(x, transpose(w)) + b. Forward
// writes the bias and accumulates the product onto it (as nn::linear does); backward adds
// dw = g^T x and db = sum(g) straight into the parameters' gradients (gemm with beta = 1): no
// transposed copy of w or of its gradient, and no gradient temporary to add afterwards.
#pragma once

#include <array>
#include <cstddef>
#include <utility>

#include "../expr/matmul.hpp"
#include "function.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// N = 2: x, w; N = 3: x, w, b. x is read as the matrix {rows, in}.
template <std::size_t N>
struct linear_function {
  static constexpr const char* name = "linear";
  shape_t x_shape;

  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x, const tensor<T, B>& w) {
    tensor<T, B> y = output(ctx, x, w);
    gemm(T(1), ctx.saved(0), w.transpose(), T(0), y.reshape({-1, w.shape()[0]}));
    return y;
  }
  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x, const tensor<T, B>& w,
                       const tensor<T, B>& b) {
    tensor<T, B> y = output(ctx, x, w);
    if (!(b.shape() == shape_t{w.shape()[0]}))
      meld::detail::raise<shape_error>("autograd::linear: a bias of shape ", b.shape(), " for ",
                                       w.shape()[0], " outputs");
    // The bias first, then the product accumulated onto it (one pass fewer than adding after).
    auto y2 = y.reshape({-1, w.shape()[0]});
    y2 = b.broadcast_to(y2.shape());
    gemm(T(1), ctx.saved(0), w.transpose(), T(1), y2);
    return y;
  }

  template <class T, class B>
  std::array<tensor<T, B>, N> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& x = ctx.saved(0);  // {rows, in}
    const auto& w = ctx.saved(1);  // {out, in}
    const auto g2 = g.reshape({x.shape()[0], w.shape()[0]});
    std::array<tensor<T, B>, N> grads;
    if (ctx.needs_input_grad(0)) {
      grads[0] = tensor<T, B>(x_shape, uninitialized);
      gemm(T(1), g2, w, T(0), grads[0].reshape(x.shape()));  // dx = g w
    }
    if (ctx.needs_input_grad(1)) {  // dw = g^T x
      if (tensor<T, B>* gw = ctx.gradient_in_place(1))
        gemm(T(1), g2.transpose(), x, T(1), *gw);
      else
        grads[1] = meld::matmul(g2.transpose(), x);
    }
    if constexpr (N == 3) {
      if (ctx.needs_input_grad(2)) {  // db = the sum of g over the rows
        if (tensor<T, B>* gb = ctx.gradient_in_place(2))
          *gb += meld::sum(g2, 0);
        else
          grads[2] = meld::sum(g2, 0);
      }
    }
    return grads;
  }

 private:
  // Checks the shapes, saves x (as a matrix) and w, and allocates y {..., out}.
  template <class T, class B>
  tensor<T, B> output(function_context<T, B>& ctx, const tensor<T, B>& x, const tensor<T, B>& w) {
    if (w.rank() != 2 || x.rank() < 1 || x.shape()[x.rank() - 1] != w.shape()[1])
      meld::detail::raise<shape_error>("autograd::linear: an input of shape ", x.shape(),
                                       " and a weight of shape ", w.shape(),
                                       " (expected {..., in} and {out, in})");
    x_shape = x.shape();
    ctx.save_for_backward(x.reshape({-1, w.shape()[1]}));
    ctx.save_for_backward(w);
    shape_t y_shape = x_shape;
    y_shape[y_shape.size() - 1] = w.shape()[0];
    return tensor<T, B>(y_shape, uninitialized);
  }
};

}  // namespace detail

/// y = x w^T + b for x {..., in}, w {out, in}, b {out} (torch.nn.functional.linear): one node
/// whose backward accumulates the weight's and bias's gradients in place. x, w and b are variables
/// or expressions of them. Throws shape_error for shapes that do not fit.
template <differentiable X, differentiable W, differentiable C>
auto linear(X&& x, W&& w, C&& b) {
  return apply(detail::linear_function<3>{}, detail::as_variable(std::forward<X>(x)),
               detail::as_variable(std::forward<W>(w)), detail::as_variable(std::forward<C>(b)));
}

/// y = x w^T, without a bias.
template <differentiable X, differentiable W>
auto linear(X&& x, W&& w) {
  return apply(detail::linear_function<2>{}, detail::as_variable(std::forward<X>(x)),
               detail::as_variable(std::forward<W>(w)));
}

/// @}

}  // namespace meld::autograd
