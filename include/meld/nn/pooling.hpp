// 2-d max and average pooling over {batch, channels, height, width}, with stride (default: the
// kernel) and padding (at most half the kernel), through the backend's window operations
// (backend/window.hpp).
//
//   max_pool2d   padding never wins (as -inf); the gradient goes to the first maximum of each
//                window (as in PyTorch); NaN propagates.
//   avg_pool2d   pads with 0 and divides by the full kernel size (PyTorch's count_include_pad).
//
// The computations are max_pool2d_kernel and avg_pool2d_kernel, which autograd's pooling functions
// share with the layers here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "detail/image_input.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// The window of a pooling layer (kernel, stride, padding) and the shapes it maps, with the checks
/// that name the layer; the base of max_pool2d_kernel and avg_pool2d_kernel.
class pool2d_window {
 public:
  /// Kernel rows and columns.
  size2 kernel() const { return geometry_.kernel; }
  /// Steps over rows and columns.
  size2 stride() const { return geometry_.stride; }
  /// Padding of rows and columns.
  size2 padding() const { return geometry_.padding; }
  /// The name in messages, e.g. "max_pool2d(kernel 2x2, stride 2x2, padding 0x0)".
  const std::string& name() const { return name_; }

  /// {batch, channels, oh, ow} for an input of shape x {batch, channels, h, w}. Throws
  /// shape_error for an input of another rank or smaller than the kernel.
  shape_t output_shape(const shape_t& x) const {
    const detail::planes p = planes_of(x);
    return {x[0], x[1], p.out_h, p.out_w};
  }

 protected:
  /// `kind` names the operation; stride 0 means "equal to the kernel". Throws
  /// std::invalid_argument for a kernel or stride below 1, or a padding above half the kernel.
  pool2d_window(const char* kind, size2 kernel, size2 stride, size2 padding)
      : geometry_{kernel, stride.h == 0 && stride.w == 0 ? kernel : stride, padding} {
    name_ = detail::cat(kind, "(kernel ", geometry_.kernel.h, "x", geometry_.kernel.w, ", stride ",
                        geometry_.stride.h, "x", geometry_.stride.w, ", padding ",
                        geometry_.padding.h, "x", geometry_.padding.w, ")");
    geometry_.validate(name_);
    if (2 * padding.h > geometry_.kernel.h || 2 * padding.w > geometry_.kernel.w)
      throw std::invalid_argument(detail::cat(name_, ": padding must be at most half the kernel"));
  }

  /// The plane geometry of input shape x (checked).
  detail::planes planes_of(const shape_t& x) const {
    detail::expect_image_batch(name_, x, -1);
    return {x[1], x[2], x[3], geometry_.out_h(name_, x[2]), geometry_.out_w(name_, x[3])};
  }
  /// Checks an output gradient against the output shape for input shape x; returns x's planes.
  detail::planes gradient_planes(const shape_t& g, const shape_t& x) const {
    const detail::planes p = planes_of(x);
    detail::expect_shape(name_, "the output gradient", g, {x[0], x[1], p.out_h, p.out_w});
    return p;
  }

  detail::window2d geometry_;  ///< kernel, stride, padding
  std::string name_;           ///< the name in messages
};

/// Max pooling's computation, shared by nn::max_pool2d and autograd::max_pool2d.
class max_pool2d_kernel : public pool2d_window {
 public:
  /// stride 0 means "equal to the kernel".
  explicit max_pool2d_kernel(size2 kernel, size2 stride = 0, size2 padding = 0)
      : pool2d_window("max_pool2d", kernel, stride, padding) {}

  /// The maximum of each window of x {batch, channels, h, w}; argmax receives, per output, the
  /// position of that maximum in its plane (reallocated when its shape is not the output's).
  template <class T, class B>
  tensor<T, B> forward(const tensor<T, B>& x, tensor<std::int32_t, B>& argmax) const {
    const detail::planes p = planes_of(x.shape());
    const shape_t out{x.shape()[0], x.shape()[1], p.out_h, p.out_w};
    tensor<T, B> y(out, uninitialized);
    if (!(argmax.shape() == out)) argmax = tensor<std::int32_t, B>(out, uninitialized);
    window_ops<B>::max_pool(x.view(), out[0] * out[1], p, geometry_, y.view(), argmax.view());
    return y;
  }

  /// Adds each output gradient into dx (of the input's shape) at its window's maximum, given the
  /// argmax of forward.
  template <class T, class B>
  void backward_add(const tensor<T, B>& grad, const tensor<std::int32_t, B>& argmax,
                    tensor<T, B>& dx) const {
    const detail::planes p = gradient_planes(grad.shape(), dx.shape());
    window_ops<B>::max_unpool_add(grad.view(), argmax.view(), dx.shape()[0] * dx.shape()[1], p,
                                  geometry_, dx.view());
  }
};

/// Average pooling's computation, shared by nn::avg_pool2d and autograd::avg_pool2d.
class avg_pool2d_kernel : public pool2d_window {
 public:
  /// stride 0 means "equal to the kernel".
  explicit avg_pool2d_kernel(size2 kernel, size2 stride = 0, size2 padding = 0)
      : pool2d_window("avg_pool2d", kernel, stride, padding) {}

