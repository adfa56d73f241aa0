// conv2d: 2-d convolution (cross-correlation, as in PyTorch) of {batch, in, height, width} with a
// weight {out, in, kh, kw} and a bias {out}, with stride and zero padding.
//
// im2col + one large matrix product: the input windows are laid out as columns (the backend's
// window operations, backend/window.hpp) and the convolution becomes weight {out, in kh kw} x col
// {in kh kw, batch oh ow}, computed by meld::matmul; backward is two more products (dW = g col^T
// and dcol = W^T g) and col2im. The batch is processed in chunks whose columns stay in cache (2^18
// floats, 1 MiB: still in L2 when the product packs them), and backward rebuilds the columns
// instead of keeping them between the passes. The computation is conv2d_kernel, which
// autograd::conv2d shares with the layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "../expr/matmul.hpp"
#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "detail/image_input.hpp"
#include "fused_activation.hpp"
#include "init.hpp"
#include "precision.hpp"
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
  /// What the products read: float, or the operands rounded to bfloat16 with float accumulation
  /// (nn::precision).
  nn::precision precision = nn::precision::float32;
  /// An activation applied to the output as it is written (nn::activation), in place of an
  /// activation layer after this one: one pass over the output less in forward and in backward.
  nn::activation activation = nn::activation::none;
};

/// The computation of a 2-d convolution, shared by nn::conv2d and autograd::conv2d (one home for
/// the im2col chunks, the products and col2im): x {batch, in, h, w} with w {out, in, kh, kw} and
/// an optional bias {out}. Holds the geometry and scratch reused between calls; a copy starts
/// without scratch, so that copies (data-parallel replicas) never share it.
template <class T, class B>
class conv2d_kernel {
 public:
  using tensor_type = tensor<T, B>;            ///< outputs and gradients
  using input_type = tensor_view<const T, B>;  ///< inputs, weights and biases (contiguous)

  /// Columns of at most this many elements are built at a time.
  static constexpr index_t column_budget = index_t(1) << 18;

  /// Kernel, stride and padding, with `name` the layer's in messages. Throws std::invalid_argument
  /// for a kernel or stride below 1 or a negative padding.
  conv2d_kernel(std::string name, size2 kernel, size2 stride, size2 padding,
                nn::precision precision = nn::precision::float32,
                nn::activation activation = nn::activation::none)
      : name_(std::move(name)),
        geometry_{kernel, stride, padding},
        precision_(precision),
        activation_(activation) {
    geometry_.validate(name_);
  }
  /// The geometry, precision, activation and name; no scratch.
  conv2d_kernel(const conv2d_kernel& other)
      : name_(other.name_),
        geometry_(other.geometry_),
        precision_(other.precision_),
        activation_(other.activation_) {}
  /// The geometry, precision, activation and name; no scratch.
  conv2d_kernel& operator=(const conv2d_kernel& other) {
    name_ = other.name_;
    geometry_ = other.geometry_;
    precision_ = other.precision_;
    activation_ = other.activation_;
    return *this;
  }
  conv2d_kernel(conv2d_kernel&&) noexcept = default;             ///< moves
  conv2d_kernel& operator=(conv2d_kernel&&) noexcept = default;  ///< moves

