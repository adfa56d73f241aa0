// Forward passes of the dense layers, activations, dropout, flatten, batch normalization and the
// loss against naive references; the sequential container; errors. On every backend: the
// operands are made on the host, the references are computed from those host copies (plain loops,
// written once for the host), and the results come back through test::host.
#include <array>
#include <cmath>
#include <limits>

#include "../backends.hpp"
#include "nn_support.hpp"

namespace nn = meld::nn;
using meld::index_t;
using meld::shape_t;
using meld::tensor;
using nn_test::max_abs;
using nn_test::mean_square;
using nn_test::require_close;
using nn_test::require_equal;
using nn_test::sum_abs_diff;

namespace {

// x W^T + b for x {n, in}, W {out, in}, b {out} (or empty).
tensor<double> naive_linear(const tensor<float>& x, const tensor<float>& w,
                            const tensor<float>& b) {
  const index_t n = x.shape()[0], in = x.shape()[1], out = w.shape()[0];
  tensor<double> y({n, out});
  for (index_t i = 0; i < n; ++i)
    for (index_t o = 0; o < out; ++o) {
      double s = b.size() ? b(o) : 0.0;
      for (index_t k = 0; k < in; ++k) s += double(x(i, k)) * w(o, k);
      y(i, o) = s;
    }
  return y;
}

// times * g^T x, the weight gradient of `times` backward passes with g {n, out}, x {n, in}.
tensor<double> naive_weight_grad(const tensor<float>& g, const tensor<float>& x, double times) {
  const index_t n = g.shape()[0], out = g.shape()[1], in = x.shape()[1];
  tensor<double> dw({out, in});
  for (index_t o = 0; o < out; ++o)
    for (index_t k = 0; k < in; ++k) {
      double s = 0;
      for (index_t i = 0; i < n; ++i) s += double(g(i, o)) * x(i, k);
      dw(o, k) = times * s;
    }
  return dw;
}

// The column sums of g {n, out}: the bias gradient.
tensor<double> naive_bias_grad(const tensor<float>& g) {
  tensor<double> db({g.shape()[1]});
  for (index_t i = 0; i < g.shape()[0]; ++i)
    for (index_t o = 0; o < g.shape()[1]; ++o) db(o) += g(i, o);
  return db;
}

// g W: the input gradient, {n, in}.
tensor<double> naive_input_grad(const tensor<float>& g, const tensor<float>& w) {
  const index_t n = g.shape()[0], out = g.shape()[1], in = w.shape()[1];
  tensor<double> dx({n, in});
  for (index_t i = 0; i < n; ++i)
    for (index_t k = 0; k < in; ++k) {
      double s = 0;
      for (index_t o = 0; o < out; ++o) s += double(g(i, o)) * w(o, k);
      dx(i, k) = s;
    }
  return dx;
}

double relu_ref(double x) {
  return std::max(0.0, x);
}
double sigmoid_ref(double x) {
  return 1 / (1 + std::exp(-x));
}
double tanh_ref(double x) {
  return std::tanh(x);
}
double relu_grad_ref(double x, double g) {
  return x > 0 ? g : 0.0;
}
double sigmoid_grad_ref(double x, double g) {
  const double y = sigmoid_ref(x);
  return g * y * (1 - y);
}
double tanh_grad_ref(double x, double g) {
  const double y = std::tanh(x);
  return g * (1 - y * y);
}

// f applied to every element of x (and of g beside it).
tensor<double> map_ref(const tensor<double>& x, double (*f)(double)) {
  tensor<double> y(x.shape());
  for (index_t i = 0; i < x.size(); ++i) y.data()[i] = f(x.data()[i]);
  return y;
}
tensor<double> map_ref(const tensor<double>& x, const tensor<double>& g,
                       double (*f)(double, double)) {
  tensor<double> y(x.shape());
  for (index_t i = 0; i < x.size(); ++i) y.data()[i] = f(x.data()[i], g.data()[i]);
  return y;
}

// The mean and (biased) variance of each channel of x {n, c, h, w}.
struct channel_stats {
  std::vector<double> mean, var;
};
channel_stats naive_stats(const tensor<double>& x) {
  const index_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  channel_stats st{std::vector<double>(std::size_t(c)), std::vector<double>(std::size_t(c))};
  const double m = double(n * h * w);
  for (index_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t a = 0; a < h; ++a)
        for (index_t b = 0; b < w; ++b) s += x(i, ch, a, b);
    const double mean = s / m;
    for (index_t i = 0; i < n; ++i)
      for (index_t a = 0; a < h; ++a)
        for (index_t b = 0; b < w; ++b) s2 += (x(i, ch, a, b) - mean) * (x(i, ch, a, b) - mean);
    st.mean[std::size_t(ch)] = mean;
    st.var[std::size_t(ch)] = s2 / m;
  }
  return st;
}

