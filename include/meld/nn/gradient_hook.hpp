// The gradient-ready hook: how a model tells whoever trains it that a parameter gradient is final
// during backward, so that its communication can start while backward continues below (what
// data_parallel does with its gradient buckets). nn::sequential implements it.
//
// A model that reports ready gradients has an overload backward(grad, hook) that calls hook(g)
// once for each parameter gradient g (a tensor its visit_parameters hands out), as soon as
// backward has finished writing it. The hook is a plain function pointer and context: no
// allocation.
#pragma once

#include "../tensor/tensor.hpp"
#include "model.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// What a model's backward(grad, hook) calls for each parameter gradient once backward has
/// finished writing it.
template <class T, class B>
struct gradient_ready_hook {
  /// Passed back to notify.
  void* context = nullptr;
  /// Called with context and the gradient (null: nothing is called).
  void (*notify)(void*, tensor<T, B>&) = nullptr;
  /// Reports grad as final.
  void operator()(tensor<T, B>& grad) const {
    if (notify) notify(context, grad);
  }
};

/// A model that reports when each gradient is final: besides backward(g), it has
/// `backward(g, hook)`, which calls hook(grad) for each parameter gradient (a tensor its
/// visit_parameters hands out) as soon as backward has finished writing it. data_parallel then
/// starts each gradient bucket's allreduce while backward continues below it; with a model
/// without the overload, every bucket waits for the whole backward. nn::sequential is one.
template <class M>
concept reports_ready_gradients = model<M> &&
    requires(M& m, const tensor<typename M::value_type, typename M::backend_type>& g,
             gradient_ready_hook<typename M::value_type, typename M::backend_type>& h) {
  m.backward(g, h);
};

/// @}

}  // namespace meld::nn
