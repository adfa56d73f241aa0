// Forward passes of the dense layers, activations, dropout, flatten, batch normalization and the
// loss against naive references; the sequential container; errors.
#include "nn_support.hpp"

namespace nn = meld::nn;
using meld::index_t;
using meld::shape_t;
using meld::tensor;

TEST_CASE("linear: forward is x W^T + b, backward accumulates parameter gradients", "[nn]") {
  nn::linear<float> fc(7, 5, {.seed = 1});
  fc.bias() = test::random_tensor<float>({5}, 2);
  const auto x = test::random_tensor<float>({4, 7}, 3);
  const tensor<float> y = fc.forward(x);
  REQUIRE(y.shape() == shape_t{4, 5});
  test::check_elements(y, [&](const test::index_list& i) {
    double s = fc.bias()(i[1]);
    for (index_t k = 0; k < 7; ++k) s += double(x(i[0], k)) * fc.weight()(i[1], k);
    return s;
  });
  // Default initialization: U(+-1/sqrt(in)), the bias 0.
  nn::linear<float> fresh(100, 50);
  REQUIRE(meld::max(meld::abs(fresh.weight())) <= 0.1f);
  REQUIRE(meld::max(meld::abs(fresh.weight())) > 0.09f);
  REQUIRE(meld::sum(meld::abs(fresh.bias())) == 0.f);

  // Two backward passes add up; zero_grad clears.
  const auto g = test::random_tensor<float>({4, 5}, 4);
  fc.zero_grad();
  fc.backward(g);
  const tensor<float> once(fc.weight_grad());
  fc.backward(g);
  test::check_elements(fc.weight_grad(), [&](const test::index_list& i) {
    double s = 0;
    for (index_t n = 0; n < 4; ++n) s += double(g(n, i[0])) * x(n, i[1]);
    return 2 * s;
  });
  test::check_elements(once,
                       [&](const test::index_list& i) { return fc.weight_grad()(i[0], i[1]) / 2; });
  fc.zero_grad();
  REQUIRE(meld::sum(meld::abs(fc.weight_grad())) == 0.f);
  // Without the input gradient: parameters only, an empty tensor back.
  REQUIRE(fc.backward(g, false).size() == 0);
  REQUIRE(meld::sum(meld::abs(fc.weight_grad())) > 0.f);
}

TEST_CASE("activations match std:: functions", "[nn]") {
  const auto x = test::random_tensor<double>({3, 17}, 5, -6, 6);
  nn::relu<double> r;
  nn::sigmoid<double> s;
  nn::tanh<double> t;
  const tensor<double> yr = r.forward(x), ys = s.forward(x), yt = t.forward(x);
  test::check_elements(
      yr, [&](const test::index_list& i) { return std::max(0.0, x(i[0], i[1])); }, 1e-14);
  test::check_elements(
      ys, [&](const test::index_list& i) { return 1 / (1 + std::exp(-x(i[0], i[1]))); }, 1e-14);
  test::check_elements(
      yt, [&](const test::index_list& i) { return std::tanh(x(i[0], i[1])); }, 1e-14);
  const auto g = test::random_tensor<double>({3, 17}, 6);
  const tensor<double> dr = r.backward(g), ds = s.backward(g), dt = t.backward(g);
  test::check_elements(
      dr, [&](const test::index_list& i) { return x(i[0], i[1]) > 0 ? g(i[0], i[1]) : 0.0; },
      1e-14);
  test::check_elements(
      ds,
      [&](const test::index_list& i) {
        const double y = 1 / (1 + std::exp(-x(i[0], i[1])));
        return g(i[0], i[1]) * y * (1 - y);
      },
      1e-12);
  test::check_elements(
      dt,
      [&](const test::index_list& i) {
        const double y = std::tanh(x(i[0], i[1]));
        return g(i[0], i[1]) * (1 - y * y);
      },
      1e-12);
}