// gamma (x - mean) / sqrt(var + eps) + beta per channel.
tensor<double> naive_batch_norm(const tensor<double>& x, const tensor<double>& gamma,
                                const tensor<double>& beta, const std::vector<double>& mean,
                                const std::vector<double>& var, double eps) {
  tensor<double> y(x.shape());
  test::for_each_index(x.shape(), [&](const test::index_list& i) {
    const index_t ch = i[1];
    const auto c = std::size_t(ch);
    y(i[0], ch, i[2], i[3]) =
        gamma(ch) * (x(i[0], ch, i[2], i[3]) - mean[c]) / std::sqrt(var[c] + eps) + beta(ch);
  });
  return y;
}

// The mean softmax cross-entropy of the float logits z {n, classes} (taken exactly as stored) for
// class indices t, in double with each row shifted by its maximum; grad becomes its gradient
// (softmax - onehot) / n.
double naive_cross_entropy(const tensor<float>& z, const tensor<std::int64_t>& t,
                           tensor<double>& grad) {
  const index_t n = z.shape()[0], k = z.shape()[1];
  grad = tensor<double>({n, k});
  double loss = 0;
  for (index_t i = 0; i < n; ++i) {
    double m = double(z(i, 0)), s = 0;
    for (index_t j = 1; j < k; ++j) m = std::max(m, double(z(i, j)));
    for (index_t j = 0; j < k; ++j) s += std::exp(double(z(i, j)) - m);
    loss += std::log(s) - (double(z(i, t(i))) - m);
    for (index_t j = 0; j < k; ++j)
      grad(i, j) = (std::exp(double(z(i, j)) - m) / s - (j == t(i) ? 1 : 0)) / double(n);
  }
  return loss / double(n);
}

// The weights of the initialization test's model made on the host and initialized from `seed`.
std::array<tensor<float>, 2> host_model_weights(std::uint64_t seed) {
  auto m = nn::sequential(nn::linear<float>(5, 4), nn::relu<float>(), nn::linear<float>(4, 5));
  nn::initialize(m, nn::xavier_uniform{}, seed);
  return {std::move(m.layer<0>().weight()), std::move(m.layer<2>().weight())};
}

}  // namespace

BACKEND_TEST_CASE("linear: forward is x W^T + b, backward accumulates parameter gradients",
                  "[nn]") {
  nn::linear<float, B> fc(7, 5, {.seed = 1});
  const auto hb = test::random_tensor<float>({5}, 2);
  fc.bias() = test::on<B>(hb);
  const auto hx = test::random_tensor<float>({4, 7}, 3);
  const auto x = test::on<B>(hx);
  const tensor<float, B> y = fc.forward(x);
  REQUIRE(y.shape() == shape_t{4, 5});
  const tensor<float> w = test::host(fc.weight());
  require_close(test::host(y), naive_linear(hx, w, hb), 1e-5);
  // The seed gives the weight a host layer draws from it.
  require_equal(w, nn::linear<float>(7, 5, {.seed = 1}).weight());
  // Default initialization: U(+-1/sqrt(in)), the bias 0.
  nn::linear<float, B> fresh(100, 50);
  const tensor<float> fresh_w = test::host(fresh.weight());
  REQUIRE(max_abs(fresh_w) <= 0.1f);
  REQUIRE(max_abs(fresh_w) > 0.09f);
  REQUIRE(max_abs(test::host(fresh.bias())) == 0);

  // Two backward passes add up; zero_grad clears.
  const auto hg = test::random_tensor<float>({4, 5}, 4);
  const auto g = test::on<B>(hg);
  fc.zero_grad();
  require_close(test::host(fc.backward(g)), naive_input_grad(hg, w), 1e-5);
  const tensor<float> once = test::host(fc.weight_grad());
  require_close(once, naive_weight_grad(hg, hx, 1), 1e-5);
  require_close(test::host(fc.bias_grad()), naive_bias_grad(hg), 1e-5);
  fc.backward(g);
  const tensor<float> twice = test::host(fc.weight_grad());
  require_close(twice, naive_weight_grad(hg, hx, 2), 1e-5);
  require_close(once, tensor<float>(twice * 0.5f), 1e-5);
  fc.zero_grad();
  REQUIRE(max_abs(test::host(fc.weight_grad())) == 0);
  // Without the input gradient: parameters only (the same), an empty tensor back.
  REQUIRE(fc.backward(g, false).size() == 0);
  require_equal(test::host(fc.weight_grad()), once);
}

