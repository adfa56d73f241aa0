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

/// A model: maps a batch (axis 0 is the batch) to outputs and back-propagates. What optimizers,
/// nn::initialize, checkpoints and data_parallel train, so any type with these members works
/// with them, not only nn::sequential (every layer is a model too):
/// - `value_type`, `backend_type`: the element type and backend of its tensors;
/// - `forward(x)`: the output for input x, keeping what backward needs (it may keep x's elements
///   rather than a copy: the caller leaves x unchanged until backward);
/// - `backward(g)`: the gradient w.r.t. the last forward's input, given the gradient w.r.t. its
///   output. It adds the parameters' gradients into their grad tensors rather than overwriting
///   them, so that gradients accumulate over micro-batches until zero_grad();
/// - `visit_parameters(f)`: calls `f(name, param, grad)` for every parameter, always in the same
///   order with the same names (unique within the model, e.g. "0.weight"): optimizers keep their
///   state in that order, checkpoints match by name, and data_parallel lays out its gradient
///   buckets by it, identically on every rank;
/// - `visit_buffers(f)`: calls `f(name, buffer)` for every state tensor that gradients do not
///   train (batch norm's running statistics; may be none), which checkpoints save and
///   data_parallel broadcasts;
/// - `zero_grad()`: sets every gradient to 0;
/// - `train(bool)`: switches between training and evaluation behaviour (dropout, batch norm);
/// - `replica() const`: an independent model with equal parameters and buffers (a deep copy),
///   one per data_parallel worker.
///
/// Where a type falls short, `static_assert(meld::nn::require_model<M>())` names the member
/// missing.
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

/// What an optimizer updates: a set of parameters with gradients, which every model is. It has
/// `value_type`, `backend_type`, `visit_parameters(f)` and `zero_grad()` as nn::model describes
/// them; data_parallel's parameter shards (meld::parameter_shard) are parameter sets and not
/// models.
template <class M>
concept parameter_set = requires(
    M& m, parameter_visitor_archetype<typename M::value_type, typename M::backend_type> pv) {
  typename M::value_type;
  typename M::backend_type;
  m.visit_parameters(pv);
  m.zero_grad();
};

/// A loss, as data_parallel::step and training loops call it: `loss(outputs, targets, grad)`
/// returns the mean loss over the batch (a number, or an nn::loss_value that converts to one)
/// and writes the gradient of that mean w.r.t. the outputs into grad, resized to the outputs'
/// shape. The mean, not the sum: data_parallel weighs each worker's by its share of the batch,
/// so that the averaged gradients are those of the whole batch whatever the number of workers.
/// Targets are class indices (tensor<std::int64_t>, shape {batch}) for classification, or a
/// tensor like the outputs. nn::cross_entropy is one.
template <class L, class T, class B, class Targets>
concept loss = requires(const L& loss, const tensor<T, B>& out, const Targets& targets,
                        tensor<T, B>& grad) {
  { loss(out, targets, grad) } -> std::convertible_to<double>;
};

/// @}

}  // namespace meld::nn