TEST_CASE("dropout: rate, scaling, seeded masks, identity in evaluation", "[nn]") {
  nn::dropout<float> d(0.3, /*seed=*/5);
  const tensor<float> x = meld::full<float>({200, 500}, 2.f);
  const tensor<float> y = d.forward(x);
  const double kept = static_cast<double>(meld::sum(y != 0.f)) / static_cast<double>(y.size());
  REQUIRE(kept == Approx(0.7).margin(0.005));  // 100,000 draws: 5 standard deviations ~ 0.007
  REQUIRE(meld::max(y) == Approx(2.f / 0.7f));
  REQUIRE(meld::sum(meld::abs(y * (y - meld::max(y)))) == 0.f);  // each 0 or 2 / 0.7
  // The gradient passes exactly where the input did.
  const tensor<float> g = meld::ones<float>({200, 500});
  const tensor<float> dx = d.backward(g);
  REQUIRE(meld::sum(meld::abs(dx * 2.f - y)) == Approx(0).margin(1e-3));
  // The same seed gives the same masks; the next draw differs.
  nn::dropout<float> same(0.3, 5);
  const tensor<float> y2 = same.forward(x), y3 = same.forward(x);
  REQUIRE(meld::sum(meld::abs(y2 - y)) == 0.f);
  REQUIRE(meld::sum(meld::abs(y3 - y)) > 0.f);
  // A replica continues the same stream.
  auto rep = same.replica();
  const tensor<float> a = same.forward(x), b = rep.forward(x);
  REQUIRE(meld::sum(meld::abs(a - b)) == 0.f);
  d.train(false);
  const tensor<float> e = d.forward(x);
  REQUIRE(meld::sum(meld::abs(e - x)) == 0.f);
  REQUIRE_THROWS_AS(nn::dropout<float>(1.0), std::invalid_argument);
  REQUIRE_THROWS_AS(nn::dropout<float>(-0.1), std::invalid_argument);
}

TEST_CASE("flatten keeps the batch axis and restores the shape in backward", "[nn]") {
  nn::flatten<float> f;
  const auto x = test::random_tensor<float>({3, 2, 4, 5}, 7);
  const tensor<float> y = f.forward(x);
  REQUIRE(y.shape() == shape_t{3, 40});
  REQUIRE(y(2, 39) == x(2, 1, 3, 4));
  const tensor<float> dx = f.backward(y);
  REQUIRE(dx.shape() == x.shape());
  REQUIRE(meld::sum(meld::abs(dx - x)) == 0.f);
  REQUIRE_THROWS_AS(f.backward(x), meld::shape_error);
}

TEST_CASE("batch_norm: batch statistics, running statistics, evaluation mode", "[nn]") {
  const index_t n = 8, c = 3;
  nn::batch_norm<double> bn(c, {.momentum = 0.2, .eps = 1e-3});
  bn.weight() = test::random_tensor<double>({c}, 8, 0.5, 2);
  bn.bias() = test::random_tensor<double>({c}, 9);
  const auto x = test::random_tensor<double>({n, c, 2, 3}, 10, -3, 5);
  const tensor<double> y = bn.forward(x);
  std::vector<double> mean(c), var(c);
  const index_t m = n * 6;
  for (index_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t a = 0; a < 2; ++a)
        for (index_t b = 0; b < 3; ++b) s += x(i, ch, a, b);
    mean[ch] = s / m;
    for (index_t i = 0; i < n; ++i)
      for (index_t a = 0; a < 2; ++a)
        for (index_t b = 0; b < 3; ++b)
          s2 += (x(i, ch, a, b) - mean[ch]) * (x(i, ch, a, b) - mean[ch]);
    var[ch] = s2 / m;
  }
  test::check_elements(
      y,
      [&](const test::index_list& i) {
        const index_t ch = i[1];
        return bn.weight()(ch) * (x(i[0], ch, i[2], i[3]) - mean[ch]) / std::sqrt(var[ch] + 1e-3) +
               bn.bias()(ch);
      },
      1e-12);
  for (index_t ch = 0; ch < c; ++ch) {
    REQUIRE(bn.running_mean()(ch) == Approx(0.2 * mean[ch]).epsilon(1e-12));
    REQUIRE(bn.running_var()(ch) == Approx(0.8 + 0.2 * var[ch] * m / (m - 1)).epsilon(1e-12));
  }
  bn.train(false);
  const tensor<double> ye = bn.forward(x);
  test::check_elements(
      ye,
      [&](const test::index_list& i) {
        const index_t ch = i[1];
        return bn.weight()(ch) * (x(i[0], ch, i[2], i[3]) - bn.running_mean()(ch)) /
                   std::sqrt(bn.running_var()(ch) + 1e-3) +
               bn.bias()(ch);
      },
      1e-12);
  // Buffers are visited by name; evaluation leaves them alone.
  std::vector<std::string> names;
  bn.visit_buffers([&](std::string_view name, tensor<double>&) { names.emplace_back(name); });
  REQUIRE(names == std::vector<std::string>{"running_mean", "running_var"});
  REQUIRE(bn.running_mean()(0) == Approx(0.2 * mean[0]).epsilon(1e-12));
  nn::batch_norm<double> one(2);
  REQUIRE_THROWS_AS(one.forward(tensor<double>({1, 2})), meld::shape_error);  // 1 value each
  REQUIRE_THROWS_AS(one.forward(tensor<double>({4, 3})), meld::shape_error);
}

