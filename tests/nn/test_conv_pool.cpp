// Convolution and pooling forward passes against naive loops (stride, padding, rectangular
// kernels, batches spanning several column chunks), and their errors. On every backend (the
// window operations are backend operations): operands made on the host, references computed from
// those host copies, results back through test::host.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "../backends.hpp"
#include "nn_support.hpp"

namespace nn = meld::nn;
using meld::index_t;
using meld::shape_t;
using meld::tensor;
using nn_test::require_close;

namespace {

tensor<double> naive_conv(const tensor<double>& x, const tensor<double>& w, const tensor<double>& b,
                          nn::size2 stride, nn::size2 pad) {
  const index_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const index_t oc = w.shape()[0], kh = w.shape()[2], kw = w.shape()[3];
  const index_t oh = (h + 2 * pad.h - kh) / stride.h + 1, ow = (wd + 2 * pad.w - kw) / stride.w + 1;
  tensor<double> y({n, oc, oh, ow});
  for (index_t i = 0; i < n; ++i)
    for (index_t o = 0; o < oc; ++o)
      for (index_t r = 0; r < oh; ++r)
        for (index_t q = 0; q < ow; ++q) {
          double s = b.size() ? b(o) : 0.0;
          for (index_t ch = 0; ch < c; ++ch)
            for (index_t a = 0; a < kh; ++a)
              for (index_t e = 0; e < kw; ++e) {
                const index_t yy = r * stride.h + a - pad.h, xx = q * stride.w + e - pad.w;
                if (yy >= 0 && yy < h && xx >= 0 && xx < wd) s += x(i, ch, yy, xx) * w(o, ch, a, e);
              }
          y(i, o, r, q) = s;
        }
  return y;
}

tensor<double> naive_pool(const tensor<double>& x, nn::size2 k, nn::size2 stride, nn::size2 pad,
                          bool max) {
  const index_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const index_t oh = (h + 2 * pad.h - k.h) / stride.h + 1,
                ow = (wd + 2 * pad.w - k.w) / stride.w + 1;
  tensor<double> y({n, c, oh, ow});
  for (index_t i = 0; i < n; ++i)
    for (index_t ch = 0; ch < c; ++ch)
      for (index_t r = 0; r < oh; ++r)
        for (index_t q = 0; q < ow; ++q) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          for (index_t a = 0; a < k.h; ++a)
            for (index_t e = 0; e < k.w; ++e) {
              const index_t yy = r * stride.h + a - pad.h, xx = q * stride.w + e - pad.w;
              const bool inside = yy >= 0 && yy < h && xx >= 0 && xx < wd;
              const double v = inside ? x(i, ch, yy, xx) : 0.0;
              if (inside) best = std::max(best, v);
              sum += v;
            }
          y(i, ch, r, q) = max ? best : sum / double(k.h * k.w);
        }
  return y;
}

// im2col of x {batch, channels, h, w} into float and bfloat16 columns on B, against a naive
// gather: the bfloat16 columns bit for bit the float columns rounded.
template <class B>
void check_im2col(index_t batch, index_t channels, index_t h, index_t w,
                  const meld::detail::window2d& g) {
  const meld::detail::planes p{channels, h, w, g.out_h("im2col", h), g.out_w("im2col", w)};
  const auto hx = test::random_tensor<float>({batch, channels, h, w}, 11);
  const index_t kk = g.kernel.h * g.kernel.w, l = p.out_h * p.out_w;
  const index_t rows = channels * kk, cols = batch * l;
  tensor<float, B> col({rows, cols});
  tensor<meld::bfloat16, B> col16({rows, cols});
  const tensor<float, B> x = test::on<B>(hx);
  meld::window_ops<B>::im2col(x.view(), batch, p, g, col.view());
  meld::window_ops<B>::im2col(x.view(), batch, p, g, col16.view());
  const tensor<float> got = test::host(col);
  const tensor<meld::bfloat16> got16 = test::host(col16);
  index_t wrong = 0, wrong16 = 0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t j = 0; j < cols; ++j) {
      const index_t c = r / kk, kh = r % kk / g.kernel.w, kw = r % g.kernel.w;
      const index_t n = j / l, oh = j / p.out_w % p.out_h, ow = j % p.out_w;
      const index_t ih = oh * g.stride.h + kh - g.padding.h,
                    iw = ow * g.stride.w + kw - g.padding.w;
      const float want = ih >= 0 && ih < h && iw >= 0 && iw < w ? hx(n, c, ih, iw) : 0.f;
      wrong += got(r, j) != want;
      wrong16 += got16(r, j).bits != meld::bfloat16(want).bits;
    }
  CHECK(wrong == 0);
  CHECK(wrong16 == 0);
}

}  // namespace

