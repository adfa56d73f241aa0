// Build-time benchmark: one expression with xtensor + xsimd (see scripts/bench-build-time.sh).
#include <cstdio>
#include <cstdlib>

#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::size_t(std::atol(argv[1])) : 1000;
  xt::xtensor<float, 1> x = xt::random::rand<float>({n}, -1.f, 1.f);
  xt::xtensor<float, 1> z = xt::ones<float>({n}), w = xt::ones<float>({n});
  xt::xtensor<float, 1> y = 1.5f * x + -0.75f * z - 0.25f * w + x * z;
  std::printf("%f\n", static_cast<double>(y(0)));
}