  /// x {batch, in, h, w} -> {batch, out, oh, ow}, adding bias {out} unless it is null, then
  /// applying the activation. Throws shape_error for shapes that do not fit.
  tensor_type forward(const input_type& x, const input_type& w, const input_type* bias) {
    check_weight(w, bias);
    detail::expect_image_batch(name_, x.shape(), w.shape()[1]);
    const detail::planes p = planes_of(x.shape());
    const index_t n = x.shape()[0], out = w.shape()[0], k = w.size() / out;
    const index_t l = p.out_h * p.out_w, chunk = chunk_size(n, k * l);
    tensor_type y({n, out, p.out_h, p.out_w}, uninitialized);
    const auto w2 = w.reshape({out, k});
    if (bf16()) w_bf16_ = meld::cast<bfloat16>(w2);
    for (index_t n0 = 0; n0 < n; n0 += chunk) {
      const index_t m = std::min(chunk, n - n0);
      fill_columns(x.slice(range(n0, n0 + m)), m, p, k);
      if (bf16())  // product_ = W col: {out, m oh ow}
        multiply(w_bf16_.view(), col_bf16_.view());
      else
        multiply(w2, col_);
      // To {m, out, oh, ow}, adding the bias and applying the activation on the way.
      auto product = product_.reshape({out, m, l}).permute({1, 0, 2});
      auto y_chunk = y.slice(range(n0, n0 + m)).reshape({m, out, l});
      const bool relu = activation_ == nn::activation::relu;
      if (bias && relu)
        y_chunk = meld::relu(product + bias->reshape({1, out, 1}));
      else if (bias)
        y_chunk = product + bias->reshape({1, out, 1});
      else if (relu)
        y_chunk = meld::relu(product);
      else
        y_chunk = product;
    }
    return y;
  }

  /// Given forward's x and w and the output gradient g, adds the input's gradient into dx (of x's
  /// shape), the weight's into dw and the bias's into db, skipping the null ones; with an
  /// activation, y is forward's output, where its derivative is taken. Throws shape_error for a
  /// gradient of another shape than forward's output, std::logic_error for an activation without y.
  void backward(const input_type& x, const input_type& w, const tensor_type& g, tensor_type* dx,
                tensor_type* dw, tensor_type* db, const input_type* y = nullptr) {
    const detail::planes p = planes_of(x.shape());
    const index_t n = x.shape()[0], out = w.shape()[0], k = w.size() / out;
    const index_t l = p.out_h * p.out_w, chunk = chunk_size(n, k * l);
    detail::expect_shape(name_, "the output gradient", g.shape(), {n, out, p.out_h, p.out_w});
    const bool relu = activation_ == nn::activation::relu;
    if (relu && !y)
      throw std::logic_error(name_ + ": backward through its activation without forward's output");
    if (relu) detail::expect_shape(name_, "the saved output", y->shape(), g.shape());
    const auto w2 = w.reshape({out, k});
    if (bf16() && dx) w_bf16_ = meld::cast<bfloat16>(w2);
    for (index_t n0 = 0; n0 < n; n0 += chunk) {
      const index_t m = std::min(chunk, n - n0);
      // The output gradient as {out, m oh ow}, the layout of the forward product (through the
      // activation: where the output is positive).
      auto g_chunk = g.slice(range(n0, n0 + m)).reshape({m, out, l}).permute({1, 0, 2});
      if (relu)
        grad_chunk_ =
            where(y->slice(range(n0, n0 + m)).reshape({m, out, l}).permute({1, 0, 2}) > T(0),
                  g_chunk, T(0));
      else
        grad_chunk_ = g_chunk;
      const auto g2 = grad_chunk_.reshape({out, m * l});
      if (dw) {  // dW += g col^T, the columns rebuilt rather than kept since forward
        fill_columns(x.slice(range(n0, n0 + m)), m, p, k);
        if (bf16())
          gemm(T(1), meld::cast<bfloat16>(g2), col_bf16_.transpose(), T(1), dw->reshape({out, k}));
        else
          gemm(T(1), g2, col_.transpose(), T(1), dw->reshape({out, k}));
      }
      if (db) *db += meld::sum(g2, 1);
      if (dx) {
        if (bf16())  // dcol = W^T g: {in kh kw, m oh ow}
          multiply(w_bf16_.view().transpose(), g2);
        else
          multiply(w2.transpose(), g2);
        window_ops<B>::col2im_add(std::as_const(product_).view(), m, p, geometry_,
                                  dx->slice(range(n0, n0 + m)));
      }
    }
  }

