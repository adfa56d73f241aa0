// bfloat16 conversions as meld assignments: float -> bfloat16 (y16 = x, rounded to nearest even)
// and bfloat16 -> float, against a float copy of the same element count (the memory's pace for
// these sizes) and against the scalar conversion in a plain loop (what the SIMD kernels replace).
// Bytes are those the conversion moves: 4 read + 2 written per element (2 + 4 widening, 8 for the
// float copy and for a float expression that rounds its lanes to bfloat16).
#include "common.hpp"

namespace {

using bench::index_t;
using meld::bfloat16;
using meld::tensor;

void set_bytes_per_element(benchmark::State& state, index_t n, int bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * n * bytes);
}

void narrow_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const tensor<float> x = bench::data(n, 1);
  tensor<bfloat16> y({n});
  for (auto _ : state) {
    y = x;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes_per_element(state, n, 6);
}
BENCHMARK(narrow_meld)->Name("bfloat16/narrow/meld")->Apply(bench::size_and_threads);

void narrow_scalar(benchmark::State& state) {
  const index_t n = state.range(0);
  const tensor<float> x = bench::data(n, 1);
  tensor<bfloat16> y({n});
  for (auto _ : state) {
    const float* in = x.data();
    bfloat16* out = y.data();
    for (index_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes_per_element(state, n, 6);
}
BENCHMARK(narrow_scalar)->Name("bfloat16/narrow/scalar")->Apply(bench::size_and_threads);

void widen_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const tensor<bfloat16> x = meld::cast<bfloat16>(bench::data(n, 1));
  tensor<float> y({n});
  for (auto _ : state) {
    y = meld::cast<float>(x);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes_per_element(state, n, 6);
}
BENCHMARK(widen_meld)->Name("bfloat16/widen/meld")->Apply(bench::size_and_threads);

// A cast inside a float expression: each lane rounded to bfloat16 and computed on in float (the
// quantization of a value that stays float), against copy_float's loop.
void round_in_float(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const tensor<float> x = bench::data(n, 1);
  tensor<float> y({n});
  for (auto _ : state) {
    y = meld::cast<bfloat16>(x) * 1.f;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes_per_element(state, n, 8);
}
BENCHMARK(round_in_float)->Name("bfloat16/round_in_float/meld")->Apply(bench::size_and_threads);

void copy_float(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const tensor<float> x = bench::data(n, 1);
  tensor<float> y({n});
  for (auto _ : state) {
    y = x * 1.f;  // an expression: the evaluator's loop, not a memcpy
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes_per_element(state, n, 8);
}
BENCHMARK(copy_float)->Name("bfloat16/copy_float/meld")->Apply(bench::size_and_threads);

}  // namespace
