// gradcheck: compares the gradients backward() derives with central finite differences.
//
//   auto r = autograd::gradcheck([](const auto& v) { return autograd::sum(v[0] * exp(v[1])); },
//                                {x, z});
//   if (!r) std::cerr << r.message;   // names the input, the element and both values
//
// f maps a std::vector of variables (one per input, in order) to a variable of any shape; the
// check uses the scalar sum(f(inputs) * w) with w a fixed pseudo-random weight of f's shape, so
// that every output element matters. Inputs should be double: the differences are taken in double
// from f's values, and float's precision (1e-7) leaves no digits for eps = 1e-6. Inputs live on any
// backend: each perturbed input is copied there explicitly, and each value of f comes back as one
// scalar (nothing reads device memory on the host).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../tensor/convert.hpp"
#include "engine.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

/// Settings of gradcheck.
struct gradcheck_options {
  double eps = 1e-6;       ///< the finite-difference step
  double atol = 1e-5;      ///< absolute tolerance
  double rtol = 1e-3;      ///< relative tolerance (of the numerical value)
  std::uint32_t seed = 7;  ///< of the output weights w
};

/// The outcome: true when every element agrees; otherwise message names the first that does not.
struct gradcheck_result {
  bool ok = true;                                ///< every element agrees
  std::string message;                           ///< the first disagreement, or empty
  explicit operator bool() const { return ok; }  ///< ok
};

namespace detail {
inline std::string index_text(const shape_t& shape, index_t flat) {
  std::string s = "(";
  index_t rest = flat;
  std::vector<index_t> idx(static_cast<std::size_t>(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = shape[d] ? rest % shape[d] : 0;
    rest = shape[d] ? rest / shape[d] : 0;
  }
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + ")";
}
}  // namespace detail

/// Checks the gradients of f at `inputs` (see above).
template <class F, class T, class B>
gradcheck_result gradcheck(F&& f, const std::vector<tensor<T, B>>& inputs,
                           gradcheck_options options = {}) {
  using V = variable<T, B>;
  std::vector<tensor<T>> host;
  for (const auto& x : inputs) host.push_back(meld::to<cpu<>>(x));
  auto variables = [&](bool requires_grad) {
    std::vector<V> v;
    for (const auto& h : host) v.emplace_back(meld::to<B>(h), requires_grad);
    return v;
  };
  // The weights w, from f's output shape.
  tensor<T, B> w;
  auto weighted = [&](const V& out) {
    if (w.shape() == shape_t{0} && !(out.shape() == shape_t{0})) {
      tensor<T> hw(out.shape(), uninitialized);
      std::mt19937 gen(options.seed);
      std::uniform_real_distribution<double> dist(0.5, 1.5);
      for (T& x : hw) x = static_cast<T>(dist(gen));
      w = meld::to<B>(hw);
    }
    return sum(out * w);
  };
  std::vector<V> vs = variables(true);
  V loss = weighted(f(vs));
  if (loss.requires_grad()) loss.backward();
  std::vector<tensor<T>> analytical;
  for (const V& v : vs) analytical.push_back(meld::to<cpu<>>(v.grad()));

  auto value_at = [&]() {
    no_grad off;
    const V l = weighted(f(variables(false)));
    return static_cast<double>(meld::to<cpu<>>(l.value()).item());
  };
  for (std::size_t i = 0; i < host.size(); ++i) {
    T* x = host[i].data();
    const T* a = analytical[i].data();
    for (index_t j = 0; j < host[i].size(); ++j) {
      const T saved = x[j];
      x[j] = static_cast<T>(static_cast<double>(saved) + options.eps);
      const double up = value_at();
      x[j] = static_cast<T>(static_cast<double>(saved) - options.eps);
      const double down = value_at();
      x[j] = saved;
      const double numerical = (up - down) / (2 * options.eps);
      const double got = static_cast<double>(a[j]);
      const double tol = options.atol + options.rtol * std::abs(numerical);
      if (!(std::abs(got - numerical) <= tol)) {
        std::ostringstream m;
        m.precision(10);
        m << "gradcheck: input " << i << " (shape " << host[i].shape() << ") element "
          << detail::index_text(host[i].shape(), j) << ": backward gives " << got
          << ", finite differences give " << numerical << " (difference "
          << std::abs(got - numerical) << " > tolerance " << tol << ")";
        return {false, m.str()};
      }
    }
  }
  return {};
}

/// @}

}  // namespace meld::autograd
