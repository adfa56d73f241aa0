// sequential: layers applied one after the other; itself an nn::model (so it nests, and every
// optimizer, checkpoint and data_parallel works with it).
//
//   auto net = nn::sequential(nn::linear<float>(784, 256), nn::relu<float>(),
//                             nn::linear<float>(256, 10));
//
// The layers are held by value in a std::tuple (no virtual calls); any type that satisfies
// nn::model can be a layer. Parameters are named "<index>.<name>" ("0.weight", "2.bias"), as in
// PyTorch, and visited in layer order.
//
// By default backward returns the gradient w.r.t. the input, as nn::model requires. A model fed
// with data does not need it: requires_input_grad(false) makes backward skip it, and everything
// before the first layer with parameters, and return an empty tensor. (For the MLP of the
// Fashion-MNIST example that saves the largest of its matrix products.)
#pragma once

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "layer.hpp"
#include "model.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

namespace detail {
// A layer whose output can be a view of its input (flatten: forward_view) and a next layer with a
// forward that takes that view (linear; not one that would copy it into a tensor): the output is
// handed on without a copy.
template <class Tensor>
using const_view_t = tensor_view<const typename Tensor::value_type, typename Tensor::backend_type>;
template <class L, class Next, class Tensor>
concept view_handoff = requires(L& l, const Tensor& x) {
  { l.forward_view(x) } -> std::same_as<const_view_t<Tensor>>;
  static_cast<Tensor (Next::*)(const const_view_t<Tensor>&)>(&Next::forward);
};

// Layers that can skip their input gradient offer backward(grad, bool input_gradient).
template <class L, class Tensor>
concept partial_backward = requires(L& l, const Tensor& g) {
  l.backward(g, false);
};
}  // namespace detail

/// Layers applied in order: a model (nn::model) made of models. Its parameter names are the layer's
/// position and the layer's own name ("0.weight"); backward(grad, hook) reports each layer's
/// gradients as soon as they are final.
template <class... Layers>
class sequential {
  static_assert(sizeof...(Layers) > 0, "meld::nn::sequential needs at least one layer");
  using first = std::tuple_element_t<0, std::tuple<Layers...>>;

 public:
  /// The layers' element type.
  using value_type = typename first::value_type;
  /// The layers' backend.
  using backend_type = typename first::backend_type;
  /// The tensors the model takes and returns.
  using tensor_type = tensor<value_type, backend_type>;
  static_assert((std::is_same_v<typename Layers::value_type, value_type> && ...),
                "meld::nn::sequential: every layer must have the same value_type");
  static_assert((std::is_same_v<typename Layers::backend_type, backend_type> && ...),
                "meld::nn::sequential: every layer must have the same backend_type");
  static_assert((model<Layers> && ...),
                "meld::nn::sequential: every layer must satisfy meld::nn::model (see "
                "meld/nn/require_model.hpp to find what a layer misses)");

  /// The number of layers.
  static constexpr std::size_t size = sizeof...(Layers);

  /// Takes the layers (moved in).
  explicit sequential(Layers... layers) : layers_(std::move(layers)...) { find_first_trainable(); }

  /// Moves.
  sequential(sequential&&) noexcept = default;
  /// Moves.
  sequential& operator=(sequential&&) noexcept = default;

  /// Runs each layer's forward on the previous one's output.
  tensor_type forward(const tensor_type& x) { return forward_from<0>(x); }

  /// Runs the layers' backward in reverse order; returns the gradient for the input (empty when
  /// requires_input_grad() is false).
  tensor_type backward(const tensor_type& grad_output) {
    return backward(grad_output, input_grad_);
  }

  /// With input_gradient false: only parameter gradients, and an empty tensor back.
  tensor_type backward(const tensor_type& grad_output, bool input_gradient) {
    no_hook none;
    return backward_from<size - 1>(grad_output, input_gradient, none);
  }

  /// Calls hook(gradient) for each parameter gradient as soon as its layer's backward has
  /// finished writing it (last layer first): data_parallel starts a bucket's allreduce there,
  /// overlapping communication with the backward of the layers below.
  template <class Hook>
  requires std::invocable<Hook&, tensor_type&> tensor_type backward(const tensor_type& grad_output,
                                                                    Hook& hook) {
    return backward_from<size - 1>(grad_output, input_grad_, hook);
  }

  /// Whether backward computes the gradient for the model's input (default true; data_parallel
  /// turns it off: the first layer then skips that work where it can).
  void requires_input_grad(bool on) { input_grad_ = on; }
  /// Whether backward computes the gradient for the model's input.
  bool requires_input_grad() const { return input_grad_; }

