// Adam (Kingma & Ba), over any nn::model, with PyTorch's update: per parameter p with gradient g,
// at step t (from 1),
//
//   g' = g + weight_decay p                          (L2 penalty; not with decoupled decay)
//   m = beta1 m + (1 - beta1) g'      v = beta2 v + (1 - beta2) g'^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
//
// With decoupled_weight_decay (AdamW), p *= 1 - lr weight_decay first and g' = g. The math is
// update.hpp's, which the parameter server's ps_adam shares.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "optimizer.hpp"
#include "update.hpp"

namespace meld::optim {

/// \addtogroup nn
/// @{

/// Settings of adam (PyTorch's defaults).
struct adam_options {
  /// Learning rate.
  double lr = 1e-3;
  /// Decay of the first-moment (mean) estimate.
  double beta1 = 0.9;
  /// Decay of the second-moment (uncentered variance) estimate.
  double beta2 = 0.999;
  /// Added to the square root of the second moment.
  double eps = 1e-8;
  /// L2 penalty (added to the gradient, or applied to the weights with decoupled_weight_decay).
  double weight_decay = 0;
  /// AdamW: decay the weights directly (p -= lr * weight_decay * p) instead of through the
  /// gradient.
  bool decoupled_weight_decay = false;
};

/// Adam (and AdamW) over the parameters of a model (anything satisfying nn::model), as PyTorch's.
template <class M>
class adam : public optimizer_base<adam<M>, M, adam_options> {
  using base = optimizer_base<adam<M>, M, adam_options>;

 public:
  using typename base::tensor_type;
  using typename base::value_type;
  static constexpr const char* kind = "adam";  ///< the prefix of its state names

  /// Keeps a pointer to model (which must outlive the optimizer) and makes the state of each
  /// parameter. Throws std::invalid_argument for invalid options.
  adam(M& model, adam_options options) : base(model, options) {
    model.visit_parameters([&](std::string_view, tensor_type& p, tensor_type&) {
      m_.emplace_back(p.shape());
      v_.emplace_back(p.shape());
    });
  }

  /// One update of every parameter from its gradient. Throws std::logic_error if the model's
  /// parameters changed since construction.
  void step() {
    using T = value_type;
    const adam_options& o = this->options_;
    const auto c = adam_coefficients<T>::at(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                            o.decoupled_weight_decay, this->steps_ + 1);
    this->update_each(
        [&](std::size_t i, tensor_type& p, tensor_type& g) { adam_update(p, g, m_[i], v_[i], c); });
  }

  /// "adam.steps", then "adam.m.<parameter>" and "adam.v.<parameter>" for every parameter.
  template <class F>
  void visit_state(F&& f) {
    f(std::string_view("adam.steps"), this->steps_);
    for (std::size_t i = 0; i < this->parameter_count(); ++i) {
      f(std::string_view(this->state_name("m", i)), m_[i]);
      f(std::string_view(this->state_name("v", i)), v_[i]);
    }
  }

  /// Throws std::invalid_argument naming the options unless they are valid.
  static void validate(const adam_options& o) {
    if (!(o.lr >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
        !(o.eps >= 0) || !(o.weight_decay >= 0))
      throw std::invalid_argument(
          meld::detail::cat("optim::adam: lr ", o.lr, ", beta1 ", o.beta1, ", beta2 ", o.beta2,
                            ", eps ", o.eps, ", weight_decay ", o.weight_decay,
                            ": lr, eps and weight_decay must be >= 0, the betas in [0, 1)"));
  }

 private:
  std::vector<tensor_type> m_, v_;
};

/// Deduces adam<M> from adam(model, options).
template <class M>
adam(M&, adam_options) -> adam<M>;

/// @}

}  // namespace meld::optim
