// log_softmax and softmax along an axis, and the losses on them for class indices: nll_loss and
// cross_entropy (their mean over the batch, a device scalar).
//
// log_softmax is one node: y = x - m - log(sum(exp(x - m))) with m the maximum (stable for logits
// of any magnitude); its backward, dx = g - exp(y) sum(g), reads only the saved output.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "../tensor/factories.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

struct log_softmax_function {
  static constexpr const char* name = "log_softmax";
  long axis = -1;
  int ax = 0;
  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x) {
    ax = normalize_axis(axis, x.rank(), name);
    const tensor<T, B> m = meld::max(x, ax, true);
    const tensor<T, B> lse = log(meld::sum(exp(x - m), ax, true));
    tensor<T, B> y = x - m - lse;
    ctx.save_for_backward(y);
    return y;
  }
  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& y = ctx.saved(0);
    const tensor<T, B> total = meld::sum(g, ax, true);
    return {tensor<T, B>(g - exp(y) * total)};
  }
};

// One-hot rows {batch, classes} for class indices {batch}; on host backends, an index out of
// range throws std::out_of_range (on a device, its row is all zeros: that sample adds nothing).
template <class T, class B>
tensor<T, B> one_hot(const tensor<std::int64_t, B>& targets, index_t batch, index_t classes,
                     const char* what) {
  if (!(targets.shape() == shape_t{batch}))
    meld::detail::raise<shape_error>(what, ": the targets have shape ", targets.shape(),
                                     ", expected {", batch, "} (one class index per row)");
  if constexpr (B::host_accessible) {
    if (batch > 0) {
      const std::int64_t lo = meld::min(targets), hi = meld::max(targets);
      if (lo < 0 || hi >= classes)
        throw std::out_of_range(meld::detail::cat(what, ": class index ", lo < 0 ? lo : hi,
                                                  " is outside [0, ", classes, ")"));
    }
  }
  const tensor<T, B> column = arange<T, B>(T(classes)).reshape({1, classes});
  return tensor<T, B>(where(column == cast<T>(targets.reshape({batch, 1})), T(1), T(0)));
}

}  // namespace detail

/// log(softmax(x)) along an axis.
template <differentiable E>
auto log_softmax(E&& x, long axis = -1) {
  detail::log_softmax_function f;
  f.axis = axis;
  return apply(f, detail::as_variable(std::forward<E>(x)));
}
/// softmax(x) along an axis: exp of log_softmax (one more fused node).
template <differentiable E>
auto softmax(E&& x, long axis = -1) {
  auto y = log_softmax(std::forward<E>(x), axis);
  return decltype(y)(exp(y));
}

/// The mean negative log-likelihood of class indices `targets` {batch} under log-probabilities
/// `log_probs` {batch, classes}: -mean_i log_probs[i, targets[i]]. A rank-0 variable.
template <differentiable E, class B>
auto nll_loss(E&& log_probs, const tensor<std::int64_t, B>& targets) {
  auto lp = detail::as_variable(std::forward<E>(log_probs));
  using T = value_t<decltype(lp)>;
  if (lp.rank() != 2 || lp.shape()[0] == 0)
    meld::detail::raise<shape_error>("nll_loss: the log-probabilities have shape ", lp.shape(),
                                     ", expected {batch, classes} with a batch");
  const index_t n = lp.shape()[0];
  tensor<T, B> weights = detail::one_hot<T, B>(targets, n, lp.shape()[1], "nll_loss");
  weights *= T(-1) / static_cast<T>(n);
  return sum(std::move(weights) * lp);
}

/// Softmax cross-entropy of logits {batch, classes} and class indices {batch}: the batch mean, a
/// rank-0 variable (nll_loss of log_softmax along the last axis).
template <differentiable E, class B>
auto cross_entropy(E&& logits, const tensor<std::int64_t, B>& targets) {
  return nll_loss(log_softmax(std::forward<E>(logits), 1), targets);
}

/// @}

}  // namespace meld::autograd
