// batch_norm: normalizes each channel (axis 1) of {batch, channels} or {batch, channels, ...}
// inputs, then scales and shifts it: y = gamma (x - mean) / sqrt(var + eps) + beta.
//
// Training mode uses the batch's mean and (biased) variance over every axis but the channel one,
// and updates the running statistics (buffers "running_mean" and "running_var", the latter with
// the unbiased variance, as PyTorch does): running = (1 - momentum) running + momentum batch.
// Evaluation mode normalizes with the running statistics.
#pragma once

#include <string>

#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Settings of batch_norm.
struct batch_norm_options {
  /// Weight of the newest batch in the running statistics.
  double momentum = 0.1;
  /// Added to the variance before its square root.
  double eps = 1e-5;
};

/// Batch normalization over the channels (axis 1) of {batch, channels} or {batch, channels, ...}
/// inputs: in training mode it normalizes with the batch's statistics and updates the running ones,
/// in evaluation mode it uses the running ones; then scales by weight() and shifts by bias().
template <class T = float, class B = cpu<>>
class batch_norm : public layer_base<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// A layer for `channels` channels: weight 1, bias 0, running mean 0 and variance 1.
  explicit batch_norm(index_t channels, batch_norm_options options = {})
      : channels_(channels),
        options_(options),
        name_(detail::cat("batch_norm(", channels, ")")),
        gamma_({channels}),
        beta_({channels}),
        gamma_grad_({channels}),
        beta_grad_({channels}),
        running_mean_({channels}),
        running_var_({channels}) {
    if (channels <= 0)
      throw std::invalid_argument(detail::cat(name_, ": the channel count must be positive"));
    if (!(options.momentum >= 0 && options.momentum <= 1) || !(options.eps > 0))
      throw std::invalid_argument(
          detail::cat(name_, ": momentum must be in [0, 1] and eps positive"));
    gamma_ = T(1);
    running_var_ = T(1);
  }

  /// x: {batch, channels, ...} -> the same shape. Throws shape_error for another channel count.
  tensor_type forward(const tensor_type& x) {
    const shape_t s3 = grouped_shape(x.shape());  // {batch, channels, rest}
    const auto x3 = x.reshape(s3);
    const shape_t stat{1, channels_, 1};
    const auto gamma = gamma_.reshape(stat), beta = beta_.reshape(stat);
    batch_statistics_ = this->training_;
    if (batch_statistics_) {
      const index_t count = s3[0] * s3[2];
      if (count < 2)
        throw shape_error(detail::cat(name_,
                                      ": training needs more than one value per channel, "
                                      "the input has shape ",
                                      x.shape()));
      const tensor_type mean = meld::mean(meld::mean(x3, 2, true), 0, true);
      const tensor_type var = meld::mean(meld::mean(square(x3 - mean), 2, true), 0, true);
      inv_std_ = T(1) / sqrt(var + static_cast<T>(options_.eps));
      xhat_ = (x3 - mean) * inv_std_;
      const T m = static_cast<T>(options_.momentum);
      const T unbias = static_cast<T>(count) / static_cast<T>(count - 1);
      running_mean_ = (T(1) - m) * running_mean_ + m * mean.reshape({channels_});
      running_var_ = (T(1) - m) * running_var_ + (m * unbias) * var.reshape({channels_});
    } else {
      inv_std_ = T(1) / sqrt(running_var_.reshape(stat) + static_cast<T>(options_.eps));
      xhat_ = (x3 - running_mean_.reshape(stat)) * inv_std_;
    }
    tensor_type y(x.shape(), uninitialized);
    y.reshape(s3) = xhat_ * gamma + beta;
    input_shape_ = x.shape();
    forwarded_ = true;
    return y;
  }

  /// The gradient for the last forward's input; accumulates the weight's and bias's gradients.
  tensor_type backward(const tensor_type& grad_output) {
    if (!forwarded_)
      throw std::logic_error(name_ + ": backward called without a forward pass before it");
    detail::expect_shape(name_, "the output gradient", grad_output.shape(), input_shape_);
    const shape_t s3 = grouped_shape(input_shape_);
    const auto g3 = grad_output.reshape(s3);
    const shape_t stat{1, channels_, 1};
    const tensor_type sum_g = meld::sum(meld::sum(g3, 2, true), 0, true);
    const tensor_type sum_gx = meld::sum(meld::sum(g3 * xhat_, 2, true), 0, true);
    beta_grad_ += sum_g.reshape({channels_});
    gamma_grad_ += sum_gx.reshape({channels_});
    tensor_type dx(input_shape_, uninitialized);
    const auto gamma = gamma_.reshape(stat);
    if (batch_statistics_) {
      // d/dx of gamma xhat with batch statistics: the mean and variance depend on x too.
      const T inv_count = T(1) / static_cast<T>(s3[0] * s3[2]);
      dx.reshape(s3) = (gamma * inv_std_) * (g3 - sum_g * inv_count - xhat_ * (sum_gx * inv_count));
    } else {
      dx.reshape(s3) = g3 * (gamma * inv_std_);
    }
    return dx;
  }

  /// Calls f(name, parameter, gradient) for weight and bias.
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view("weight"), gamma_, gamma_grad_);
    f(std::string_view("bias"), beta_, beta_grad_);
  }
  /// Calls f(name, buffer) for the running mean and variance.
  template <class F>
  void visit_buffers(F&& f) {
    f(std::string_view("running_mean"), running_mean_);
    f(std::string_view("running_var"), running_var_);
  }
  /// Zeroes the parameters' gradients.
  void zero_grad() {
    gamma_grad_ = T(0);
    beta_grad_ = T(0);
  }

  /// A deep copy (parameters, statistics, gradients, mode); nothing a forward pass saved.
  batch_norm replica() const {
    batch_norm r(channels_, options_);
    meld::copy(r.gamma_, gamma_);  // device to device where r was made on another device
    meld::copy(r.beta_, beta_);
    meld::copy(r.gamma_grad_, gamma_grad_);
    meld::copy(r.beta_grad_, beta_grad_);
    meld::copy(r.running_mean_, running_mean_);
    meld::copy(r.running_var_, running_var_);
    r.training_ = this->training_;
    return r;
  }

  /// The number of channels.
  index_t channels() const { return channels_; }
  /// The scale, {channels}.
  tensor_type& weight() { return gamma_; }
  /// The shift, {channels}.
  tensor_type& bias() { return beta_; }
  /// The gradient of weight(), {channels}.
  tensor_type& weight_grad() { return gamma_grad_; }
  /// The gradient of bias(), {channels}.
  tensor_type& bias_grad() { return beta_grad_; }
  /// The running mean, {channels}.
  tensor_type& running_mean() { return running_mean_; }
  /// The running variance, {channels}.
  tensor_type& running_var() { return running_var_; }
  /// The layer's name in messages and parameter names.
  const std::string& name() const { return name_; }

 private:
  shape_t grouped_shape(const shape_t& s) const {
    if (s.size() < 2 || s[1] != channels_)
      throw shape_error(detail::cat(name_, ": the input has shape ", s, ", expected {batch, ",
                                    channels_, ", ...}"));
    index_t rest = 1;
    for (int i = 2; i < s.size(); ++i) rest *= s[i];
    return {s[0], channels_, rest};
  }

  index_t channels_;
  batch_norm_options options_;
  std::string name_;
  tensor_type gamma_, beta_, gamma_grad_, beta_grad_, running_mean_, running_var_;
  // Saved by forward for backward: the normalized input {batch, channels, rest} and 1 / std.
  tensor_type xhat_, inv_std_;
  shape_t input_shape_;
  bool forwarded_ = false, batch_statistics_ = true;
};

/// @}

}  // namespace meld::nn
