// batch_norm(x, running_mean, running_var, weight, bias, training, options) as one primitive node
// whose forward and backward are nn::batch_norm_kernel's, the code of nn::batch_norm itself. In
// training the batch's statistics normalize x and the running ones are updated in place (they are
// buffers, not variables: no gradient); in evaluation the running ones normalize it. Backward adds
// the weight's and bias's gradients straight into the parameters'.
#pragma once

#include <array>
#include <utility>

#include "../nn/batch_norm.hpp"
#include "function.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

template <class T, class B>
struct batch_norm_function {
  static constexpr const char* name = "batch_norm";
  nn::batch_norm_kernel kernel;
  tensor<T, B>* running_mean;  // read and updated by forward only
  tensor<T, B>* running_var;
  bool training;
  nn::batch_norm_saved<T, B> saved;

  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x,
                       const tensor<T, B>& weight, const tensor<T, B>& bias) {
    ctx.save_for_backward(weight);
    tensor<T, B> y = kernel.forward(x.view(), weight.view(), bias.view(), *running_mean,
                                    *running_var, training, saved);
    running_mean = running_var = nullptr;  // the node may outlive them
    return y;
  }

  std::array<tensor<T, B>, 3> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    std::array<tensor<T, B>, 3> grads;
    auto target = [&](std::size_t i) -> tensor<T, B>* {
      if (!ctx.needs_input_grad(i)) return nullptr;
      if (tensor<T, B>* in_place = ctx.gradient_in_place(i)) return in_place;
      grads[i] = tensor<T, B>({kernel.channels()});
      return &grads[i];
    };
    tensor<T, B>* dweight = target(1);
    tensor<T, B>* dbias = target(2);
    grads[0] = kernel.backward(g, ctx.saved(0), saved, ctx.needs_input_grad(0), dweight, dbias);
    return grads;
  }
};

// batch_norm through a given kernel (a layer's).
template <class T, class B>
variable<T, B> batch_norm_with(const nn::batch_norm_kernel& kernel, const variable<T, B>& x,
                               tensor<T, B>& running_mean, tensor<T, B>& running_var,
                               const variable<T, B>& weight, const variable<T, B>& bias,
                               bool training) {
  const shape_t c{kernel.channels()};
  if (!(running_mean.shape() == c) || !(running_var.shape() == c) || !(weight.shape() == c) ||
      !(bias.shape() == c))
    meld::detail::raise<shape_error>(kernel.name(),
                                     ": the running mean, running variance, weight "
                                     "and bias have shapes ",
                                     running_mean.shape(), ", ", running_var.shape(), ", ",
                                     weight.shape(), " and ", bias.shape(), ", expected ", c);
  return apply(batch_norm_function<T, B>{kernel, &running_mean, &running_var, training, {}}, x,
               weight, bias);
}

}  // namespace detail

/// Batch normalization over the channels (axis 1) of x {batch, channels, ...}
/// (torch.nn.functional.batch_norm): y = weight (x - mean) / sqrt(var + eps) + bias, with the
/// batch's mean and (biased) variance over every axis but the channels' when training, updating
/// running_mean and running_var {channels} (running = (1 - momentum) running + momentum batch,
/// the variance unbiased), else with running_mean and running_var. x, weight and bias {channels}
/// are variables or expressions of them. Throws shape_error for shapes that do not fit (or, in
/// training, a single value per channel), std::invalid_argument for invalid options.
template <differentiable X, class T, class B, differentiable W, differentiable C>
auto batch_norm(X&& x, tensor<T, B>& running_mean, tensor<T, B>& running_var, W&& weight, C&& bias,
                bool training, nn::batch_norm_options options = {}) {
  if (running_mean.rank() != 1)
    meld::detail::raise<shape_error>("autograd::batch_norm: a running mean of shape ",
                                     running_mean.shape(), " (expected {channels})");
  const nn::batch_norm_kernel kernel(running_mean.shape()[0], options, "autograd::batch_norm");
  return detail::batch_norm_with(kernel, detail::as_variable(std::forward<X>(x)), running_mean,
                                 running_var, detail::as_variable(std::forward<W>(weight)),
                                 detail::as_variable(std::forward<C>(bias)), training);
}

/// @}

}  // namespace meld::autograd