BACKEND_TEST_CASE("linear in bfloat16 precision: products of the rounded operands, float results",
                  "[nn][bfloat16]") {
  const auto rounded = nn_test::rounded_to_bfloat16;
  nn::linear<float, B> fc(37, 23, {.seed = 1, .precision = nn::precision::bfloat16});
  REQUIRE(fc.replica().precision() == nn::precision::bfloat16);
  const auto hb = test::random_tensor<float>({23}, 2);
  fc.bias() = test::on<B>(hb);
  const auto hx = test::random_tensor<float>({9, 37}, 3);
  const tensor<float, B> y = fc.forward(test::on<B>(hx));
  const tensor<float> w = test::host(fc.weight());  // the float master weights, unchanged
  require_close(test::host(y), naive_linear(rounded(hx), rounded(w), hb), 1e-5);
  // The rounding shows: the float layer's output differs.
  const tensor<double> y_double = meld::cast<double>(test::host(y));
  REQUIRE(sum_abs_diff(y_double, naive_linear(hx, w, hb)) > 1e-3);

  const auto hg = test::random_tensor<float>({9, 23}, 4);
  fc.zero_grad();
  require_close(test::host(fc.backward(test::on<B>(hg))), naive_input_grad(rounded(hg), rounded(w)),
                1e-5);
  require_close(test::host(fc.weight_grad()), naive_weight_grad(rounded(hg), rounded(hx), 1), 1e-5);
  require_close(test::host(fc.bias_grad()), naive_bias_grad(hg), 1e-5);  // from the float gradient
}

SYNC_BACKEND_TEST_CASE("activations match std:: functions", "[nn]") {
  const auto hx = test::random_tensor<double>({3, 17}, 5, -6, 6);
  const auto hg = test::random_tensor<double>({3, 17}, 6);
  const auto x = test::on<B>(hx), g = test::on<B>(hg);
  nn::relu<double, B> r;
  nn::sigmoid<double, B> s;
  nn::tanh<double, B> t;
  require_close(test::host(r.forward(x)), map_ref(hx, relu_ref), 1e-14);
  require_close(test::host(s.forward(x)), map_ref(hx, sigmoid_ref), 1e-14);
  require_close(test::host(t.forward(x)), map_ref(hx, tanh_ref), 1e-14);
  require_close(test::host(r.backward(g)), map_ref(hx, hg, relu_grad_ref), 1e-14);
  require_close(test::host(s.backward(g)), map_ref(hx, hg, sigmoid_grad_ref), 1e-12);
  require_close(test::host(t.backward(g)), map_ref(hx, hg, tanh_grad_ref), 1e-12);
}

BACKEND_TEST_CASE("dropout: rate, scaling, seeded masks, identity in evaluation", "[nn]") {
  using dropout = nn::dropout<float, B>;
  dropout d(0.3, /*seed=*/5);
  const tensor<float> hx = meld::full<float>({200, 500}, 2.f);
  const auto x = test::on<B>(hx);
  const tensor<float> y = test::host(d.forward(x));
  const float top = static_cast<float>(max_abs(y));
  index_t kept = 0, other = 0;
  for (const float v : y) {
    kept += v != 0.f;
    other += v != 0.f && v != top;  // each 0 or 2 / 0.7
  }
  REQUIRE(double(kept) / double(y.size()) == Approx(0.7).margin(0.005));  // 5 sigma ~ 0.007
  REQUIRE(top == Approx(2.f / 0.7f));
  REQUIRE(other == 0);
  // The gradient passes exactly where the input did.
  const tensor<float> dx = test::host(d.backward(meld::ones<float, B>({200, 500})));
  REQUIRE(sum_abs_diff(tensor<float>(dx * 2.f), y) == Approx(0).margin(1e-3));
  // The masks of a host dropout with the same seed: the same on every backend.
  nn::dropout<float> on_host(0.3, 5);
  require_equal(y, on_host.forward(hx));
  require_equal(dx, on_host.backward(meld::ones<float>({200, 500})));
  // The same seed gives the same masks; the next draw differs.
  dropout same(0.3, 5);
  const tensor<float> y2 = test::host(same.forward(x)), y3 = test::host(same.forward(x));
  require_equal(y2, y);
  REQUIRE(sum_abs_diff(y3, y) > 0);
  // A replica continues the same stream.
  auto rep = same.replica();
  const tensor<float> a = test::host(same.forward(x)), b = test::host(rep.forward(x));
  require_equal(a, b);
  d.train(false);
  require_equal(test::host(d.forward(x)), hx);
  REQUIRE_THROWS_AS(dropout(1.0), std::invalid_argument);
  REQUIRE_THROWS_AS(dropout(-0.1), std::invalid_argument);
}

