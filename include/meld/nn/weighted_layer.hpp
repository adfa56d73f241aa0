// What linear and conv2d share: a weight, an optional bias and their gradients, with the model
// operations on them (visit_parameters as "weight" then "bias", zero_grad) and the accessors.
// The layer sets the shapes in its constructor (init_parameters) and copies the state into its
// replicas (copy_parameters_to).
#pragma once

#include <string>
#include <string_view>

#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// The base of layers with a weight and an optional bias (linear, conv2d): the parameters, their
/// gradients, and the model operations on them.
template <class T, class B>
class weighted_layer : public layer_base<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// Calls f(name, parameter, gradient) for "weight", then "bias" (when the layer has one).
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view("weight"), weight_, weight_grad_);
    if (has_bias_) f(std::string_view("bias"), bias_, bias_grad_);
  }
  /// No buffers.
  template <class F>
  void visit_buffers(F&&) {}

  /// Sets the gradients to 0.
  void zero_grad() {
    weight_grad_ = T(0);
    bias_grad_ = T(0);
  }

  /// Whether the layer adds a bias.
  bool has_bias() const { return has_bias_; }
  /// The weight (its shape depends on the layer).
  tensor_type& weight() { return weight_; }
  /// The bias ({out}; empty without a bias).
  tensor_type& bias() { return bias_; }
  /// The weight's gradient, accumulated by backward.
  tensor_type& weight_grad() { return weight_grad_; }
  /// The bias's gradient, accumulated by backward.
  tensor_type& bias_grad() { return bias_grad_; }
  /// The layer's name in messages, e.g. "linear(784 -> 256)".
  const std::string& name() const { return name_; }

 protected:
  /// A layer called `name`, with or without a bias; init_parameters gives the shapes.
  weighted_layer(std::string name, bool has_bias) : has_bias_(has_bias), name_(std::move(name)) {}

  /// Zero-filled parameters and gradients: the weight of `weight_shape`, the bias of `bias_size`
  /// elements (none without a bias).
  void init_parameters(const shape_t& weight_shape, index_t bias_size) {
    weight_ = tensor_type(weight_shape);
    weight_grad_ = tensor_type(weight_shape);
    bias_ = tensor_type({has_bias_ ? bias_size : 0});
    bias_grad_ = tensor_type(bias_.shape());
  }

  /// The replica's parameters, gradients and mode become this layer's (deep copies, device to
  /// device where the replica was made on another device).
  void copy_parameters_to(weighted_layer& r) const {
    meld::copy(r.weight_, weight_);
    meld::copy(r.bias_, bias_);
    meld::copy(r.weight_grad_, weight_grad_);
    meld::copy(r.bias_grad_, bias_grad_);
    r.training_ = this->training_;
  }

  bool has_bias_;            ///< whether the layer adds a bias
  std::string name_;         ///< the name in messages
  tensor_type weight_;       ///< the weight
  tensor_type bias_;         ///< the bias
  tensor_type weight_grad_;  ///< the weight's gradient
  tensor_type bias_grad_;    ///< the bias's gradient
};

/// @}

}  // namespace meld::nn
