// The Optimizer concept: what training loops and checkpoints rely on.
//
//   step()            updates every parameter of the model from its gradient
//   zero_grad()       sets the model's gradients to 0
//   visit_state(f)    calls f(name, tensor&) for every state tensor (momentum, Adam moments) and
//                     f(name, std::int64_t&) for every counter (steps taken), in a fixed order;
//                     names are unique and start with the optimizer's kind ("sgd.", "adam.")
//   model_type        the model it updates
//
// and optimizer_base, what sgd and adam share: the model, the options with their learning rate,
// the step count, and the check that the model still has the parameters it had at construction.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../../tensor/tensor.hpp"
#include "../require_model.hpp"

namespace meld::optim {

/// \addtogroup nn
/// @{

/// What an optimizer's visit_state hands to its visitor: a name and a state tensor, or a name and a
/// counter (the step count). Checkpoints save and load through it.
template <class T, class B>
struct state_visitor_archetype {
  /// Receives a name and a state tensor.
  void operator()(std::string_view, tensor<T, B>&) const {}
  /// Receives a name and a counter.
  void operator()(std::string_view, std::int64_t&) const {}
};

/// An optimizer, as training loops and checkpoints use it:
/// - `model_type`: the model it updates (an nn::model, or an nn::parameter_set);
/// - `step()`: updates every parameter of the model from its gradient;
/// - `zero_grad()`: sets the model's gradients to 0;
/// - `visit_state(f)`: calls `f(name, tensor&)` for every state tensor (momentum, Adam's moments)
///   and `f(name, std::int64_t&)` for every counter (steps taken), in a fixed order, with names
///   unique and starting with the optimizer's kind ("sgd.", "adam."). nn::save_checkpoint and
///   nn::load_checkpoint go through it, so that a resumed run continues with the state it had.
///
/// optim::sgd and optim::adam are optimizers; a wrapper that adds state of its own (a run's
/// progress) is one too when its visit_state visits the wrapped optimizer's state and its own.
template <class O>
concept optimizer = requires(O& o) {
  typename O::model_type;
  o.step();
  o.zero_grad();
  o.visit_state(state_visitor_archetype<typename O::model_type::value_type,
                                        typename O::model_type::backend_type>{});
};

/// The common part of an optimizer of kind Derived over model M with Options (which have `lr`):
/// Derived provides `static void validate(const Options&)` (throws std::invalid_argument naming
/// what is wrong) and `static constexpr const char* kind` ("sgd", "adam").
template <class Derived, class M, class Options>
class optimizer_base {
  static_assert(nn::require_parameter_set<M>(),
                "meld::optim: the optimizer's model is not a meld::nn::model (see the messages "
                "above)");

 public:
  using model_type = M;                                              ///< the model type
  using value_type = typename M::value_type;                         ///< its element type
  using tensor_type = tensor<value_type, typename M::backend_type>;  ///< its tensor type

  /// Sets the model's gradients to 0.
  void zero_grad() { model_->zero_grad(); }

  /// The learning rate.
  double lr() const { return options_.lr; }
  /// A new learning rate (schedules); refused like a bad option, leaving the old one.
  void set_lr(double lr) {
    Options o = options_;
    o.lr = lr;
    Derived::validate(o);
    options_ = o;
  }
  /// The options.
  const Options& options() const { return options_; }
  /// The number of steps taken.
  std::int64_t steps() const { return steps_; }

 protected:
  /// Keeps a pointer to model (which must outlive the optimizer) and its parameters' names and
  /// shapes; throws std::invalid_argument for invalid options.
  optimizer_base(M& model, const Options& options) : model_(&model), options_(options) {
    Derived::validate(options);
    model.visit_parameters([&](std::string_view name, tensor_type& p, tensor_type&) {
      names_.emplace_back(name);
      shapes_.push_back(p.shape());
    });
  }

  /// Calls f(i, p, g) for parameter i of the model with its gradient, in the model's order,
  /// after checking that it is the parameter the optimizer was made for (name and shape); then
  /// counts the step. Throws std::logic_error when the model's parameters changed.
  template <class F>
  void update_each(F&& f) {
    std::size_t i = 0;
    model_->visit_parameters([&](std::string_view name, tensor_type& p, tensor_type& g) {
      if (i >= names_.size() || names_[i] != name || !(shapes_[i] == p.shape())) throw_changed();
      f(i, p, g);
      ++i;
    });
    if (i != names_.size()) throw_changed();
    ++steps_;
  }

  /// "<kind>.<what>.<parameter>": the name of a state tensor in checkpoints.
  std::string state_name(const char* what, std::size_t i) const {
    return std::string(Derived::kind) + "." + what + "." + names_[i];
  }
  /// The number of parameters.
  std::size_t parameter_count() const { return names_.size(); }

  M* model_;                ///< the model updated
  Options options_;         ///< the options
  std::int64_t steps_ = 0;  ///< steps taken

 private:
  [[noreturn]] static void throw_changed() {
    throw std::logic_error(std::string("optim::") + Derived::kind +
                           ": the model's parameters changed (names, count or shapes) since the "
                           "optimizer was made");
  }

  std::vector<std::string> names_;
  std::vector<shape_t> shapes_;
};

/// @}

}  // namespace meld::optim