TEST_CASE("softmax cross-entropy matches a naive log-softmax and stays finite", "[nn]") {
  const auto z = test::random_tensor<float>({6, 5}, 11, -4, 4);
  tensor<std::int64_t> t({6});
  for (int i = 0; i < 6; ++i) t(i) = (i * 2 + 1) % 5;
  tensor<float> grad;
  const double loss = nn::cross_entropy(z, t, grad);
  double want = 0;
  for (index_t i = 0; i < 6; ++i) {
    double s = 0;
    for (index_t j = 0; j < 5; ++j) s += std::exp(double(z(i, j)));
    want += std::log(s) - z(i, t(i));
    for (index_t j = 0; j < 5; ++j)
      REQUIRE(grad(i, j) ==
              Approx((std::exp(double(z(i, j))) / s - (j == t(i) ? 1 : 0)) / 6).margin(1e-6));
  }
  REQUIRE(loss == Approx(want / 6).epsilon(1e-6));
  // Huge logits: log-sum-exp keeps it finite and exact.
  tensor<float> big({2, 3});
  big(0, 0) = 1000.f;
  big(0, 1) = -1000.f;
  big(1, 2) = 3e4f;
  tensor<std::int64_t> bt({2});
  bt(0) = 1;
  bt(1) = 2;
  const double l = nn::cross_entropy(big, bt, grad);
  REQUIRE(std::isfinite(l));
  REQUIRE(l == Approx((2000.0 + 0.0) / 2).epsilon(1e-6));
  REQUIRE(std::isfinite(meld::sum(grad)));
  // Errors.
  bt(1) = 3;
  REQUIRE_THROWS_AS(nn::cross_entropy(big, bt, grad), std::out_of_range);
  bt(1) = -1;
  REQUIRE_THROWS_AS(nn::cross_entropy(big, bt, grad), std::out_of_range);
  REQUIRE_THROWS_AS(nn::cross_entropy(big, tensor<std::int64_t>({3}), grad), meld::shape_error);
  REQUIRE_THROWS_AS(nn::cross_entropy(tensor<float>({3}), tensor<std::int64_t>({3}), grad),
                    meld::shape_error);
  REQUIRE(nn::correct_predictions(big, tensor<std::int64_t>({2})) == 1);
}

TEST_CASE("cross-entropy keeps its precision for logits of any magnitude", "[nn]") {
  // Logits s + {0, 0.5, 1} with target 0 (issue 13: the loss was 1.6875 at 1e6, 2.0 at 1e7 and
  // 0 at 1e8). The reference takes the float logits exactly as stored and works in double.
  for (float s : {0.f, 1e6f, 1e7f, 1e8f, -1e8f, 3e38f}) {
    INFO("s = " << s);
    tensor<float> z({1, 3});
    z(0, 0) = s;
    z(0, 1) = s + 0.5f;
    z(0, 2) = s + 1.f;
    const tensor<std::int64_t> t({1});  // class 0
    const double m = std::max({double(z(0, 0)), double(z(0, 1)), double(z(0, 2))});
    double sum = 0;
    for (index_t j = 0; j < 3; ++j) sum += std::exp(double(z(0, j)) - m);
    const double want = std::log(sum) - (double(z(0, 0)) - m);
    tensor<float> grad;
    const double loss = nn::cross_entropy(z, t, grad);
    REQUIRE(loss == Approx(want).epsilon(1e-6));
    // Each gradient row sums to 0 (softmax sums to 1, minus the one-hot).
    REQUIRE(std::abs(double(grad(0, 0)) + grad(0, 1) + grad(0, 2)) < 1e-6);
    for (index_t j = 0; j < 3; ++j)
      REQUIRE(grad(0, j) == Approx(std::exp(double(z(0, j)) - m) / sum - (j == 0)).margin(1e-6));
  }
}

