// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum, over
// any nn::model. The update (PyTorch's), per parameter p with gradient g:
//
//   d = g + weight_decay p
//   buf = d on the first step, else momentum buf + (1 - dampening) d      (when momentum != 0)
//   p -= lr (d + momentum buf)   with nesterov,   p -= lr buf   without,   p -= lr d   (no
//   momentum)
//
// Each line is one fused expression per parameter.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../require_model.hpp"
#include "optimizer.hpp"

namespace meld::optim {

/// Settings of sgd (PyTorch's semantics).
struct sgd_options {
  /// Learning rate.
  double lr = 0.01;
  /// Momentum factor (0: plain SGD).
  double momentum = 0;
  /// Dampening of the momentum: buf = momentum * buf + (1 - dampening) * g.
  double dampening = 0;
  /// L2 penalty added to the gradient (g + weight_decay * p).
  double weight_decay = 0;
  /// Nesterov momentum (needs momentum > 0 and dampening 0).
  bool nesterov = false;
};

/// Stochastic gradient descent with momentum, weight decay and Nesterov momentum over the
/// parameters of a model (anything satisfying nn::model), as PyTorch's.
template <class M>
class sgd {
  static_assert(nn::require_model<M>(),
                "meld::optim::sgd<M>: M is not a meld::nn::model (see "
                "the messages above)");

 public:
  /// The model type.
  using model_type = M;
  /// The parameters' element type.
  using value_type = typename M::value_type;
  /// The parameters' tensor type.
  using tensor_type = tensor<value_type, typename M::backend_type>;

  /// Keeps a pointer to model (which must outlive the optimizer) and a momentum buffer for each
  /// parameter. Throws std::invalid_argument for invalid options.
  sgd(M& model, sgd_options options) : model_(&model), options_(options) {
    validate(options);
    model.visit_parameters([&](std::string_view name, tensor_type& p, tensor_type&) {
      names_.emplace_back(name);
      momentum_.emplace_back(options.momentum != 0 ? p.shape() : shape_t{0});
    });
  }

  /// One update of every parameter from its gradient. Throws std::logic_error if the model's
  /// parameters changed since construction.
  void step() {
    using T = value_type;
    const T lr = static_cast<T>(options_.lr), wd = static_cast<T>(options_.weight_decay),
            mu = static_cast<T>(options_.momentum), keep = static_cast<T>(1 - options_.dampening);
    std::size_t i = 0;
    model_->visit_parameters([&](std::string_view name, tensor_type& p, tensor_type& g) {
      check_parameter(i, name, p);
      if (options_.momentum == 0) {
        if (wd != T(0))
          p -= lr * (g + wd * p);
        else
          p -= lr * g;
      } else {
        tensor_type& buf = momentum_[i];
        if (wd != T(0)) {
          if (steps_ == 0)
            buf = g + wd * p;
          else
            buf = mu * buf + keep * (g + wd * p);
          if (options_.nesterov)
            p -= lr * (g + wd * p + mu * buf);
          else
            p -= lr * buf;
        } else {
          if (steps_ == 0)
            buf = g;
          else
            buf = mu * buf + keep * g;
          if (options_.nesterov)
            p -= lr * (g + mu * buf);
          else
            p -= lr * buf;
        }
      }
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
    sgd_options o = options_;
    o.lr = lr;
    validate(o);
    options_ = o;
  }
  /// The settings.
  const sgd_options& options() const { return options_; }
  /// Steps taken.
  std::int64_t steps() const { return steps_; }

  /// "sgd.steps" and, with momentum, "sgd.momentum.<parameter>".
  template <class F>
  void visit_state(F&& f) {
    f(std::string_view("sgd.steps"), steps_);
    if (options_.momentum == 0) return;
    for (std::size_t i = 0; i < names_.size(); ++i)
      f(std::string_view("sgd.momentum." + names_[i]), momentum_[i]);
  }

 private:
  static void validate(const sgd_options& o) {
    if (!(o.lr >= 0) || !(o.momentum >= 0) || !(o.weight_decay >= 0) || !(o.dampening >= 0) ||
        !(o.dampening <= 1))
      throw std::invalid_argument(nn::detail::cat(
          "optim::sgd: lr ", o.lr, ", momentum ", o.momentum, ", dampening ", o.dampening,
          ", weight_decay ", o.weight_decay, ": each must be >= 0 (dampening <= 1)"));
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
      throw std::invalid_argument(
          "optim::sgd: Nesterov momentum needs momentum > 0 and dampening 0");
  }
  void check_parameter(std::size_t i, std::string_view name, const tensor_type& p) const {
    if (i >= names_.size() || names_[i] != name ||
        (options_.momentum != 0 && !(momentum_[i].shape() == p.shape())))
      throw_changed();
  }
  [[noreturn]] static void throw_changed() {
    throw std::logic_error(
        "optim::sgd: the model's parameters changed (names, count or shapes) since the "
        "optimizer was made");
  }

  M* model_;
  sgd_options options_;
  std::vector<std::string> names_;
  std::vector<tensor_type> momentum_;
  std::int64_t steps_ = 0;
};

/// Deduces sgd<M> from sgd(model, options).
template <class M>
sgd(M&, sgd_options) -> sgd<M>;

}  // namespace meld::optim