  /// Kernel rows and columns.
  size2 kernel() const { return geometry_.kernel; }
  /// Stride over rows and columns.
  size2 stride() const { return geometry_.stride; }
  /// Padding of rows and columns.
  size2 padding() const { return geometry_.padding; }
  /// The name in messages.
  const std::string& name() const { return name_; }
  /// What the products read.
  nn::precision precision() const { return precision_; }
  /// What is applied to the output.
  nn::activation activation() const { return activation_; }

 private:
  bool bf16() const { return precision_ == nn::precision::bfloat16; }

  // product_ = a b: of T, or in bfloat16 precision of the operands rounded to bfloat16 (bfloat16
  // views, the rounded weight and columns, as they are), accumulating in float.
  template <class A, class M>
  void multiply(const A& a, const M& b) {
    if constexpr (std::is_same_v<value_t<A>, T> && std::is_same_v<value_t<M>, T>) {
      if (!bf16()) {
        product_ = matmul(a, b);
        return;
      }
    }
    const shape_t shape{a.shape()[0], b.shape()[1]};
    if (!(product_.shape() == shape)) product_ = tensor_type(shape, uninitialized);
    gemm(T(1), rounded(a), rounded(b), T(0), product_);
  }
  template <class X>
  static auto rounded(const X& x) {
    if constexpr (std::is_same_v<value_t<X>, bfloat16>)
      return x;
    else
      return meld::cast<bfloat16>(x);
  }

  // The columns of x's m samples {k, m oh ow} into the scratch the products read: in bfloat16
  // precision rounded as im2col writes them (the same rounding the product would apply, with half
  // the bytes written and read again).
  void fill_columns(const input_type& x, index_t m, const detail::planes& p, index_t k) {
    const shape_t shape{k, m * p.out_h * p.out_w};
    if (bf16()) {
      if (!(col_bf16_.shape() == shape)) col_bf16_ = tensor<bfloat16, B>(shape, uninitialized);
      window_ops<B>::im2col(x, m, p, geometry_, col_bf16_.view());
    } else {
      if (!(col_.shape() == shape)) col_ = tensor_type(shape, uninitialized);
      window_ops<B>::im2col(x, m, p, geometry_, col_.view());
    }
  }

  void check_weight(const input_type& w, const input_type* bias) const {
    if (w.rank() != 4 || w.shape()[0] < 1 || w.shape()[2] != geometry_.kernel.h ||
        w.shape()[3] != geometry_.kernel.w)
      throw shape_error(detail::cat(name_, ": a weight of shape ", w.shape(), " for a ",
                                    geometry_.kernel.h, "x", geometry_.kernel.w,
                                    " kernel, expected {out, in, kh, kw}"));
    if (bias && !(bias->shape() == shape_t{w.shape()[0]}))
      throw shape_error(detail::cat(name_, ": a bias of shape ", bias->shape(), " for ",
                                    w.shape()[0], " output channels"));
  }
  detail::planes planes_of(const shape_t& s) const {
    return {s[1], s[2], s[3], geometry_.out_h(name_, s[2]), geometry_.out_w(name_, s[3])};
  }
  static index_t chunk_size(index_t batch, index_t per_sample) {
    return std::clamp<index_t>(column_budget / std::max<index_t>(per_sample, 1), 1,
                               std::max<index_t>(batch, 1));
  }

  std::string name_;
  detail::window2d geometry_;
  nn::precision precision_;
  nn::activation activation_;
  // Scratch reused between calls (never part of a copy, a replica or a checkpoint).
  tensor_type col_, product_, grad_chunk_;
  // In bfloat16 precision: the columns, and the weight {out, k} rounded once per call (the column
  // chunks' packings rounded it again each, an element at a time).
  tensor<bfloat16, B> col_bf16_, w_bf16_;
};

/// A 2-D convolution (cross-correlation, as in PyTorch) of {batch, in_channels, h, w} inputs with
/// out_channels kernels of size kernel, computed as im2col plus a matrix product (conv2d_kernel).
template <class T = float, class B = cpu<>>
class conv2d : public weighted_layer<T, B> {
  using base = weighted_layer<T, B>;

