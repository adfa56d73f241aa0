// Helpers for the nn tests: gradient checks against central finite differences, and reading
// every parameter of a model.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <meld/nn/nn.hpp>

#include "../support.hpp"

namespace nn_test {

// Each element rounded to bfloat16 and back (the scalar conversion, which
// tests/core/test_float16.cpp checks over every value): what nn::precision::bfloat16's products
// read.
inline meld::tensor<float> rounded_to_bfloat16(const meld::tensor<float>& t) {
  meld::tensor<float> r(t.shape());
  std::transform(t.begin(), t.end(), r.begin(), [](float v) { return float(meld::bfloat16(v)); });
  return r;
}

using meld::index_t;
using meld::tensor;

// The elements of a tensor of any backend, in order (a device tensor through a host copy).
template <class T, class B>
std::vector<double> values(const tensor<T, B>& t) {
  if constexpr (B::host_accessible) {
    return {t.begin(), t.end()};
  } else {
    const tensor<T> h = meld::to<meld::cpu<>>(t);
    return {h.begin(), h.end()};
  }
}

// A copy of every parameter (or gradient) of a model, in visiting order (of any backend).
template <class M>
std::vector<std::vector<double>> snapshot(M& model, bool gradients = false) {
  std::vector<std::vector<double>> out;
  model.visit_parameters(
      [&](std::string_view, auto& p, auto& g) { out.push_back(values(gradients ? g : p)); });
  model.visit_buffers([&](std::string_view, auto& b) { out.push_back(values(b)); });
  return out;
}

// Comparisons of host tensors (device results come through test::host first): written once for
// the host, so that a backend-generic case instantiates none of their loops per backend.

// Every element of `got` within tol of `want`'s (as test::check_elements: relative or absolute).
template <class T, class U>
void require_close(const tensor<T>& got, const tensor<U>& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  test::check_elements(
      got, [&](const test::index_list& i) { return test::at(want, i); }, tol);
}

// The same shape and exactly the same elements.
template <class T>
void require_equal(const tensor<T>& got, const tensor<T>& want) {
  REQUIRE(got.shape() == want.shape());
  index_t differ = 0;
  for (index_t i = 0; i < got.size(); ++i) differ += got.data()[i] != want.data()[i];
  INFO(differ << " of " << got.size() << " elements differ");
  REQUIRE(differ == 0);
}

// sum |a - b| over the elements (same shapes).
template <class T>
double sum_abs_diff(const tensor<T>& a, const tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  double s = 0;
  for (index_t i = 0; i < a.size(); ++i) s += std::abs(double(a.data()[i]) - double(b.data()[i]));
  return s;
}

// max |t| (NaN if an element is), and the mean of t^2, over the elements.
template <class T>
double max_abs(const tensor<T>& t) {
  double m = 0;
  for (const T v : t) m = std::isnan(double(v)) ? double(v) : std::max(m, std::abs(double(v)));
  return m;
}
template <class T>
double mean_square(const tensor<T>& t) {
  double s = 0;
  for (const T v : t) s += double(v) * double(v);
  return s / double(t.size());
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