  /// Calls f(name, parameter, gradient) for every layer's parameters, names prefixed with the
  /// position.
  template <class F>
  void visit_parameters(F&& f) {
    for_each_layer([&](std::size_t i, auto& layer) {
      const std::string prefix = std::to_string(i) + ".";
      layer.visit_parameters([&](std::string_view name, tensor_type& p, tensor_type& g) {
        f(std::string_view(prefix + std::string(name)), p, g);
      });
    });
  }

  /// Calls f(name, buffer) for every layer's buffers, names prefixed with the position.
  template <class F>
  void visit_buffers(F&& f) {
    for_each_layer([&](std::size_t i, auto& layer) {
      const std::string prefix = std::to_string(i) + ".";
      layer.visit_buffers([&](std::string_view name, tensor_type& b) {
        f(std::string_view(prefix + std::string(name)), b);
      });
    });
  }

  /// Zeroes every layer's gradients.
  void zero_grad() {
    for_each_layer([](std::size_t, auto& layer) { layer.zero_grad(); });
  }

  /// Sets every layer's mode.
  void train(bool on = true) {
    training_ = on;
    for_each_layer([on](std::size_t, auto& layer) { layer.train(on); });
  }
  /// Evaluation mode for every layer.
  void eval() { train(false); }
  /// Whether the model is in training mode.
  bool training() const { return training_; }

  /// A deep copy of every layer (layer.replica()).
  sequential replica() const {
    sequential r = std::apply([](const auto&... l) { return sequential(l.replica()...); }, layers_);
    r.input_grad_ = input_grad_;
    r.training_ = training_;
    return r;
  }

  /// Layer I.
  template <std::size_t I>
  auto& layer() {
    return std::get<I>(layers_);
  }
  /// Layer I.
  template <std::size_t I>
  const auto& layer() const {
    return std::get<I>(layers_);
  }

 private:
  template <class F>
  void for_each_layer(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(I, std::get<I>(layers_)), ...);
    }
    (std::index_sequence_for<Layers...>{});
  }

  // The index of the first layer with parameters (size when there is none): layers before it
  // need no backward when the input gradient is not wanted.
  void find_first_trainable() {
    first_trainable_ = size;
    for_each_layer([&](std::size_t i, auto& layer) {
      bool has = false;
      layer.visit_parameters([&](std::string_view, tensor_type&, tensor_type&) { has = true; });
      if (has && first_trainable_ == size) first_trainable_ = i;
    });
  }

  // x is a tensor, or a view that layer I takes (see detail::view_handoff).
  template <std::size_t I, class X>
  tensor_type forward_from(const X& x) {
    auto& layer = std::get<I>(layers_);
    if constexpr (I + 1 == size) {
      return layer.forward(x);
    } else {
      using next = std::tuple_element_t<I + 1, std::tuple<Layers...>>;
      if constexpr (detail::view_handoff<std::remove_cvref_t<decltype(layer)>, next, tensor_type>)
        return forward_from<I + 1>(layer.forward_view(x));
      else
        return forward_from<I + 1>(layer.forward(x));
    }
  }

  struct no_hook {
    void operator()(tensor_type&) const {}
  };

  // Reports layer I's parameter gradients, now final, to the hook.
  template <std::size_t I, class Hook>
  void report(Hook& hook) {
    if constexpr (!std::is_same_v<Hook, no_hook>)
      std::get<I>(layers_).visit_parameters(
          [&](std::string_view, tensor_type&, tensor_type& grad) { hook(grad); });
  }

  template <std::size_t I, class Hook>
  tensor_type backward_from(const tensor_type& g, bool input_gradient, Hook& hook) {
    auto& layer = std::get<I>(layers_);
    if (!input_gradient &&
        std::cmp_less_equal(I, first_trainable_)) {  // (nvcc warns on I <= x for I = 0)
      // Nothing below this layer needs a gradient: parameters only, then stop.
      if (I == first_trainable_) {
        if constexpr (detail::partial_backward<std::remove_cvref_t<decltype(layer)>, tensor_type>)
          layer.backward(g, false);
        else
          layer.backward(g);
        report<I>(hook);
      }
      return tensor_type();
    }
    tensor_type below = layer.backward(g);
    report<I>(hook);
    if constexpr (I == 0)
      return below;
    else
      return backward_from<I - 1>(below, input_gradient, hook);
  }

  std::tuple<Layers...> layers_;
  std::size_t first_trainable_ = 0;
  bool input_grad_ = true;
  bool training_ = true;
};

/// Deduces sequential<L...> from sequential(layers...).
template <class... L>
sequential(L...) -> sequential<L...>;

/// @}

}  // namespace meld::nn