  /// The mean of each window of x {batch, channels, h, w}.
  template <class T, class B>
  tensor<T, B> forward(const tensor<T, B>& x) const {
    const detail::planes p = planes_of(x.shape());
    tensor<T, B> y({x.shape()[0], x.shape()[1], p.out_h, p.out_w}, uninitialized);
    window_ops<B>::avg_pool(x.view(), x.shape()[0] * x.shape()[1], p, geometry_, y.view());
    return y;
  }

  /// Adds each output gradient, spread evenly over its window, into dx (of the input's shape).
  template <class T, class B>
  void backward_add(const tensor<T, B>& grad, tensor<T, B>& dx) const {
    const detail::planes p = gradient_planes(grad.shape(), dx.shape());
    window_ops<B>::avg_unpool_add(grad.view(), dx.shape()[0] * dx.shape()[1], p, geometry_,
                                  dx.view());
  }
  /// The input gradient for an input of shape x: each output gradient spread evenly over its
  /// window (0 where no window reaches), written without zeroing it first.
  template <class T, class B>
  tensor<T, B> backward(const tensor<T, B>& grad, const shape_t& x) const {
    const detail::planes p = gradient_planes(grad.shape(), x);
    tensor<T, B> dx(x, uninitialized);
    window_ops<B>::avg_unpool(grad.view(), x[0] * x[1], p, geometry_, dx.view());
    return dx;
  }
};

namespace detail {

// A pooling layer: its kernel, and the input shape of the last forward for backward.
template <class T, class B, class Kernel>
class pool2d_base : public stateless_layer<T, B> {
 public:
  size2 kernel() const { return kernel_.kernel(); }
  size2 stride() const { return kernel_.stride(); }
  size2 padding() const { return kernel_.padding(); }
  const std::string& name() const { return kernel_.name(); }

 protected:
  explicit pool2d_base(Kernel kernel) : kernel_(std::move(kernel)) {}

  // The zero input gradient to add into, once forward has run.
  tensor<T, B> begin_backward() const { return tensor<T, B>(backward_input_shape()); }
  // The shape of forward's input, once forward has run.
  const shape_t& backward_input_shape() const {
    if (!forwarded_)
      throw std::logic_error(name() + ": backward called without a forward pass before it");
    return input_shape_;
  }

  Kernel kernel_;
  shape_t input_shape_;
  bool forwarded_ = false;
};

}  // namespace detail

/// Max pooling over windows of {batch, channels, h, w} inputs.
template <class T = float, class B = cpu<>>
class max_pool2d : public detail::pool2d_base<T, B, max_pool2d_kernel> {
  using base = detail::pool2d_base<T, B, max_pool2d_kernel>;

 public:
  using typename layer_base<T, B>::tensor_type;

  /// stride 0 means "equal to the kernel".
  explicit max_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base(max_pool2d_kernel(kernel, stride, padding)) {}

  /// x: {batch, channels, h, w} -> {batch, channels, oh, ow}, the maximum of each window.
  tensor_type forward(const tensor_type& x) {
    tensor_type y = this->kernel_.forward(x, argmax_);
    this->input_shape_ = x.shape();
    this->forwarded_ = true;
    return y;
  }

  /// Sends each output gradient to the position of its window's maximum.
  tensor_type backward(const tensor_type& grad_output) {
    tensor_type dx = this->begin_backward();
    this->kernel_.backward_add(grad_output, argmax_, dx);
    return dx;
  }

  /// A new layer with the same geometry and mode.
  max_pool2d replica() const {
    max_pool2d r(this->kernel(), this->stride(), this->padding());
    r.training_ = this->training_;
    return r;
  }

 private:
  tensor<std::int32_t, B> argmax_;  // per output: the position of its maximum in its plane
};

/// Average pooling over windows of {batch, channels, h, w} inputs (padding counts as zeros).
template <class T = float, class B = cpu<>>
class avg_pool2d : public detail::pool2d_base<T, B, avg_pool2d_kernel> {
  using base = detail::pool2d_base<T, B, avg_pool2d_kernel>;

 public:
  using typename layer_base<T, B>::tensor_type;

  /// stride 0 means "equal to the kernel".
  explicit avg_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base(avg_pool2d_kernel(kernel, stride, padding)) {}

  /// x: {batch, channels, h, w} -> {batch, channels, oh, ow}, the mean of each window.
  tensor_type forward(const tensor_type& x) {
    tensor_type y = this->kernel_.forward(x);
    this->input_shape_ = x.shape();
    this->forwarded_ = true;
    return y;
  }

  /// Spreads each output gradient evenly over its window.
  tensor_type backward(const tensor_type& grad_output) {
    return this->kernel_.backward(grad_output, this->backward_input_shape());
  }

  /// A new layer with the same geometry and mode.
  avg_pool2d replica() const {
    avg_pool2d r(this->kernel(), this->stride(), this->padding());
    r.training_ = this->training_;
    return r;
  }
};

/// @}

}  // namespace meld::nn