BACKEND_TEST_CASE("flatten keeps the batch axis and restores the shape in backward", "[nn]") {
  nn::flatten<float, B> f;
  const auto hx = test::random_tensor<float>({3, 2, 4, 5}, 7);
  const auto x = test::on<B>(hx);
  const tensor<float, B> y = f.forward(x);
  REQUIRE(y.shape() == shape_t{3, 40});
  const tensor<float> hy = test::host(y);
  REQUIRE(hy(2, 39) == hx(2, 1, 3, 4));
  require_equal(hy, tensor<float>(hx.reshape({3, 40})));
  const tensor<float, B> dx = f.backward(y);
  REQUIRE(dx.shape() == x.shape());
  require_equal(test::host(dx), hx);
  REQUIRE_THROWS_AS(f.backward(x), meld::shape_error);
}

BACKEND_TEST_CASE("flatten hands linear a view in sequential: the copying path's numbers", "[nn]") {
  using tensor_b = tensor<float, B>;
  static_assert(nn::detail::view_handoff<nn::flatten<float, B>, nn::linear<float, B>, tensor_b>);
  static_assert(!nn::detail::view_handoff<nn::flatten<float, B>, nn::relu<float, B>, tensor_b>);
  const auto x = test::on<B>(test::random_tensor<float>({5, 2, 3, 2}, 21));
  nn::flatten<float, B> f;
  const meld::tensor_view<const float, B> v = f.forward_view(x);  // x's elements, not a copy
  REQUIRE(v.shape() == shape_t{5, 12});
  REQUIRE(v.raw_data() == x.raw_data());

  // The same weights in a sequential (view handed on) and in layers called one by one (copies).
  auto net = nn::sequential(nn::flatten<float, B>(), nn::linear<float, B>(12, 4, {.seed = 3}),
                            nn::relu<float, B>(), nn::flatten<float, B>(),
                            nn::linear<float, B>(4, 3, {.seed = 4}));
  nn::flatten<float, B> f1, f2;
  nn::linear<float, B> l1(12, 4, {.seed = 3}), l2(4, 3, {.seed = 4});
  nn::relu<float, B> r;
  const tensor<float> y = test::host(net.forward(x));
  const tensor_b y_layers = l2.forward(f2.forward(r.forward(l1.forward(f1.forward(x)))));
  require_equal(y, test::host(y_layers));

  const auto g = test::on<B>(test::random_tensor<float>({5, 3}, 22));
  net.zero_grad();
  const tensor_b dx = net.backward(g);
  l1.zero_grad();
  l2.zero_grad();
  const tensor_b dx_layers = f1.backward(l1.backward(r.backward(f2.backward(l2.backward(g)))));
  require_equal(test::host(dx), test::host(dx_layers));
  require_equal(test::host(net.template layer<1>().weight_grad()), test::host(l1.weight_grad()));
  require_equal(test::host(net.template layer<4>().weight_grad()), test::host(l2.weight_grad()));
}

