// linear: y = x W^T + b for x of shape {batch, in}, W of shape {out, in} (PyTorch's layout), b of
// shape {out}. Every product goes through meld::gemm / meld::matmul.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "../expr/matmul.hpp"
#include "../expr/reduce.hpp"
#include "init.hpp"
#include "layer.hpp"

namespace meld::nn {

/// Settings of linear.
struct linear_options {
  /// Whether the layer adds a bias.
  bool bias = true;
  /// The weight is drawn with PyTorch's default, U(+-1 / sqrt(in)), from this seed; the bias
  /// starts at 0. To initialize a whole model from one seed, use nn::initialize.
  std::uint64_t seed = 0;
};

/// A fully connected layer, y = x W^T + b.
template <class T = float, class B = cpu<>>
class linear : public layer_base<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// weight {out_features, in_features}, bias {out_features}. Throws shape_error for sizes below 1.
  linear(index_t in_features, index_t out_features, linear_options options = {})
      : in_(in_features),
        out_(out_features),
        has_bias_(options.bias),
        name_(detail::cat("linear(", in_features, " -> ", out_features, ")")),
        weight_({out_features, in_features}),
        bias_({options.bias ? out_features : 0}),
        weight_grad_({out_features, in_features}),
        bias_grad_({options.bias ? out_features : 0}) {
    if (in_features <= 0 || out_features <= 0)
      throw shape_error(detail::cat(name_, ": feature counts must be positive"));
    rng gen(options.seed);
    kaiming_uniform{1 / std::sqrt(3.0)}(weight_, gen);
  }

  /// x: {batch, in} -> {batch, out}.
  tensor_type forward(const tensor_type& x) {
    if (x.rank() != 2 || x.shape()[1] != in_)
      throw shape_error(
          detail::cat(name_, ": the input has shape ", x.shape(), ", expected {batch, ", in_, "}"));
    input_.save(x);
    const shape_t out_shape{x.shape()[0], out_};
    if (!has_bias_) return matmul(x, weight_.transpose());
    // The bias first, then the product accumulated onto it (one pass fewer than adding after).
    tensor_type y(bias_.broadcast_to(out_shape));
    gemm(T(1), x, weight_.transpose(), T(1), y);
    return y;
  }

  /// The gradient for the last forward's input, {batch, in}; accumulates the parameters' gradients.
  tensor_type backward(const tensor_type& grad_output) { return backward(grad_output, true); }

  /// With input_gradient false, only the parameters' gradients are computed (a first layer does
  /// not need the gradient of the data) and an empty tensor is returned.
  tensor_type backward(const tensor_type& grad_output, bool input_gradient) {
    const auto& x = input_.get(name_);
    detail::expect_shape(name_, "the output gradient", grad_output.shape(), {x.shape()[0], out_});
    gemm(T(1), grad_output.transpose(), x, T(1), weight_grad_);  // dW += g^T x
    if (has_bias_) bias_grad_ += meld::sum(grad_output, 0);
    if (!input_gradient) return tensor_type();
    return matmul(grad_output, weight_);  // dx = g W
  }

  /// Calls f(name, parameter, gradient) for the weight and the bias (if any).
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view("weight"), weight_, weight_grad_);
    if (has_bias_) f(std::string_view("bias"), bias_, bias_grad_);
  }
  /// No buffers.
  template <class F>
  void visit_buffers(F&&) {}

  /// Zeroes the parameters' gradients.
  void zero_grad() {
    weight_grad_ = T(0);
    bias_grad_ = T(0);
  }

  /// A deep copy (parameters, gradients, mode); nothing a forward pass saved.
  linear replica() const {
    linear r(in_, out_, {.bias = has_bias_});
    r.weight_ = weight_;
    r.bias_ = bias_;
    r.weight_grad_ = weight_grad_;
    r.bias_grad_ = bias_grad_;
    r.training_ = this->training_;
    return r;
  }

  /// Input features.
  index_t in_features() const { return in_; }
  /// Output features.
  index_t out_features() const { return out_; }
  /// Whether there is a bias.
  bool has_bias() const { return has_bias_; }
  /// The weight, {out_features, in_features}.
  tensor_type& weight() { return weight_; }
  /// The bias, {out_features} (empty without bias).
  tensor_type& bias() { return bias_; }
  /// The gradient of weight().
  tensor_type& weight_grad() { return weight_grad_; }
  /// The gradient of bias().
  tensor_type& bias_grad() { return bias_grad_; }
  /// The layer's name in messages and parameter names.
  const std::string& name() const { return name_; }

 private:
  index_t in_, out_;
  bool has_bias_;
  std::string name_;
  tensor_type weight_, bias_, weight_grad_, bias_grad_;
  detail::saved_tensor<T, B> input_;
};

}  // namespace meld::nn
