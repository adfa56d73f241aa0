// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum, over
// any nn::model. The update (PyTorch's), per parameter p with gradient g:
//
//   d = g + weight_decay p
//   buf = d on the first step, else momentum buf + (1 - dampening) d      (when momentum != 0)
//   p -= lr (d + momentum buf)   with nesterov,   p -= lr buf   without,   p -= lr d   (no
//   momentum)
//
// Each line is one fused expression per parameter (update.hpp: the math the parameter server's
// ps_sgd shares).
#pragma once

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
class sgd : public optimizer_base<sgd<M>, M, sgd_options> {
  using base = optimizer_base<sgd<M>, M, sgd_options>;

 public:
  using typename base::tensor_type;
  using typename base::value_type;
  static constexpr const char* kind = "sgd";  ///< the prefix of its state names

  /// Keeps a pointer to model (which must outlive the optimizer) and makes the state of each
  /// parameter. Throws std::invalid_argument for invalid options.
  sgd(M& model, sgd_options options) : base(model, options) {
    model.visit_parameters([&](std::string_view, tensor_type& p, tensor_type&) {
      momentum_.emplace_back(options.momentum != 0 ? p.shape() : shape_t{0});
    });
  }

  /// One update of every parameter from its gradient. Throws std::logic_error if the model's
  /// parameters changed since construction.
  void step() {
    using T = value_type;
    const sgd_options& o = this->options_;
    const sgd_coefficients<T> c{static_cast<T>(o.lr),
                                static_cast<T>(o.momentum),
                                static_cast<T>(1 - o.dampening),
                                static_cast<T>(o.weight_decay),
                                o.nesterov,
                                this->steps_ == 0};
    this->update_each(
        [&](std::size_t i, tensor_type& p, tensor_type& g) { sgd_update(p, g, momentum_[i], c); });
  }

  /// "sgd.steps" and, with momentum, "sgd.momentum.<parameter>".
  template <class F>
  void visit_state(F&& f) {
    f(std::string_view("sgd.steps"), this->steps_);
    if (this->options_.momentum == 0) return;
    for (std::size_t i = 0; i < this->parameter_count(); ++i)
      f(std::string_view(this->state_name("momentum", i)), momentum_[i]);
  }

  /// Throws std::invalid_argument naming the options unless they are valid.
  static void validate(const sgd_options& o) {
    if (!(o.lr >= 0) || !(o.momentum >= 0) || !(o.weight_decay >= 0) || !(o.dampening >= 0) ||
        !(o.dampening <= 1))
      throw std::invalid_argument(meld::detail::cat(
          "optim::sgd: lr ", o.lr, ", momentum ", o.momentum, ", dampening ", o.dampening,
          ", weight_decay ", o.weight_decay, ": each must be >= 0 (dampening <= 1)"));
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
      throw std::invalid_argument(
          "optim::sgd: Nesterov momentum needs momentum > 0 and dampening 0");
  }

 private:
  std::vector<tensor_type> momentum_;
};

/// Deduces sgd<M> from sgd(model, options).
template <class M>
sgd(M&, sgd_options) -> sgd<M>;

/// @}

}  // namespace meld::optim
