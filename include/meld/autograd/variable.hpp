// variable<T, B>: a tensor that records how it was computed, so that backward() can derive the
// gradient of a scalar result with respect to every leaf that requires one.
//
//   autograd::variable<float> w(meld::uniform<float>({10, 784}, -0.1f, 0.1f, 1), true);  // a leaf
//   autograd::variable<float> y = w * x + exp(z) * sigmoid(w);   // one fused loop, recorded
//   auto loss = autograd::sum(y);                                // a device scalar
//   loss.backward();                                             // w.grad() now holds dloss/dw
//
// A variable is a handle: copies share the value, the gradient and the graph (as a PyTorch
// tensor does). Variables are expressions, so the operators and functions of meld build fused
// trees over them; assigning such a tree to a variable evaluates it in one pass and records one
// node whose backward is itself fused (autograd/fused.hpp). Reductions, matmul and views have
// variable overloads in meld::autograd (found unqualified, by argument-dependent lookup).
#pragma once

#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "../expr/map.hpp"
#include "../expr/matmul.hpp"
#include "../expr/reduce.hpp"
#include "../tensor/convert.hpp"
#include "../tensor/tensor.hpp"
#include "grad_mode.hpp"
#include "node.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

template <class T, class B>
class variable;

/// Whether E is an autograd::variable.
template <class E>
inline constexpr bool is_variable = false;
/// Every variable<T, B> is a variable.
template <class T, class B>
inline constexpr bool is_variable<variable<T, B>> = true;

namespace detail {
// Whether an expression tree has a variable among its leaves.
template <class E>
struct contains_variable : std::bool_constant<is_variable<E>> {};
template <class Op, class... A>
struct contains_variable<map_expr<Op, A...>>
    : std::bool_constant<(contains_variable<A>::value || ...)> {};
template <class R, class A>
struct contains_variable<reduce_expr<R, A>> : contains_variable<A> {};
template <class A, class C>
struct contains_variable<matmul_expr<A, C>>
    : std::bool_constant<contains_variable<A>::value || contains_variable<C>::value> {};

// Evaluates a tree of variables (and tensors and scalars) into a new variable, recording a fused
// node when an input requires a gradient (defined in autograd/fused.hpp).
template <class T, class B, class E>
state_ptr<T, B> record_fused(const E& e);
}  // namespace detail

/// An expression with at least one variable among its leaves: differentiable.
template <class E>
concept differentiable = expression<E> && detail::contains_variable<std::remove_cvref_t<E>>::value;

/// Options of backward().
struct backward_options {
  /// Keep the graph (its saved inputs) so that backward can run through it again.
  bool retain_graph = false;
};

template <class T, class B, class OnLeafReady>
void run_backward(const state_ptr<T, B>& root, tensor<T, B> grad, bool retain_graph,
                  OnLeafReady&& on_leaf_ready);

/// A differentiable tensor (see above). T is float or double.
template <class T, class B = cpu<>>
class variable : public expression_tag {
  static_assert(std::is_floating_point_v<T>, "meld::autograd::variable<T>: T must be floating");

 public:
  using value_type = T;                     ///< the element type
  using backend_type = B;                   ///< the backend
  using tensor_type = tensor<T, B>;         ///< the type of the value and the gradient
  using state_type = variable_state<T, B>;  ///< what every handle to the variable shares

  /// A null handle (no value); assign one to it.
  variable() = default;
  // Copies and moves share the state. Declared host and device with nvcc's check off: expression
  // nodes that hold a variable are built by host-and-device code (map_expr::transform), from
  // which nvcc would otherwise infer an implicit constructor that calls shared_ptr's host-only
  // members on the device, and warn. No variable is ever copied on a device.
  /// Another handle to other's variable.
  MELD_EXEC_CHECK_DISABLE
  MELD_HD variable(const variable& other) : s_(other.s_) {}
  /// Takes other's handle (other becomes null).
  MELD_EXEC_CHECK_DISABLE
  MELD_HD variable(variable&& other) noexcept : s_(std::move(other.s_)) {}
  /// Refers to other's variable.
  variable& operator=(const variable& other) {
    s_ = other.s_;
    return *this;
  }
  /// Takes other's handle (other becomes null).
  variable& operator=(variable&& other) noexcept {
    s_ = std::move(other.s_);
    return *this;
  }

  /// A leaf holding `value`; with requires_grad, backward fills its grad() (allocated here, 0).
  explicit variable(tensor_type value, bool requires_grad = false)
      : s_(std::make_shared<state_type>()) {
    s_->value = std::move(value);
    set_requires_grad(requires_grad);
  }

