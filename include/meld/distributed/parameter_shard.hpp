// parameter_shard<T, B>: one rank's part of a model's parameters and of their averaged gradients,
// as data_parallel's sharded optimizer (ZeRO stage 1) lays them out: elements [r m, (r + 1) m) of
// every gradient bucket, bucket after bucket, in one tensor (m = ceil(bucket size / ranks); past a
// bucket's end, padding that stays 0). It is an nn::parameter_set with one parameter, named
// "shard<r>", so that any optimizer (optim::sgd, optim::adam) updates it unchanged: elementwise
// updates give each element the bits they give it in the whole model, with state of 1/k the size.
#pragma once

#include <string>
#include <string_view>

#include "../tensor/tensor.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// One rank's shard of a data_parallel model's parameters and averaged gradients (see
/// data_parallel_options::shard_optimizer): an nn::parameter_set with one flat parameter.
template <class T, class B>
class parameter_shard {
 public:
  using value_type = T;              ///< the element type
  using backend_type = B;            ///< the backend
  using tensor_type = tensor<T, B>;  ///< its tensors

  /// The shard of rank `rank`, over tensors that data_parallel owns and keeps in place.
  parameter_shard(int rank, tensor_type& parameters, tensor_type& gradients)
      : name_("shard" + std::to_string(rank)), param_(&parameters), grad_(&gradients) {}

  /// Calls f("shard<r>", parameters, gradients).
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view(name_), *param_, *grad_);
  }
  /// Sets the gradient shard to 0.
  void zero_grad() { *grad_ = T(0); }
  /// The shard's parameters (elements of every bucket, padded).
  tensor_type& parameters() { return *param_; }
  /// The shard's averaged gradients (after a synchronized step).
  tensor_type& gradients() { return *grad_; }

 private:
  std::string name_;
  tensor_type* param_;
  tensor_type* grad_;
};

/// @}

}  // namespace meld