BACKEND_TEST_CASE("conv2d matches a naive convolution", "[nn]") {
  struct config {
    index_t c, oc, h, w;
    nn::size2 kernel;
    nn::conv2d_options options;
  };
  for (const config& cfg :
       {config{1, 2, 6, 6, 3, {}}, config{3, 4, 7, 5, 3, {.padding = 1, .stride = 2}},
        config{2, 3, 8, 9, {2, 4}, {.padding = {1, 2}, .stride = {3, 1}}},
        config{4, 2, 5, 5, 5, {.padding = 2, .bias = false}}, config{2, 5, 4, 4, 1, {}}}) {
    INFO("channels " << cfg.c << " -> " << cfg.oc << ", input " << cfg.h << "x" << cfg.w);
    nn::conv2d<double, B> conv(cfg.c, cfg.oc, cfg.kernel, cfg.options);
    if (cfg.options.bias) conv.bias() = test::on<B>(test::random_tensor<double>({cfg.oc}, 1));
    const auto hx = test::random_tensor<double>({3, cfg.c, cfg.h, cfg.w}, 2);
    const tensor<double, B> y = conv.forward(test::on<B>(hx));
    const tensor<double> want = naive_conv(hx, test::host(conv.weight()), test::host(conv.bias()),
                                           cfg.options.stride, cfg.options.padding);
    require_close(test::host(y), want, 1e-12);
  }
}

BACKEND_TEST_CASE("conv2d in float over a batch spanning several column chunks", "[nn]") {
  // 8 x 3 x 3 x 24 x 24 = 41,472 column elements per sample: 6 samples per chunk, 60 in 10 chunks.
  nn::conv2d<float, B> conv(8, 6, 3, {.padding = 1, .seed = 3});
  const auto hb = test::random_tensor<float>({6}, 4);
  conv.bias() = test::on<B>(hb);
  const auto hx = test::random_tensor<float>({60, 8, 24, 24}, 5);
  const tensor<float, B> y = conv.forward(test::on<B>(hx));
  const tensor<double> want =
      naive_conv(tensor<double>(meld::cast<double>(hx)),
                 tensor<double>(meld::cast<double>(test::host(conv.weight()))),
                 tensor<double>(meld::cast<double>(hb)), 1, 1);
  require_close(test::host(y), want, 1e-4);
}

BACKEND_TEST_CASE("conv2d in float: window rows shorter than, as long as and longer than a vector",
                  "[nn]") {
  // Output rows of 1, 7, 8, 9 (LeNet's), 15, 16, 17 and 26 floats, whole and in part inside the
  // image (padding): im2col copies rows of 4-byte elements as whole vectors and a masked rest, rows
  // of 8 to 15 one after another as whole vectors whose tails the next row overwrites.
  for (const index_t out_w : {1, 7, 8, 9, 15, 16, 17, 26})
    for (const index_t pad : {0, 2}) {
      INFO("output width " << out_w << ", padding " << pad);
      nn::conv2d<float, B> conv(3, 4, 5, {.padding = pad, .seed = 7});
      const auto hb = test::random_tensor<float>({4}, 8);
      conv.bias() = test::on<B>(hb);
      const auto hx = test::random_tensor<float>({5, 3, 7, out_w + 4 - 2 * pad}, 9);
      const tensor<float, B> y = conv.forward(test::on<B>(hx));
      const tensor<double> want =
          naive_conv(tensor<double>(meld::cast<double>(hx)),
                     tensor<double>(meld::cast<double>(test::host(conv.weight()))),
                     tensor<double>(meld::cast<double>(hb)), 1, pad);
      require_close(test::host(y), want, 1e-4);
    }
}

