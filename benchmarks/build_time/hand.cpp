// Build-time benchmark: the same expression as a plain loop (see scripts/bench-build-time.sh).
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000;
  std::vector<float> x(n), z(n, 1.f), w(n, 1.f), y(n);
  for (long i = 0; i < n; ++i) x[i] = float(std::rand()) / RAND_MAX * 2.f - 1.f;
  for (long i = 0; i < n; ++i) y[i] = 1.5f * x[i] + -0.75f * z[i] - 0.25f * w[i] + x[i] * z[i];
  std::printf("%f\n", static_cast<double>(y[0]));
}
