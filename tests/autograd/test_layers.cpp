// nn's convolution, pooling, batch normalization and dropout kernels as autograd nodes: gradients
// against finite differences (strided, padded, rectangular windows; leaves, whose gradients are
// added in place, and expressions), the same values as the nn layers, autograd's layer objects,
// and two LeNets written with forward only that train step for step as nn::sequential does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "autograd_support.hpp"
#include "lenet.hpp"

namespace ag = meld::autograd;
namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;

namespace {

// Every element of got within rel of want's, relative to the element or to the largest of want
// (gradients summed in another order differ by rounding, and some elements are near 0).
template <class X, class Y>
void require_near(const X& got, const Y& want, double rel) {
  const auto g = test::host(got);
  const auto w = test::host(want);
  REQUIRE(g.shape() == w.shape());
  double scale = 0;
  for (index_t i = 0; i < w.size(); ++i)
    scale = std::max(scale, std::abs(static_cast<double>(w.data()[i])));
  for (index_t i = 0; i < w.size(); ++i) {
    INFO("element " << i << " of " << w.shape());
    REQUIRE(static_cast<double>(g.data()[i]) ==
            Approx(static_cast<double>(w.data()[i])).epsilon(rel).margin(rel * scale));
  }
}

// A leaf that requires a gradient, holding a copy of t.
template <class T, class B>
ag::variable<T, B> leaf_copy(const tensor<T, B>& t) {
  return ag::variable<T, B>(tensor<T, B>(t), true);
}

// The host copies of a model's parameters (or their gradients), and of its buffers.
template <class M>
std::vector<tensor<float>> parameters_of(M& m, bool grads) {
  std::vector<tensor<float>> out;
  m.visit_parameters(
      [&](std::string_view, auto& p, auto& g) { out.push_back(test::host(grads ? g : p)); });
  return out;
}
template <class M>
std::vector<tensor<float>> buffers_of(M& m) {
  std::vector<tensor<float>> out;
  m.visit_buffers([&](std::string_view, auto& b) { out.push_back(test::host(b)); });
  return out;
}
// Unused where MELD_TEST_ASYNC_ONLY leaves out the synchronous cases that train.
[[maybe_unused]] void require_near(const std::vector<tensor<float>>& got,
                                   const std::vector<tensor<float>>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("tensor " << i);
    require_near(got[i], want[i], rel);
  }
}

// Trains net (forward only) and ref (nn's layers), which start with the same parameters, for two
// SGD steps on x, y: the same losses, parameter and input gradients, and buffers; then the same
// outputs in evaluation mode.
template <class B, class Net, class Ref>
void require_same_training(Net net, Ref& ref, const tensor<float, B>& x,
                           const tensor<std::int64_t, B>& y) {
  ag::module model(std::move(net));
  require_near(parameters_of(model, false), parameters_of(ref, false), 0);
  meld::optim::sgd opt(model, {.lr = 0.05, .momentum = 0.9});
  meld::optim::sgd ref_opt(ref, {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    model.zero_grad();
    ref.zero_grad();
    tensor<float, B> g_ref, g;
    const double l_ref = nn::cross_entropy(ref.forward(x), y, g_ref);
    const tensor<float, B> dx_ref = ref.backward(g_ref);
    const double l = nn::cross_entropy(model.forward(x), y, g);
    const tensor<float, B> dx = model.backward(g);
    REQUIRE(l == Approx(l_ref).epsilon(1e-5));
    require_near(parameters_of(model, true), parameters_of(ref, true), 1e-5);
    require_near(dx, dx_ref, 1e-5);
    require_near(buffers_of(model), buffers_of(ref), 1e-5);
    opt.step();
    ref_opt.step();
  }
  model.eval();
  ref.eval();
  require_near(model.forward(x), ref.forward(x), 1e-5);
}

}  // namespace

