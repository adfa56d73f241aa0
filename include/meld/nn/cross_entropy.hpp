// Softmax cross-entropy, fused and numerically stable: for logits z {batch, classes} and class
// indices t {batch} (std::int64_t), with m_i = max_j z_ij,
//
//   loss = mean_i [ log sum_j exp(z_ij - m_i) - (z_i,t_i - m_i) ]
//
// The difference is taken between two small numbers (both shifted by the row's maximum), so that
// logits of any magnitude keep their precision (computing logsumexp(z_i) - z_i,t_i instead loses
// every digit once |z| is large: at z = 1e8 + {0, 0.5, 1} it gives 0 instead of 1.0986). The
// gradient w.r.t. the logits is (softmax(z_i) - onehot(t_i)) / batch, and each of its rows sums to
// 0 to rounding.
//
// It satisfies nn::loss: `auto loss = nn::cross_entropy(logits, targets, grad);` returns an
// nn::loss_value that stays on the logits' backend until read (`double l = loss;`). Everything is
// computed where the logits live, as a few fused expressions (softmax never materializes apart
// from the gradient itself); nothing is read back on the host. Class indices are checked at the
// call for host backends (std::out_of_range), and for device backends with the loss, so that a
// bad index throws std::out_of_range when the loss is read.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "../tensor/factories.hpp"
#include "layer.hpp"
#include "loss_value.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Softmax cross-entropy over class indices (see above).
struct softmax_cross_entropy {
  /// The mean loss over the batch as an nn::loss_value (read it to get the number); writes its
  /// gradient w.r.t. the logits into grad (resized to the logits' shape). Throws shape_error for
  /// mismatched shapes, and std::out_of_range for a class index outside [0, classes) (on a device
  /// backend: when the loss is read).
  template <class T, class B>
  loss_value<T, B> operator()(const tensor<T, B>& logits, const tensor<std::int64_t, B>& targets,
                              tensor<T, B>& grad) const {
    const index_t n = check(logits.shape(), targets);
    const tensor<T, B> m = meld::max(logits, 1, true);                  // {batch, 1}
    const tensor<T, B> lse = log(meld::sum(exp(logits - m), 1, true));  // shifted by m
    const tensor<T, B> column = arange<T, B>(T(logits.shape()[1])).reshape({1, logits.shape()[1]});
    const auto target = cast<T>(targets.reshape({n, 1}));
    const auto onehot = where(column == target, T(1), T(0));
    grad = (exp(logits - m - lse) - onehot) * (T(1) / static_cast<T>(n));
    return loss_of(lse - target_logit(column == target, logits, m), targets, logits.shape()[1]);
  }

  /// The mean loss alone (evaluation), as an nn::loss_value.
  template <class T, class B>
  loss_value<T, B> operator()(const tensor<T, B>& logits,
                              const tensor<std::int64_t, B>& targets) const {
    const index_t n = check(logits.shape(), targets);
    const tensor<T, B> m = meld::max(logits, 1, true);
    const tensor<T, B> lse = log(meld::sum(exp(logits - m), 1, true));
    const tensor<T, B> column = arange<T, B>(T(logits.shape()[1])).reshape({1, logits.shape()[1]});
    const auto is_target = column == cast<T>(targets.reshape({n, 1}));
    return loss_of(lse - target_logit(is_target, logits, m), targets, logits.shape()[1]);
  }

  /// logsumexp along axis 1, kept as {batch, 1}: m + log(sum exp(z - m)).
  template <class T, class B>
  static tensor<T, B> log_sum_exp(const tensor<T, B>& logits) {
    const tensor<T, B> m = meld::max(logits, 1, true);
    return m + log(meld::sum(exp(logits - m), 1, true));
  }

 private:
  // Each row's target logit, shifted by the row's max: {batch, 1}. Selected, not multiplied by a
  // one-hot mask, since 0 x -inf is NaN for a masked class (a logit of -inf) or a shifted logit
  // that overflowed (-FLT_MAX - FLT_MAX).
  template <class C, class T, class B>
  static auto target_logit(const C& is_target, const tensor<T, B>& logits, const tensor<T, B>& m) {
    return meld::sum(where(is_target, logits - m, T(0)), 1, true);
  }

  // The loss_value of per-sample losses {batch, 1}: their sum and the number of class indices
  // out of range, side by side in one tensor of 2 elements on the backend.
  template <class E, class B>
  static auto loss_of(const E& per_sample, const tensor<std::int64_t, B>& targets,
                      index_t classes) {
    using T = value_t<E>;
    tensor<T, B> sums({2}, uninitialized);
    sums.slice(range(0, 1)) = meld::sum(per_sample, 0);
    sums.slice(range(1, 2)) = meld::sum(
        cast<T>(logical_or(targets < std::int64_t(0), targets >= std::int64_t(classes))), 0, true);
    return loss_value<T, B>(std::move(sums), static_cast<double>(targets.size()), classes);
  }

  template <class B>
  static index_t check(const shape_t& s, const tensor<std::int64_t, B>& targets) {
    if (s.size() != 2 || s[0] == 0 || s[1] == 0)
      throw shape_error(detail::cat("softmax_cross_entropy: the logits have shape ", s,
                                    ", expected {batch, classes} with both positive"));
    if (!(targets.shape() == shape_t{s[0]}))
      throw shape_error(detail::cat("softmax_cross_entropy: the targets have shape ",
                                    targets.shape(), ", expected {", s[0],
                                    "} (one class index per row of the logits ", s, ")"));
    if constexpr (B::host_accessible) {
      // On the host the check costs nothing: fail at the call, before anything is written.
      const std::int64_t lo = meld::min(targets), hi = meld::max(targets);
      if (lo < 0 || hi >= s[1])
        throw std::out_of_range(detail::cat("softmax_cross_entropy: class index ", lo < 0 ? lo : hi,
                                            " is outside [0, ", s[1], ")"));
    }
    return s[0];
  }
};

/// The loss object: `double loss = nn::cross_entropy(logits, targets, grad);`.
inline constexpr softmax_cross_entropy cross_entropy{};

/// How many rows of `logits` have their largest value at the target class (read on the host).
template <class T, class B>
std::int64_t correct_predictions(const tensor<T, B>& logits,
                                 const tensor<std::int64_t, B>& targets) {
  return meld::sum(meld::argmax(logits, 1) == targets);
}

/// The same count as a tensor of one element on the logits' backend (nothing read on the host):
/// add it up on the device and read it when it is logged.
template <class T, class B>
tensor<std::int64_t, B> correct_count(const tensor<T, B>& logits,
                                      const tensor<std::int64_t, B>& targets) {
  return meld::sum(cast<std::int64_t>(meld::argmax(logits, 1) == targets), 0, true);
}

/// @}

}  // namespace meld::nn
