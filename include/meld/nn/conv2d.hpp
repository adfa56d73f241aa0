// conv2d: 2-d convolution (cross-correlation, as in PyTorch) of {batch, in, height, width} with a
// weight {out, in, kh, kw} and a bias {out}, with stride and zero padding.
//
// im2col + one large matrix product: the input windows are laid out as columns (the backend's
// window operations, backend/window.hpp) and the convolution becomes weight {out, in kh kw} x col
// {in kh kw, batch oh ow}, computed by meld::matmul; backward is two more products (dW = g col^T
// and dcol = W^T g) and col2im. The batch is processed in chunks whose columns stay in cache (2^18
// floats, 1 MiB: still in L2 when the product packs them), and backward rebuilds the columns
// instead of keeping them between the passes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "../expr/matmul.hpp"
#include "../expr/reduce.hpp"
#include "detail/window.hpp"
#include "init.hpp"
#include "weighted_layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Settings of conv2d.
struct conv2d_options {
  /// (padding before stride: g++ 12.2 at -O2 with AVX-512 (-march=native on a Xeon) miscompiles
  /// a stack constant of the form {a, a, 0, 0}, which stride 1 then padding 0 would be; see
  /// tests/nn/test_conv_pool.cpp.)
  size2 padding = 0;
  /// Steps of the kernel over the rows and columns.
  size2 stride = 1;
  /// Whether the layer adds a bias per output channel.
  bool bias = true;
  /// The weight is drawn with PyTorch's default, U(+-1 / sqrt(in kh kw)), from this seed; the
  /// bias starts at 0. To initialize a whole model from one seed, use nn::initialize.
  std::uint64_t seed = 0;
};

/// A 2-D convolution (cross-correlation, as in PyTorch) of {batch, in_channels, h, w} inputs with
/// out_channels kernels of size kernel, computed as im2col plus a matrix product.
template <class T = float, class B = cpu<>>
class conv2d : public weighted_layer<T, B> {
  using base = weighted_layer<T, B>;

 public:
  using typename base::tensor_type;

  /// Columns of at most this many elements are built at a time.
  static constexpr index_t column_budget = index_t(1) << 18;

  /// weight {out_channels, in_channels, kh, kw}, bias {out_channels}. Throws std::invalid_argument
  /// for channel counts below 1 and an invalid kernel, stride or padding.
  conv2d(index_t in_channels, index_t out_channels, size2 kernel, conv2d_options options = {})
      : base(detail::cat("conv2d(", in_channels, " -> ", out_channels, ", kernel ", kernel.h, "x",
                         kernel.w, ", stride ", options.stride.h, "x", options.stride.w,
                         ", padding ", options.padding.h, "x", options.padding.w, ")"),
             options.bias),
        in_(in_channels),
        out_(out_channels),
        geometry_{kernel, options.stride, options.padding} {
    if (in_channels <= 0 || out_channels <= 0)
      throw std::invalid_argument(detail::cat(this->name_, ": channel counts must be positive"));
    geometry_.validate(this->name_);
    this->init_parameters({out_, in_, kernel.h, kernel.w}, out_);
    rng gen(options.seed);
    kaiming_uniform{1 / std::sqrt(3.0)}(this->weight_, gen);
  }

  /// x: {batch, in, h, w} -> {batch, out, oh, ow}.
  tensor_type forward(const tensor_type& x) {
    detail::expect_image_batch(this->name_, x.shape(), in_);
    const detail::planes p = geometry(x.shape());
    const index_t n = x.shape()[0], k = patch_size(), l = p.out_h * p.out_w;
    const index_t chunk = chunk_size(n, k * l);
    input_.save(x);
    tensor_type y({n, out_, p.out_h, p.out_w}, uninitialized);
    const auto w2 = this->weight_.reshape({out_, k});
    for (index_t n0 = 0; n0 < n; n0 += chunk) {
      const index_t m = std::min(chunk, n - n0);
      window_ops<B>::im2col(samples(x, n0, m), m, p, geometry_, columns(k, m * l));
      product_ = matmul(w2, col_);  // {out, m oh ow}
      // To {m, out, oh, ow}, adding the bias on the way.
      auto product = product_.reshape({out_, m, l}).permute({1, 0, 2});
      auto y_chunk = y.slice(range(n0, n0 + m)).reshape({m, out_, l});
      if (this->has_bias_)
        y_chunk = product + this->bias_.reshape({1, out_, 1});
      else
        y_chunk = product;
    }
    return y;
  }