SYNC_BACKEND_TEST_CASE("conv2d: gradients with stride, padding, rectangles, and without a bias",
                       "[autograd]") {
  struct config {
    nn::size2 kernel;
    nn::conv2d_options options;
    index_t h, w;
  };
  for (const config& c : {config{3, {}, 5, 5}, config{3, {.padding = 1, .stride = 2}, 5, 6},
                          config{{2, 3}, {.padding = {0, 1}, .stride = {1, 2}}, 4, 5},
                          config{1, {.bias = false}, 3, 3}}) {
    INFO("kernel " << c.kernel.h << "x" << c.kernel.w << " stride " << c.options.stride.h << "x"
                   << c.options.stride.w << " padding " << c.options.padding.h << "x"
                   << c.options.padding.w);
    const std::vector<tensor<double, B>> in =
        test::random_inputs<B>({{2, 2, c.h, c.w}, {3, 2, c.kernel.h, c.kernel.w}, {3}}, 300);
    if (c.options.bias) {
      // Leaves (every gradient added in place), then expressions (gradients returned).
      test::require_gradcheck(
          [&](const auto& v) { return ag::conv2d(v[0], v[1], v[2], c.options); }, in);
      test::require_gradcheck(
          [&](const auto& v) { return ag::conv2d(tanh(v[0]), 0.5 * v[1], v[2] * v[2], c.options); },
          in);
    } else {
      const auto xw =
          test::random_inputs<B>({{2, 2, c.h, c.w}, {3, 2, c.kernel.h, c.kernel.w}}, 300);
      test::require_gradcheck([&](const auto& v) { return ag::conv2d(v[0], v[1], c.options); }, xw);
      test::require_gradcheck([&](const auto& v) { return ag::conv2d(v[0] * v[0], v[1]); }, xw);
    }
  }
}

SYNC_BACKEND_TEST_CASE("conv2d: nn::conv2d's values; gradients accumulate; shapes are checked",
                       "[autograd]") {
  nn::conv2d<double, B> ref(2, 4, 3, {.padding = 1, .stride = 2, .seed = 3});
  ref.bias() = test::random_tensor<double, B>({4}, 310);
  const tensor<double, B> xh = test::random_tensor<double, B>({3, 2, 7, 6}, 311);
  ag::variable<double, B> x = leaf_copy(xh), w = leaf_copy(ref.weight()), b = leaf_copy(ref.bias());
  const tensor<double, B> y_ref = ref.forward(xh);
  const tensor<double, B> g = test::random_tensor<double, B>(y_ref.shape(), 312);
  const tensor<double, B> dx_ref = ref.backward(g);
  for (int pass = 1; pass <= 2; ++pass) {  // the second pass adds as much again
    ag::variable<double, B> y = ag::conv2d(x, w, b, {.padding = 1, .stride = 2});
    require_near(y.value(), y_ref, 1e-12);
    y.backward(tensor<double, B>(g));
    require_near(x.grad(), tensor<double, B>(double(pass) * dx_ref), 1e-12);
    require_near(w.grad(), tensor<double, B>(double(pass) * ref.weight_grad()), 1e-12);
    require_near(b.grad(), tensor<double, B>(double(pass) * ref.bias_grad()), 1e-12);
  }
  const std::string m = test::message_of<meld::shape_error>([&] {
    (void)ag::conv2d(x, ag::variable<double, B>(tensor<double, B>({4, 3, 3, 3})));
  });
  INFO(m);
  REQUIRE(m.find("autograd::conv2d") != std::string::npos);
  REQUIRE_THROWS_AS(ag::conv2d(x, b), meld::shape_error);     // a weight of rank 1
  REQUIRE_THROWS_AS(ag::conv2d(x, w, w), meld::shape_error);  // a bias of the weight's shape
  REQUIRE_THROWS_AS(ag::conv2d(x, w, {.stride = 0}), std::invalid_argument);
  // nn::conv2d's fused activation is not silently dropped.
  REQUIRE_THROWS_AS(ag::conv2d(x, w, {.activation = meld::nn::activation::relu}),
                    std::invalid_argument);
}

SYNC_BACKEND_TEST_CASE("max_pool2d and avg_pool2d: gradients with stride, padding, rectangles",
                       "[autograd]") {
  struct config {
    nn::size2 kernel, stride, padding;
  };
  for (const config& c : {config{2, 0, 0}, config{3, 2, 1}, config{{2, 3}, 1, 0}}) {
    INFO("kernel " << c.kernel.h << "x" << c.kernel.w << " stride " << c.stride.h << " padding "
                   << c.padding.h);
    const auto in = test::random_inputs<B>({{2, 2, 5, 6}}, 320);
    test::require_gradcheck(
        [&](const auto& v) { return ag::max_pool2d(v[0], c.kernel, c.stride, c.padding); }, in);
    test::require_gradcheck(
        [&](const auto& v) { return ag::avg_pool2d(v[0], c.kernel, c.stride, c.padding); }, in);
    test::require_gradcheck(
        [&](const auto& v) { return ag::max_pool2d(2.0 * v[0], c.kernel, c.stride, c.padding); },
        in);
  }
  auto x = test::leaf<B>(test::random_tensor<double>({2, 3, 4}, 321));
  REQUIRE_THROWS_AS(ag::max_pool2d(x, 2), meld::shape_error);            // not {n, c, h, w}
  REQUIRE_THROWS_AS(ag::avg_pool2d(x, 2, 1, 2), std::invalid_argument);  // padding > kernel / 2
}

