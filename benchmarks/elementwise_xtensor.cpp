// xtensor 0.24 with XTENSOR_USE_XSIMD on the 5-op expression: xt::xtensor<float, 1>, its own
// (aligned) storage, assigned through xt::noalias (no temporary). xtensor threads assignments only
// when built with TBB or OpenMP for the whole program; here, with more than one thread, each
// OpenMP thread evaluates the expression on xt::adapt views of its own contiguous segment.
#include "common.hpp"

#include <xtensor/xadapt.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>

namespace {

using bench::index_t;

xt::xtensor<float, 1> xtensor_data(index_t n, std::uint64_t seed) {
  const meld::tensor<float> t = bench::data(n, seed);
  xt::xtensor<float, 1> out = xt::xtensor<float, 1>::from_shape({std::size_t(n)});
  std::copy(t.data(), t.data() + n, out.data());
  return out;
}

void fiveop_xtensor(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  const auto x = xtensor_data(n, 1), z = xtensor_data(n, 2), w = xtensor_data(n, 3);
  xt::xtensor<float, 1> y = xt::zeros<float>({std::size_t(n)});
  const float a = bench::a, b = bench::b, c = bench::c;
  for (auto _ : state) {
    if (threads == 1) {
      xt::noalias(y) = a * x + b * z - c * w + x * z;
    } else {
      bench::segments(n, threads, [&](index_t lo, index_t hi) {
        const std::array<std::size_t, 1> shape{std::size_t(hi - lo)};
        auto seg = [&](auto& t) {
          return xt::adapt(t.data() + lo, shape[0], xt::no_ownership(), shape);
        };
        auto ys = seg(y);
        auto xs = seg(x), zs = seg(z), ws = seg(w);
        xt::noalias(ys) = a * xs + b * zs - c * ws + xs * zs;
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 4);
}
BENCHMARK(fiveop_xtensor)->Name("fiveop/xtensor")->Apply(bench::size_and_threads);

}  // namespace
