// The graph that define-by-run differentiation records: each variable's state (its value, its
// gradient, the node that computed it) and the node interface that backward() walks. A node adds
// its inputs' gradients with accumulate(), which sums a gradient over the axes along which the
// input was broadcast.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../expr/reduce.hpp"
#include "../tensor/tensor.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

template <class T, class B>
class node;

/// What a variable is: shared by every handle to it and by the nodes that read it.
template <class T, class B>
struct variable_state {
  /// The variable's value.
  tensor<T, B> value;
  /// A leaf's gradient, allocated (zero) when the leaf starts requiring one; stays in place, so
  /// that optimizers and data_parallel's buckets may keep its address.
  tensor<T, B> grad;
  /// An interior result's gradient while backward runs (freed once its node has used it).
  tensor<T, B> pending;
  /// Whether backward computes a gradient for the variable.
  bool requires_grad = false;
  /// Whether `pending` holds a gradient yet.
  bool has_pending = false;
  /// The node that computed the value; null for leaves.
  std::shared_ptr<node<T, B>> grad_fn;

  /// Whether the variable is a leaf (not computed by a recorded node).
  bool is_leaf() const { return !grad_fn; }
};

/// Shared ownership of a variable's state (its value, gradient and graph node).
template <class T, class B>
using state_ptr = std::shared_ptr<variable_state<T, B>>;

/// A step of the recorded graph: it computed one output from its inputs, and given the gradient
/// of that output it adds each input's gradient (accumulate()). Built-in operations and custom
/// functions (autograd/function.hpp) are nodes.
template <class T, class B>
class node {
 public:
  virtual ~node() = default;
  /// Adds the gradient of every input that requires one, from the gradient of the output.
  virtual void backward(const tensor<T, B>& grad_output) = 0;
  /// The operation's name, for messages.
  virtual std::string name() const = 0;
  /// Frees what backward needs (the inputs and saved tensors): the graph after a backward.
  void release() {
    released_ = true;
    inputs_.clear();
    release_saved();
  }
  /// Whether release() ran (a backward without retain_graph).
  bool released() const { return released_; }
  /// The variables the output was computed from (in operand order; one may appear twice).
  const std::vector<state_ptr<T, B>>& inputs() const { return inputs_; }

 protected:
  /// Frees what the node saved for backward beyond its inputs.
  virtual void release_saved() = 0;
  /// The inputs (filled by the node's constructor).
  std::vector<state_ptr<T, B>> inputs_;

 private:
  bool released_ = false;
};

namespace detail {

// The sum of gradient g over the axes along which a tensor of shape `to` was broadcast to g's
// shape (the gradient of a broadcast input). g is a tensor or a view: accumulate() evaluates an
// expression first, since a reduction along a leading axis evaluates its operand one element at a
// time, without SIMD, and a gradient expression recomputes transcendental functions (the
// example's GELU bias: 7 % of a training step, where the evaluated tensor costs one pass).
template <class T, class B, class X>
tensor<T, B> sum_to_shape(const X& g, const shape_t& to) {
  const shape_t from = g.shape();
  if (from.size() < to.size() || !broadcasts_to(to, from))
    meld::detail::raise<shape_error>("autograd: a gradient of shape ", from,
                                     " does not belong to an input of shape ", to);
  const int lead = from.size() - to.size();
  struct step {
    int axis;
    bool keepdims;
  };
  step steps[max_rank];
  int n = 0;
  for (int i = 0; i < lead; ++i) steps[n++] = {0, false};
  for (int j = 0; j < to.size(); ++j)
    if (to[j] == 1 && from[lead + j] != 1) steps[n++] = {j, true};
  if (n == 0) return tensor<T, B>(g);
  tensor<T, B> acc = meld::sum(g, steps[0].axis, steps[0].keepdims);
  for (int i = 1; i < n; ++i) {
    tensor<T, B> next = meld::sum(acc, steps[i].axis, steps[i].keepdims);
    acc = std::move(next);
  }
  return acc;
}

template <class T, class B>
void add_gradient(variable_state<T, B>& s, tensor<T, B>&& g) {
  if (s.is_leaf()) {
    s.grad += g;
  } else if (s.has_pending) {
    s.pending += g;
  } else {
    s.pending = std::move(g);
    s.has_pending = true;
  }
}

}  // namespace detail

/// Adds e (an expression, view or tensor of the input's shape, or of a shape the input was
/// broadcast to, which is summed back) to the gradient of s. Nothing happens when s requires no
/// gradient. An expression is evaluated into a tensor of its own shape, which is then added (or,
/// for an interior result's first gradient, taken): each gradient expression compiles one
/// assignment, where writing it into a leaf's or a pending gradient directly would compile a
/// second, one that adds (a fifth to a quarter of each differentiated expression's compile time:
/// benchmarks/RESULTS.md). The price is a pass over a temporary where an expression's gradient
/// is added, not taken.
template <class T, class B, class E>
void accumulate(variable_state<T, B>& s, E&& e) {
  if (!s.requires_grad) return;
  if constexpr (is_map_expr<std::remove_cvref_t<E>>) {
    accumulate(s, tensor<T, B>(e));
  } else if (!(e.shape() == s.value.shape())) {
    detail::add_gradient(s, detail::sum_to_shape<T, B>(e, s.value.shape()));
  } else if constexpr (std::is_same_v<E, tensor<T, B>>) {
    detail::add_gradient(s, std::move(e));  // an rvalue: taken where it is the first
  } else if (s.is_leaf()) {
    s.grad += e;
  } else if (s.has_pending) {
    s.pending += e;
  } else {
    s.pending = tensor<T, B>(e);
    s.has_pending = true;
  }
}

/// @}

}  // namespace meld::autograd
