// 2-d max and average pooling over {batch, channels, height, width}, with stride (default: the
// kernel) and padding (at most half the kernel), through the backend's window operations
// (backend/window.hpp).
//
//   max_pool2d   padding never wins (as -inf); the gradient goes to the first maximum of each
//                window (as in PyTorch); NaN propagates.
//   avg_pool2d   pads with 0 and divides by the full kernel size (PyTorch's count_include_pad).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "detail/window.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

namespace detail {

template <class T, class B>
class pool2d_base : public stateless_layer<T, B> {
 public:
  size2 kernel() const { return geometry_.kernel; }
  size2 stride() const { return geometry_.stride; }
  size2 padding() const { return geometry_.padding; }
  const std::string& name() const { return name_; }

 protected:
  pool2d_base(const char* kind, size2 kernel, size2 stride, size2 padding)
      : geometry_{kernel, stride.h == 0 && stride.w == 0 ? kernel : stride, padding} {
    name_ = cat(kind, "(kernel ", geometry_.kernel.h, "x", geometry_.kernel.w, ", stride ",
                geometry_.stride.h, "x", geometry_.stride.w, ", padding ", geometry_.padding.h, "x",
                geometry_.padding.w, ")");
    geometry_.validate(name_);
    if (2 * padding.h > geometry_.kernel.h || 2 * padding.w > geometry_.kernel.w)
      throw std::invalid_argument(cat(name_, ": padding must be at most half the kernel"));
  }

  // Checks x and records its shape; returns the plane geometry.
  planes begin_forward(const shape_t& x) {
    expect_image_batch(name_, x, -1);
    const planes p = geometry(x);
    input_shape_ = x;
    forwarded_ = true;
    return p;
  }
  // Checks the output gradient against the last forward; returns the plane geometry.
  planes begin_backward(const shape_t& g) const {
    if (!forwarded_)
      throw std::logic_error(name_ + ": backward called without a forward pass before it");
    const planes p = geometry(input_shape_);
    expect_shape(name_, "the output gradient", g,
                 {input_shape_[0], input_shape_[1], p.out_h, p.out_w});
    return p;
  }
  planes geometry(const shape_t& x) const {
    return {x[1], x[2], x[3], geometry_.out_h(name_, x[2]), geometry_.out_w(name_, x[3])};
  }

  window2d geometry_;
  std::string name_;
  shape_t input_shape_;
  bool forwarded_ = false;
};

}  // namespace detail

/// Max pooling over windows of {batch, channels, h, w} inputs.
template <class T = float, class B = cpu<>>
class max_pool2d : public detail::pool2d_base<T, B> {
  using base = detail::pool2d_base<T, B>;

 public:
  using typename layer_base<T, B>::tensor_type;

  /// stride 0 means "equal to the kernel".
  explicit max_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base("max_pool2d", kernel, stride, padding) {}

  /// x: {batch, channels, h, w} -> {batch, channels, oh, ow}, the maximum of each window.
  tensor_type forward(const tensor_type& x) {
    const detail::planes p = this->begin_forward(x.shape());
    const shape_t out{x.shape()[0], x.shape()[1], p.out_h, p.out_w};
    tensor_type y(out, uninitialized);
    if (!(argmax_.shape() == out)) argmax_ = tensor<std::int32_t, B>(out, uninitialized);
    window_ops<B>::max_pool(x.view(), out[0] * out[1], p, this->geometry_, y.view(),
                            argmax_.view());
    return y;
  }

  /// Sends each output gradient to the position of its window's maximum.
  tensor_type backward(const tensor_type& grad_output) {
    const detail::planes p = this->begin_backward(grad_output.shape());
    tensor_type dx(this->input_shape_);
    window_ops<B>::max_unpool_add(grad_output.view(), std::as_const(argmax_).view(),
                                  this->input_shape_[0] * this->input_shape_[1], p, this->geometry_,
                                  dx.view());
    return dx;
  }

  /// A new layer with the same geometry and mode.
  max_pool2d replica() const {
    max_pool2d r(this->geometry_.kernel, this->geometry_.stride, this->geometry_.padding);
    r.training_ = this->training_;
    return r;
  }

 private:
  tensor<std::int32_t, B> argmax_;  // per output: the position of its maximum in its plane
};

/// Average pooling over windows of {batch, channels, h, w} inputs (padding counts as zeros).
template <class T = float, class B = cpu<>>
class avg_pool2d : public detail::pool2d_base<T, B> {
  using base = detail::pool2d_base<T, B>;

 public:
  using typename layer_base<T, B>::tensor_type;

  /// stride 0 means "equal to the kernel".
  explicit avg_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base("avg_pool2d", kernel, stride, padding) {}

  /// x: {batch, channels, h, w} -> {batch, channels, oh, ow}, the mean of each window.
  tensor_type forward(const tensor_type& x) {
    const detail::planes p = this->begin_forward(x.shape());
    tensor_type y({x.shape()[0], x.shape()[1], p.out_h, p.out_w}, uninitialized);
    window_ops<B>::avg_pool(x.view(), x.shape()[0] * x.shape()[1], p, this->geometry_, y.view());
    return y;
  }

  /// Spreads each output gradient evenly over its window.
  tensor_type backward(const tensor_type& grad_output) {
    const detail::planes p = this->begin_backward(grad_output.shape());
    tensor_type dx(this->input_shape_);
    window_ops<B>::avg_unpool_add(grad_output.view(), this->input_shape_[0] * this->input_shape_[1],
                                  p, this->geometry_, dx.view());
    return dx;
  }

  /// A new layer with the same geometry and mode.
  avg_pool2d replica() const {
    avg_pool2d r(this->geometry_.kernel, this->geometry_.stride, this->geometry_.padding);
    r.training_ = this->training_;
    return r;
  }
};

/// @}

}  // namespace meld::nn
