// 2-d max and average pooling over {batch, channels, height, width}, with stride (default: the
// kernel) and padding (at most half the kernel). Each window offset is a strided view of the
// input and contributes through one fused meld assignment (see detail/window.hpp).
//
//   max_pool2d   pads with -inf; the gradient goes to the first maximum of each window (as in
//                PyTorch).
//   avg_pool2d   pads with 0 and divides by the full kernel size (PyTorch's count_include_pad).
#pragma once

#include <limits>
#include <string>

#include "detail/window.hpp"
#include "layer.hpp"

namespace meld::nn {

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

  // Checks x and records its shape; returns the output's {height, width}.
  size2 begin_forward(const shape_t& x) {
    expect_image_batch(name_, x, -1);
    input_shape_ = x;
    forwarded_ = true;
    return {geometry_.out_h(name_, x[2]), geometry_.out_w(name_, x[3])};
  }
  // Checks the output gradient against the last forward; returns the output's {height, width}.
  size2 begin_backward(const shape_t& g) const {
    if (!forwarded_)
      throw std::logic_error(name_ + ": backward called without a forward pass before it");
    const size2 o{geometry_.out_h(name_, input_shape_[2]), geometry_.out_w(name_, input_shape_[3])};
    expect_shape(name_, "the output gradient", g, {input_shape_[0], input_shape_[1], o.h, o.w});
    return o;
  }
  shape_t padded_input_shape() const {
    return {input_shape_[0], input_shape_[1], input_shape_[2] + 2 * geometry_.padding.h,
            input_shape_[3] + 2 * geometry_.padding.w};
  }

  window2d geometry_;
  std::string name_;
  shape_t input_shape_;
  bool forwarded_ = false;
};

}  // namespace detail

template <class T = float, class B = cpu<>>
class max_pool2d : public detail::pool2d_base<T, B> {
  using base = detail::pool2d_base<T, B>;

 public:
  using typename layer_base<T, B>::tensor_type;

  // stride 0 means "equal to the kernel".
  explicit max_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base("max_pool2d", kernel, stride, padding) {}

  tensor_type forward(const tensor_type& x) {
    const size2 o = this->begin_forward(x.shape());
    const detail::window2d& g = this->geometry_;
    const auto xp = detail::pad2d(x.view(), g.padding, -std::numeric_limits<T>::infinity());
    tensor_type y(detail::window_view(xp, g, 0, 0, o.h, o.w));
    // Which window offset holds the maximum (the first one on ties), for backward.
    argmax_ = tensor_type(y.shape());
    for (index_t i = 0; i < g.kernel.h; ++i)
      for (index_t j = 0; j < g.kernel.w; ++j) {
        if (i == 0 && j == 0) continue;
        const auto v = detail::window_view(xp, g, i, j, o.h, o.w);
        argmax_ = where(v > y, static_cast<T>(i * g.kernel.w + j), argmax_);
        y = maximum(y, v);
      }
    return y;
  }

  tensor_type backward(const tensor_type& grad_output) {
    const size2 o = this->begin_backward(grad_output.shape());
    const detail::window2d& g = this->geometry_;
    tensor_type dxp(this->padded_input_shape());
    for (index_t i = 0; i < g.kernel.h; ++i)
      for (index_t j = 0; j < g.kernel.w; ++j)
        detail::window_view(dxp.view(), g, i, j, o.h, o.w) +=
            where(argmax_ == static_cast<T>(i * g.kernel.w + j), grad_output, T(0));
    return detail::crop2d(std::move(dxp), g.padding, this->input_shape_);
  }

  max_pool2d replica() const {
    max_pool2d r(this->geometry_.kernel, this->geometry_.stride, this->geometry_.padding);
    r.training_ = this->training_;
    return r;
  }

 private:
  tensor_type argmax_;
};

template <class T = float, class B = cpu<>>
class avg_pool2d : public detail::pool2d_base<T, B> {
  using base = detail::pool2d_base<T, B>;

 public:
  using typename layer_base<T, B>::tensor_type;

  // stride 0 means "equal to the kernel".
  explicit avg_pool2d(size2 kernel, size2 stride = 0, size2 padding = 0)
      : base("avg_pool2d", kernel, stride, padding) {}

  tensor_type forward(const tensor_type& x) {
    const size2 o = this->begin_forward(x.shape());
    const detail::window2d& g = this->geometry_;
    const auto xp = detail::pad2d(x.view(), g.padding, T(0));
    const T scale = T(1) / static_cast<T>(g.kernel.h * g.kernel.w);
    tensor_type y(detail::window_view(xp, g, 0, 0, o.h, o.w));
    for (index_t i = 0; i < g.kernel.h; ++i)
      for (index_t j = 0; j < g.kernel.w; ++j) {
        if (i == 0 && j == 0) continue;
        const auto v = detail::window_view(xp, g, i, j, o.h, o.w);
        if (i + 1 == g.kernel.h && j + 1 == g.kernel.w)
          y = (y + v) * scale;  // the last offset also applies the scale
        else
          y += v;
      }
    if (g.kernel.h * g.kernel.w == 1) y *= scale;
    return y;
  }

  tensor_type backward(const tensor_type& grad_output) {
    const size2 o = this->begin_backward(grad_output.shape());
    const detail::window2d& g = this->geometry_;
    const T scale = T(1) / static_cast<T>(g.kernel.h * g.kernel.w);
    tensor_type dxp(this->padded_input_shape());
    for (index_t i = 0; i < g.kernel.h; ++i)
      for (index_t j = 0; j < g.kernel.w; ++j)
        detail::window_view(dxp.view(), g, i, j, o.h, o.w) += grad_output * scale;
    return detail::crop2d(std::move(dxp), g.padding, this->input_shape_);
  }

  avg_pool2d replica() const {
    avg_pool2d r(this->geometry_.kernel, this->geometry_.stride, this->geometry_.padding);
    r.training_ = this->training_;
    return r;
  }
};

}  // namespace meld::nn
