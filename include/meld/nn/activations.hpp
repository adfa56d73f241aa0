// Elementwise activations: relu, sigmoid, tanh. Forward and backward are each one fused
// expression (one pass over the data).
#pragma once

#include <string>

#include "../expr/operators.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// max(x, 0); the gradient passes where x > 0.
template <class T = float, class B = cpu<>>
class relu : public stateless_layer<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// Elementwise max(x, 0); any shape.
  tensor_type forward(const tensor_type& x) {
    input_.save(x);
    return meld::relu(x);
  }
  /// The gradient for the last forward's input: grad_output where that input was positive, else 0.
  tensor_type backward(const tensor_type& grad_output) {
    const auto& x = input_.get("relu");
    detail::expect_shape("relu", "the output gradient", grad_output.shape(), x.shape());
    return where(x > T(0), grad_output, T(0));
  }
  /// A new layer in the same mode (it has no state).
  relu replica() const {
    relu r;
    r.training_ = this->training_;
    return r;
  }

 private:
  detail::saved_tensor<T, B> input_;
};

/// 1 / (1 + e^-x); the gradient is g y (1 - y), from the saved output y.
template <class T = float, class B = cpu<>>
class sigmoid : public stateless_layer<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// Elementwise 1 / (1 + exp(-x)); any shape.
  tensor_type forward(const tensor_type& x) {
    tensor_type y = meld::sigmoid(x);
    output_.save(y);
    return y;
  }
  /// The gradient for the last forward's input: grad_output * y * (1 - y) with y its output.
  tensor_type backward(const tensor_type& grad_output) {
    const auto& y = output_.get("sigmoid");
    detail::expect_shape("sigmoid", "the output gradient", grad_output.shape(), y.shape());
    return grad_output * y * (T(1) - y);
  }
  /// A new layer in the same mode (it has no state).
  sigmoid replica() const {
    sigmoid r;
    r.training_ = this->training_;
    return r;
  }

 private:
  detail::saved_tensor<T, B> output_;
};

/// tanh(x); the gradient is g (1 - y^2), from the saved output y.
template <class T = float, class B = cpu<>>
class tanh : public stateless_layer<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// Elementwise tanh(x); any shape.
  tensor_type forward(const tensor_type& x) {
    tensor_type y = meld::tanh(x);
    output_.save(y);
    return y;
  }
  /// The gradient for the last forward's input: grad_output * (1 - y * y) with y its output.
  tensor_type backward(const tensor_type& grad_output) {
    const auto& y = output_.get("tanh");
    detail::expect_shape("tanh", "the output gradient", grad_output.shape(), y.shape());
    return grad_output * (T(1) - y * y);
  }
  /// A new layer in the same mode (it has no state).
  tanh replica() const {
    tanh r;
    r.training_ = this->training_;
    return r;
  }

 private:
  detail::saved_tensor<T, B> output_;
};

/// @}

}  // namespace meld::nn
