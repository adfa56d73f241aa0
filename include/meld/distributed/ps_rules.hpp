// The update rules a param_server applies on its servers: what a server does with the
// aggregated pushes of a round (or with one push, asynchronously) to its shard of a value, with
// the state the rule keeps there (momentum, Adam's moments), sized by the shard.
//
//   meld::param_server<float> ps(MPI_COMM_WORLD, options, meld::ps_sgd<float>(0.1f, 0.9f));
//
// A rule is called once per contiguous run of the shard that a round touched (the whole shard
// for dense pushes; runs of rows for sparse ones), with the element offset of the run in the
// value, so that a rule can tell where it is. State lives beside the value: `state_slots` arrays
// of the shard's size, zero at first, saved with the shard in checkpoints. SGD's and Adam's math
// is nn::optim's (nn/optim/update.hpp), applied element by element.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>

#include "../core/config.hpp"
#include "../nn/optim/update.hpp"

namespace meld {

/// \addtogroup param_server
/// @{

/// One call of an update rule: the aggregated push for a run of a server's shard and the value
/// and state of that run.
template <class T>
struct ps_update {
  int key = 0;               ///< the key
  index_t offset = 0;        ///< element offset of the run in the key's value
  std::span<const T> grad;   ///< the aggregated push (the sum of `contributions` pushes)
  std::span<T> value;        ///< the stored value of the run, updated in place
  int workers = 1;           ///< how many workers push this key each round
  int contributions = 1;     ///< how many pushes `grad` sums (workers when synchronous, else 1)
  std::uint64_t step = 0;    ///< updates applied to this key before this one (1-based after it)
  T* state_data = nullptr;   ///< slot s of element i of the run: state_data[s * state_stride + i]
  index_t state_stride = 0;  ///< elements between two state slots (the shard's size)

  /// State array `slot` (of the rule's state_slots) for this run.
  std::span<T> state(int slot) const {
    return {state_data + static_cast<index_t>(slot) * state_stride, value.size()};
  }
};

/// An update rule: the function a server applies, and how many state arrays (of the shard's
/// size) it keeps per key. The default stores the aggregated push (value = sum of the pushes).
template <class T>
struct ps_rule {
  /// Applies one update (see ps_update).
  std::function<void(const ps_update<T>&)> apply;
  /// State arrays per element the rule needs (momentum 1, Adam 2).
  int state_slots = 0;
};

/// value = the aggregated push (the sum of the round's pushes; the last push when asynchronous).
template <class T>
ps_rule<T> ps_assign() {
  return {[](const ps_update<T>& u) {
            for (std::size_t i = 0; i < u.value.size(); ++i) u.value[i] = u.grad[i];
          },
          0};
}

/// Stochastic gradient descent on the mean gradient over the workers: g = push / workers
/// (a round's synchronous sum, or one worker's push applied at 1/workers of the step, so that a
/// round of asynchronous pushes moves the value as far as one synchronous update), with
/// momentum (v = momentum v + g; value -= lr v) and L2 weight decay (g += decay value). `lr` is
/// a number, or a schedule: a function of the key's update count (ps_update::step).
template <class T, class Rate>
requires std::convertible_to<Rate, T> || std::is_invocable_r_v<T, Rate, std::uint64_t> ps_rule<T>
ps_sgd(Rate lr, T momentum = T(0), T weight_decay = T(0)) {
  return {[=](const ps_update<T>& u) {
            T rate;
            if constexpr (std::is_invocable_r_v<T, Rate, std::uint64_t>)
              rate = static_cast<T>(lr(u.step));
            else
              rate = static_cast<T>(lr);
            const optim::sgd_coefficients<T> c{rate, momentum, T(1), weight_decay};
            const T scale = T(1) / static_cast<T>(u.workers);
            const std::span<T> v = momentum != T(0) ? u.state(0) : std::span<T>();
            T unused = T(0);  // the momentum buffer of plain SGD
            for (std::size_t i = 0; i < u.value.size(); ++i)
              optim::sgd_update(u.value[i], u.grad[i] * scale, momentum != T(0) ? v[i] : unused, c);
          },
          momentum != T(0) ? 1 : 0};
}

/// Adam on the mean gradient over the workers (g = push / workers), its two moments kept on the
/// server, bias-corrected by the key's update count.
template <class T>
ps_rule<T> ps_adam(T lr, T beta1 = T(0.9), T beta2 = T(0.999), T eps = T(1e-8)) {
  return {[=](const ps_update<T>& u) {
            const T scale = T(1) / static_cast<T>(u.workers);
            const std::span<T> m = u.state(0), v = u.state(1);
            const auto c = optim::adam_coefficients<T>::at(lr, beta1, beta2, eps, 0, false,
                                                           static_cast<std::int64_t>(u.step + 1));
            for (std::size_t i = 0; i < u.value.size(); ++i)
              optim::adam_update(u.value[i], u.grad[i] * scale, m[i], v[i], c);
          },
          2};
}

/// @}

}  // namespace meld
