// Layer objects for forward-only models: each owns its parameters as leaf variables (drawn from a
// seed as the matching nn layer draws them, so that the same seed gives the same model both ways),
// is called on a variable, and lists its parameters for autograd::module. parameters() names the
// layers and variables of a network in one line:
//
//   struct mlp {
//     using value_type = float;
//     using backend_type = meld::cpu<>;
//     autograd::layers::linear<float> fc1{784, 256, {.seed = 1}}, fc2{256, 10, {.seed = 2}};
//     autograd::variable<float> forward(const autograd::variable<float>& x) {
//       return fc2(relu(fc1(x)));
//     }
//     template <class F>
//     void parameters(F&& f) { autograd::parameters(f, "fc1", fc1, "fc2", fc2); }
//   };
//
// Beside linear: conv2d, max_pool2d, avg_pool2d, batch_norm and dropout, each running the kernel
// of the nn layer of the same name. Layers with buffers (batch_norm's running statistics) list
// them with buffers(f), which autograd::buffers names as parameters() does; layers whose result
// depends on the mode (batch_norm, dropout) have train(bool), which autograd::train sets on many:
//
//     template <class F>
//     void buffers(F&& f) { autograd::buffers(f, "bn1", bn1); }
//     void train(bool on) { autograd::train(on, bn1, drop); }
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "../nn/init.hpp"
#include "../nn/linear.hpp"
#include "convolution.hpp"
#include "dropout.hpp"
#include "linear.hpp"
#include "normalization.hpp"
#include "pooling.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

/// Layer objects that own their parameters as leaf variables (see autograd/layers.hpp).
namespace layers {

/// A fully connected layer, y = x W^T + b (autograd::linear), with W {out, in} drawn as
/// nn::linear draws it (U(+-1/sqrt(in)) from options.seed) and b starting at 0.
template <class T = float, class B = cpu<>>
class linear {
 public:
  using variable_type = variable<T, B>;  ///< the parameters' and outputs' type

  /// weight {out_features, in_features}, bias {out_features} (none with options.bias false).
  /// Throws shape_error for sizes below 1.
  linear(index_t in_features, index_t out_features, nn::linear_options options = {}) {
    if (in_features <= 0 || out_features <= 0)
      meld::detail::raise<shape_error>("autograd::layers::linear(", in_features, " -> ",
                                       out_features, "): feature counts must be positive");
    tensor<T, B> w({out_features, in_features}, uninitialized);
    rng gen(options.seed);
    nn::kaiming_uniform{1 / std::sqrt(3.0)}(w, gen);
    weight = variable_type(std::move(w), true);
    if (options.bias) bias = variable_type(tensor<T, B>({out_features}), true);
  }

  /// x {..., in} -> {..., out}; x is a variable or an expression of variables.
  template <differentiable X>
  variable_type operator()(X&& x) const {
    if (bias.defined()) return autograd::linear(std::forward<X>(x), weight, bias);
    return autograd::linear(std::forward<X>(x), weight);
  }

  /// Calls f("weight", weight) and f("bias", bias) (when the layer has one).
  template <class F>
  void parameters(F&& f) {
    f("weight", weight);
    if (bias.defined()) f("bias", bias);
  }

  variable_type weight;  ///< {out, in}
  variable_type bias;    ///< {out}, or undefined without a bias
};

/// A 2-d convolution layer, autograd::conv2d with weight {out, in, kh, kw} drawn as nn::conv2d
/// draws it (U(+-1/sqrt(in kh kw)) from options.seed) and bias {out} starting at 0 (none with
/// options.bias false). Its nn::conv2d_kernel keeps scratch between calls; a copy of the layer
/// shares the parameters' handles (as variables do) but gets its own scratch.
template <class T = float, class B = cpu<>>
class conv2d {
 public:
  using variable_type = variable<T, B>;  ///< the parameters' and outputs' type