TEST_CASE("sequential: names, order, modes, replicas, input gradient switch", "[nn]") {
  auto net = nn::sequential(nn::flatten<float>(), nn::linear<float>(12, 8), nn::relu<float>(),
                            nn::batch_norm<float>(8), nn::dropout<float>(0.5),
                            nn::linear<float>(8, 3, {.bias = false}));
  static_assert(nn::model<decltype(net)>);
  std::vector<std::string> names;
  net.visit_parameters(
      [&](std::string_view n, tensor<float>&, tensor<float>&) { names.emplace_back(n); });
  REQUIRE(names ==
          std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight"});
  names.clear();
  net.visit_buffers([&](std::string_view n, tensor<float>&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"3.running_mean", "3.running_var"});

  const auto x = test::random_tensor<float>({4, 3, 2, 2}, 12);
  net.train(false);
  REQUIRE(!net.layer<4>().training());
  const tensor<float> y = net.forward(x);
  auto copy = net.replica();
  const tensor<float> y2 = copy.forward(x);
  REQUIRE(meld::sum(meld::abs(y - y2)) == 0.f);
  // The replica is independent.
  copy.layer<1>().weight() += 1.f;
  REQUIRE(meld::sum(meld::abs(net.forward(x) - y)) == 0.f);

  // Backward: with the input gradient by default; without it, the same parameter gradients.
  const auto g = test::random_tensor<float>({4, 3}, 13);
  net.zero_grad();
  const tensor<float> dx = net.backward(g);
  REQUIRE(dx.shape() == x.shape());
  const auto full = nn_test::snapshot(net, true);
  net.zero_grad();
  net.requires_input_grad(false);
  REQUIRE(net.backward(g).size() == 0);
  REQUIRE(nn_test::snapshot(net, true) == full);
  // Errors name the layer.
  REQUIRE_THAT(test::message_of<meld::shape_error>([&] {
                 net.forward(tensor<float>({4, 13}));
               }),
               Catch::Matchers::Contains("linear(12 -> 8)"));
  nn::linear<float> fresh(3, 2);
  REQUIRE_THROWS_AS(fresh.backward(tensor<float>({1, 2})), std::logic_error);
}

TEST_CASE("initialization: Xavier and Kaiming bounds and variances, seeded", "[nn]") {
  meld::rng gen(1);
  tensor<double> w({400, 300});
  nn::xavier_uniform{}(w, gen);
  const double a = std::sqrt(6.0 / 700);
  REQUIRE(meld::max(meld::abs(w)) <= a);
  REQUIRE(meld::mean(meld::square(w)) == Approx(a * a / 3).epsilon(0.02));
  nn::kaiming_normal{}(w, gen);
  REQUIRE(meld::mean(meld::square(w)) == Approx(2.0 / 300).epsilon(0.02));
  nn::kaiming_uniform{}(w, gen);
  REQUIRE(meld::max(meld::abs(w)) <= std::sqrt(6.0 / 300));
  nn::xavier_normal{2.0}(w, gen);
  REQUIRE(meld::mean(meld::square(w)) == Approx(4 * 2.0 / 700).epsilon(0.02));
  tensor<double> conv({8, 4, 3, 3});  // fan_in 36, fan_out 72
  nn::kaiming_normal{}(conv, gen);
  REQUIRE(meld::mean(meld::square(conv)) == Approx(2.0 / 36).epsilon(0.1));

  // A whole model: weights from one stream, biases kept; the same seed gives the same model.
  auto make = [] {
    return nn::sequential(nn::linear<float>(5, 4), nn::relu<float>(), nn::linear<float>(4, 5));
  };
  auto m1 = make(), m2 = make();
  m1.layer<0>().bias() = 3.f;
  nn::initialize(m1, nn::xavier_uniform{}, 42);
  nn::initialize(m2, nn::xavier_uniform{}, 42);
  REQUIRE(meld::sum(meld::abs(m1.layer<0>().weight() - m2.layer<0>().weight())) == 0.f);
  REQUIRE(meld::sum(meld::abs(m1.layer<2>().weight() - m2.layer<2>().weight())) == 0.f);
  // Same-shape layers get different draws (one stream).
  REQUIRE(meld::sum(meld::abs(m1.layer<0>().weight() - m1.layer<2>().weight().transpose())) > 0.f);
  REQUIRE(meld::min(m1.layer<0>().bias()) == 3.f);
  nn::initialize(m2, nn::xavier_uniform{}, 43);
  REQUIRE(meld::sum(meld::abs(m1.layer<0>().weight() - m2.layer<0>().weight())) > 0.f);
}