SYNC_BACKEND_TEST_CASE("batch_norm: gradients and running statistics as nn::batch_norm's",
                       "[autograd]") {
  const auto in = test::random_inputs<B>({{3, 2, 2, 3}, {2}, {2}}, 330);
  const tensor<double, B> mean0 = test::random_tensor<double, B>({2}, 331, -0.5, 0.5);
  const tensor<double, B> var0 = test::random_tensor<double, B>({2}, 332, 0.5, 2);
  for (bool training : {true, false}) {
    INFO("training " << training);
    // Fresh running statistics for each evaluation (training updates them).
    auto f = [&](const auto& v) {
      tensor<double, B> mean(mean0), var(var0);
      return ag::batch_norm(v[0], mean, var, v[1], v[2], training);
    };
    test::require_gradcheck(f, in);
    test::require_gradcheck(
        [&](const auto& v) {
          tensor<double, B> mean(mean0), var(var0);
          return ag::batch_norm(exp(v[0]), mean, var, v[1] * v[1], 2.0 * v[2], training);
        },
        in);

    // The values, gradients and running statistics of nn::batch_norm with the same state.
    nn::batch_norm<double, B> ref(2, {.momentum = 0.3});
    ref.train(training);
    meld::copy(ref.weight(), in[1]);
    meld::copy(ref.bias(), in[2]);
    meld::copy(ref.running_mean(), mean0);
    meld::copy(ref.running_var(), var0);
    tensor<double, B> mean(mean0), var(var0);
    ag::variable<double, B> x = leaf_copy(in[0]), w = leaf_copy(in[1]), b = leaf_copy(in[2]);
    ag::variable<double, B> y = ag::batch_norm(x, mean, var, w, b, training, {.momentum = 0.3});
    const tensor<double, B> y_ref = ref.forward(in[0]);
    require_near(y.value(), y_ref, 1e-12);
    require_near(mean, ref.running_mean(), 1e-12);
    require_near(var, ref.running_var(), 1e-12);
    const tensor<double, B> g = test::random_tensor<double, B>(y_ref.shape(), 333);
    y.backward(tensor<double, B>(g));
    require_near(x.grad(), ref.backward(g), 1e-12);
    require_near(w.grad(), ref.weight_grad(), 1e-12);
    require_near(b.grad(), ref.bias_grad(), 1e-12);
  }
  tensor<double, B> mean({2}), var({3});
  auto x = test::leaf<B>(test::random_tensor<double>({4, 2}, 334));
  auto w = test::leaf<B>(test::random_tensor<double>({2}, 335));
  REQUIRE_THROWS_AS(ag::batch_norm(x, mean, var, w, w, true), meld::shape_error);
  REQUIRE_THROWS_AS(ag::batch_norm(x, mean, mean, w, w, true, {.eps = 0}), std::invalid_argument);
}

SYNC_BACKEND_TEST_CASE("dropout: nn::dropout's masks, the gradient through them, the identity",
                       "[autograd]") {
  const auto in = test::random_inputs<B>({{4, 5, 3}}, 340);
  test::require_gradcheck(
      [](const auto& v) {
        meld::rng gen(3);  // the same mask at every evaluation
        return ag::dropout(v[0], 0.4, true, gen);
      },
      in);
  nn::dropout<double, B> ref(0.4, 5);
  meld::rng gen(5);
  ag::variable<double, B> x = leaf_copy(in[0]);
  for (int call = 0; call < 2; ++call) {  // the streams advance alike
    ag::variable<double, B> y = ag::dropout(x, 0.4, true, gen);
    require_near(y.value(), ref.forward(in[0]), 0);
    const tensor<double, B> g = test::random_tensor<double, B>(in[0].shape(), 341);
    x.zero_grad();
    y.backward(tensor<double, B>(g));
    require_near(x.grad(), ref.backward(g), 0);
  }
  // Outside training, and with p = 0: x itself.
  REQUIRE(ag::dropout(x, 0.4, false, gen).state_handle() == x.state_handle());
  REQUIRE(ag::dropout(x, 0.0, true, gen).state_handle() == x.state_handle());
  REQUIRE_THROWS_AS(ag::dropout(x, 1.0, true, gen), std::invalid_argument);
}

