// The fused backward of elementwise expressions: closed forms, every functor's rule against finite
// differences, broadcasting, a leaf used twice, accumulation, no_grad and the freed graph.
#include <cmath>
#include <stdexcept>

#include "autograd_support.hpp"

namespace ag = meld::autograd;
using meld::tensor;

BACKEND_TEST_CASE("the fused backward of a*x + exp(z)*sigmoid(w) matches its closed form",
                  "[autograd]") {
  const auto ha = test::random_tensor<double>({4, 5}, 1),
             hx = test::random_tensor<double>({4, 5}, 2),
             hz = test::random_tensor<double>({4, 5}, 3),
             hw = test::random_tensor<double>({4, 5}, 4),
             hg = test::random_tensor<double>({4, 5}, 5);
  auto a = test::leaf<B>(ha), x = test::leaf<B>(hx), z = test::leaf<B>(hz), w = test::leaf<B>(hw);
  ag::variable<double, B> y = a * x + exp(z) * sigmoid(w);
  REQUIRE(y.requires_grad());
  REQUIRE_FALSE(y.is_leaf());
  test::check_elements(y.value(), [&](const auto& i) {
    const double s = 1 / (1 + std::exp(-test::at(hw, i)));
    return test::at(ha, i) * test::at(hx, i) + std::exp(test::at(hz, i)) * s;
  });
  y.backward(meld::to<B>(hg));
  auto sig = [&](const auto& i) { return 1 / (1 + std::exp(-test::at(hw, i))); };
  test::check_elements(a.grad(), [&](const auto& i) { return test::at(hg, i) * test::at(hx, i); });
  test::check_elements(x.grad(), [&](const auto& i) { return test::at(hg, i) * test::at(ha, i); });
  test::check_elements(z.grad(), [&](const auto& i) {
    return test::at(hg, i) * std::exp(test::at(hz, i)) * sig(i);
  });
  test::check_elements(w.grad(), [&](const auto& i) {
    return test::at(hg, i) * std::exp(test::at(hz, i)) * sig(i) * (1 - sig(i));
  });
}

