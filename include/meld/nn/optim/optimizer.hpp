// The Optimizer concept: what training loops and checkpoints rely on.
//
//   step()            updates every parameter of the model from its gradient
//   zero_grad()       sets the model's gradients to 0
//   visit_state(f)    calls f(name, tensor&) for every state tensor (momentum, Adam moments) and
//                     f(name, std::int64_t&) for every counter (steps taken), in a fixed order;
//                     names are unique and start with the optimizer's kind ("sgd.", "adam.")
//   model_type        the model it updates
#pragma once

#include <cstdint>
#include <string_view>

#include "../../tensor/tensor.hpp"

namespace meld::optim {

/// What an optimizer's visit_state hands to its visitor: a name and a state tensor, or a name and a
/// counter (the step count). Checkpoints save and load through it.
template <class T, class B>
struct state_visitor_archetype {
  /// Receives a name and a state tensor.
  void operator()(std::string_view, tensor<T, B>&) const {}
  /// Receives a name and a counter.
  void operator()(std::string_view, std::int64_t&) const {}
};

template <class O>
concept optimizer = requires(O& o) {
  typename O::model_type;
  o.step();
  o.zero_grad();
  o.visit_state(state_visitor_archetype<typename O::model_type::value_type,
                                        typename O::model_type::backend_type>{});
};

}  // namespace meld::optim