BACKEND_TEST_CASE("layers: nn's initial parameters, buffers() and train() name and switch",
                  "[autograd]") {
  ag::layers::conv2d<float, B> conv(3, 4, {2, 3}, {.seed = 21});
  nn::conv2d<float, B> ref(3, 4, {2, 3}, {.seed = 21});
  require_near(conv.weight.value(), ref.weight(), 0);
  require_near(conv.bias.value(), ref.bias(), 0);
  const tensor<float, B> xh = test::random_tensor<float, B>({2, 3, 5, 6}, 351);
  require_near(conv(leaf_copy(xh)).value(), ref.forward(xh), 0);
  REQUIRE_FALSE(ag::layers::conv2d<float, B>(3, 4, 1, {.bias = false}).bias.defined());
  REQUIRE_THROWS_AS((ag::layers::conv2d<float, B>(0, 4, 3)), std::invalid_argument);
  REQUIRE_THROWS_AS(
      (ag::layers::conv2d<float, B>(3, 4, 3, {.activation = meld::nn::activation::relu})),
      std::invalid_argument);
  // A copy shares the parameters (variables are handles).
  const ag::layers::conv2d<float, B> copy(conv);
  REQUIRE(copy.weight.state_handle() == conv.weight.state_handle());

  ag::layers::batch_norm<float, B> bn(3);
  ag::layers::dropout<float, B> drop(0.5);
  std::vector<std::string> names;
  ag::buffers([&](std::string_view name, tensor<float, B>&) { names.emplace_back(name); }, "bn", bn,
              "extra", bn.running_mean);
  REQUIRE(names == std::vector<std::string>{"bn.running_mean", "bn.running_var", "extra"});
  names.clear();
  ag::parameters([&](std::string_view name, ag::variable<float, B>&) { names.emplace_back(name); },
                 "conv", conv, "bn", bn);
  REQUIRE(names == std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias"});
  REQUIRE(bn.training());
  ag::train(false, bn, drop);
  REQUIRE_FALSE(bn.training());
  REQUIRE_FALSE(drop.training());
  // Evaluation mode: dropout is the identity, batch norm uses (and keeps) the running statistics.
  const ag::variable<float, B> x(test::random_tensor<float, B>({4, 3, 2, 2}, 350), true);
  REQUIRE(drop(x).state_handle() == x.state_handle());
  const ag::variable<float, B> y = bn(x);
  require_near(y.value(), tensor<float, B>(x.value() / std::sqrt(1.f + 1e-5f)), 1e-6);
  require_near(bn.running_var, tensor<float, B>(meld::ones<float, B>({3})), 0);
  ag::train(true, bn, drop);
  REQUIRE(bn.training());
}

SYNC_BACKEND_TEST_CASE("LeNet with forward only trains as nn::sequential's LeNet", "[autograd]") {
  auto ref = test::nn_lenet<float, B>();
  const tensor<float, B> x = test::random_tensor<float, B>({8, 1, 28, 28}, 360, -1, 1);
  const tensor<std::int64_t, B> y = meld::to<B>(meld::rng(5).integers<std::int64_t>({8}, 0, 10));
  require_same_training(test::lenet<float, B>{}, ref, x, y);
}

SYNC_BACKEND_TEST_CASE("LeNet with batch norm, max pooling and dropout trains as nn's",
                       "[autograd]") {
  auto ref = test::nn_lenet_bn<float, B>(0.25);
  const tensor<float, B> x = test::random_tensor<float, B>({8, 1, 28, 28}, 370, -1, 1);
  const tensor<std::int64_t, B> y = meld::to<B>(meld::rng(6).integers<std::int64_t>({8}, 0, 10));
  require_same_training(test::lenet_bn<float, B>(0.25), ref, x, y);
}