  /// Throws std::invalid_argument for channel counts below 1 or an invalid kernel, stride or
  /// padding.
  conv2d(index_t in_channels, index_t out_channels, size2 kernel, nn::conv2d_options options = {})
      : kernel_(std::make_shared<nn::conv2d_kernel<T, B>>(
            meld::detail::cat("autograd::layers::conv2d(", in_channels, " -> ", out_channels,
                              ", kernel ", kernel.h, "x", kernel.w, ", stride ", options.stride.h,
                              "x", options.stride.w, ", padding ", options.padding.h, "x",
                              options.padding.w, ")"),
            kernel, options.stride, options.padding)) {
    if (in_channels <= 0 || out_channels <= 0)
      throw std::invalid_argument(kernel_->name() + ": channel counts must be positive");
    if (options.activation != nn::activation::none)
      throw std::invalid_argument(kernel_->name() +
                                  ": options.activation is nn::conv2d's; apply relu to its "
                                  "result instead");
    tensor<T, B> w({out_channels, in_channels, kernel.h, kernel.w}, uninitialized);
    rng gen(options.seed);
    nn::kaiming_uniform{1 / std::sqrt(3.0)}(w, gen);
    weight = variable_type(std::move(w), true);
    if (options.bias) bias = variable_type(tensor<T, B>({out_channels}), true);
  }
  /// The same parameters (handles), scratch of its own.
  conv2d(const conv2d& other)
      : weight(other.weight),
        bias(other.bias),
        kernel_(std::make_shared<nn::conv2d_kernel<T, B>>(*other.kernel_)) {}
  /// The same parameters (handles), scratch of its own.
  conv2d& operator=(const conv2d& other) {
    weight = other.weight;
    bias = other.bias;
    kernel_ = std::make_shared<nn::conv2d_kernel<T, B>>(*other.kernel_);
    return *this;
  }
  conv2d(conv2d&&) noexcept = default;             ///< moves
  conv2d& operator=(conv2d&&) noexcept = default;  ///< moves

  /// x {batch, in, h, w} -> {batch, out, oh, ow}; x is a variable or an expression of variables.
  template <differentiable X>
  variable_type operator()(X&& x) const {
    auto xv = detail::as_variable(std::forward<X>(x));
    if (bias.defined()) return detail::conv2d_with(kernel_, xv, weight, bias);
    return detail::conv2d_with(kernel_, xv, weight);
  }

  /// Calls f("weight", weight) and f("bias", bias) (when the layer has one).
  template <class F>
  void parameters(F&& f) {
    f("weight", weight);
    if (bias.defined()) f("bias", bias);
  }

  variable_type weight;  ///< {out, in, kh, kw}
  variable_type bias;    ///< {out}, or undefined without a bias

 private:
  std::shared_ptr<nn::conv2d_kernel<T, B>> kernel_;
};

/// Max pooling, autograd::max_pool2d with a fixed window (stride 0: the kernel).
template <class T = float, class B = cpu<>>
class max_pool2d {
 public:
  using variable_type = variable<T, B>;  ///< the outputs' type

  /// Throws std::invalid_argument for an invalid kernel, stride or padding.
  explicit max_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : kernel_(kernel, stride, padding) {}
  /// x {batch, channels, h, w} -> {batch, channels, oh, ow}.
  template <differentiable X>
  variable_type operator()(X&& x) const {
    return detail::pool2d_with(kernel_, detail::as_variable(std::forward<X>(x)));
  }

 private:
  nn::max_pool2d_kernel kernel_;
};

/// Average pooling, autograd::avg_pool2d with a fixed window (stride 0: the kernel).
template <class T = float, class B = cpu<>>
class avg_pool2d {
 public:
  using variable_type = variable<T, B>;  ///< the outputs' type

  /// Throws std::invalid_argument for an invalid kernel, stride or padding.
  explicit avg_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : kernel_(kernel, stride, padding) {}
  /// x {batch, channels, h, w} -> {batch, channels, oh, ow}.
  template <differentiable X>
  variable_type operator()(X&& x) const {
    return detail::pool2d_with(kernel_, detail::as_variable(std::forward<X>(x)));
  }

 private:
  nn::avg_pool2d_kernel kernel_;
};

/// Batch normalization over the channels (axis 1), autograd::batch_norm with weight 1 and bias 0
/// (parameters), running mean 0 and variance 1 (buffers), as nn::batch_norm starts. Training mode
/// (the default; train(bool)) normalizes with the batch's statistics and updates the running ones.
/// A copy shares the parameters' handles and copies the buffers.
template <class T = float, class B = cpu<>>
class batch_norm {
  nn::batch_norm_kernel kernel_;  // first: its constructor checks the channel count

 public:
  using variable_type = variable<T, B>;  ///< the parameters' and outputs' type
  using tensor_type = tensor<T, B>;      ///< the buffers' type

  /// Throws std::invalid_argument for a channel count below 1, a momentum outside [0, 1] or an
  /// eps that is not positive.
  explicit batch_norm(index_t channels, nn::batch_norm_options options = {})
      : kernel_(channels, options,
                meld::detail::cat("autograd::layers::batch_norm(", channels, ")")),
        running_mean({channels}),
        running_var({channels}) {
    tensor_type ones({channels}, uninitialized);
    ones.fill(T(1));
    weight = variable_type(std::move(ones), true);
    bias = variable_type(tensor_type({channels}), true);
    running_var.fill(T(1));
  }

  /// x {batch, channels, ...} -> the same shape.
  template <differentiable X>
  variable_type operator()(X&& x) {
    return detail::batch_norm_with(kernel_, detail::as_variable(std::forward<X>(x)), running_mean,
                                   running_var, weight, bias, training_);
  }

