// The hand-written contestants of the elementwise cases: plain loops over __restrict pointers that
// the compiler vectorizes (g++ -O3 -march=native), STREAM triad (the bandwidth ceiling), and the
// transcendental case written directly with xsimd's batches and math, as meld computes it.
// Threaded with OpenMP over one contiguous segment per thread (bench::segments).
//
// The arrays are meld tensors, so that the hand loops and meld run on identically allocated memory
// (64-byte aligned; huge pages advised for large arrays).
#include "common.hpp"

#include <xsimd/xsimd.hpp>

namespace {

using bench::index_t;
using meld::tensor;

__attribute__((noinline)) void fiveop_kernel(float* __restrict y, const float* __restrict x,
                                             const float* __restrict z, const float* __restrict w,
                                             float a, float b, float c, index_t n) {
  for (index_t i = 0; i < n; ++i) y[i] = a * x[i] + b * z[i] - c * w[i] + x[i] * z[i];
}

// The same loop, vectorized with 256-bit registers (clang's and GCC's choice on some Intel cores).
__attribute__((noinline, target("prefer-vector-width=256"))) void fiveop_kernel_256(
    float* __restrict y, const float* __restrict x, const float* __restrict z,
    const float* __restrict w, float a, float b, float c, index_t n) {
  for (index_t i = 0; i < n; ++i) y[i] = a * x[i] + b * z[i] - c * w[i] + x[i] * z[i];
}

template <auto Kernel>
void fiveop_hand(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2), w = bench::data(n, 3);
  tensor<float> y({n});
  float* py = y.data();
  const float *px = x.data(), *pz = z.data(), *pw = w.data();
  for (auto _ : state) {
    bench::segments(n, threads, [&](index_t lo, index_t hi) {
      Kernel(py + lo, px + lo, pz + lo, pw + lo, bench::a, bench::b, bench::c, hi - lo);
    });
    benchmark::DoNotOptimize(py);
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 4);
}
BENCHMARK(fiveop_hand<fiveop_kernel>)->Name("fiveop/hand")->Apply(bench::size_and_threads);
BENCHMARK(fiveop_hand<fiveop_kernel_256>)->Name("fiveop/hand256")->Apply(bench::size_and_threads);

// ---- STREAM triad: y = x + s z (2 reads, 1 write)
// ------------------------------------------------

__attribute__((noinline)) void triad_kernel(float* __restrict y, const float* __restrict x,
                                            const float* __restrict z, float s, index_t n) {
  for (index_t i = 0; i < n; ++i) y[i] = x[i] + s * z[i];
}

// With non-temporal (streaming) stores: the output bypasses the caches, and its lines are not read
// before they are written.
using batch = xsimd::batch<float>;
__attribute__((noinline)) void triad_kernel_nt(float* __restrict y, const float* __restrict x,
                                               const float* __restrict z, float s, index_t n) {
  constexpr index_t W = batch::size;
  index_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(y + i) % (W * sizeof(float)) != 0; ++i)
    y[i] = x[i] + s * z[i];
  const batch vs(s);
  for (; i + W <= n; i += W) {
    const batch r = xsimd::fma(vs, batch::load_unaligned(z + i), batch::load_unaligned(x + i));
#if defined(__AVX512F__)
    _mm512_stream_ps(y + i, r);
#elif defined(__AVX__)
    _mm256_stream_ps(y + i, r);
#else
    r.store_aligned(y + i);
#endif
  }
  for (; i < n; ++i) y[i] = x[i] + s * z[i];
  _mm_sfence();
}

template <auto Kernel>
void triad(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2);
  tensor<float> y({n});
  float* py = y.data();
  const float *px = x.data(), *pz = z.data();
  for (auto _ : state) {
    bench::segments(n, threads, [&](index_t lo, index_t hi) {
      Kernel(py + lo, px + lo, pz + lo, bench::a, hi - lo);
    });
    benchmark::DoNotOptimize(py);
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 3);
}
BENCHMARK(triad<triad_kernel>)->Name("triad/hand")->Apply(bench::size_and_threads);
BENCHMARK(triad<triad_kernel_nt>)->Name("triad/hand_nt")->Apply(bench::size_and_threads);

// ---- broadcast: y = m + v, m {4096, 4096}, v {4096}
// ------------------------------------------------

__attribute__((noinline)) void broadcast_kernel(float* __restrict y, const float* __restrict m,
                                                const float* __restrict v, index_t rows,
                                                index_t cols) {
  for (index_t r = 0; r < rows; ++r)
    for (index_t j = 0; j < cols; ++j) y[r * cols + j] = m[r * cols + j] + v[j];
}

void broadcast_hand(benchmark::State& state) {
  constexpr index_t rows = 4096, cols = 4096;
  const int threads = static_cast<int>(state.range(0));
  bench::use_threads(threads);
  tensor<float> m = meld::uniform<float>({rows, cols}, -1.f, 1.f, 4);
  tensor<float> v = bench::data(cols, 5);
  tensor<float> y({rows, cols});
  float* py = y.data();
  const float *pm = m.data(), *pv = v.data();
  for (auto _ : state) {
    bench::segments(rows, threads, [&](index_t lo, index_t hi) {
      broadcast_kernel(py + lo * cols, pm + lo * cols, pv, hi - lo, cols);
    });
    benchmark::DoNotOptimize(py);
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, rows * cols, 2);
}
BENCHMARK(broadcast_hand)->Name("broadcast/hand")->Apply(bench::threads_only);

// ---- transcendental: y = exp(x) * sigmoid(z), with xsimd's math ---------------------------------

__attribute__((noinline)) void transcendental_kernel(float* __restrict y, const float* __restrict x,
                                                     const float* __restrict z, index_t n) {
  constexpr index_t W = batch::size;
  const batch one(1.f);
  index_t i = 0;
  for (; i + W <= n; i += W) {
    const batch xv = batch::load_unaligned(x + i), zv = batch::load_unaligned(z + i);
    (xsimd::exp(xv) * (one / (one + xsimd::exp(-zv)))).store_unaligned(y + i);
  }
  if (i < n) {  // the tail, through the same batch code
    alignas(64) float xs[W] = {}, zs[W] = {}, ys[W];
    std::copy(x + i, x + n, xs);
    std::copy(z + i, z + n, zs);
    const batch xv = batch::load_aligned(xs), zv = batch::load_aligned(zs);
    (xsimd::exp(xv) * (one / (one + xsimd::exp(-zv)))).store_aligned(ys);
    std::copy(ys, ys + (n - i), y + i);
  }
}

void transcendental_hand(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2);
  tensor<float> y({n});
  float* py = y.data();
  const float *px = x.data(), *pz = z.data();
  for (auto _ : state) {
    bench::segments(n, threads, [&](index_t lo, index_t hi) {
      transcendental_kernel(py + lo, px + lo, pz + lo, hi - lo);
    });
    benchmark::DoNotOptimize(py);
    benchmark::ClobberMemory();
  }
  bench::set_bytes(state, n, 3);
}
BENCHMARK(transcendental_hand)->Name("transcendental/hand")->Apply(bench::size_and_threads);

}  // namespace