 public:
  using typename base::tensor_type;

  /// Columns of at most this many elements are built at a time.
  static constexpr index_t column_budget = conv2d_kernel<T, B>::column_budget;

  /// weight {out_channels, in_channels, kh, kw}, bias {out_channels}. Throws std::invalid_argument
  /// for channel counts below 1 and an invalid kernel, stride or padding.
  conv2d(index_t in_channels, index_t out_channels, size2 kernel, conv2d_options options = {})
      : base(detail::cat("conv2d(", in_channels, " -> ", out_channels, ", kernel ", kernel.h, "x",
                         kernel.w, ", stride ", options.stride.h, "x", options.stride.w,
                         ", padding ", options.padding.h, "x", options.padding.w,
                         options.activation == nn::activation::relu ? ", relu" : "", ")"),
             options.bias),
        in_(in_channels),
        out_(out_channels),
        kernel_(this->name_, kernel, options.stride, options.padding, options.precision,
                options.activation) {
    if (in_channels <= 0 || out_channels <= 0)
      throw std::invalid_argument(detail::cat(this->name_, ": channel counts must be positive"));
    this->init_parameters({out_, in_, kernel.h, kernel.w}, out_);
    rng gen(options.seed);
    kaiming_uniform{1 / std::sqrt(3.0)}(this->weight_, gen);
  }

  /// x: {batch, in, h, w} -> {batch, out, oh, ow}.
  tensor_type forward(const tensor_type& x) {
    const tensor_view<const T, B> b = std::as_const(this->bias_).view();
    tensor_type y = kernel_.forward(x.view(), std::as_const(this->weight_).view(),
                                    this->has_bias_ ? &b : nullptr);
    input_.save(x);
    if (kernel_.activation() != nn::activation::none) output_.save(y);
    return y;
  }

  /// The gradient for the last forward's input; accumulates the parameters' gradients.
  tensor_type backward(const tensor_type& grad_output) { return backward(grad_output, true); }

  /// With input_gradient false, only the parameters' gradients are computed and an empty tensor
  /// is returned.
  tensor_type backward(const tensor_type& grad_output, bool input_gradient) {
    const auto& x = input_.get(this->name_);
    tensor_type dx;
    if (input_gradient) dx = tensor_type(x.shape());
    const bool activated = kernel_.activation() != nn::activation::none;
    kernel_.backward(x, std::as_const(this->weight_).view(), grad_output,
                     input_gradient ? &dx : nullptr, &this->weight_grad_,
                     this->has_bias_ ? &this->bias_grad_ : nullptr,
                     activated ? &output_.get(this->name_) : nullptr);
    return dx;
  }

  /// A deep copy: parameters, gradients and mode (never what forward saved).
  conv2d replica() const {
    conv2d r(in_, out_, kernel_.kernel(),
             {.padding = kernel_.padding(),
              .stride = kernel_.stride(),
              .bias = this->has_bias_,
              .precision = kernel_.precision(),
              .activation = kernel_.activation()});
    this->copy_parameters_to(r);
    return r;
  }

  /// Input channels.
  index_t in_channels() const { return in_; }
  /// Output channels.
  index_t out_channels() const { return out_; }
  /// Kernel rows and columns.
  size2 kernel() const { return kernel_.kernel(); }
  /// Stride over rows and columns.
  size2 stride() const { return kernel_.stride(); }
  /// Padding of rows and columns.
  size2 padding() const { return kernel_.padding(); }
  /// What the products read.
  nn::precision precision() const { return kernel_.precision(); }
  /// What is applied to the output.
  nn::activation activation() const { return kernel_.activation(); }

 private:
  index_t in_, out_;
  conv2d_kernel<T, B> kernel_;
  detail::saved_tensor<T, B> input_;
  detail::saved_tensor<T, B> output_;  // with an activation: where its derivative is taken
};

/// @}

}  // namespace meld::nn
