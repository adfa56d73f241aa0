// Eigen 3.4 on the 5-op expression: Eigen::ArrayXf, its own (aligned) storage. Eigen does not
// thread coefficient-wise expressions; with more than one thread each OpenMP thread evaluates the
// expression on its own contiguous segment (bench::segments).
#include "common.hpp"

#include <Eigen/Core>

namespace {

using bench::index_t;

Eigen::ArrayXf eigen_data(index_t n, std::uint64_t seed) {
  const meld::tensor<float> t = bench::data(n, seed);
  return Eigen::Map<const Eigen::ArrayXf>(t.data(), n);
}

void fiveop_eigen(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  const Eigen::ArrayXf x = eigen_data(n, 1), z = eigen_data(n, 2), w = eigen_data(n, 3);
  Eigen::ArrayXf y = Eigen::ArrayXf::Zero(n);
  const float a = bench::a, b = bench::b, c = bench::c;
  for (auto _ : state) {
    if (threads == 1) {
      y = a * x + b * z - c * w + x * z;
    } else {
      bench::segments(n, threads, [&](index_t lo, index_t hi) {
        const index_t len = hi - lo;
        y.segment(lo, len) = a * x.segment(lo, len) + b * z.segment(lo, len) -
                             c * w.segment(lo, len) + x.segment(lo, len) * z.segment(lo, len);
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 4);
}
BENCHMARK(fiveop_eigen)->Name("fiveop/eigen")->Apply(bench::size_and_threads);

}  // namespace
