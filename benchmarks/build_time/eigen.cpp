// Build-time benchmark: one expression with Eigen (see scripts/bench-build-time.sh).
#include <cstdio>
#include <cstdlib>

#include <Eigen/Core>

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000;
  Eigen::ArrayXf x = Eigen::ArrayXf::Random(n), z = Eigen::ArrayXf::Ones(n),
                 w = Eigen::ArrayXf::Ones(n);
  Eigen::ArrayXf y = 1.5f * x + -0.75f * z - 0.25f * w + x * z;
  std::printf("%f\n", static_cast<double>(y(0)));
}