BACKEND_TEST_CASE("batch_norm: batch statistics, running statistics, evaluation mode", "[nn]") {
  using tensor_b = tensor<double, B>;
  const index_t n = 8, c = 3;
  nn::batch_norm<double, B> bn(c, {.momentum = 0.2, .eps = 1e-3});
  const auto gamma = test::random_tensor<double>({c}, 8, 0.5, 2);
  const auto beta = test::random_tensor<double>({c}, 9);
  bn.weight() = test::on<B>(gamma);
  bn.bias() = test::on<B>(beta);
  const auto hx = test::random_tensor<double>({n, c, 2, 3}, 10, -3, 5);
  const auto x = test::on<B>(hx);
  const channel_stats st = naive_stats(hx);
  require_close(test::host(bn.forward(x)), naive_batch_norm(hx, gamma, beta, st.mean, st.var, 1e-3),
                1e-12);
  const tensor<double> running_mean = test::host(bn.running_mean());
  const tensor<double> running_var = test::host(bn.running_var());
  const index_t m = n * 6;
  for (index_t ch = 0; ch < c; ++ch) {
    const auto i = std::size_t(ch);
    REQUIRE(running_mean(ch) == Approx(0.2 * st.mean[i]).epsilon(1e-12));
    REQUIRE(running_var(ch) == Approx(0.8 + 0.2 * st.var[i] * m / (m - 1)).epsilon(1e-12));
  }
  bn.train(false);
  require_close(test::host(bn.forward(x)),
                naive_batch_norm(hx, gamma, beta, nn_test::values(running_mean),
                                 nn_test::values(running_var), 1e-3),
                1e-12);
  // Buffers are visited by name; evaluation leaves them alone.
  std::vector<std::string> names;
  bn.visit_buffers([&](std::string_view name, tensor_b&) { names.emplace_back(name); });
  REQUIRE(names == std::vector<std::string>{"running_mean", "running_var"});
  require_equal(test::host(bn.running_mean()), running_mean);
  require_equal(test::host(bn.running_var()), running_var);
  nn::batch_norm<double, B> one(2);
  REQUIRE_THROWS_AS(one.forward(tensor_b({1, 2})), meld::shape_error);  // 1 value each
  REQUIRE_THROWS_AS(one.forward(tensor_b({4, 3})), meld::shape_error);
}

BACKEND_TEST_CASE("softmax cross-entropy: masked classes (-inf) and logits at FLT_MAX", "[nn]") {
  const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
  tensor<float> hz({4, 3});
  const float rows[4][3] = {{2, -inf, 1}, {big, -big, big}, {0, -inf, -inf}, {-inf, 5, -big}};
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) hz(i, j) = rows[i][j];
  tensor<std::int64_t> ht({4});
  ht(0) = 0, ht(1) = 2, ht(2) = 0, ht(3) = 1;
  tensor<float, B> grad;
  const double loss = nn::cross_entropy(test::on<B>(hz), test::on<B>(ht), grad);
  tensor<double> want_grad;
  const double want = naive_cross_entropy(hz, ht, want_grad);  // in double: nothing overflows
  REQUIRE(std::isfinite(loss));
  REQUIRE(loss == Approx(want).epsilon(1e-6));
  REQUIRE(want == Approx((std::log1p(std::exp(-1.0)) + std::log(2.0)) / 4).epsilon(1e-12));
  require_close(test::host(grad), want_grad, 1e-6);
  REQUIRE(double(nn::cross_entropy(test::on<B>(hz), test::on<B>(ht))) == loss);
}