BACKEND_TEST_CASE("im2col gathers the windows, rounded to bfloat16 for bfloat16 columns", "[nn]") {
  // Output rows of 1 to 26 elements, stride 1 and 2, with and without padding: each of im2col's row
  // copies (whole vectors, masked rests, rows overwriting the tails of the rows before them) and,
  // at stride 1 without padding, its permutes (segments shorter than a vector, a last vector
  // overlapping the one before).
  for (const index_t out_w : {1, 7, 8, 9, 15, 16, 17, 26})
    for (const index_t stride : {1, 2})
      for (const index_t pad : {0, 2}) {
        INFO("output width " << out_w << ", stride " << stride << ", padding " << pad);
        const index_t k = 3, w = (out_w - 1) * stride + k - 2 * pad;
        if (w < 1) continue;
        const meld::detail::window2d g{k, stride, pad};
        REQUIRE(g.out_w("im2col", w) == out_w);
        check_im2col<B>(3, 2, 5, w, g);
      }
}

BACKEND_TEST_CASE("im2col's permutes: stride 1 without padding, planes of every size", "[nn]") {
  // The planes the permutes take (host_im2col_permute.hpp) and those they leave to the row copies:
  // LeNet's two convolutions; rectangular kernels; segments of many vectors; several samples per
  // buffer, the last block partial; outputs spanning more than two vectors of the plane (one
  // output a row, wide rows), and planes beyond the buffer.
  struct geometry {
    index_t batch, channels, h, w;
    meld::size2 kernel;
  };
  for (const geometry& c :
       {geometry{7, 3, 28, 28, 3}, geometry{7, 4, 13, 13, 5}, geometry{3, 2, 9, 12, {2, 5}},
        geometry{9, 2, 64, 16, 3}, geometry{5, 1, 128, 16, 3}, geometry{3, 2, 20, 40, {3, 38}},
        geometry{2, 2, 7, 40, {3, 26}}, geometry{2, 1, 70, 70, 60}}) {
    INFO("batch " << c.batch << ", " << c.channels << " channels of " << c.h << " x " << c.w
                  << ", kernel " << c.kernel.h << " x " << c.kernel.w);
    check_im2col<B>(c.batch, c.channels, c.h, c.w, {c.kernel, 1, 0});
  }
}