  /// Calls f("weight", weight) and f("bias", bias).
  template <class F>
  void parameters(F&& f) {
    f("weight", weight);
    f("bias", bias);
  }
  /// Calls f("running_mean", running_mean) and f("running_var", running_var).
  template <class F>
  void buffers(F&& f) {
    f("running_mean", running_mean);
    f("running_var", running_var);
  }
  /// Training mode (batch statistics) or evaluation mode (the running ones).
  void train(bool on = true) { training_ = on; }
  /// Evaluation mode.
  void eval() { training_ = false; }
  /// Whether the layer is in training mode.
  bool training() const { return training_; }

  variable_type weight;      ///< the scale, {channels}
  variable_type bias;        ///< the shift, {channels}
  tensor_type running_mean;  ///< {channels}
  tensor_type running_var;   ///< {channels}

 private:
  bool training_ = true;
};

/// Dropout, autograd::dropout with probability p and masks drawn from a stream seeded by seed (as
/// nn::dropout draws them): active in training mode (the default; train(bool)). A copy continues
/// the same stream.
template <class T = float, class B = cpu<>>
class dropout {
 public:
  using variable_type = variable<T, B>;  ///< the outputs' type

  /// Throws std::invalid_argument unless 0 <= p < 1.
  explicit dropout(double p, std::uint64_t seed = 0) : p_(p), gen_(seed) {
    if (!(p >= 0 && p < 1))
      throw std::invalid_argument(
          meld::detail::cat("autograd::layers::dropout: probability ", p, " is not in [0, 1)"));
  }

  /// x of any shape -> the same shape.
  template <differentiable X>
  variable_type operator()(X&& x) {
    return autograd::dropout(std::forward<X>(x), p_, training_, gen_);
  }

  /// Restarts the mask stream.
  void seed(std::uint64_t s) { gen_ = rng(s); }
  /// The probability of dropping an element.
  double probability() const { return p_; }
  /// Training mode (masks) or evaluation mode (the identity).
  void train(bool on = true) { training_ = on; }
  /// Evaluation mode.
  void eval() { training_ = false; }
  /// Whether the layer is in training mode.
  bool training() const { return training_; }

 private:
  double p_;
  rng gen_;
  bool training_ = true;
};

}  // namespace layers

namespace detail {
template <class F, class Item>
void parameters_of(F& f, std::string_view name, Item& item) {
  if constexpr (requires { item.parameters(f); }) {
    std::string full(name);
    full += '.';
    const std::size_t prefix = full.size();
    item.parameters([&](std::string_view inner, auto& p) {
      full.resize(prefix);
      full += inner;
      f(std::string_view(full), p);
    });
  } else {
    f(name, item);
  }
}
}  // namespace detail

/// Calls f(name, variable) for every parameter of the named items, in order: a variable is passed
/// as is, a layer (anything with parameters(f)) with its parameters' names prefixed by "name.".
/// parameters(f, "fc1", fc1, "w", w) gives "fc1.weight", "fc1.bias", "w".
template <class F, class... Items>
void parameters(F&& f, std::string_view name, auto& item, Items&&... rest) {
  detail::parameters_of(f, name, item);
  if constexpr (sizeof...(Items) > 0) parameters(f, std::forward<Items>(rest)...);
}

namespace detail {
template <class F, class Item>
void buffers_of(F& f, std::string_view name, Item& item) {
  if constexpr (requires { item.buffers(f); }) {
    std::string full(name);
    full += '.';
    const std::size_t prefix = full.size();
    item.buffers([&](std::string_view inner, auto& b) {
      full.resize(prefix);
      full += inner;
      f(std::string_view(full), b);
    });
  } else {
    static_assert(
        requires { f(name, item); },
        "meld::autograd::buffers: an item is neither a tensor nor a layer with "
        "buffers(f)");
    f(name, item);
  }
}
template <class Item>
void train_one(bool on, Item& item) {
  static_assert(
      requires { item.train(on); },
      "meld::autograd::train: an item has no train(bool) (only layers whose result "
      "depends on the mode do)");
  item.train(on);
}
}  // namespace detail

/// Calls f(name, tensor) for every buffer of the named items, in order, for a network's
/// buffers(f): a tensor is passed as is, a layer with buffers(f) (batch_norm) with its buffers'
/// names prefixed by "name.". buffers(f, "bn1", bn1) gives "bn1.running_mean", "bn1.running_var".
template <class F, class... Items>
void buffers(F&& f, std::string_view name, auto& item, Items&&... rest) {
  detail::buffers_of(f, name, item);
  if constexpr (sizeof...(Items) > 0) buffers(f, std::forward<Items>(rest)...);
}

/// Sets training (on) or evaluation mode on each item, by its train(bool): for a network's
/// train(bool), over the layers that have modes (batch_norm, dropout).
template <class... Items>
void train(bool on, Items&... items) {
  (detail::train_one(on, items), ...);
}

/// @}

}  // namespace meld::autograd
