// The update math of each optimizer, once: nn's optimizers (sgd.hpp, adam.hpp) apply it to a
// model's parameters as a few fused assignments over tensors (of any backend), and the parameter
// server's rules (distributed/ps_rules.hpp) to each element of a server's shard, as scalars. The
// same code serves both: its operands are tensors and expressions, or numbers.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../expr/operators.hpp"
#include "../../tensor/assign_each.hpp"

namespace meld::detail {
// Each destination takes its value, in order, each value reading what those before it wrote (the
// values are functions that build them): for tensors one pass over the elements
// (meld::assign_each: every operand read from memory once, as an optimizer's state is), for
// numbers (the parameter server's rules, element by element) one assignment after another.
template <class... D, class... F>
void update_in_order(const std::tuple<D&...>& dsts, F&&... values) {
  if constexpr ((std::is_arithmetic_v<D> && ...))
    std::apply([&](D&... d) { ((d = values()), ...); }, dsts);
  else
    meld::assign_each(dsts, values()...);
}

// x * x: meld::square for tensors and expressions (one fused node), a product for numbers.
template <class X>
auto squared(const X& x) {
  if constexpr (std::is_arithmetic_v<X>)
    return x * x;
  else
    return square(x);
}
}  // namespace meld::detail

namespace meld::optim {

/// \addtogroup nn
/// @{

/// The coefficients of one SGD step (PyTorch's semantics; see sgd.hpp).
template <class T>
struct sgd_coefficients {
  T lr{};                 ///< learning rate
  T momentum{};           ///< momentum factor (0: plain SGD)
  T keep{1};              ///< 1 - dampening
  T weight_decay{};       ///< L2 penalty added to the gradient
  bool nesterov = false;  ///< Nesterov momentum
  bool first = false;     ///< the first step: the momentum buffer (all 0 then) starts as d
};

/// One SGD step of parameter p with gradient g and momentum buffer buf (unused without momentum;
/// each a tensor, view or expression, or each a number):
/// d = g + weight_decay p; buf = d on the first step (from zeros), else momentum buf + keep d;
/// p -= lr (d + momentum buf) with Nesterov momentum, lr buf without, lr d without momentum.
template <class P, class G, class Buf, class T>
void sgd_update(P&& p, const G& g, Buf&& buf, const sgd_coefficients<T>& c) {
  if (c.momentum == T(0)) {
    if (c.weight_decay != T(0))
      p -= c.lr * (g + c.weight_decay * p);
    else
      p -= c.lr * g;
    return;
  }
  // The buffer, then the parameter from the new buffer: one pass over p, g and buf. On the first
  // step the buffer, still 0, becomes d as 0 buf + 1 d (exactly d): the same pass, not another.
  using meld::detail::update_in_order;
  const T old_weight = c.first ? T(0) : c.momentum, new_weight = c.first ? T(1) : c.keep;
  const auto buffers = std::tie(buf, p);
  auto plain_p = [&] { return p - c.lr * buf; };
  if (c.weight_decay != T(0)) {
    auto new_buf = [&] { return old_weight * buf + new_weight * (g + c.weight_decay * p); };
    if (c.nesterov)
      update_in_order(buffers, new_buf,
                      [&] { return p - c.lr * (g + c.weight_decay * p + c.momentum * buf); });
    else
      update_in_order(buffers, new_buf, plain_p);
  } else {
    auto new_buf = [&] { return old_weight * buf + new_weight * g; };
    if (c.nesterov)
      update_in_order(buffers, new_buf, [&] { return p - c.lr * (g + c.momentum * buf); });
    else
      update_in_order(buffers, new_buf, plain_p);
  }
}

/// The coefficients of Adam's step `step` (from 1; see adam.hpp).
template <class T>
struct adam_coefficients {
  /// The decay rates of the first- and second-moment estimates.
  /// @{
  T beta1{}, beta2{};
  /// @}
  T step_size{};           ///< lr / (1 - beta1^step)
  T inv_bc2{};             ///< 1 / (1 - beta2^step)
  T eps{};                 ///< added to the denominator for numerical stability
  T weight_decay{};        ///< L2 penalty (added to the gradient unless decoupled)
  T decay{1};              ///< 1 - lr weight_decay (AdamW's decoupled decay)
  bool decoupled = false;  ///< AdamW: weight decay applied to the parameter, not the gradient

  /// The coefficients of step `step` (computed in double, as PyTorch does).
  static adam_coefficients at(double lr, double beta1, double beta2, double eps,
                              double weight_decay, bool decoupled, std::int64_t step) {
    const double t = static_cast<double>(step);
    adam_coefficients c;
    c.beta1 = static_cast<T>(beta1);
    c.beta2 = static_cast<T>(beta2);
    c.step_size = static_cast<T>(lr / (1 - std::pow(beta1, t)));
    c.inv_bc2 = static_cast<T>(1 / (1 - std::pow(beta2, t)));
    c.eps = static_cast<T>(eps);
    c.weight_decay = static_cast<T>(weight_decay);
    c.decay = static_cast<T>(1 - lr * weight_decay);
    c.decoupled = decoupled;
    return c;
  }
};

/// One Adam step of parameter p with gradient g and moments m, v (tensors, views and expressions,
/// or numbers): g' = g + weight_decay p (not
/// with decoupled decay); m = beta1 m + (1 - beta1) g'; v = beta2 v + (1 - beta2) g'^2;
/// p -= step_size m / (sqrt(v inv_bc2) + eps), after p *= decay with decoupled decay.
template <class P, class G, class M, class V, class T>
void adam_update(P&& p, const G& g, M&& m, V&& v, const adam_coefficients<T>& c) {
  // The moments, then the parameter from the new moments: one pass over p, g, m and v.
  using meld::detail::update_in_order;
  using std::sqrt;  // for numbers; tensors and expressions find meld::sqrt
  const auto state = std::tie(m, v, p);
  auto plain_m = [&] { return c.beta1 * m + (T(1) - c.beta1) * g; };
  auto plain_v = [&] { return c.beta2 * v + (T(1) - c.beta2) * meld::detail::squared(g); };
  auto plain_p = [&] { return p - c.step_size * m / (sqrt(v * c.inv_bc2) + c.eps); };
  if (c.weight_decay != T(0) && !c.decoupled)  // L2: the decay joins the gradient
    update_in_order(
        state, [&] { return c.beta1 * m + (T(1) - c.beta1) * (g + c.weight_decay * p); },
        [&] {
          return c.beta2 * v + (T(1) - c.beta2) * meld::detail::squared(g + c.weight_decay * p);
        },
        plain_p);
  else if (c.weight_decay != T(0))  // AdamW: the parameter decays apart from the gradient
    update_in_order(state, plain_m, plain_v,
                    [&] { return c.decay * p - c.step_size * m / (sqrt(v * c.inv_bc2) + c.eps); });
  else
    update_in_order(state, plain_m, plain_v, plain_p);
}

/// @}

}  // namespace meld::optim
