// Losses written as expressions of variables, each the mean over every element, returned as a
// rank-0 variable on the predictions' backend (a device scalar: nothing is read on the host).
// Targets are tensors (or expressions) of the predictions' shape, or broadcasting to it.
#pragma once

#include <utility>

#include "reductions.hpp"
#include "softmax.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

/// mean((pred - target)^2).
template <differentiable P, expression Y>
auto mse_loss(P&& pred, Y&& target) {
  return mean(square(std::forward<P>(pred) - std::forward<Y>(target)));
}

/// mean(|pred - target|).
template <differentiable P, expression Y>
auto l1_loss(P&& pred, Y&& target) {
  return mean(abs(std::forward<P>(pred) - std::forward<Y>(target)));
}

/// mean of 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, with d = pred - target (Huber's
/// loss divided by beta, as PyTorch's smooth_l1_loss).
template <differentiable P, expression Y>
auto smooth_l1_loss(P&& pred, Y&& target, double beta = 1.0) {
  auto d = detail::as_variable(std::forward<P>(pred) - std::forward<Y>(target));
  using T = value_t<decltype(d)>;
  const T b = static_cast<T>(beta);
  return mean(where(abs(d) < b, T(0.5) * d * d / b, abs(d) - T(0.5) * b));
}

/// Binary cross-entropy of logits x and targets y in [0, 1]: mean(max(x, 0) - x y + log(1 +
/// exp(-|x|))), stable for logits of any magnitude.
template <differentiable P, expression Y>
auto bce_with_logits_loss(P&& logits, Y&& target) {
  auto x = detail::as_variable(std::forward<P>(logits));
  using T = value_t<decltype(x)>;
  return mean(relu(x) - x * std::forward<Y>(target) + log(T(1) + exp(-abs(x))));
}

/// @}

}  // namespace meld::autograd
