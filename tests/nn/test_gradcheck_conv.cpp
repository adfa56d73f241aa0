// Gradient checks (double precision, central differences) for convolution, pooling, batch
// normalization over images, and a small LeNet-like sequential model.
#include "nn_support.hpp"

namespace nn = meld::nn;
using meld::tensor;
using nn_test::check_gradients;

TEST_CASE("conv2d: gradients match finite differences (stride, padding, rectangles)", "[nn]") {
  struct config {
    nn::size2 kernel;
    nn::conv2d_options options;
    meld::index_t h, w;
  };
  for (const config& c : {config{3, {}, 5, 5}, config{3, {.padding = 1, .stride = 2}, 5, 6},
                          config{{2, 3}, {.padding = {0, 1}, .stride = {1, 2}}, 4, 5},
                          config{1, {.bias = false}, 3, 3},
                          config{3, {.padding = 1, .activation = nn::activation::relu}, 5, 5},
                          config{2, {.bias = false, .activation = nn::activation::relu}, 4, 4}}) {
    INFO("kernel " << c.kernel.h << "x" << c.kernel.w << " stride " << c.options.stride.h << "x"
                   << c.options.stride.w << " padding " << c.options.padding.h << "x"
                   << c.options.padding.w);
    nn::conv2d<double> conv(2, 3, c.kernel, c.options);
    if (c.options.bias) conv.bias() = test::random_tensor<double>({3}, 3);
    auto x = test::random_tensor<double>({2, 2, c.h, c.w}, 4);
    check_gradients(conv, x);
  }
}

TEST_CASE("conv2d: gradients when the batch is split into several column chunks", "[nn]") {
  // 4 channels x 3 x 3 x 30 x 30 columns per sample: ~32k elements, so 33 samples span five
  // chunks of the column budget (8 samples each, the last 1). Checked on a few input and weight
  // elements only.
  nn::conv2d<double> conv(4, 2, 3, {.padding = 1});
  auto x = test::random_tensor<double>({33, 4, 30, 30}, 5);
  const tensor<double> y = conv.forward(x);
  const tensor<double> r = test::random_tensor<double>(y.shape(), 6);
  conv.zero_grad();
  const tensor<double> dx = conv.backward(r);
  auto f = [&] { return nn_test::objective(conv, x, r); };
  const double h = 1e-6;
  for (meld::index_t i : {meld::index_t(0), meld::index_t(4 * 900 * 32 + 17), x.size() - 1}) {
    const double v = x.data()[i];
    x.data()[i] = v + h;
    const double up = f();
    x.data()[i] = v - h;
    const double down = f();
    x.data()[i] = v;
    REQUIRE(dx.data()[i] == Approx((up - down) / (2 * h)).margin(1e-5));
  }
  const tensor<double> dw(conv.weight_grad());
  for (meld::index_t i : {meld::index_t(0), meld::index_t(40), meld::index_t(71)}) {
    const double v = conv.weight().data()[i];
    conv.weight().data()[i] = v + h;
    const double up = f();
    conv.weight().data()[i] = v - h;
    const double down = f();
    conv.weight().data()[i] = v;
    REQUIRE(dw.data()[i] == Approx((up - down) / (2 * h)).epsilon(1e-6).margin(1e-5));
  }
}

TEST_CASE("max_pool2d and avg_pool2d: gradients match finite differences", "[nn]") {
  struct config {
    nn::size2 kernel, stride, padding;
  };
  for (const config& c : {config{2, 0, 0}, config{3, 2, 1}, config{{2, 3}, 1, 0}}) {
    INFO("kernel " << c.kernel.h << "x" << c.kernel.w << " stride " << c.stride.h << " padding "
                   << c.padding.h);
    auto x = test::random_tensor<double>({2, 2, 5, 6}, 6);
    nn::max_pool2d<double> mp(c.kernel, c.stride, c.padding);
    check_gradients(mp, x);
    nn::avg_pool2d<double> ap(c.kernel, c.stride, c.padding);
    check_gradients(ap, x);
  }
}

TEST_CASE("batch_norm on images: gradients in training mode", "[nn]") {
  nn::batch_norm<double> bn(2);
  bn.weight() = test::random_tensor<double>({2}, 7, 0.5, 2);
  bn.bias() = test::random_tensor<double>({2}, 8);
  auto x = test::random_tensor<double>({3, 2, 2, 3}, 9);
  check_gradients(bn, x);
}

TEST_CASE("a small LeNet: gradients match finite differences end to end", "[nn]") {
  auto net =
      nn::sequential(nn::conv2d<double>(1, 2, 3, {.padding = 1, .seed = 1}), nn::relu<double>(),
                     nn::max_pool2d<double>(2), nn::conv2d<double>(2, 3, 2, {.seed = 2}),
                     nn::batch_norm<double>(3), nn::tanh<double>(), nn::avg_pool2d<double>(2),
                     nn::flatten<double>(), nn::linear<double>(3, 4, {.seed = 3}));
  auto x = test::random_tensor<double>({2, 1, 6, 6}, 10);
  check_gradients(net, x);
}
