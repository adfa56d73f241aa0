// conv2d(x, w[, b], options): 2-d convolution (cross-correlation, as in PyTorch) as one primitive
// node whose forward and backward are nn::conv2d_kernel's, the code of nn::conv2d itself (im2col
// over chunks of the batch, one product per chunk, col2im). Backward adds the weight's and bias's
// gradients straight into the parameters' (gemm with beta = 1) and, for an input that is a leaf,
// the input's gradient into its own (col2im adds): no gradient temporaries to add afterwards.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <utility>

#include "../nn/conv2d.hpp"
#include "function.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// N = 2: x, w; N = 3: x, w, b. The kernel is shared with the layer that made it (its scratch).
template <class T, class B, std::size_t N>
struct conv2d_function {
  static constexpr const char* name = "conv2d";
  std::shared_ptr<nn::conv2d_kernel<T, B>> kernel;

  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x, const tensor<T, B>& w) {
    ctx.save_for_backward(x);
    ctx.save_for_backward(w);
    return kernel->forward(x.view(), w.view(), nullptr);
  }
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x, const tensor<T, B>& w,
                       const tensor<T, B>& b) {
    ctx.save_for_backward(x);
    ctx.save_for_backward(w);
    const tensor_view<const T, B> bias = b.view();
    return kernel->forward(x.view(), w.view(), &bias);
  }

  std::array<tensor<T, B>, N> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& x = ctx.saved(0);
    const auto& w = ctx.saved(1);
    std::array<tensor<T, B>, N> grads;
    // Where input i's gradient is added: its leaf gradient in place, else a zero tensor returned.
    auto target = [&](std::size_t i, const shape_t& shape) -> tensor<T, B>* {
      if (!ctx.needs_input_grad(i)) return nullptr;
      if (tensor<T, B>* in_place = ctx.gradient_in_place(i)) return in_place;
      grads[i] = tensor<T, B>(shape);
      return &grads[i];
    };
    tensor<T, B>* dx = target(0, x.shape());
    tensor<T, B>* dw = target(1, w.shape());
    tensor<T, B>* db = nullptr;
    if constexpr (N == 3) db = target(2, shape_t{w.shape()[0]});
    kernel->backward(x, w, g, dx, dw, db);
    return grads;
  }
};

// A kernel for weight w (checked to be {out, in, kh, kw}) with options' stride and padding.
template <class T, class B>
std::shared_ptr<nn::conv2d_kernel<T, B>> conv2d_kernel_for(const variable<T, B>& w,
                                                           const nn::conv2d_options& options) {
  if (w.rank() != 4)
    meld::detail::raise<shape_error>("autograd::conv2d: a weight of shape ", w.shape(),
                                     " (expected {out, in, kh, kw})");
  if (options.activation != nn::activation::none)
    throw std::invalid_argument(
        "autograd::conv2d: options.activation is nn::conv2d's; apply relu to its result instead");
  return std::make_shared<nn::conv2d_kernel<T, B>>(
      "autograd::conv2d", size2{w.shape()[2], w.shape()[3]}, options.stride, options.padding);
}

// conv2d through a given kernel (a layer's).
template <class T, class B>
variable<T, B> conv2d_with(std::shared_ptr<nn::conv2d_kernel<T, B>> kernel, const variable<T, B>& x,
                           const variable<T, B>& w) {
  return apply(conv2d_function<T, B, 2>{std::move(kernel)}, x, w);
}
template <class T, class B>
variable<T, B> conv2d_with(std::shared_ptr<nn::conv2d_kernel<T, B>> kernel, const variable<T, B>& x,
                           const variable<T, B>& w, const variable<T, B>& b) {
  return apply(conv2d_function<T, B, 3>{std::move(kernel)}, x, w, b);
}

}  // namespace detail

/// The 2-d convolution of x {batch, in, h, w} with w {out, in, kh, kw} plus b {out}, with
/// options.stride and options.padding (torch.nn.functional.conv2d; options.bias and options.seed
/// are nn::conv2d's and unused here): {batch, out, oh, ow}. x, w and b are variables or
/// expressions of them. Throws shape_error for shapes that do not fit, std::invalid_argument for
/// a stride below 1 or a negative padding.
template <differentiable X, differentiable W, differentiable C>
auto conv2d(X&& x, W&& w, C&& b, const nn::conv2d_options& options = {}) {
  auto wv = detail::as_variable(std::forward<W>(w));
  auto kernel = detail::conv2d_kernel_for(wv, options);
  return detail::conv2d_with(std::move(kernel), detail::as_variable(std::forward<X>(x)), wv,
                             detail::as_variable(std::forward<C>(b)));
}

/// The same without a bias.
template <differentiable X, differentiable W>
auto conv2d(X&& x, W&& w, const nn::conv2d_options& options = {}) {
  auto wv = detail::as_variable(std::forward<W>(w));
  auto kernel = detail::conv2d_kernel_for(wv, options);
  return detail::conv2d_with(std::move(kernel), detail::as_variable(std::forward<X>(x)), wv);
}

/// @}

}  // namespace meld::autograd
