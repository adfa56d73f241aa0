// Gradient checks (double precision, central differences) for the dense layers, batch
// normalization on {batch, features}, dropout, flatten, the loss, and a sequential MLP.
#include "nn_support.hpp"

namespace nn = meld::nn;
using meld::tensor;
using nn_test::check_gradients;

TEST_CASE("linear: gradients match finite differences", "[nn]") {
  nn::linear<double> fc(5, 4, {.seed = 3});
  fc.bias() = test::random_tensor<double>({4}, 9);
  auto x = test::random_tensor<double>({3, 5}, 1);
  check_gradients(fc, x);
  nn::linear<double> no_bias(5, 2, {.bias = false, .seed = 4});
  check_gradients(no_bias, x);
}

TEST_CASE("relu, sigmoid and tanh: gradients match finite differences", "[nn]") {
  // Away from 0, where relu has no derivative.
  auto x = test::random_tensor<double>({4, 6}, 2);
  x = meld::where(meld::abs(x) < 0.05, x + 0.1, x);
  nn::relu<double> r;
  check_gradients(r, x);
  nn::sigmoid<double> s;
  check_gradients(s, x);
  nn::tanh<double> t;
  check_gradients(t, x);
}

TEST_CASE("dropout: gradients match finite differences for a fixed mask", "[nn]") {
  nn::dropout<double> d(0.4);
  auto x = test::random_tensor<double>({5, 7}, 3);
  check_gradients(d, x, 7, [&] { d.seed(11); });
  d.train(false);
  check_gradients(d, x);
}

TEST_CASE("flatten: gradients match finite differences", "[nn]") {
  nn::flatten<double> f;
  auto x = test::random_tensor<double>({2, 3, 2, 2}, 4);
  check_gradients(f, x);
}

TEST_CASE("batch_norm on {batch, features}: gradients in training and evaluation mode", "[nn]") {
  nn::batch_norm<double> bn(3);
  bn.weight() = test::random_tensor<double>({3}, 5, 0.5, 2);
  bn.bias() = test::random_tensor<double>({3}, 6);
  auto x = test::random_tensor<double>({6, 3}, 7);
  check_gradients(bn, x);  // the batch statistics depend on x: the full derivative
  bn.running_mean() = test::random_tensor<double>({3}, 8);
  bn.running_var() = test::random_tensor<double>({3}, 9, 0.5, 2);
  bn.train(false);
  check_gradients(bn, x);
}

TEST_CASE("softmax cross-entropy: gradient matches finite differences of the loss", "[nn]") {
  auto z = test::random_tensor<double>({5, 4}, 10, -3, 3);
  tensor<std::int64_t> t({5});
  for (int i = 0; i < 5; ++i) t(i) = (i * 3) % 4;
  tensor<double> grad;
  const double loss = nn::cross_entropy(z, t, grad);
  REQUIRE(grad.shape() == z.shape());
  REQUIRE(nn::cross_entropy(z, t) == Approx(loss).epsilon(1e-14));
  const double h = 1e-6;
  for (meld::index_t i = 0; i < z.size(); ++i) {
    const double v = z.data()[i];
    z.data()[i] = v + h;
    const double up = nn::cross_entropy(z, t);
    z.data()[i] = v - h;
    const double down = nn::cross_entropy(z, t);
    z.data()[i] = v;
    REQUIRE(grad.data()[i] == Approx((up - down) / (2 * h)).margin(1e-8));
  }
}

TEST_CASE("a sequential MLP: gradients match finite differences end to end", "[nn]") {
  auto net = nn::sequential(nn::linear<double>(4, 6, {.seed = 1}), nn::tanh<double>(),
                            nn::batch_norm<double>(6), nn::linear<double>(6, 5, {.seed = 2}),
                            nn::relu<double>(), nn::linear<double>(5, 3, {.seed = 3}),
                            nn::sigmoid<double>());
  auto x = test::random_tensor<double>({4, 4}, 12);
  check_gradients(net, x);
}
