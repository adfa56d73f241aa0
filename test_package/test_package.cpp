// The Conan package's smoke test: a fused expression and a reduction.
#include <cstdio>
#include <meld/meld.hpp>

int main() {
  meld::tensor<float> x = meld::arange<float>(100.f), y({100});
  y = 2.f * x + 1.f;
  const float s = meld::sum(y);  // 2 * 4950 + 100
  std::printf("meld %s: sum = %g\n", MELD_VERSION_STRING, s);
  return s == 10000.f ? 0 : 1;
}