BACKEND_TEST_CASE("col2im adds the columns back into the input gradient", "[nn]") {
  // Against a naive scatter adding in the same order (kernel row, then column): the same bits.
  // Rows of 1 to 17 elements, stride 1 and 2, with and without padding, 3 x 3 and 2 x 5 kernels:
  // rows of at most 16 floats with stride 1 are added a row at a time in registers.
  for (const index_t w : {1, 5, 9, 13, 16, 17})
    for (const index_t stride : {1, 2})
      for (const index_t pad : {0, 2})
        for (const nn::size2 k : {nn::size2(3), nn::size2(2, 5)}) {
          INFO("input width " << w << ", stride " << stride << ", padding " << pad << ", kernel "
                              << k.h << "x" << k.w);
          const index_t batch = 2, channels = 3, h = 6;
          if (w + 2 * pad < k.w) continue;
          const meld::detail::window2d g{k, stride, pad};
          const meld::detail::planes p{channels, h, w, g.out_h("col2im", h), g.out_w("col2im", w)};
          const index_t rows = channels * k.h * k.w, l = p.out_h * p.out_w;
          const auto hcol = test::random_tensor<float>({rows, batch * l}, 12);
          const auto hdx = test::random_tensor<float>({batch, channels, h, w}, 13);
          tensor<float, B> dx = test::on<B>(hdx);
          const tensor<float, B> col = test::on<B>(hcol);
          meld::window_ops<B>::col2im_add(col.view(), batch, p, g, dx.view());
          tensor<float> want(hdx);
          for (index_t n = 0; n < batch; ++n)
            for (index_t c = 0; c < channels; ++c)
              for (index_t kh = 0; kh < k.h; ++kh)
                for (index_t kw = 0; kw < k.w; ++kw)
                  for (index_t oh = 0; oh < p.out_h; ++oh)
                    for (index_t ow = 0; ow < p.out_w; ++ow) {
                      const index_t ih = oh * stride + kh - pad, iw = ow * stride + kw - pad;
                      if (ih >= 0 && ih < h && iw >= 0 && iw < w)
                        want(n, c, ih, iw) +=
                            hcol((c * k.h + kh) * k.w + kw, n * l + oh * p.out_w + ow);
                    }
          const tensor<float> got = test::host(dx);
          index_t wrong = 0;
          for (index_t i = 0; i < got.size(); ++i) wrong += got.data()[i] != want.data()[i];
          CHECK(wrong == 0);
        }
}

BACKEND_TEST_CASE("conv2d in bfloat16 precision: products of the rounded operands",
                  "[nn][bfloat16]") {
  const auto rounded = nn_test::rounded_to_bfloat16;
  // 3 x 3 x 3 x 20 x 20 = 10,800 column elements per sample: 24 per chunk, 50 in 3 chunks.
  nn::conv2d<float, B> conv(3, 4, 3,
                            {.padding = 1, .seed = 3, .precision = nn::precision::bfloat16});
  REQUIRE(conv.replica().precision() == nn::precision::bfloat16);
  const auto hb = test::random_tensor<float>({4}, 4);
  conv.bias() = test::on<B>(hb);
  const auto hx = test::random_tensor<float>({50, 3, 20, 20}, 5);
  // The reference: a float layer with the rounded weights, given the rounded input and gradient.
  nn::conv2d<float, B> ref(3, 4, 3, {.padding = 1});
  ref.weight() = test::on<B>(rounded(test::host(conv.weight())));
  ref.bias() = test::on<B>(hb);
  require_close(test::host(conv.forward(test::on<B>(hx))),
                test::host(ref.forward(test::on<B>(rounded(hx)))), 1e-5);
  const auto hg = test::random_tensor<float>({50, 4, 20, 20}, 6);
  conv.zero_grad();
  ref.zero_grad();
  require_close(test::host(conv.backward(test::on<B>(hg))),
                test::host(ref.backward(test::on<B>(rounded(hg)))), 1e-5);
  // Each weight's gradient sums 20,000 products, which the bfloat16 kernel (vdpbf16ps, where the
  // CPU has it) adds in another order than float's: float rounding apart, the same (an operand
  // not rounded would differ by ~2^-9 relative).
  require_close(test::host(conv.weight_grad()), test::host(ref.weight_grad()), 1e-4);
  // The bias gradient from the float gradient: sums over batch, rows and columns.
  tensor<float> db({4});
  for (index_t c = 0; c < 4; ++c) {
    double s = 0;
    for (index_t n = 0; n < 50; ++n)
      for (index_t i = 0; i < 400; ++i) s += hg.data()[(n * 4 + c) * 400 + i];
    db(c) = float(s);
  }
  require_close(test::host(conv.bias_grad()), db, 1e-4);
}