BACKEND_TEST_CASE("softmax cross-entropy matches a naive log-softmax and stays finite", "[nn]") {
  using logits = tensor<float, B>;
  using classes = tensor<std::int64_t, B>;
  const auto hz = test::random_tensor<float>({6, 5}, 11, -4, 4);
  tensor<std::int64_t> ht({6});
  for (int i = 0; i < 6; ++i) ht(i) = (i * 2 + 1) % 5;
  logits grad;
  const double loss = nn::cross_entropy(test::on<B>(hz), test::on<B>(ht), grad);
  tensor<double> want_grad;
  const double want = naive_cross_entropy(hz, ht, want_grad);
  REQUIRE(loss == Approx(want).epsilon(1e-6));
  require_close(test::host(grad), want_grad, 1e-6);
  // Huge logits: log-sum-exp keeps it finite and exact.
  tensor<float> hbig({2, 3});
  hbig(0, 0) = 1000.f;
  hbig(0, 1) = -1000.f;
  hbig(1, 2) = 3e4f;
  tensor<std::int64_t> hbt({2});
  hbt(0) = 1;
  hbt(1) = 2;
  const auto big = test::on<B>(hbig);
  const double l = nn::cross_entropy(big, test::on<B>(hbt), grad);
  REQUIRE(std::isfinite(l));
  REQUIRE(l == Approx((2000.0 + 0.0) / 2).epsilon(1e-6));
  REQUIRE(std::isfinite(sum_abs_diff(test::host(grad), tensor<float>({2, 3}))));  // sum |grad|
  // The loss alone is the same number.
  REQUIRE(double(nn::cross_entropy(big, test::on<B>(hbt))) == l);
  // Class indices out of range: the host backends throw at the call; a device backend throws
  // when the loss is read (the check rides along with the loss).
  for (const std::int64_t bad : {std::int64_t(3), std::int64_t(-1)}) {
    INFO("class index " << bad);
    hbt(1) = bad;
    const classes bt = test::on<B>(hbt);
    if constexpr (B::host_accessible) {
      REQUIRE_THROWS_AS(nn::cross_entropy(big, bt, grad), std::out_of_range);
      REQUIRE_THROWS_AS(nn::cross_entropy(big, bt), std::out_of_range);
      REQUIRE_THAT(test::message_of<std::out_of_range>([&] { nn::cross_entropy(big, bt, grad); }),
                   Catch::Matchers::Contains("is outside [0, 3)"));
    } else {
      const auto with_grad = nn::cross_entropy(big, bt, grad);  // no error yet
      const auto alone = nn::cross_entropy(big, bt);
      REQUIRE_THROWS_AS(with_grad.get(), std::out_of_range);
      REQUIRE_THROWS_AS(static_cast<double>(with_grad), std::out_of_range);
      REQUIRE_THROWS_AS(alone.get(), std::out_of_range);
      REQUIRE_THAT(test::message_of<std::out_of_range>([&] { with_grad.get(); }),
                   Catch::Matchers::Contains("1 class indices were outside [0, 3)"));
    }
  }
  REQUIRE_THROWS_AS(nn::cross_entropy(big, classes({3}), grad), meld::shape_error);
  REQUIRE_THROWS_AS(nn::cross_entropy(logits({3}), classes({3}), grad), meld::shape_error);
  REQUIRE(nn::correct_predictions(big, classes({2})) == 1);
}

BACKEND_TEST_CASE("cross-entropy keeps its precision for logits of any magnitude", "[nn]") {
  // Logits s + {0, 0.5, 1} with target 0 (issue 13: the loss was 1.6875 at 1e6, 2.0 at 1e7 and
  // 0 at 1e8). The reference takes the float logits exactly as stored and works in double.
  for (float s : {0.f, 1e6f, 1e7f, 1e8f, -1e8f, 3e38f}) {
    INFO("s = " << s);
    tensor<float> hz({1, 3});
    hz(0, 0) = s;
    hz(0, 1) = s + 0.5f;
    hz(0, 2) = s + 1.f;
    const tensor<std::int64_t> ht({1});  // class 0
    tensor<double> want_grad;
    const double want = naive_cross_entropy(hz, ht, want_grad);
    tensor<float, B> grad;
    const double loss = nn::cross_entropy(test::on<B>(hz), test::on<B>(ht), grad);
    REQUIRE(loss == Approx(want).epsilon(1e-6));
    // Each gradient row sums to 0 (softmax sums to 1, minus the one-hot).
    const tensor<float> hg = test::host(grad);
    REQUIRE(std::abs(double(hg(0, 0)) + hg(0, 1) + hg(0, 2)) < 1e-6);
    require_close(hg, want_grad, 1e-6);
  }
}

