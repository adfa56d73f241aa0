// Adam (Kingma & Ba), over any nn::model, with PyTorch's update: per parameter p with gradient g,
// at step t (from 1),
//
//   g' = g + weight_decay p                          (L2 penalty; not with decoupled decay)
//   m = beta1 m + (1 - beta1) g'      v = beta2 v + (1 - beta2) g'^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
//
// With decoupled_weight_decay (AdamW), p *= 1 - lr weight_decay first and g' = g.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../require_model.hpp"
#include "optimizer.hpp"

namespace meld::optim {

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
class adam {
  static_assert(nn::require_model<M>(),
                "meld::optim::adam<M>: M is not a meld::nn::model (see "
                "the messages above)");

 public:
  /// The model type.
  using model_type = M;
  /// The parameters' element type.
  using value_type = typename M::value_type;
  /// The parameters' tensor type.
  using tensor_type = tensor<value_type, typename M::backend_type>;

  /// Keeps a pointer to model (which must outlive the optimizer) and zero moments for each
  /// parameter. Throws std::invalid_argument for invalid options.
  adam(M& model, adam_options options) : model_(&model), options_(options) {
    validate(options);
    model.visit_parameters([&](std::string_view name, tensor_type& p, tensor_type&) {
      names_.emplace_back(name);
      m_.emplace_back(p.shape());
      v_.emplace_back(p.shape());
    });
  }

  /// One update of every parameter from its gradient. Throws std::logic_error if the model's
  /// parameters changed since construction.
  void step() {
    using T = value_type;
    const double t = static_cast<double>(steps_ + 1);
    const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
    const T step_size = static_cast<T>(options_.lr / (1 - std::pow(options_.beta1, t)));
    const T inv_bc2 = static_cast<T>(1 / (1 - std::pow(options_.beta2, t)));
    const T eps = static_cast<T>(options_.eps), wd = static_cast<T>(options_.weight_decay);
    const T decay = static_cast<T>(1 - options_.lr * options_.weight_decay);
    const bool decoupled = options_.decoupled_weight_decay;
    std::size_t i = 0;
    model_->visit_parameters([&](std::string_view name, tensor_type& p, tensor_type& g) {
      if (i >= names_.size() || names_[i] != name || !(m_[i].shape() == p.shape())) throw_changed();
      tensor_type &m = m_[i], &v = v_[i];
      if (wd != T(0) && !decoupled) {
        m = b1 * m + (T(1) - b1) * (g + wd * p);
        v = b2 * v + (T(1) - b2) * square(g + wd * p);
      } else {
        m = b1 * m + (T(1) - b1) * g;
        v = b2 * v + (T(1) - b2) * square(g);
      }
      if (wd != T(0) && decoupled)
        p = decay * p - step_size * m / (sqrt(v * inv_bc2) + eps);
      else
        p -= step_size * m / (sqrt(v * inv_bc2) + eps);
      ++i;
    });
    if (i != names_.size()) throw_changed();
    ++steps_;
  }

  /// Zeroes the model's gradients.
  void zero_grad() { model_->zero_grad(); }

  /// The learning rate.
  double lr() const { return options_.lr; }
  /// Changes the learning rate (for schedules); throws std::invalid_argument for a negative one.
  void set_lr(double lr) {
    adam_options o = options_;
    o.lr = lr;
    validate(o);
    options_ = o;
  }
  /// The settings.
  const adam_options& options() const { return options_; }
  /// Steps taken.
  std::int64_t steps() const { return steps_; }

  /// "adam.steps", then "adam.m.<parameter>" and "adam.v.<parameter>" for every parameter.
  template <class F>
  void visit_state(F&& f) {
    f(std::string_view("adam.steps"), steps_);
    for (std::size_t i = 0; i < names_.size(); ++i) {
      f(std::string_view("adam.m." + names_[i]), m_[i]);
      f(std::string_view("adam.v." + names_[i]), v_[i]);
    }
  }

 private:
  static void validate(const adam_options& o) {
    if (!(o.lr >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
        !(o.eps >= 0) || !(o.weight_decay >= 0))
      throw std::invalid_argument(
          nn::detail::cat("optim::adam: lr ", o.lr, ", beta1 ", o.beta1, ", beta2 ", o.beta2,
                          ", eps ", o.eps, ", weight_decay ", o.weight_decay,
                          ": lr, eps and weight_decay must be >= 0, the betas in [0, 1)"));
  }
  [[noreturn]] static void throw_changed() {
    throw std::logic_error(
        "optim::adam: the model's parameters changed (names, count or shapes) since the "
        "optimizer was made");
  }

  M* model_;
  adam_options options_;
  std::vector<std::string> names_;
  std::vector<tensor_type> m_, v_;
  std::int64_t steps_ = 0;
};

/// Deduces adam<M> from adam(model, options).
template <class M>
adam(M&, adam_options) -> adam<M>;

}  // namespace meld::optim
