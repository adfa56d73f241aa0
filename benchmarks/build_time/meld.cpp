// Build-time benchmark: one expression with meld (see scripts/bench-build-time.sh).
#include <cstdio>
#include <cstdlib>

#include <meld/essentials.hpp>

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000;
  meld::tensor<float> x = meld::uniform<float>({n}, -1.f, 1.f, 1), z = meld::ones<float>({n}),
                      w = meld::ones<float>({n});
  meld::tensor<float> y = 1.5f * x + -0.75f * z - 0.25f * w + x * z;
  std::printf("%f\n", static_cast<double>(y(0)));
}
