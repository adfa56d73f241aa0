// Softmax cross-entropy, fused and numerically stable: for logits z {batch, classes} and class
// indices t {batch} (std::int64_t),
//
//   loss = mean_i [ logsumexp(z_i) - z_i,t_i ],   logsumexp(z) = m + log(sum_j exp(z_j - m)),
//   m = max_j z_j (so that exp never overflows), and the gradient w.r.t. the logits is
//   (softmax(z_i) - onehot(t_i)) / batch.
//
// It satisfies nn::loss: `double loss = nn::cross_entropy(logits, targets, grad);`. Each step is
// one fused expression; softmax never materializes apart from the gradient itself.
#pragma once

#include <cstdint>

#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "../tensor/factories.hpp"
#include "layer.hpp"

namespace meld::nn {

/// Softmax followed by cross-entropy, fused and stable (log-sum-exp): logits {batch, classes},
/// targets {batch} class indices. nn::cross_entropy is an instance.
struct softmax_cross_entropy {
  /// Returns the mean loss over the batch; writes its gradient w.r.t. the logits into grad
  /// (resized to the logits' shape). Throws shape_error for mismatched shapes and
  /// std::out_of_range for a class index outside [0, classes).
  template <class T, class B>
  double operator()(const tensor<T, B>& logits, const tensor<std::int64_t, B>& targets,
                    tensor<T, B>& grad) const {
    const index_t n = check(logits.shape(), targets);
    const tensor<T, B> lse = log_sum_exp(logits);  // {batch, 1}
    const tensor<T, B> onehot = one_hot(logits, targets);
    const double loss = static_cast<double>(meld::sum(lse - meld::sum(onehot * logits, 1, true)) /
                                            static_cast<T>(n));
    grad = (exp(logits - lse) - onehot) * (T(1) / static_cast<T>(n));
    return loss;
  }

  /// The mean loss alone (evaluation).
  template <class T, class B>
  double operator()(const tensor<T, B>& logits, const tensor<std::int64_t, B>& targets) const {
    const index_t n = check(logits.shape(), targets);
    const tensor<T, B> lse = log_sum_exp(logits);
    const tensor<T, B> onehot = one_hot(logits, targets);
    return static_cast<double>(meld::sum(lse - meld::sum(onehot * logits, 1, true)) /
                               static_cast<T>(n));
  }

  /// logsumexp along axis 1, kept as {batch, 1}.
  template <class T, class B>
  static tensor<T, B> log_sum_exp(const tensor<T, B>& logits) {
    const tensor<T, B> m = meld::max(logits, 1, true);
    return m + log(meld::sum(exp(logits - m), 1, true));
  }

 private:
  template <class B>
  static index_t check(const shape_t& s, const tensor<std::int64_t, B>& targets) {
    if (s.size() != 2 || s[0] == 0 || s[1] == 0)
      throw shape_error(detail::cat("softmax_cross_entropy: the logits have shape ", s,
                                    ", expected {batch, classes} with both positive"));
    if (!(targets.shape() == shape_t{s[0]}))
      throw shape_error(detail::cat("softmax_cross_entropy: the targets have shape ",
                                    targets.shape(), ", expected {", s[0],
                                    "} (one class index per row of the logits ", s, ")"));
    const std::int64_t lo = meld::min(targets), hi = meld::max(targets);
    if (lo < 0 || hi >= s[1])
      throw std::out_of_range(detail::cat("softmax_cross_entropy: class index ", lo < 0 ? lo : hi,
                                          " is outside [0, ", s[1], ")"));
    return s[0];
  }

  // 1 where column j is row i's class, else 0: {batch, classes}.
  template <class T, class B>
  static tensor<T, B> one_hot(const tensor<T, B>& logits, const tensor<std::int64_t, B>& targets) {
    const index_t classes = logits.shape()[1];
    const tensor<T, B> column = arange<T, B>(T(classes)).reshape({1, classes});
    const tensor<T, B> target = cast<T>(targets.reshape({logits.shape()[0], 1}));
    return where(column == target, T(1), T(0));
  }
};

/// The loss object: `double loss = nn::cross_entropy(logits, targets, grad);`.
inline constexpr softmax_cross_entropy cross_entropy{};

/// How many rows of `logits` have their largest value at the target class.
template <class T, class B>
std::int64_t correct_predictions(const tensor<T, B>& logits,
                                 const tensor<std::int64_t, B>& targets) {
  return meld::sum(meld::argmax(logits, 1) == targets);
}

}  // namespace meld::nn
