// The Model and Loss concepts: what optimizers, checkpoints and data_parallel<Model> rely on.
// Any user type that satisfies them works, not only nn::sequential.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../tensor/tensor.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// What visit_parameters hands to its visitor for each trainable parameter: a stable name (unique
/// within the model, e.g. "0.weight"), the parameter and its gradient (same shape).
template <class T, class B>
struct parameter_visitor_archetype {
  /// Receives a name, a parameter and its gradient.
  void operator()(std::string_view, tensor<T, B>&, tensor<T, B>&) const {}
};

/// What visit_buffers hands to its visitor: state that is not trained by gradients but belongs to
/// the model (batch-norm running statistics): a name and the tensor.
template <class T, class B>
struct buffer_visitor_archetype {
  /// Receives a name and a buffer.
  void operator()(std::string_view, tensor<T, B>&) const {}
};

// A model maps a batch (axis 0 is the batch) to outputs and back-propagates:
//   using value_type, backend_type          element type and backend of its tensors
//   forward(x)        -> the output for input x (keeps what backward needs)
//   backward(g)       -> the gradient w.r.t. the last forward's input, given the gradient w.r.t.
//                        its output; ADDS the parameters' gradients into their grad tensors
//                        (so that gradients accumulate over micro-batches until zero_grad)
//   visit_parameters(f)  calls f(name, param, grad) for every parameter, always in the same order
//   visit_buffers(f)     calls f(name, buffer) for every non-trained state tensor (may be none)
//   zero_grad()       sets every gradient to 0
//   train(bool)       switches training / evaluation behaviour (dropout, batch norm)
//   replica()         an independent model with equal parameters and buffers (deep copy)
template <class M>
concept model =
    requires(M& m, const M& cm, const tensor<typename M::value_type, typename M::backend_type>& t,
             parameter_visitor_archetype<typename M::value_type, typename M::backend_type> pv,
             buffer_visitor_archetype<typename M::value_type, typename M::backend_type> bv) {
  typename M::value_type;
  typename M::backend_type;
  { m.forward(t) } -> std::convertible_to<tensor<typename M::value_type, typename M::backend_type>>;
  {
    m.backward(t)
    } -> std::convertible_to<tensor<typename M::value_type, typename M::backend_type>>;
  m.visit_parameters(pv);
  m.visit_buffers(bv);
  m.zero_grad();
  m.train(true);
  { cm.replica() } -> std::same_as<M>;
};

// A loss maps (outputs, targets) to the mean loss over the batch and writes the gradient of that
// mean w.r.t. the outputs into grad (resized to the outputs' shape). Targets are class indices
// (tensor<std::int64_t>, shape {batch}) for classification, or a tensor like the outputs.
template <class L, class T, class B, class Targets>
concept loss = requires(const L& loss, const tensor<T, B>& out, const Targets& targets,
                        tensor<T, B>& grad) {
  { loss(out, targets, grad) } -> std::convertible_to<double>;
};

/// @}

}  // namespace meld::nn
