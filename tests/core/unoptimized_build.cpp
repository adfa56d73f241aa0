// Compiled (not run) by the test `unoptimized_build`: meld must compile in an unoptimized (-O0,
// Debug) build with every element type through the paths that use vector selects, comparisons
// and transcendental functions, whatever SIMD instruction set -march picks.
#include <cstdint>

#include <meld/meld.hpp>

template <class T>
T exercise() {
  meld::tensor<T> a = meld::arange<T>(T(0), T(64)).reshape({8, 8}), b({8, 8});
  b = meld::maximum(a, T(3)) + meld::minimum(a, T(5)) + meld::where(a > T(2), a, b);
  meld::tensor<T> m = meld::max(b, 1);
  meld::tensor<T> c = meld::matmul(a, b);
  return meld::min(b) + meld::max(m) + meld::sum(c) + static_cast<T>(meld::argmax(b));
}

int main() {
  meld::tensor<float> x = meld::uniform<float>({256}, 0.5f, 2.f, 1);
  const float y = meld::sum(meld::log(x) + meld::exp(x) + meld::tanh(x) + meld::sigmoid(x));
  return static_cast<int>(y + exercise<float>() + exercise<double>() +
                          static_cast<float>(exercise<std::int32_t>() + exercise<std::int64_t>())) &
         1;
}