BACKEND_TEST_CASE("sequential: names, order, modes, replicas, input gradient switch", "[nn]") {
  using tensor_b = tensor<float, B>;
  auto net =
      nn::sequential(nn::flatten<float, B>(), nn::linear<float, B>(12, 8), nn::relu<float, B>(),
                     nn::batch_norm<float, B>(8), nn::dropout<float, B>(0.5),
                     nn::linear<float, B>(8, 3, {.bias = false}));
  static_assert(nn::model<decltype(net)>);
  std::vector<std::string> names;
  net.visit_parameters([&](std::string_view n, tensor_b&, tensor_b&) { names.emplace_back(n); });
  REQUIRE(names ==
          std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight"});
  names.clear();
  net.visit_buffers([&](std::string_view n, tensor_b&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"3.running_mean", "3.running_var"});

  const auto x = test::on<B>(test::random_tensor<float>({4, 3, 2, 2}, 12));
  net.train(false);
  REQUIRE(!net.template layer<4>().training());
  const tensor<float> y = test::host(net.forward(x));
  auto copy = net.replica();
  require_equal(test::host(copy.forward(x)), y);
  // The replica is independent.
  copy.template layer<1>().weight() += 1.f;
  REQUIRE(sum_abs_diff(test::host(copy.forward(x)), y) > 0);
  require_equal(test::host(net.forward(x)), y);

  // Backward: with the input gradient by default; without it, the same parameter gradients.
  const auto g = test::on<B>(test::random_tensor<float>({4, 3}, 13));
  net.zero_grad();
  const tensor_b dx = net.backward(g);
  REQUIRE(dx.shape() == x.shape());
  const auto full = nn_test::snapshot(net, true);
  net.zero_grad();
  net.requires_input_grad(false);
  REQUIRE(net.backward(g).size() == 0);
  REQUIRE(nn_test::snapshot(net, true) == full);
  // Errors name the layer.
  REQUIRE_THAT(test::message_of<meld::shape_error>([&] {
                 net.forward(tensor_b({4, 13}));
               }),
               Catch::Matchers::Contains("linear(12 -> 8)"));
  nn::linear<float, B> fresh(3, 2);
  REQUIRE_THROWS_AS(fresh.backward(tensor_b({1, 2})), std::logic_error);
}

BACKEND_TEST_CASE("initialization: Xavier and Kaiming bounds and variances, seeded", "[nn]") {
  meld::rng gen(1);
  tensor<double, B> w({400, 300});
  nn::xavier_uniform{}(w, gen);
  const tensor<double> hw = test::host(w);
  const double a = std::sqrt(6.0 / 700);
  REQUIRE(max_abs(hw) <= a);
  REQUIRE(mean_square(hw) == Approx(a * a / 3).epsilon(0.02));
  // The same draws as on the host.
  meld::rng host_gen(1);
  tensor<double> drawn_on_host({400, 300});
  nn::xavier_uniform{}(drawn_on_host, host_gen);
  require_equal(hw, drawn_on_host);
  nn::kaiming_normal{}(w, gen);
  REQUIRE(mean_square(test::host(w)) == Approx(2.0 / 300).epsilon(0.02));
  nn::kaiming_uniform{}(w, gen);
  REQUIRE(max_abs(test::host(w)) <= std::sqrt(6.0 / 300));
  nn::xavier_normal{2.0}(w, gen);
  REQUIRE(mean_square(test::host(w)) == Approx(4 * 2.0 / 700).epsilon(0.02));
  tensor<double, B> conv({8, 4, 3, 3});  // fan_in 36, fan_out 72
  nn::kaiming_normal{}(conv, gen);
  REQUIRE(mean_square(test::host(conv)) == Approx(2.0 / 36).epsilon(0.1));

  // A whole model: weights from one stream, biases kept; the same seed gives the same model, on
  // every backend.
  auto make = [] {
    return nn::sequential(nn::linear<float, B>(5, 4), nn::relu<float, B>(),
                          nn::linear<float, B>(4, 5));
  };
  auto m1 = make(), m2 = make();
  m1.template layer<0>().bias() = 3.f;
  nn::initialize(m1, nn::xavier_uniform{}, 42);
  nn::initialize(m2, nn::xavier_uniform{}, 42);
  const tensor<float> w0 = test::host(m1.template layer<0>().weight());
  const tensor<float> w2 = test::host(m1.template layer<2>().weight());
  require_equal(test::host(m2.template layer<0>().weight()), w0);
  require_equal(test::host(m2.template layer<2>().weight()), w2);
  const auto on_host = host_model_weights(42);
  require_equal(w0, on_host[0]);
  require_equal(w2, on_host[1]);
  // Same-shape layers get different draws (one stream).
  REQUIRE(sum_abs_diff(w0, tensor<float>(w2.transpose())) > 0);
  require_equal(test::host(m1.template layer<0>().bias()), meld::full<float>({4}, 3.f));
  nn::initialize(m2, nn::xavier_uniform{}, 43);
  REQUIRE(sum_abs_diff(test::host(m2.template layer<0>().weight()), w0) > 0);
}