BACKEND_TEST_CASE("conv2d with a fused relu gives the separate relu layer's numbers", "[nn]") {
  // 3 x 3 x 3 x 20 x 20 = 10,800 column elements per sample: 24 per chunk, 50 in 3 chunks.
  for (const bool bias : {true, false}) {
    INFO("bias " << bias);
    const nn::conv2d_options plain{.padding = 1, .bias = bias, .seed = 3};
    nn::conv2d_options fused_options = plain;
    fused_options.activation = nn::activation::relu;
    nn::conv2d<float, B> fused(3, 4, 3, fused_options), conv(3, 4, 3, plain);
    nn::relu<float, B> relu;
    REQUIRE(fused.replica().activation() == nn::activation::relu);
    REQUIRE(fused.name().find("relu") != std::string::npos);
    const auto hb = test::random_tensor<float>({4}, 4);
    if (bias) fused.bias() = conv.bias() = test::on<B>(hb);
    const auto hx = test::random_tensor<float>({50, 3, 20, 20}, 5);
    const tensor<float> y = test::host(fused.forward(test::on<B>(hx)));
    const tensor<float> y_separate = test::host(relu.forward(conv.forward(test::on<B>(hx))));
    REQUIRE(std::memcmp(y.data(), y_separate.data(), sizeof(float) * std::size_t(y.size())) == 0);
    // Against a naive convolution: positive parts only, and some of each.
    const tensor<double> want =
        naive_conv(tensor<double>(meld::cast<double>(hx)),
                   tensor<double>(meld::cast<double>(test::host(conv.weight()))),
                   bias ? tensor<double>(meld::cast<double>(hb)) : tensor<double>({0}), 1, 1);
    index_t zeros = 0;
    for (index_t i = 0; i < want.size(); ++i) {
      const double w = std::max(want.data()[i], 0.0);
      REQUIRE(double(y.data()[i]) == Approx(w).margin(1e-4));
      zeros += y.data()[i] == 0.f;
    }
    REQUIRE(zeros > want.size() / 4);
    REQUIRE(zeros < 3 * want.size() / 4);
    // Backward: the gradient passes where the output is positive, into every parameter.
    const auto hg = test::random_tensor<float>({50, 4, 20, 20}, 6);
    fused.zero_grad();
    conv.zero_grad();
    const tensor<float> dx = test::host(fused.backward(test::on<B>(hg)));
    const tensor<float> dx_separate = test::host(conv.backward(relu.backward(test::on<B>(hg))));
    REQUIRE(std::memcmp(dx.data(), dx_separate.data(), sizeof(float) * std::size_t(dx.size())) ==
            0);
    const tensor<float> dw = test::host(fused.weight_grad()),
                        dw_separate = test::host(conv.weight_grad());
    REQUIRE(std::memcmp(dw.data(), dw_separate.data(), sizeof(float) * std::size_t(dw.size())) ==
            0);
    if (bias) require_close(test::host(fused.bias_grad()), test::host(conv.bias_grad()), 0);
  }
}

HOST_TEST_CASE("conv2d options survive g++ 12.2's AVX-512 {a, a, 0, 0} miscompile", "[nn]") {
  // g++ 12.2 -O2 -march=cooperlake builds a 256-bit stack constant {1, 1, 0, 0} with a
  // broadcast of 1; stride 1 followed by padding 0 would be exactly that constant.
  nn::conv2d<float> conv(20, 50, 5);
  REQUIRE(conv.padding().h == 0);
  REQUIRE(conv.padding().w == 0);
  REQUIRE(conv.stride().h == 1);
  nn::conv2d<float> strided(2, 2, 3, {.padding = 0, .stride = 2});
  REQUIRE(strided.padding().h == 0);
  REQUIRE(strided.stride().w == 2);
}