  /// Evaluates a tree over variables in one pass and records it (one fused backward node).
  template <differentiable E>
  requires(!std::is_same_v<std::remove_cvref_t<E>, variable>) variable(E&& e)  // NOLINT
      : s_(detail::record_fused<T, B>(e)) {
    static_assert(std::is_same_v<value_t<E>, T>,
                  "meld::autograd::variable<T>: the expression's element type is not T (use "
                  "meld::cast<T>)");
  }

  /// A variable computed by node `fn` (a custom function's output); requires a gradient.
  static variable from_node(tensor_type value, std::shared_ptr<node<T, B>> fn) {
    variable v;
    v.s_ = std::make_shared<state_type>();
    v.s_->value = std::move(value);
    v.s_->requires_grad = true;
    v.s_->grad_fn = std::move(fn);
    return v;
  }
  /// A variable sharing state s.
  static variable from_state(state_ptr<T, B> s) {
    variable v;
    v.s_ = std::move(s);
    return v;
  }

  /// Whether the handle refers to a variable. (Not operator bool: `!v` is meld's elementwise
  /// logical not, as for every expression.)
  bool defined() const { return s_ != nullptr; }

  /// The value's shape.
  const shape_t& shape() const { return state().value.shape(); }
  /// The shape, as expressions report theirs (a variable is one leaf of an expression).
  const shape_t* uniform_shape() const { return &shape(); }
  /// The number of axes.
  int rank() const { return shape().size(); }
  /// The number of elements.
  index_t size() const { return shape().product(); }

  /// The value. Writing it (an optimizer's update of a parameter) is fine between steps; writing
  /// it between forward and backward changes what backward reads.
  const tensor_type& value() const { return state().value; }
  /// The value, writable (see above).
  tensor_type& value() { return state().value; }

  /// A leaf's accumulated gradient (same shape as the value). Throws std::logic_error for a
  /// variable that is not a leaf requiring a gradient.
  tensor_type& grad() const {
    const state_type& s = state();
    if (!s.is_leaf() || !s.requires_grad)
      throw std::logic_error(
          s.is_leaf() ? "autograd::variable::grad: this leaf does not require a gradient"
                      : "autograd::variable::grad: only leaves keep a gradient (this variable was "
                        "computed by " +
                            s.grad_fn->name() + ")");
    return s_->grad;
  }

  /// Whether backward computes a gradient for this variable (or through it).
  bool requires_grad() const { return state().requires_grad; }
  /// Makes a leaf require a gradient (allocating it, zero) or not. Throws for a computed variable.
  void set_requires_grad(bool on) {
    state_type& s = state();
    if (!s.is_leaf())
      throw std::logic_error("autograd::variable::set_requires_grad: only for leaves");
    s.requires_grad = on;
    if (on && !(s.grad.shape() == s.value.shape())) {
      s.grad = tensor_type(s.value.shape(), uninitialized);
      s.grad.fill(T(0));
    }
  }
  /// Whether no operation computed this variable.
  bool is_leaf() const { return state().is_leaf(); }
  /// The node that computed the variable (null for a leaf).
  const std::shared_ptr<node<T, B>>& grad_fn() const { return state().grad_fn; }

  /// Sets a leaf's gradient to 0.
  void zero_grad() {
    if (state().requires_grad && is_leaf()) s_->grad.fill(T(0));
  }

  /// Back-propagates from this scalar (one element; a device scalar is never read on the host):
  /// adds d this / d leaf to the grad() of every leaf that requires one. The graph is freed
  /// afterwards unless options.retain_graph.
  void backward(backward_options options = {}) const {
    if (size() != 1)
      meld::detail::raise<shape_error>("autograd::variable::backward: a variable of shape ",
                                       shape(),
                                       " is not a scalar; pass the gradient of its elements");
    tensor_type one(shape(), uninitialized);
    one.fill(T(1));
    backward(std::move(one), options);
  }
  /// Back-propagates `grad_output`, the gradient of some scalar with respect to this variable
  /// (same shape).
  void backward(tensor_type grad_output, backward_options options = {}) const {
    if (!(grad_output.shape() == shape()))
      meld::detail::raise<shape_error>("autograd::variable::backward: a gradient of shape ",
                                       grad_output.shape(), " for a variable of shape ", shape());
    run_backward(s_, std::move(grad_output), options.retain_graph, [](state_type&) {});
  }

  /// A new leaf with a copy of the value on the current device (no graph, no gradient).
  variable detach() const {
    tensor_type v(shape(), uninitialized);
    meld::copy(v, value());
    return variable(std::move(v));
  }

  /// The shared state (for nodes and the engine).
  const state_ptr<T, B>& state_handle() const { return s_; }

 private:
  state_type& state() const {
    if (!s_) throw std::logic_error("autograd::variable: a null variable (default-constructed)");
    return *s_;
  }
  state_ptr<T, B> s_;
};

/// @}

}  // namespace meld::autograd
