// max_pool2d and avg_pool2d as primitive nodes whose forward and backward are nn's pooling kernels
// (nn::max_pool2d_kernel, nn::avg_pool2d_kernel: the backend's window operations), the code of
// nn's pooling layers. Max pooling keeps, per output, the position of its window's maximum for
// backward, which sends the gradient there (the first maximum of a window, as PyTorch).
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "../nn/pooling.hpp"
#include "function.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// The gradient of input 0 to add into: its leaf gradient in place, or `fresh` set to zeros.
template <class T, class B>
tensor<T, B>& input_gradient_target(function_context<T, B>& ctx, tensor<T, B>& fresh,
                                    const shape_t& shape) {
  if (tensor<T, B>* in_place = ctx.gradient_in_place(0)) return *in_place;
  fresh = tensor<T, B>(shape);
  return fresh;
}

template <class T, class B>
struct max_pool2d_function {
  static constexpr const char* name = "max_pool2d";
  nn::max_pool2d_kernel kernel;
  shape_t in_shape;
  tensor<std::int32_t, B> argmax;  // per output: where its window's maximum is in its plane

  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    in_shape = x.shape();
    return kernel.forward(x, argmax);
  }
  std::array<tensor<T, B>, 1> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    std::array<tensor<T, B>, 1> grads;
    kernel.backward_add(g, argmax, input_gradient_target(ctx, grads[0], in_shape));
    return grads;
  }
};

template <class T, class B>
struct avg_pool2d_function {
  static constexpr const char* name = "avg_pool2d";
  nn::avg_pool2d_kernel kernel;
  shape_t in_shape;

  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    in_shape = x.shape();
    return kernel.forward(x);
  }
  std::array<tensor<T, B>, 1> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    std::array<tensor<T, B>, 1> grads;
    kernel.backward_add(g, input_gradient_target(ctx, grads[0], in_shape));
    return grads;
  }
};

// Pooling through a given kernel (a layer's).
template <class T, class B>
variable<T, B> pool2d_with(const nn::max_pool2d_kernel& kernel, const variable<T, B>& x) {
  return apply(max_pool2d_function<T, B>{kernel, {}, {}}, x);
}
template <class T, class B>
variable<T, B> pool2d_with(const nn::avg_pool2d_kernel& kernel, const variable<T, B>& x) {
  return apply(avg_pool2d_function<T, B>{kernel, {}}, x);
}

}  // namespace detail

/// The maximum of each kernel window of x {batch, channels, h, w}, moved by stride (0: the
/// kernel) over x padded by `padding` (at most half the kernel; padding never wins):
/// {batch, channels, oh, ow} (torch.nn.functional.max_pool2d). Throws shape_error for an input
/// that is not {batch, channels, h, w} or is smaller than the kernel, std::invalid_argument for
/// an invalid kernel, stride or padding.
template <differentiable X>
auto max_pool2d(X&& x, size2 kernel, size2 stride = 0, size2 padding = 0) {
  return detail::pool2d_with(nn::max_pool2d_kernel(kernel, stride, padding),
                             detail::as_variable(std::forward<X>(x)));
}

/// The mean of each window (padding counts as zeros, PyTorch's count_include_pad); as max_pool2d
/// otherwise (torch.nn.functional.avg_pool2d).
template <differentiable X>
auto avg_pool2d(X&& x, size2 kernel, size2 stride = 0, size2 padding = 0) {
  return detail::pool2d_with(nn::avg_pool2d_kernel(kernel, stride, padding),
                             detail::as_variable(std::forward<X>(x)));
}

/// @}

}  // namespace meld::autograd
