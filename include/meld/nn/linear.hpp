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
#include "precision.hpp"
#include "weighted_layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Settings of linear.
struct linear_options {
  /// Whether the layer adds a bias.
  bool bias = true;
  /// The weight is drawn with PyTorch's default, U(+-1 / sqrt(in)), from this seed; the bias
  /// starts at 0. To initialize a whole model from one seed, use nn::initialize.
  std::uint64_t seed = 0;
  /// What the products read: float, or bfloat16 copies with float accumulation (nn::precision).
  nn::precision precision = nn::precision::float32;
};

/// A fully connected layer, y = x W^T + b.
template <class T = float, class B = cpu<>>
class linear : public weighted_layer<T, B> {
  using base = weighted_layer<T, B>;

 public:
  using typename base::tensor_type;

  /// weight {out_features, in_features}, bias {out_features}. Throws shape_error for sizes below 1.
  linear(index_t in_features, index_t out_features, linear_options options = {})
      : base(detail::cat("linear(", in_features, " -> ", out_features, ")"), options.bias),
        in_(in_features),
        out_(out_features),
        precision_(options.precision) {
    if (in_features <= 0 || out_features <= 0)
      throw shape_error(detail::cat(this->name_, ": feature counts must be positive"));
    this->init_parameters({out_features, in_features}, out_features);
    rng gen(options.seed);
    kaiming_uniform{1 / std::sqrt(3.0)}(this->weight_, gen);
  }

  /// x: {batch, in} -> {batch, out}.
  tensor_type forward(const tensor_type& x) { return forward(x.view()); }
  /// The same for a view of {batch, in} elements (flatten's output, handed on by nn::sequential
  /// without a copy); backward keeps the view, and so its storage.
  tensor_type forward(const tensor_view<const T, B>& x) {
    if (x.rank() != 2 || x.shape()[1] != in_)
      throw shape_error(detail::cat(this->name_, ": the input has shape ", x.shape(),
                                    ", expected {batch, ", in_, "}"));
    const shape_t out_shape{x.shape()[0], out_};
    // The bias first, then the product accumulated onto it (one pass fewer than adding after).
    tensor_type y = this->has_bias_ ? tensor_type(this->bias_.broadcast_to(out_shape))
                                    : tensor_type(out_shape, uninitialized);
    const T beta = this->has_bias_ ? T(1) : T(0);
    if (precision_ == nn::precision::bfloat16) {
      // The input rounded once and kept for backward in half the memory; the weights rounded as
      // the product reads them (the CPU's bfloat16 kernels round while they pack).
      tensor<bfloat16, B> x16 = meld::cast<bfloat16>(x);
      gemm(T(1), x16, meld::cast<bfloat16>(this->weight_.transpose()), beta, y);
      input16_.save(x16);
      return y;
    }
    input_.save(x);
    gemm(T(1), x, this->weight_.transpose(), beta, y);
    return y;
  }

  /// The gradient for the last forward's input, {batch, in}; accumulates the parameters' gradients.
  tensor_type backward(const tensor_type& grad_output) { return backward(grad_output, true); }

  /// With input_gradient false, only the parameters' gradients are computed (a first layer does
  /// not need the gradient of the data) and an empty tensor is returned.
  tensor_type backward(const tensor_type& grad_output, bool input_gradient) {
    if (precision_ == nn::precision::bfloat16) return backward16(grad_output, input_gradient);
    const auto& x = input_.get(this->name_);
    detail::expect_shape(this->name_, "the output gradient", grad_output.shape(),
                         {x.shape()[0], out_});
    gemm(T(1), grad_output.transpose(), x, T(1), this->weight_grad_);  // dW += g^T x
    if (this->has_bias_) this->bias_grad_ += meld::sum(grad_output, 0);
    if (!input_gradient) return tensor_type();
    return matmul(grad_output, this->weight_);  // dx = g W
  }

  /// A deep copy (parameters, gradients, mode, precision); nothing a forward pass saved.
  linear replica() const {
    linear r(in_, out_, {.bias = this->has_bias_, .precision = precision_});
    this->copy_parameters_to(r);
    return r;
  }

  /// Input features.
  index_t in_features() const { return in_; }
  /// Output features.
  index_t out_features() const { return out_; }
  /// What the products read.
  nn::precision precision() const { return precision_; }

 private:
  // backward with bfloat16 operands: the saved input, and the output gradient and the weights
  // rounded as the products read them; the bias gradient from the float gradient.
  tensor_type backward16(const tensor_type& grad_output, bool input_gradient) {
    const auto& x16 = input16_.get(this->name_);
    detail::expect_shape(this->name_, "the output gradient", grad_output.shape(),
                         {x16.shape()[0], out_});
    gemm(T(1), meld::cast<bfloat16>(grad_output.transpose()), x16, T(1),
         this->weight_grad_);  // dW += g^T x
    if (this->has_bias_) this->bias_grad_ += meld::sum(grad_output, 0);
    if (!input_gradient) return tensor_type();
    tensor_type dx({x16.shape()[0], in_}, uninitialized);
    gemm(T(1), meld::cast<bfloat16>(grad_output), meld::cast<bfloat16>(this->weight_), T(0),
         dx);  // dx = g W
    return dx;
  }

  index_t in_, out_;
  nn::precision precision_;
  detail::saved_tensor<T, B> input_;
  detail::saved_tensor<bfloat16, B> input16_;
};

/// @}

}  // namespace meld::nn
