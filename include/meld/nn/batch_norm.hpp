// batch_norm: normalizes each channel (axis 1) of {batch, channels} or {batch, channels, ...}
// inputs, then scales and shifts it: y = gamma (x - mean) / sqrt(var + eps) + beta.
//
// Training mode uses the batch's mean and (biased) variance over every axis but the channel one,
// and updates the running statistics (buffers "running_mean" and "running_var", the latter with
// the unbiased variance, as PyTorch does): running = (1 - momentum) running + momentum batch.
// Evaluation mode normalizes with the running statistics.
//
// The computation is batch_norm_kernel, which autograd::batch_norm shares with the layer.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

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

/// What a batch_norm_kernel forward pass leaves for backward.
template <class T, class B>
struct batch_norm_saved {
  tensor<T, B> xhat;              ///< the normalized input, {batch, channels, rest}
  tensor<T, B> inv_std;           ///< 1 / sqrt(var + eps), {1, channels, 1}
  shape_t input_shape;            ///< the input's shape
  bool batch_statistics = false;  ///< whether forward used the batch's statistics (training)
};

/// Batch normalization's computation, shared by nn::batch_norm and autograd::batch_norm: the
/// statistics, the running averages' update, the normalization and its backward.
class batch_norm_kernel {
 public:
  /// For `channels` channels, with `name` the layer's in messages. Throws std::invalid_argument
  /// for a channel count below 1, a momentum outside [0, 1] or an eps that is not positive.
  batch_norm_kernel(index_t channels, batch_norm_options options, std::string name)
      : channels_(channels), options_(options), name_(std::move(name)) {
    if (channels <= 0)
      throw std::invalid_argument(detail::cat(name_, ": the channel count must be positive"));
    if (!(options.momentum >= 0 && options.momentum <= 1) || !(options.eps > 0))
      throw std::invalid_argument(
          detail::cat(name_, ": momentum must be in [0, 1] and eps positive"));
  }

  /// y = gamma (x - mean) / sqrt(var + eps) + beta for x {batch, channels, ...}, gamma and beta
  /// {channels}: with the batch's statistics when training (updating the running ones), else with
  /// the running ones. Fills `saved` for backward. Throws shape_error for another channel count,
  /// or in training for a single value per channel.
  template <class T, class B>
  tensor<T, B> forward(const tensor_view<const T, B>& x, const tensor_view<const T, B>& gamma,
                       const tensor_view<const T, B>& beta, tensor<T, B>& running_mean,
                       tensor<T, B>& running_var, bool training,
                       batch_norm_saved<T, B>& saved) const {
    const shape_t s3 = grouped_shape(x.shape());  // {batch, channels, rest}
    const auto x3 = x.reshape(s3);
    const shape_t stat{1, channels_, 1};
    saved.batch_statistics = training;
    if (training) {
      const index_t count = s3[0] * s3[2];
      if (count < 2)
        throw shape_error(detail::cat(name_,
                                      ": training needs more than one value per channel, "
                                      "the input has shape ",
                                      x.shape()));
      const tensor<T, B> mean = meld::mean(meld::mean(x3, 2, true), 0, true);
      const tensor<T, B> var = meld::mean(meld::mean(square(x3 - mean), 2, true), 0, true);
      saved.inv_std = T(1) / sqrt(var + static_cast<T>(options_.eps));
      saved.xhat = (x3 - mean) * saved.inv_std;
      const T m = static_cast<T>(options_.momentum);
      const T unbias = static_cast<T>(count) / static_cast<T>(count - 1);
      running_mean = (T(1) - m) * running_mean + m * mean.reshape({channels_});
      running_var = (T(1) - m) * running_var + (m * unbias) * var.reshape({channels_});
    } else {
      saved.inv_std = T(1) / sqrt(running_var.reshape(stat) + static_cast<T>(options_.eps));
      saved.xhat = (x3 - running_mean.reshape(stat)) * saved.inv_std;
    }
    tensor<T, B> y(x.shape(), uninitialized);
    y.reshape(s3) = saved.xhat * gamma.reshape(stat) + beta.reshape(stat);
    saved.input_shape = x.shape();
    return y;
  }