// On the host only: each rule is an expression, lowered on every backend as the cases around it
// show; one instantiation per backend of these ~30 checks would cost minutes of compile time. A
// catalog of values, with the loops of the cases around it: not in the AddressSanitizer build
// (MELD_TEST_NO_CATALOGS), where it was 72 of this file's 188 s of clang++.
#if !defined(MELD_TEST_NO_CATALOGS)
HOST_TEST_CASE("every elementwise function's derivative agrees with finite differences",
               "[autograd]") {
  using B = meld::cpu<meld::sync>;
  using V = ag::variable<double, B>;
  const auto any = test::random_inputs<B>({{3, 4}, {3, 4}}, 10);
  const auto positive = test::random_inputs<B>({{3, 4}, {3, 4}}, 20, 0.5, 2.0);
  // abs and relu away from their kink at 0: |values| in [0.2, 2), signs alternating.
  tensor<double> hk = test::random_tensor<double>({3, 4}, 30, 0.2, 2.0);
  for (meld::index_t i = 0; i < hk.size(); ++i) hk.data()[i] *= i % 2 ? -1 : 1;
  const std::vector<tensor<double, B>> kinked{meld::to<B>(hk)};
  test::require_gradcheck([](const auto& v) { return V(exp(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(log(v[0])); }, positive);
  test::require_gradcheck([](const auto& v) { return V(sqrt(v[0])); }, positive);
  test::require_gradcheck([](const auto& v) { return V(tanh(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(sin(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(cos(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(sigmoid(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(abs(v[0])); }, kinked);
  test::require_gradcheck([](const auto& v) { return V(square(v[0])); }, any);
  test::require_gradcheck([](const auto& v) { return V(relu(v[0])); }, kinked);
  test::require_gradcheck([](const auto& v) { return V(-v[0]); }, any);
  // Binary operations.
  test::require_gradcheck([](const auto& v) { return V(v[0] + v[1]); }, any);
  test::require_gradcheck([](const auto& v) { return V(v[0] - v[1]); }, any);
  test::require_gradcheck([](const auto& v) { return V(v[0] * v[1]); }, any);
  test::require_gradcheck([](const auto& v) { return V(v[0] / v[1]); }, positive);
  test::require_gradcheck([](const auto& v) { return V(maximum(v[0], v[1])); }, any);
  test::require_gradcheck([](const auto& v) { return V(minimum(v[0], v[1])); }, any);
  test::require_gradcheck([](const auto& v) { return V(pow(v[0], v[1])); }, positive);
  // Scalars on either side.
  test::require_gradcheck([](const auto& v) { return V(2.0 * v[0] - v[1] / 3.0 + 1.0); }, any);
  test::require_gradcheck([](const auto& v) { return V(pow(v[0], 3.0) + pow(2.0, v[1])); },
                          positive);
  // where: the gradient goes to the chosen branch; the comparison passes none.
  test::require_gradcheck([](const auto& v) { return V(where(v[0] > v[1], v[0] * v[1], v[1])); },
                          any);
}

#endif

BACKEND_TEST_CASE("maximum and minimum split the gradient of a tie", "[autograd]") {
  tensor<double> ha({3}), hb({3});
  ha(0) = 1, ha(1) = 2, ha(2) = 3;
  hb(0) = 2, hb(1) = 2, hb(2) = 1;
  auto a = test::leaf<B>(ha), b = test::leaf<B>(hb);
  ag::variable<double, B> y = maximum(a, b) + 10.0 * minimum(a, b);
  y.backward(meld::ones<double, B>({3}));
  const double da[] = {10, 5.5, 1}, db[] = {1, 5.5, 10};
  test::check_elements(a.grad(), [&](const auto& i) { return da[i[0]]; });
  test::check_elements(b.grad(), [&](const auto& i) { return db[i[0]]; });
}

SYNC_BACKEND_TEST_CASE("broadcast inputs get gradients summed over the broadcast axes",
                       "[autograd]") {
  using V = ag::variable<double, B>;
  // {5} and {3, 1} broadcast against {2, 3, 5}; a rank-0 input against everything.
  const auto in = test::random_inputs<B>({{2, 3, 5}, {5}, {3, 1}, {}}, 30);
  test::require_gradcheck(
      [](const auto& v) { return V(v[0] * v[1] + tanh(v[2]) * v[3] - v[1] * v[2]); }, in);
  // Closed form: d/db sum(x * b) = sum of x over the broadcast axes.
  const auto hx = test::random_tensor<double>({2, 3, 5}, 40),
             hb = test::random_tensor<double>({3, 1}, 41);
  auto x = test::leaf<B>(hx, false), b = test::leaf<B>(hb);
  ag::sum(x * b).backward();
  test::check_elements(b.grad(), [&](const auto& i) {
    double s = 0;
    for (meld::index_t p = 0; p < 2; ++p)
      for (meld::index_t q = 0; q < 5; ++q) s += hx(p, i[0], q);
    return s;
  });
}

SYNC_BACKEND_TEST_CASE("strided tensors inside a differentiated expression", "[autograd]") {
  using V = ag::variable<double, B>;
  // A constant read through a transposed, stepped view; a variable sliced with a negative step.
  const tensor<double, B> c = test::random_tensor<double, B>({6, 4}, 50);
  const auto in = test::random_inputs<B>({{4, 3}, {4, 6}}, 51);
  test::require_gradcheck(
      [&](const auto& v) {
        return V(v[0] * c.transpose().slice(meld::all, meld::range(0, 6, 2)) +
                 exp(ag::slice(v[1], meld::all, meld::range::every(-2))));
      },
      in);
}

SYNC_BACKEND_TEST_CASE("a variable used twice gets the sum of its paths", "[autograd]") {
  const auto hx = test::random_tensor<double>({7}, 60);
  auto x = test::leaf<B>(hx);
  ag::variable<double, B> y = x * x + sin(x) * x;
  y.backward(meld::ones<double, B>({7}));
  test::check_elements(x.grad(), [&](const auto& i) {
    const double v = test::at(hx, i);
    return 2 * v + std::cos(v) * v + std::sin(v);
  });
  // Through an intermediate read by two nodes (a diamond).
  using V = ag::variable<double, B>;
  test::require_gradcheck(
      [](const auto& v) {
        V h = tanh(v[0]);
        V a = h * h, b = exp(h);
        return V(a * b + h);
      },
      test::random_inputs<B>({{3, 3}}, 61));
  // A variable at a minority of the leaves (2 of 6) gets a loop per path, a leaf variable and an
  // interior one (whose gradient is pending until its node runs).
  test::require_gradcheck(
      [](const auto& v) { return V(v[0] * v[1] + exp(v[2]) * sigmoid(v[3]) - v[4] * v[4]); },
      test::random_inputs<B>({{2, 3}, {2, 3}, {2, 3}, {2, 3}, {2, 3}}, 62));
  test::require_gradcheck(
      [](const auto& v) {
        V h = tanh(v[0]);
        return V(v[1] * v[2] + exp(v[3]) * v[1] - h * h);
      },
      test::random_inputs<B>({{4}, {4}, {4}, {4}}, 63));
}

// The one pass where fresh and added gradients mix: h's first path written into its pending
// gradient, its second and the leaf a's through temporaries added next (on every backend: the
// temporaries are added by queued operations on the asynchronous ones).
BACKEND_TEST_CASE("one pass writes an interior result's first gradient and adds the others",
                  "[autograd]") {
  const auto hx = test::random_tensor<double>({3, 5}, 64),
             ha = test::random_tensor<double>({3, 5}, 65),
             hg = test::random_tensor<double>({3, 5}, 66);
  auto x = test::leaf<B>(hx), a = test::leaf<B>(ha);
  ag::variable<double, B> h = tanh(x);
  ag::variable<double, B> y = h * a + h * h;
  y.backward(meld::to<B>(hg));
  test::check_elements(a.grad(),
                       [&](const auto& i) { return test::at(hg, i) * std::tanh(test::at(hx, i)); });
  test::check_elements(x.grad(), [&](const auto& i) {
    const double t = std::tanh(test::at(hx, i));
    return test::at(hg, i) * (test::at(ha, i) + 2 * t) * (1 - t * t);
  });
}

BACKEND_TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
  const auto hx = test::random_tensor<double>({5}, 70);
  auto x = test::leaf<B>(hx);
  for (int k = 0; k < 3; ++k) ag::sum(3.0 * x * x).backward();
  test::check_elements(x.grad(), [&](const auto& i) { return 3 * 6 * test::at(hx, i); });
  x.zero_grad();
  test::check_elements(x.grad(), [](const auto&) { return 0.0; });
}

BACKEND_TEST_CASE("no_grad records nothing, and the graph is freed after backward", "[autograd]") {
  auto x = test::leaf<B>(test::random_tensor<double>({4}, 80));
  {
    ag::no_grad off;
    ag::variable<double, B> y = exp(x);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.is_leaf());
    REQUIRE_THROWS_AS(ag::sum(y).backward(), std::logic_error);
    {
      ag::enable_grad on;
      REQUIRE(ag::variable<double, B>(exp(x)).requires_grad());
    }
  }
  REQUIRE(ag::is_grad_enabled());
  // A leaf that does not require a gradient keeps none.
  auto c = test::leaf<B>(test::random_tensor<double>({4}, 81), false);
  ag::variable<double, B> s = ag::sum(c * x);
  REQUIRE_THROWS_AS(c.grad(), std::logic_error);
  s.backward();
  const std::string again = test::message_of<std::logic_error>([&] { s.backward(); });
  INFO(again);
  REQUIRE(again.find("retain_graph") != std::string::npos);
  // Kept, the graph runs twice and the gradients add up.
  x.zero_grad();
  ag::variable<double, B> t = ag::sum(c * x);
  t.backward({.retain_graph = true});
  t.backward();
  const auto hc = test::host(c.value());
  test::check_elements(x.grad(), [&](const auto& i) { return 2 * test::at(hc, i); });
  // The graph holds the inputs only while it is alive: after backward, the nodes are gone.
  REQUIRE(t.grad_fn()->inputs().empty());
}
