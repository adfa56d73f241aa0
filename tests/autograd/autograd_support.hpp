// Helpers of the autograd suites: random inputs on a backend, and gradcheck as a test assertion.
#pragma once

#include <cstdint>
#include <vector>

#include <meld/autograd/autograd.hpp>

#include "backends.hpp"

namespace test {

namespace ag = meld::autograd;

// Random double tensors of the given shapes on backend B (values in [lo, hi)).
template <class B>
std::vector<meld::tensor<double, B>> random_inputs(const std::vector<meld::shape_t>& shapes,
                                                   std::uint32_t seed, double lo = -2,
                                                   double hi = 2) {
  std::vector<meld::tensor<double, B>> out;
  for (const auto& s : shapes) out.push_back(random_tensor<double, B>(s, seed++, lo, hi));
  return out;
}

// Requires f's gradients at `inputs` to agree with finite differences (the message says where not).
template <class F, class B>
void require_gradcheck(F&& f, const std::vector<meld::tensor<double, B>>& inputs,
                       ag::gradcheck_options options = {}) {
  const ag::gradcheck_result r = ag::gradcheck(f, inputs, options);
  INFO(r.message);
  REQUIRE(r.ok);
}

// A leaf variable on B holding a copy of a host tensor.
template <class B, class T>
ag::variable<T, B> leaf(const meld::tensor<T>& h, bool requires_grad = true) {
  return ag::variable<T, B>(meld::to<B>(h), requires_grad);
}

}  // namespace test
