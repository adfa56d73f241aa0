#include <cmath>
#include <cstdio>
#include <meld/meld.hpp>

int main() {
  meld::tensor<float> x = meld::arange<float>(1000.f), z({1000});
  z = 2.f;
  meld::tensor<float> y = 2.f * x + meld::exp(z) - x * z;
  const float s = meld::sum(x * z);
  // sum over i of 2 i = 999 * 1000
  if (s != 999000.f || std::abs(y(10) - std::exp(2.f)) > 1e-5f) {
    std::printf("wrong: %f %f\n", s, y(10));
    return 1;
  }
  std::printf("consumer ok: sum=%g\n", s);
  return 0;
}