  /// The gradient for the last forward's input; accumulates the parameters' gradients.
  tensor_type backward(const tensor_type& grad_output) { return backward(grad_output, true); }

  /// With input_gradient false, only the parameters' gradients are computed and an empty tensor
  /// is returned.
  tensor_type backward(const tensor_type& grad_output, bool input_gradient) {
    const auto& x = input_.get(this->name_);
    const detail::planes p = geometry(x.shape());
    const index_t n = x.shape()[0], k = patch_size(), l = p.out_h * p.out_w;
    const index_t chunk = chunk_size(n, k * l);
    detail::expect_shape(this->name_, "the output gradient", grad_output.shape(),
                         {n, out_, p.out_h, p.out_w});
    tensor_type dx;
    if (input_gradient) dx = tensor_type(x.shape());
    const auto w2 = this->weight_.reshape({out_, k});
    auto dw2 = this->weight_grad_.reshape({out_, k});
    for (index_t n0 = 0; n0 < n; n0 += chunk) {
      const index_t m = std::min(chunk, n - n0);
      window_ops<B>::im2col(samples(x, n0, m), m, p, geometry_, columns(k, m * l));
      // The output gradient as {out, m oh ow}, the layout of the forward product.
      grad_chunk_ = grad_output.slice(range(n0, n0 + m)).reshape({m, out_, l}).permute({1, 0, 2});
      const auto g2 = grad_chunk_.reshape({out_, m * l});
      gemm(T(1), g2, col_.transpose(), T(1), dw2);  // dW += g col^T
      if (this->has_bias_) this->bias_grad_ += meld::sum(g2, 1);
      if (input_gradient) {
        product_ = matmul(w2.transpose(), g2);  // dcol = W^T g: {in kh kw, m oh ow}
        window_ops<B>::col2im_add(std::as_const(product_).view(), m, p, geometry_,
                                  dx.slice(range(n0, n0 + m)));
      }
    }
    return dx;
  }

  /// A deep copy: parameters, gradients and mode (never what forward saved).
  conv2d replica() const {
    conv2d r(in_, out_, geometry_.kernel,
             {.padding = geometry_.padding, .stride = geometry_.stride, .bias = this->has_bias_});
    this->copy_parameters_to(r);
    return r;
  }

  /// Input channels.
  index_t in_channels() const { return in_; }
  /// Output channels.
  index_t out_channels() const { return out_; }
  /// Kernel rows and columns.
  size2 kernel() const { return geometry_.kernel; }
  /// Stride over rows and columns.
  size2 stride() const { return geometry_.stride; }
  /// Padding of rows and columns.
  size2 padding() const { return geometry_.padding; }

 private:
  index_t patch_size() const { return in_ * geometry_.kernel.h * geometry_.kernel.w; }
  detail::planes geometry(const shape_t& s) const {
    return {in_, s[2], s[3], geometry_.out_h(this->name_, s[2]),
            geometry_.out_w(this->name_, s[3])};
  }
  // The column scratch as a {rows, cols} matrix (reallocated only when the shape changes).
  tensor_view<T, B> columns(index_t rows, index_t cols) {
    if (!(col_.shape() == shape_t{rows, cols})) col_ = tensor_type({rows, cols}, uninitialized);
    return col_.view();
  }
  // Samples [n0, n0 + m) of x (contiguous).
  template <class X>
  static tensor_view<const T, B> samples(const X& x, index_t n0, index_t m) {
    return x.slice(range(n0, n0 + m));
  }
  static index_t chunk_size(index_t batch, index_t per_sample) {
    return std::clamp<index_t>(column_budget / std::max<index_t>(per_sample, 1), 1,
                               std::max<index_t>(batch, 1));
  }

  index_t in_, out_;
  detail::window2d geometry_;
  detail::saved_tensor<T, B> input_;
  // Scratch reused between calls (never part of a replica or a checkpoint).
  tensor_type col_, product_, grad_chunk_;
};

/// @}

}  // namespace meld::nn