BACKEND_TEST_CASE("max_pool2d and avg_pool2d match naive pooling", "[nn]") {
  struct config {
    nn::size2 kernel, stride, padding;
    index_t h, w;
  };
  for (const config& c : {config{2, 0, 0, 6, 6}, config{2, 0, 0, 7, 5}, config{3, 2, 1, 7, 8},
                          config{{2, 3}, {1, 2}, {1, 1}, 5, 7}, config{1, 0, 0, 3, 3}}) {
    INFO("kernel " << c.kernel.h << "x" << c.kernel.w << ", input " << c.h << "x" << c.w);
    const auto hx = test::random_tensor<double>({2, 3, c.h, c.w}, 6);
    const auto x = test::on<B>(hx);
    const nn::size2 stride = c.stride.h == 0 ? c.kernel : c.stride;
    nn::max_pool2d<double, B> mp(c.kernel, c.stride, c.padding);
    nn::avg_pool2d<double, B> ap(c.kernel, c.stride, c.padding);
    const tensor<double, B> ym = mp.forward(x), ya = ap.forward(x);
    require_close(test::host(ym), naive_pool(hx, c.kernel, stride, c.padding, true), 1e-14);
    require_close(test::host(ya), naive_pool(hx, c.kernel, stride, c.padding, false), 1e-12);
    // avg_pool2d's input gradient, written whole (no zeroing first): each output gradient spread
    // over its window's inputs inside the image, 0 where no window reaches.
    const auto hg = test::random_tensor<double>(ya.shape(), 7);
    tensor<double> want({2, 3, c.h, c.w});
    const double scale = 1.0 / double(c.kernel.h * c.kernel.w);
    for (index_t i = 0; i < 2; ++i)
      for (index_t ch = 0; ch < 3; ++ch)
        for (index_t oh = 0; oh < ya.shape()[2]; ++oh)
          for (index_t ow = 0; ow < ya.shape()[3]; ++ow)
            for (index_t a = 0; a < c.kernel.h; ++a)
              for (index_t e = 0; e < c.kernel.w; ++e) {
                const index_t r = oh * stride.h + a - c.padding.h,
                              q = ow * stride.w + e - c.padding.w;
                if (r >= 0 && r < c.h && q >= 0 && q < c.w)
                  want(i, ch, r, q) += hg(i, ch, oh, ow) * scale;
              }
    require_close(test::host(ap.backward(test::on<B>(hg))), want, 1e-14);
  }
}

BACKEND_TEST_CASE("avg_pool2d 2x2 in float: rows of every width, the naive loop's bits", "[nn]") {
  // Output rows of 1 to 33 floats, inputs of even and odd size (a last row and column in no
  // window): the CPU pools rows of 8 outputs or more 16 at a time, narrower ones element by
  // element. Forward adds from 0 in the window's order, then scales; backward adds g / 4 to each
  // input of the window (g / 4 is exact: the same bits fused or not).
  for (const index_t out_w : {1, 5, 7, 8, 9, 14, 15, 16, 17, 31, 33})
    for (const index_t extra : {0, 1}) {
      INFO("output width " << out_w << ", input " << (2 * out_w + extra) << " wide");
      const index_t n = 3, c = 2, out_h = 3, h = 2 * out_h + extra, w = 2 * out_w + extra;
      auto hx = test::random_tensor<float>({n, c, h, w}, 21);
      hx(0, 0, 0, 0) = -0.f;  // (0 + -0) is +0: the sum starts from 0 as the naive loop's does
      hx(0, 0, 0, 1) = -0.f;
      nn::avg_pool2d<float, B> pool(2);
      const tensor<float> y = test::host(pool.forward(test::on<B>(hx)));
      const auto hg = test::random_tensor<float>({n, c, out_h, out_w}, 22);
      const auto hd = test::random_tensor<float>({n, c, h, w}, 23);
      tensor<float, B> dx = test::on<B>(hd);
      nn::avg_pool2d_kernel(2).backward_add(test::on<B>(hg), dx);
      const tensor<float> got = test::host(dx);
      // The layer writes its input gradient (no zeroing first): 0 + g / 4, 0 outside the windows.
      const tensor<float> written = test::host(pool.backward(test::on<B>(hg)));
      index_t wrong = 0, wrong_dx = 0, wrong_written = 0;
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < c; ++j) {
          for (index_t oh = 0; oh < out_h; ++oh)
            for (index_t ow = 0; ow < out_w; ++ow) {
              float sum = 0.f;
              for (const index_t r : {2 * oh, 2 * oh + 1})
                for (const index_t col : {2 * ow, 2 * ow + 1}) sum = sum + hx(i, j, r, col);
              const float want = sum * 0.25f;
              wrong += std::memcmp(&want, &y(i, j, oh, ow), sizeof(float)) != 0;
            }
          for (index_t r = 0; r < h; ++r)
            for (index_t col = 0; col < w; ++col) {
              const bool inside = r < 2 * out_h && col < 2 * out_w;
              const float want =
                  inside ? hd(i, j, r, col) + hg(i, j, r / 2, col / 2) * 0.25f : hd(i, j, r, col);
              wrong_dx += std::memcmp(&want, &got(i, j, r, col), sizeof(float)) != 0;
              const float spread = inside ? 0.f + hg(i, j, r / 2, col / 2) * 0.25f : 0.f;
              wrong_written += std::memcmp(&spread, &written(i, j, r, col), sizeof(float)) != 0;
            }
        }
      CHECK(wrong == 0);
      CHECK(wrong_dx == 0);
      CHECK(wrong_written == 0);
    }
}

