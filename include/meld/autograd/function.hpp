// Custom functions: a primitive with a hand-written backward, the same way the built-in reductions,
// matrix products and views are defined, and the way a layer with a faster backward than its
// derived one (convolution, pooling, batch norm) joins the graph:
//
//   struct cube {
//     static constexpr const char* name = "cube";          // for messages (optional)
//     template <class T, class B>
//     tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& x) {
//       ctx.save_for_backward(x);                           // a view: no copy
//       return x * x * x;
//     }
//     template <class T, class B>
//     std::array<tensor<T, B>, 1> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
//       const auto& x = ctx.saved(0);
//       return {tensor<T, B>(T(3) * g * x * x)};
//     }
//   };
//   variable<float> y = autograd::apply(cube{}, x);
//
// forward runs on the inputs' values (with recording off) and may keep anything in the function
// object or the context; backward returns one gradient per input, of the input's shape, or an
// empty tensor for an input with !ctx.needs_input_grad(i), or for an input whose gradient it added
// in place (ctx.gradient_in_place(i): a parameter's gradient, which a product may accumulate into
// with beta = 1). The function object lives in the graph until backward has run.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "grad_mode.hpp"
#include "node.hpp"
#include "variable.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

/// What forward leaves for backward: saved tensors (views sharing storage) and which inputs need
/// a gradient.
template <class T, class B>
class function_context {
 public:
  /// Keeps t for backward, without copying (do not modify it in place before backward runs).
  void save_for_backward(const tensor<T, B>& t) { saved_.push_back(t.view()); }
  /// Keeps a view for backward.
  void save_for_backward(tensor_view<const T, B> v) { saved_.push_back(std::move(v)); }
  /// Saved tensor i, in the order saved. Throws std::out_of_range.
  const tensor_view<const T, B>& saved(std::size_t i) const {
    if (i >= saved_.size())
      throw std::out_of_range("autograd::function_context::saved: index " + std::to_string(i) +
                              " of " + std::to_string(saved_.size()) + " saved tensors");
    return saved_[i];
  }
  /// Whether input i needs a gradient (backward may skip the others).
  bool needs_input_grad(std::size_t i) const { return i < needs_.size() && needs_[i]; }

  /// During backward: the gradient of input i when that input is a leaf requiring one (a
  /// parameter), else null. backward may add input i's gradient into it directly (gemm with
  /// beta = 1, `+=`) and return an empty tensor for input i: no temporary gradient, no second pass
  /// to add it. Adding is the only write allowed: the tensor holds what earlier nodes and steps
  /// accumulated.
  tensor<T, B>* gradient_in_place(std::size_t i) {
    if (i >= in_place_.size() || !in_place_[i]) return nullptr;
    added_in_place_[i] = true;
    return in_place_[i];
  }

  /// (Set by apply.)
  std::vector<bool> needs_;
  /// (Set by the node around backward.)
  std::vector<tensor<T, B>*> in_place_;
  /// (Set by gradient_in_place: which inputs' gradients backward may have added in place.)
  std::vector<bool> added_in_place_;
  /// Frees the saved tensors.
  void clear() { saved_.clear(); }

 private:
  std::vector<tensor_view<const T, B>> saved_;
};

namespace detail {

template <class F>
std::string function_name() {
  if constexpr (requires { F::name; })
    return F::name;
  else
    return "a custom function";
}

template <class T, class B, class F, std::size_t N>
class function_node final : public node<T, B> {
 public:
  function_node(F f, function_context<T, B> ctx, std::vector<state_ptr<T, B>> inputs)
      : f_(std::move(f)), ctx_(std::move(ctx)) {
    this->inputs_ = std::move(inputs);
  }

  void backward(const tensor<T, B>& grad_output) override {
    // A leaf that is read once by this node may take its gradient in place (an input passed twice
    // gets both gradients returned, which accumulate() adds).
    ctx_.in_place_.assign(N, nullptr);
    ctx_.added_in_place_.assign(N, false);
    for (std::size_t i = 0; i < N; ++i) {
      variable_state<T, B>& in = *this->inputs_[i];
      bool once = true;
      for (std::size_t j = 0; j < N; ++j) once = once && (j == i || this->inputs_[j].get() != &in);
      if (in.is_leaf() && in.requires_grad && once) ctx_.in_place_[i] = &in.grad;
    }
    std::array<tensor<T, B>, N> grads = f_.backward(ctx_, grad_output);
    for (std::size_t i = 0; i < N; ++i) {
      variable_state<T, B>& in = *this->inputs_[i];
      if (!in.requires_grad) continue;
      if (ctx_.added_in_place_[i] && grads[i].shape() == shape_t{0}) continue;
      if (!(grads[i].shape() == in.value.shape())) {
        if (grads[i].shape() == shape_t{0})
          throw std::logic_error("autograd: " + name() + "'s backward returned no gradient for " +
                                 "input " + std::to_string(i) + ", which requires one");
        meld::detail::raise<shape_error>(
            "autograd: ", name(), "'s backward returned a gradient of ", "shape ", grads[i].shape(),
            " for input ", i, " of shape ", in.value.shape());
      }
      accumulate(in, std::move(grads[i]));
    }
  }
  std::string name() const override { return function_name<F>(); }

 private:
  void release_saved() override { ctx_.clear(); }
  F f_;
  function_context<T, B> ctx_;
};

}  // namespace detail

/// Applies custom function f (see above) to variables; records it when an input requires a
/// gradient.
template <class F, class T, class B, class... V>
requires(std::is_same_v<V, variable<T, B>>&&...) variable<T, B> apply(F f,
                                                                      const variable<T, B>& first,
                                                                      const V&... rest) {
  constexpr std::size_t n = 1 + sizeof...(V);
  function_context<T, B> ctx;
  const bool record = is_grad_enabled();
  ctx.needs_ = {record && first.requires_grad(), (record && rest.requires_grad())...};
  bool any = false;
  for (bool b : ctx.needs_) any = any || b;
  tensor<T, B> out;
  {
    no_grad off;
    out = f.forward(ctx, first.value(), rest.value()...);
  }
  if (!any) return variable<T, B>(std::move(out));
  std::vector<state_ptr<T, B>> inputs{first.state_handle(), rest.state_handle()...};
  auto fn = std::make_shared<detail::function_node<T, B, F, n>>(std::move(f), std::move(ctx),
                                                                std::move(inputs));
  return variable<T, B>::from_node(std::move(out), std::move(fn));
}

/// @}

}  // namespace meld::autograd
