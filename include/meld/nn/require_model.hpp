// require_model<M>(): checks nn::model<M> requirement by requirement, so that a type that misses
// one gets a compile error saying which one, instead of a page of concept diagnostics. Generic
// code over models (optimizers, checkpoints, initialization) calls it in a static_assert:
//
//   static_assert(nn::require_model<M>(), "meld::optim::sgd: see the messages above");
#pragma once

#include <concepts>
#include <string_view>

#include "model.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

namespace detail {
template <class>
inline constexpr bool always_false = false;
}

/// True when M is a model; otherwise fails to compile with one static_assert per missing member,
/// naming it: static_assert(meld::nn::require_model<M>()).
template <class M>
consteval bool require_model() {
  if constexpr (!requires {
                  typename M::value_type;
                  typename M::backend_type;
                }) {
    static_assert(detail::always_false<M>,
                  "meld::nn::model: the type needs `using value_type = ...;` and `using "
                  "backend_type = ...;` (the element type and backend of its tensors)");
    return false;
  } else {
    using T = typename M::value_type;
    using B = typename M::backend_type;
    using Tensor = tensor<T, B>;
    static_assert(
        requires(M & m, const Tensor& t) {
          { m.forward(t) } -> std::convertible_to<Tensor>;
        },
        "meld::nn::model: the type needs `tensor<value_type, backend_type> forward(const "
        "tensor<value_type, backend_type>& input)`");
    static_assert(
        requires(M & m, const Tensor& t) {
          { m.backward(t) } -> std::convertible_to<Tensor>;
        },
        "meld::nn::model: the type needs `tensor<value_type, backend_type> backward(const "
        "tensor<value_type, backend_type>& grad_output)` returning the input's gradient and "
        "adding into the parameters' gradients");
    static_assert(
        requires(M & m, parameter_visitor_archetype<T, B> f) { m.visit_parameters(f); },
        "meld::nn::model: the type needs `template <class F> void visit_parameters(F&& "
        "f)` calling f(std::string_view name, tensor& param, tensor& grad) for every "
        "parameter, always in the same order");
    static_assert(
        requires(M & m, buffer_visitor_archetype<T, B> f) { m.visit_buffers(f); },
        "meld::nn::model: the type needs `template <class F> void visit_buffers(F&& f)` "
        "calling f(std::string_view name, tensor& buffer) for every non-trained state "
        "tensor (an empty body if there is none)");
    static_assert(
        requires(M & m) { m.zero_grad(); },
        "meld::nn::model: the type needs `void zero_grad()` setting every gradient to 0");
    static_assert(
        requires(M & m) { m.train(true); },
        "meld::nn::model: the type needs `void train(bool)` switching training and "
        "evaluation behaviour");
    static_assert(
        requires(const M& m) {
          { m.replica() } -> std::same_as<M>;
        },
        "meld::nn::model: the type needs `M replica() const` returning an independent deep copy");
    return model<M>;
  }
}

/// True when M is an nn::parameter_set (what optimizers update); otherwise fails to compile
/// with require_model's messages, naming what a model would need.
template <class M>
consteval bool require_parameter_set() {
  if constexpr (parameter_set<M>)
    return true;
  else
    return require_model<M>();
}

/// @}

}  // namespace meld::nn
