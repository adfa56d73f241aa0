// Helpers for the nn tests: gradient checks against central finite differences, and reading
// every parameter of a model.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <meld/nn/nn.hpp>

#include "../support.hpp"

namespace nn_test {

using meld::index_t;
using meld::tensor;

// A copy of every parameter (or gradient) of a model, in visiting order.
template <class M>
std::vector<std::vector<double>> snapshot(M& model, bool gradients = false) {
  std::vector<std::vector<double>> out;
  model.visit_parameters([&](std::string_view, auto& p, auto& g) {
    const auto& t = gradients ? g : p;
    out.emplace_back(t.begin(), t.end());
  });
  model.visit_buffers([&](std::string_view, auto& b) { out.emplace_back(b.begin(), b.end()); });
  return out;
}

template <class M>
double objective(M& model, const tensor<double>& x, const tensor<double>& r) {
  const tensor<double> y = model.forward(x);
  REQUIRE(y.shape() == r.shape());
  double s = 0;
  for (index_t i = 0; i < y.size(); ++i) s += y.data()[i] * r.data()[i];
  return s;
}

// Checks a layer's (or model's) backward in double precision: for f(x) = sum(forward(x) * r)
// with a fixed random r, backward(r) must give df/dx and add df/dparam into every gradient, as
// central differences (f(v + h) - f(v - h)) / 2h say. `prepare` runs before every forward (e.g.
// to restart a dropout stream, so that every evaluation uses the same mask).
template <class M>
void check_gradients(
    M& model, tensor<double>& x, std::uint32_t seed = 7,
    const std::function<void()>& prepare = [] {}, double h = 1e-6, double tol = 1e-6,
    bool check_input = true) {
  prepare();
  const tensor<double> y0 = model.forward(x);
  const tensor<double> r = test::random_tensor<double>(y0.shape(), seed, -1, 1);
  model.zero_grad();
  const tensor<double> dx = model.backward(r);
  const auto analytic = snapshot(model, /*gradients=*/true);

  auto f = [&] {
    prepare();
    return objective(model, x, r);
  };
  auto compare = [&](double numeric, double got, const std::string& what) {
    INFO(what << ": numeric " << numeric << ", backward " << got);
    REQUIRE(std::abs(numeric - got) <= tol * std::max(1.0, std::abs(numeric)));
  };
  if (check_input) {
    REQUIRE(dx.shape() == x.shape());
    for (index_t i = 0; i < x.size(); ++i) {
      const double v = x.data()[i];
      x.data()[i] = v + h;
      const double up = f();
      x.data()[i] = v - h;
      const double down = f();
      x.data()[i] = v;
      compare((up - down) / (2 * h), dx.data()[i], "input element " + std::to_string(i));
    }
  }
  std::size_t k = 0;
  model.visit_parameters([&](std::string_view name, tensor<double>& p, tensor<double>&) {
    for (index_t i = 0; i < p.size(); ++i) {
      const double v = p.data()[i];
      p.data()[i] = v + h;
      const double up = f();
      p.data()[i] = v - h;
      const double down = f();
      p.data()[i] = v;
      compare((up - down) / (2 * h), analytic[k][static_cast<std::size_t>(i)],
              "parameter " + std::string(name) + " element " + std::to_string(i));
    }
    ++k;
  });
}

}  // namespace nn_test
