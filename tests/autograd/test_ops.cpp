// Reductions, matmul, views, log_softmax and the losses of autograd: gradients against finite
// differences, values and gradients against independent references, and the custom-function API.
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <meld/nn/cross_entropy.hpp>

#include "autograd_support.hpp"

namespace ag = meld::autograd;
using meld::tensor;

namespace {
// Every element of got equals want's (tensors of any backend) within tol.
template <class X, class Y>
void require_same_values(const X& got, const Y& want, double tol) {
  const auto w = test::host(want);
  REQUIRE(got.shape() == w.shape());
  test::check_elements(
      got, [&](const auto& i) { return test::at(w, i); }, tol);
}
}  // namespace

SYNC_BACKEND_TEST_CASE("sum, mean, max and min, over everything and along axes", "[autograd]") {
  const auto in = test::random_inputs<B>({{3, 4, 5}}, 100);
  for (bool keep : {false, true})
    for (long axis : {0L, 1L, -1L}) {
      INFO("axis " << axis << " keepdims " << keep);
      test::require_gradcheck([&](const auto& v) { return ag::sum(v[0], axis, keep); }, in);
      test::require_gradcheck([&](const auto& v) { return ag::mean(v[0], axis, keep); }, in);
      test::require_gradcheck([&](const auto& v) { return ag::max(v[0], axis, keep); }, in);
      test::require_gradcheck([&](const auto& v) { return ag::min(v[0], axis, keep); }, in);
    }
  test::require_gradcheck([](const auto& v) { return ag::sum(v[0] * v[0]); }, in);
  test::require_gradcheck([](const auto& v) { return ag::mean(exp(v[0])); }, in);
  test::require_gradcheck([](const auto& v) { return ag::max(v[0]); }, in);
  test::require_gradcheck([](const auto& v) { return ag::min(v[0]); }, in);
  // A reduction's result is a device scalar of rank 0.
  auto x = test::leaf<B>(test::random_tensor<double>({3, 4}, 101));
  REQUIRE(ag::sum(x).shape() == meld::shape_t{});
}

