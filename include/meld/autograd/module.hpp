// module<Net>: a model written with forward only, as an nn::model. Net holds its parameters as
// leaf variables that require gradients, and says which they are:
//
//   struct mlp {
//     using value_type = float;                      // (float and cpu<> where Net names none)
//     using backend_type = meld::cpu<>;
//     using variable = autograd::variable<float>;
//     variable w1, b1, w2, b2;                       // leaves, requires_grad = true
//     variable forward(const variable& x) {
//       variable h = relu(matmul(x, w1) + b1);       // one fused node for the bias and relu
//       return matmul(h, w2) + b2;
//     }
//     template <class F>
//     void parameters(F&& f) { f("w1", w1); f("b1", b1); f("w2", w2); f("b2", b2); }
//   };
//   autograd::module model(mlp{...});     // optimizers, checkpoints, data_parallel take it
//
// forward(x) records the graph (x's elements, not a copy, are its input leaf's value: keep x
// unchanged until backward, as the nn layers' saved inputs require) and returns a copy of the
// output;
// backward(g) back-propagates g through it, adding into the parameters' gradients, and frees it.
// backward(g, hook) reports each parameter's gradient to data_parallel's hook as soon as the
// engine has finished it (every node reading that parameter has run), so gradient buckets overlap
// the rest of the backward pass. Net may also define `void train(bool)` and `template <class F>
// void buffers(F&& f)` (f(name, tensor&)); replica() copies Net (which must be copyable: the
// variables are handles) and gives the copy its own parameters.
#pragma once

#include <concepts>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "engine.hpp"
#include "variable.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {
// Net's value_type and backend_type, float and cpu<> where it declares none (as tensor's
// defaults).
template <class Net>
struct net_types {
  using value_type = float;
  using backend_type = cpu<>;
};
template <class Net>
requires requires {
  typename Net::value_type;
  typename Net::backend_type;
}
struct net_types<Net> {
  using value_type = typename Net::value_type;
  using backend_type = typename Net::backend_type;
};
}  // namespace detail

/// A model that defines forward only (see above); satisfies nn::model.
template <class Net>
class module {
 public:
  using value_type = typename detail::net_types<Net>::value_type;      ///< the element type
  using backend_type = typename detail::net_types<Net>::backend_type;  ///< the backend
  using tensor_type = tensor<value_type, backend_type>;      ///< the parameters' tensor type
  using variable_type = variable<value_type, backend_type>;  ///< the network's variable type

  /// Takes the network. Throws std::logic_error for a parameter that is not a leaf requiring a
  /// gradient.
  explicit module(Net net) : net_(std::move(net)) {
    net_.parameters([](std::string_view name, variable_type& p) {
      if (!p.defined() || !p.is_leaf() || !p.requires_grad())
        throw std::logic_error("autograd::module: parameter '" + std::string(name) +
                               "' must be a leaf variable that requires a gradient");
    });
  }
  // (No line starts with `module`: nvcc reads one as a C++20 module declaration.)
  inline module(module&&) noexcept = default;              ///< moves
  auto operator=(module&&) noexcept -> module& = default;  ///< moves

  /// Runs Net's forward on x (its elements shared, not copied: leave x unchanged until
  /// backward), recording the graph; returns a copy of the output.
  tensor_type forward(const tensor_type& x) {
    input_ = variable_type(meld::detail::share_elements(x, x.shape()), input_grad_);
    output_ = net_.forward(input_);
    return tensor_type(output_.value());
  }

  /// Back-propagates the output's gradient; returns the input's (empty when
  /// requires_input_grad(false)).
  tensor_type backward(const tensor_type& grad_output) {
    auto none = [](tensor_type&) {};
    return backward(grad_output, none);
  }

  /// The same, calling hook(gradient) for each parameter gradient once it is final.
  template <class Hook>
  requires std::invocable<Hook&, tensor_type&> tensor_type backward(const tensor_type& grad_output,
                                                                    Hook& hook) {
    if (!output_.defined())
      throw std::logic_error("autograd::module: backward called without a forward pass before it");
    std::unordered_set<const variable_state<value_type, backend_type>*> params, reported;
    net_.parameters(
        [&](std::string_view, variable_type& p) { params.insert(p.state_handle().get()); });
    if (output_.requires_grad())
      run_backward(output_.state_handle(), tensor_type(grad_output), false,
                   [&](variable_state<value_type, backend_type>& s) {
                     if (params.count(&s) && reported.insert(&s).second) hook(s.grad);
                   });
    // Parameters the output does not depend on have final (unchanged) gradients too.
    net_.parameters([&](std::string_view, variable_type& p) {
      if (reported.insert(p.state_handle().get()).second) hook(p.grad());
    });
    tensor_type dx;
    if (input_grad_) dx = std::move(input_.grad());
    output_ = variable_type();
    input_ = variable_type();
    return dx;
  }

  /// Calls f(name, parameter, gradient) for each parameter of Net, in Net's order.
  template <class F>
  void visit_parameters(F&& f) {
    net_.parameters([&](std::string_view name, variable_type& p) { f(name, p.value(), p.grad()); });
  }
  /// Calls f(name, buffer) for Net's buffers (if it has any).
  template <class F>
  void visit_buffers(F&& f) {
    if constexpr (requires { net_.buffers(f); }) net_.buffers(f);
  }
  /// Sets every parameter's gradient to 0.
  void zero_grad() {
    net_.parameters([](std::string_view, variable_type& p) { p.zero_grad(); });
  }
  /// Training or evaluation mode (passed to Net's train(bool) if it has one).
  void train(bool on = true) {
    training_ = on;
    if constexpr (requires { net_.train(on); }) net_.train(on);
  }
  /// Evaluation mode.
  void eval() { train(false); }
  /// Whether the model is in training mode.
  bool training() const { return training_; }

  /// Whether backward computes the input's gradient (default true, as nn::model asks; off saves
  /// the first layer's input-gradient product).
  void requires_input_grad(bool on) { input_grad_ = on; }
  /// Whether backward computes the input's gradient.
  bool requires_input_grad() const { return input_grad_; }

  /// An independent copy: Net copied, each parameter (and its gradient) copied to the current
  /// device.
  [[nodiscard]] module replica() const {
    static_assert(std::is_copy_constructible_v<Net>,
                  "meld::autograd::module<Net>::replica: Net must be copyable (its variables are "
                  "handles; replica gives the copy its own parameters)");
    Net copy(net_);
    copy.parameters([](std::string_view, variable_type& p) {
      variable_type fresh = p.detach();
      fresh.set_requires_grad(true);
      meld::copy(fresh.grad(), p.grad());
      p = fresh;
    });
    auto r = module(std::move(copy));
    r.training_ = training_;
    r.input_grad_ = input_grad_;
    return r;
  }

  /// The network.
  Net& net() { return net_; }
  /// The network.
  const Net& net() const { return net_; }

 private:
  Net net_;
  variable_type input_, output_;
  bool training_ = true;
  bool input_grad_ = true;
};

/// @}

}  // namespace meld::autograd
