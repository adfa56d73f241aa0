// meld's side of the elementwise cases: the 5-op expression (fused, and eager with one temporary
// per operation as numpy evaluates it), STREAM triad written as a meld expression, the broadcast
// case and the transcendental case.
#include "common.hpp"

namespace {

using bench::index_t;
using meld::tensor;

// y = a*x + b*z - c*w + x*z, fused into one pass.
void fiveop_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2), w = bench::data(n, 3);
  tensor<float> y({n});
  const float a = bench::a, b = bench::b, c = bench::c;
  for (auto _ : state) {
    y = a * x + b * z - c * w + x * z;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 4);
}
BENCHMARK(fiveop_meld)->Name("fiveop/meld")->Apply(bench::size_and_threads);

// The same, one operation at a time, each into a fresh temporary (seven passes, six temporaries:
// what `a*x + b*z - c*w + x*z` costs in numpy without its temporary elision). Every operation is
// itself a meld assignment, so it is vectorized and threaded like the fused one.
void fiveop_eager(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2), w = bench::data(n, 3);
  tensor<float> y({n});
  const float a = bench::a, b = bench::b, c = bench::c;
  for (auto _ : state) {
    tensor<float> t1 = a * x;
    tensor<float> t2 = b * z;
    tensor<float> t3 = t1 + t2;
    tensor<float> t4 = c * w;
    tensor<float> t5 = t3 - t4;
    tensor<float> t6 = x * z;
    y = t5 + t6;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 4);
}
BENCHMARK(fiveop_eager)->Name("fiveop/eager")->Apply(bench::size_and_threads);

// STREAM triad as a meld expression (the hand-written ceiling is in elementwise_hand.cpp).
void triad_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2);
  tensor<float> y({n});
  const float s = bench::a;
  for (auto _ : state) {
    y = x + s * z;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 3);
}
BENCHMARK(triad_meld)->Name("triad/meld")->Apply(bench::size_and_threads);

// y = m + v, m of shape {4096, 4096}, v of shape {4096} broadcast along the rows.
void broadcast_meld(benchmark::State& state) {
  constexpr index_t rows = 4096, cols = 4096;
  bench::use_threads(static_cast<int>(state.range(0)));
  tensor<float> m = meld::uniform<float>({rows, cols}, -1.f, 1.f, 4);
  tensor<float> v = bench::data(cols, 5);
  tensor<float> y({rows, cols});
  for (auto _ : state) {
    y = m + v;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, rows * cols, 2);
}
BENCHMARK(broadcast_meld)->Name("broadcast/meld")->Apply(bench::threads_only);

// y = exp(x) * sigmoid(z).
void transcendental_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2);
  tensor<float> y({n});
  for (auto _ : state) {
    y = meld::exp(x) * meld::sigmoid(z);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 3);
}
BENCHMARK(transcendental_meld)->Name("transcendental/meld")->Apply(bench::size_and_threads);

}  // namespace