BACKEND_TEST_CASE("max_pool2d routes the gradient to the first maximum of each window", "[nn]") {
  tensor<float> hx({1, 1, 2, 4});
  // Window 0: a tie between (0,0) and (1,1); window 1: maximum at (0,3).
  hx(0, 0, 0, 0) = 5.f;
  hx(0, 0, 1, 1) = 5.f;
  hx(0, 0, 0, 3) = 7.f;
  nn::max_pool2d<float, B> mp(2);
  const tensor<float> y = test::host(mp.forward(test::on<B>(hx)));
  REQUIRE(y(0, 0, 0, 0) == 5.f);
  REQUIRE(y(0, 0, 0, 1) == 7.f);
  const tensor<float> dx =
      test::host(mp.backward(test::on<B>(meld::full<float>({1, 1, 1, 2}, 1.f))));
  REQUIRE(dx(0, 0, 0, 0) == 1.f);
  REQUIRE(dx(0, 0, 1, 1) == 0.f);
  REQUIRE(dx(0, 0, 0, 3) == 1.f);
  REQUIRE(meld::sum(dx) == 2.f);
}

TEST_CASE("convolution and pooling errors name the layer", "[nn]") {
  nn::conv2d<float> conv(3, 4, 5);
  REQUIRE_THAT(test::message_of<meld::shape_error>([&] {
                 conv.forward(tensor<float>({2, 2, 8, 8}));
               }),
               Catch::Matchers::Contains("conv2d(3 -> 4") &&
                   Catch::Matchers::Contains("expected {batch, 3, height, width}"));
  REQUIRE_THAT(test::message_of<meld::shape_error>([&] {
                 conv.forward(tensor<float>({2, 3, 4, 8}));
               }),
               Catch::Matchers::Contains("smaller than the kernel"));
  REQUIRE_THROWS_AS(conv.backward(tensor<float>({2, 4, 4, 4})), std::logic_error);
  conv.forward(tensor<float>({2, 3, 8, 8}));
  REQUIRE_THROWS_AS(conv.backward(tensor<float>({2, 4, 5, 4})), meld::shape_error);
  REQUIRE_THROWS_AS(nn::conv2d<float>(3, 4, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(nn::conv2d<float>(3, 4, 3, {.stride = 0}), std::invalid_argument);
  REQUIRE_THROWS_AS(nn::max_pool2d<float>(2, 2, 2), std::invalid_argument);  // padding > k/2
  nn::avg_pool2d<float> ap(2);
  REQUIRE_THROWS_AS(ap.forward(tensor<float>({2, 8, 8})), meld::shape_error);
}