  /// Given forward's `saved` and gamma and the output gradient g: adds gamma's gradient into
  /// dgamma and beta's into dbeta (unless null), and returns the input's gradient (an empty tensor
  /// without input_gradient). Throws shape_error for a gradient of another shape than the input.
  template <class T, class B>
  tensor<T, B> backward(const tensor<T, B>& g, const tensor_view<const T, B>& gamma,
                        const batch_norm_saved<T, B>& saved, bool input_gradient,
                        tensor<T, B>* dgamma, tensor<T, B>* dbeta) const {
    detail::expect_shape(name_, "the output gradient", g.shape(), saved.input_shape);
    const shape_t s3 = grouped_shape(saved.input_shape);
    const auto g3 = g.reshape(s3);
    const shape_t stat{1, channels_, 1};
    const tensor<T, B> sum_g = meld::sum(meld::sum(g3, 2, true), 0, true);
    const tensor<T, B> sum_gx = meld::sum(meld::sum(g3 * saved.xhat, 2, true), 0, true);
    if (dbeta) *dbeta += sum_g.reshape({channels_});
    if (dgamma) *dgamma += sum_gx.reshape({channels_});
    tensor<T, B> dx;
    if (!input_gradient) return dx;
    dx = tensor<T, B>(saved.input_shape, uninitialized);
    const auto gamma3 = gamma.reshape(stat);
    if (saved.batch_statistics) {
      // d/dx of gamma xhat with batch statistics: the mean and variance depend on x too.
      const T inv_count = T(1) / static_cast<T>(s3[0] * s3[2]);
      dx.reshape(s3) =
          (gamma3 * saved.inv_std) * (g3 - sum_g * inv_count - saved.xhat * (sum_gx * inv_count));
    } else {
      dx.reshape(s3) = g3 * (gamma3 * saved.inv_std);
    }
    return dx;
  }

  /// The number of channels.
  index_t channels() const { return channels_; }
  /// The settings.
  const batch_norm_options& options() const { return options_; }
  /// The name in messages.
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
      : kernel_(channels, options, detail::cat("batch_norm(", channels, ")")),
        gamma_({channels}),
        beta_({channels}),
        gamma_grad_({channels}),
        beta_grad_({channels}),
        running_mean_({channels}),
        running_var_({channels}) {
    gamma_ = T(1);
    running_var_ = T(1);
  }

  /// x: {batch, channels, ...} -> the same shape. Throws shape_error for another channel count.
  tensor_type forward(const tensor_type& x) {
    tensor_type y =
        kernel_.forward(x.view(), std::as_const(gamma_).view(), std::as_const(beta_).view(),
                        running_mean_, running_var_, this->training_, saved_);
    forwarded_ = true;
    return y;
  }

  /// The gradient for the last forward's input; accumulates the weight's and bias's gradients.
  tensor_type backward(const tensor_type& grad_output) {
    if (!forwarded_)
      throw std::logic_error(name() + ": backward called without a forward pass before it");
    return kernel_.backward(grad_output, std::as_const(gamma_).view(), saved_, true, &gamma_grad_,
                            &beta_grad_);
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
    batch_norm r(channels(), kernel_.options());
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
  index_t channels() const { return kernel_.channels(); }
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
  const std::string& name() const { return kernel_.name(); }

 private:
  batch_norm_kernel kernel_;
  tensor_type gamma_, beta_, gamma_grad_, beta_grad_, running_mean_, running_var_;
  // Saved by forward for backward: the normalized input and 1 / std.
  batch_norm_saved<T, B> saved_;
  bool forwarded_ = false;
};

/// @}

}  // namespace meld::nn