BACKEND_TEST_CASE("max and min share the gradient among ties", "[autograd]") {
  tensor<double> h({2, 4});
  const double values[] = {1, 3, 3, 2, 5, 5, 5, 0};
  std::copy(values, values + 8, h.data());
  auto x = test::leaf<B>(h);
  ag::sum(ag::max(x, 1)).backward();
  const double want[] = {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
  test::check_elements(x.grad(), [&](const auto& i) { return want[i[0] * 4 + i[1]]; });
  x.zero_grad();
  ag::min(x).backward();
  test::check_elements(x.grad(), [&](const auto& i) { return i[0] == 1 && i[1] == 3 ? 1.0 : 0.0; });
}

SYNC_BACKEND_TEST_CASE("matmul: plain, batched, and with a shared operand", "[autograd]") {
  test::require_gradcheck([](const auto& v) { return ag::matmul(v[0], v[1]); },
                          test::random_inputs<B>({{3, 4}, {4, 2}}, 110));
  test::require_gradcheck([](const auto& v) { return ag::matmul(v[0], v[1]); },
                          test::random_inputs<B>({{2, 3, 4}, {2, 4, 5}}, 111));
  test::require_gradcheck([](const auto& v) { return ag::matmul(v[0], v[1]); },
                          test::random_inputs<B>({{3, 4}, {2, 4, 5}}, 112));
  test::require_gradcheck([](const auto& v) { return ag::matmul(v[0], v[1]); },
                          test::random_inputs<B>({{2, 3, 4}, {4, 5}}, 113));
  // An expression as an operand, and a constant (transposed view) as the other.
  const tensor<double, B> c = test::random_tensor<double, B>({5, 4}, 114);
  test::require_gradcheck([&](const auto& v) { return ag::matmul(tanh(v[0]), c.transpose()); },
                          test::random_inputs<B>({{3, 4}}, 115));
}

SYNC_BACKEND_TEST_CASE(
    "linear: with and without a bias, batched, and a parameter's gradient in place", "[autograd]") {
  // Leaves (gradients added in place), a rank-3 input, and expressions (gradients returned).
  test::require_gradcheck([](const auto& v) { return ag::linear(v[0], v[1], v[2]); },
                          test::random_inputs<B>({{5, 4}, {3, 4}, {3}}, 120));
  test::require_gradcheck([](const auto& v) { return ag::linear(v[0], v[1]); },
                          test::random_inputs<B>({{2, 5, 4}, {3, 4}}, 121));
  test::require_gradcheck(
      [](const auto& v) { return ag::linear(tanh(v[0]), 0.5 * v[1], v[2] * v[2]); },
      test::random_inputs<B>({{5, 4}, {3, 4}, {3}}, 122));
  // One input twice: both gradients are returned and added.
  test::require_gradcheck([](const auto& v) { return ag::linear(v[0], v[0]); },
                          test::random_inputs<B>({{4, 4}}, 123));

  // The value and the gradients against matmul's path, accumulated over two backward passes.
  const std::vector<tensor<double, B>> in = test::random_inputs<B>({{6, 4}, {3, 4}, {3}}, 124);
  const tensor<double, B> g = test::random_tensor<double, B>({6, 3}, 125);
  auto x = ag::variable<double, B>(tensor<double, B>(in[0]), true);
  auto w = ag::variable<double, B>(tensor<double, B>(in[1]), true);
  auto b = ag::variable<double, B>(tensor<double, B>(in[2]), true);
  auto x2 = ag::variable<double, B>(tensor<double, B>(in[0]), true);
  auto w2 = ag::variable<double, B>(tensor<double, B>(in[1]), true);
  auto b2 = ag::variable<double, B>(tensor<double, B>(in[2]), true);
  for (int pass = 0; pass < 2; ++pass) {
    ag::variable<double, B> y = ag::linear(x, w, b);
    ag::variable<double, B> y2 = ag::matmul(x2, ag::transpose(w2)) + b2;
    require_same_values(y.value(), y2.value(), 1e-12);
    y.backward(tensor<double, B>(g));
    y2.backward(tensor<double, B>(g));
  }
  require_same_values(x.grad(), x2.grad(), 1e-12);
  require_same_values(w.grad(), w2.grad(), 1e-12);
  require_same_values(b.grad(), b2.grad(), 1e-12);

  const std::string m =
      test::message_of<meld::shape_error>([&] { (void)ag::linear(x, ag::transpose(w)); });
  INFO(m);
  REQUIRE(m.find("autograd::linear") != std::string::npos);
  REQUIRE(m.find("{6, 4}") != std::string::npos);
  REQUIRE(m.find("{4, 3}") != std::string::npos);
  REQUIRE_THROWS_AS(ag::linear(x, w, x), meld::shape_error);
}

BACKEND_TEST_CASE("layers::linear draws nn::linear's weights; parameters() names layers",
                  "[autograd]") {
  ag::layers::linear<float, B> fc(7, 3, {.seed = 11});
  meld::nn::linear<float, B> ref(7, 3, {.seed = 11});
  require_same_values(fc.weight.value(), ref.weight(), 0);
  require_same_values(fc.bias.value(), ref.bias(), 0);
  ag::layers::linear<float, B> plain(7, 3, {.bias = false});
  REQUIRE_FALSE(plain.bias.defined());
  ag::variable<float, B> scale(tensor<float, B>({1}), true);
  std::vector<std::string> names;
  auto collect = [&](std::string_view name, ag::variable<float, B>& v) {
    names.emplace_back(name);
    REQUIRE(v.requires_grad());
  };
  ag::parameters(collect, "fc", fc, "scale", scale, "plain", plain);
  REQUIRE(names == std::vector<std::string>{"fc.weight", "fc.bias", "scale", "plain.weight"});
  using layer = ag::layers::linear<float, B>;
  REQUIRE_THROWS_AS(layer(0, 3), meld::shape_error);
}

SYNC_BACKEND_TEST_CASE("views: reshape, permute, transpose, squeeze, unsqueeze, slice",
                       "[autograd]") {
  using V = ag::variable<double, B>;
  const auto in = test::random_inputs<B>({{2, 3, 4}}, 120);
  const auto w = test::random_inputs<B>({{4, 6}}, 121);
  test::require_gradcheck([](const auto& v) { return ag::reshape(v[0], {4, -1}); }, in);
  test::require_gradcheck([](const auto& v) { return ag::permute(v[0], {2, 0, 1}); }, in);
  test::require_gradcheck([](const auto& v) { return ag::transpose(v[0]); }, in);
  test::require_gradcheck([](const auto& v) { return ag::squeeze(ag::unsqueeze(v[0], 1), 1); }, in);
  test::require_gradcheck(
      [](const auto& v) {
        return ag::slice(v[0], meld::range(1, 2), meld::range::every(-2), meld::range(0, 4, 3));
      },
      in);
  test::require_gradcheck([](const auto& v) { return ag::slice(v[0], 1); }, in);
  // A view inside a larger computation: an element of it used twice.
  test::require_gradcheck(
      [](const auto& v) {
        V t = ag::transpose(v[0]);
        return V(t * ag::slice(t, meld::range::every(-1)));
      },
      w);
  // Reshaped variables share their input's elements, and their gradients the output gradient's:
  // the gradients of two reshapes of one input and of the input itself meet in one sum.
  test::require_gradcheck(
      [](const auto& v) {
        V a = ag::reshape(v[0], {-1});
        V b = ag::reshape(ag::unsqueeze(v[0], 0), {6, 4});
        return V(v[0] * ag::reshape(exp(a), {2, 3, 4}) + ag::reshape(b * b, {2, 3, 4}));
      },
      in);
  const V x{tensor<double, B>(in[0]), true};
  const V r = ag::reshape(x, {4, -1});
  REQUIRE(r.shape() == meld::shape_t{4, 6});
  REQUIRE(r.value().storage_ptr() == x.value().storage_ptr());
  REQUIRE(ag::squeeze(ag::unsqueeze(x, 1), 1).value().storage_ptr() == x.value().storage_ptr());
  REQUIRE(ag::permute(x, {2, 0, 1}).value().storage_ptr() != x.value().storage_ptr());
  REQUIRE_THROWS_AS(ag::reshape(x, {5, -1}), meld::shape_error);
}

SYNC_BACKEND_TEST_CASE("log_softmax, softmax and cross_entropy", "[autograd]") {
  const auto in = test::random_inputs<B>({{4, 5}}, 130);
  test::require_gradcheck([](const auto& v) { return ag::log_softmax(v[0], 1); }, in);
  test::require_gradcheck([](const auto& v) { return ag::log_softmax(v[0], 0); }, in);
  test::require_gradcheck([](const auto& v) { return ag::softmax(v[0], -1); }, in);
  tensor<std::int64_t> ht({4});
  ht(0) = 2, ht(1) = 0, ht(2) = 4, ht(3) = 2;
  const tensor<std::int64_t, B> t = meld::to<B>(ht);
  test::require_gradcheck([&](const auto& v) { return ag::cross_entropy(v[0], t); }, in);
  // The same value and gradient as the hand-written nn::cross_entropy.
  const tensor<float, B> logits = test::random_tensor<float, B>({4, 5}, 131, -3, 3);
  tensor<float, B> grad;
  const double want = meld::nn::cross_entropy(logits, t, grad);
  ag::variable<float, B> z(tensor<float, B>(logits), true);
  auto loss = ag::cross_entropy(z, t);
  REQUIRE(test::host(loss.value()).item() == Approx(want).epsilon(1e-5));
  loss.backward();
  const auto g_ref = test::host(grad);
  test::check_elements(
      z.grad(), [&](const auto& i) { return test::at(g_ref, i); }, 1e-6);
}

SYNC_BACKEND_TEST_CASE("losses: values against naive loops, gradients against finite differences",
                       "[autograd]") {
  const auto hp = test::random_tensor<double>({3, 4}, 140),
             hy = test::random_tensor<double>({3, 4}, 141);
  const tensor<double, B> y = meld::to<B>(hy);
  const tensor<double, B> prob = meld::to<B>(test::random_tensor<double>({3, 4}, 142, 0, 1));
  auto p = test::leaf<B>(hp);
  auto naive = [&](auto&& f) {
    double s = 0;
    for (meld::index_t i = 0; i < hp.size(); ++i) s += f(hp.data()[i], hy.data()[i]);
    return s / static_cast<double>(hp.size());
  };
  auto value = [](const auto& v) { return test::host(v.value()).item(); };
  REQUIRE(value(ag::mse_loss(p, y)) ==
          Approx(naive([](double a, double b) { return (a - b) * (a - b); })));
  REQUIRE(value(ag::l1_loss(p, y)) ==
          Approx(naive([](double a, double b) { return std::abs(a - b); })));
  REQUIRE(value(ag::smooth_l1_loss(p, y, 0.5)) == Approx(naive([](double a, double b) {
            const double d = std::abs(a - b);
            return d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
          })));
  const auto hprob = test::host(prob);
  double bce = 0;
  for (meld::index_t i = 0; i < hp.size(); ++i) {
    const double x = hp.data()[i], t = hprob.data()[i], s = 1 / (1 + std::exp(-x));
    bce -= t * std::log(s) + (1 - t) * std::log(1 - s);
  }
  REQUIRE(value(ag::bce_with_logits_loss(p, prob)) == Approx(bce / static_cast<double>(hp.size())));
  const auto in = test::random_inputs<B>({{3, 4}}, 143);
  test::require_gradcheck([&](const auto& v) { return ag::mse_loss(v[0], y); }, in);
  test::require_gradcheck([&](const auto& v) { return ag::l1_loss(v[0], y); }, in);
  test::require_gradcheck([&](const auto& v) { return ag::smooth_l1_loss(v[0], y, 0.5); }, in);
  test::require_gradcheck([&](const auto& v) { return ag::bce_with_logits_loss(v[0], prob); }, in);
  tensor<std::int64_t> ht({3});
  ht(0) = 1, ht(1) = 3, ht(2) = 0;
  const tensor<std::int64_t, B> t = meld::to<B>(ht);
  test::require_gradcheck([&](const auto& v) { return ag::nll_loss(v[0], t); }, in);
  REQUIRE(value(ag::nll_loss(p, t)) == Approx(-(hp(0, 1) + hp(1, 3) + hp(2, 0)) / 3));
}

namespace {
// A user's primitive: x^3 with a hand-written backward.
struct cube {
  static constexpr const char* name = "cube";
  template <class T, class B>
  tensor<T, B> forward(ag::function_context<T, B>& ctx, const tensor<T, B>& x) {
    ctx.save_for_backward(x);
    return x * x * x;
  }
  template <class T, class B>
  std::array<tensor<T, B>, 1> backward(ag::function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& x = ctx.saved(0);
    return {tensor<T, B>(T(3) * g * x * x)};
  }
};
// Its backward returns the wrong shape.
struct broken {
  template <class T, class B>
  tensor<T, B> forward(ag::function_context<T, B>&, const tensor<T, B>& x, const tensor<T, B>&) {
    return tensor<T, B>(x);
  }
  template <class T, class B>
  std::array<tensor<T, B>, 2> backward(ag::function_context<T, B>&, const tensor<T, B>& g) {
    return {tensor<T, B>(g), tensor<T, B>({7})};
  }
};
}  // namespace

BACKEND_TEST_CASE("custom functions join the graph; a wrong gradient shape is named",
                  "[autograd]") {
  using V = ag::variable<double, B>;
  test::require_gradcheck([](const auto& v) { return V(ag::apply(cube{}, v[0]) * v[1]); },
                          test::random_inputs<B>({{2, 3}, {2, 3}}, 150));
  auto a = test::leaf<B>(test::random_tensor<double>({2}, 151));
  auto b = test::leaf<B>(test::random_tensor<double>({2}, 152));
  auto y = ag::sum(ag::apply(broken{}, a, b));
  const std::string m = test::message_of<meld::shape_error>([&] { y.backward(); });
  INFO(m);
  REQUIRE(m.find("a custom function") != std::string::npos);
  REQUIRE(m.find("input 1") != std::string::npos);
  REQUIRE(m.find("{7}") != std::string::npos);
}

HOST_TEST_CASE("gradcheck names the input and element that disagree", "[autograd]") {
  // A function whose backward is wrong on purpose: d/dx x^3 reported as 2 x^2.
  struct wrong_cube : cube {
    std::array<tensor<double>, 1> backward(ag::function_context<double, meld::cpu<>>& ctx,
                                           const tensor<double>& g) {
      const auto& x = ctx.saved(0);
      return {tensor<double>(2.0 * g * x * x)};
    }
  };
  std::vector<tensor<double>> in;
  in.push_back(test::random_tensor<double>({2, 2}, 160, 0.5, 1));
  in.push_back(test::random_tensor<double>({3}, 161));
  const auto r = ag::gradcheck(
      [](const auto& v) {
        return ag::variable<double>(ag::sum(v[1]) + ag::apply(wrong_cube{}, v[0]));
      },
      in);
  REQUIRE_FALSE(r.ok);
  INFO(r.message);
  REQUIRE(r.message.find("input 0") != std::string::npos);
  REQUIRE(r.message.find("element (0, 0)") != std::string::npos);
}
