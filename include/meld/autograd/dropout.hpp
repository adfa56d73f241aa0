// dropout(x, p, training, gen) as a primitive node applying nn::dropout_mask, the code of
// nn::dropout itself: forward draws uniforms u from gen and keeps x / (1 - p) where u >= p, and
// backward applies the same mask to the gradient. Outside training (or with p = 0) it is the
// identity and records nothing.
#pragma once

#include <array>
#include <stdexcept>
#include <utility>

#include "../nn/dropout.hpp"
#include "function.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

template <class T, class B>
struct dropout_function {
  static constexpr const char* name = "dropout";
  tensor<T, B> u;  // the uniform draws: the mask of forward and backward
  double p;

  tensor<T, B> forward(function_context<T, B>&, const tensor<T, B>& x) {
    return nn::dropout_mask(x, u, p);
  }
  std::array<tensor<T, B>, 1> backward(function_context<T, B>&, const tensor<T, B>& g) {
    return {nn::dropout_mask(g, u, p)};
  }
};

}  // namespace detail

/// Inverted dropout (torch.nn.functional.dropout): when training, each element of x is zeroed
/// with probability p and the others are scaled by 1 / (1 - p), with uniforms drawn from gen
/// (the same seed and calls give the same masks); otherwise x itself. Throws
/// std::invalid_argument unless 0 <= p < 1.
template <differentiable X>
auto dropout(X&& x, double p, bool training, rng& gen) {
  if (!(p >= 0 && p < 1))
    throw std::invalid_argument(
        meld::detail::cat("autograd::dropout: probability ", p, " is not in [0, 1)"));
  auto v = detail::as_variable(std::forward<X>(x));
  using V = decltype(v);
  using T = typename V::value_type;
  using B = typename V::backend_type;
  if (!training || p == 0) return v;
  return apply(detail::dropout_function<T, B>{gen.template uniform<T, B>(v.shape()), p}, v);
}

/// @}

}  // namespace meld::autograd
