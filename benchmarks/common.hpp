// Shared set-up of meld's benchmarks: the sizes, the thread counts, data, and an OpenMP helper that
// runs the hand-written contestants (and Eigen / xtensor, which do not thread elementwise work by
// themselves) over all threads in contiguous, equal segments.
//
// Benchmark names are <case>/<contestant>/n:<elements>/t:<threads>; scripts/bench_table.py reads
// them back. Every benchmark reports real (wall-clock) time, so that multi-threaded runs are timed
// as the caller sees them.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <meld/meld.hpp>

namespace bench {

using meld::index_t;

inline constexpr index_t sizes[] = {1'000, 100'000, 10'000'000};

// Every core this process may use (meld's default pool size).
inline int all_threads() {
  static const int n = meld::detail::available_cores();
  return n;
}

// The thread counts benchmarked: one and all (just one when there is a single core).
inline std::vector<int> thread_counts() {
  if (all_threads() == 1) return {1};
  return {1, all_threads()};
}

// Registers every (n, threads) pair of `sizes`, or of the given sizes.
inline void size_and_threads(benchmark::internal::Benchmark* b) {
  for (index_t n : sizes)
    for (int t : thread_counts()) b->Args({n, t});
  b->ArgNames({"n", "t"});
  b->UseRealTime();
}
inline void threads_only(benchmark::internal::Benchmark* b) {
  for (int t : thread_counts()) b->Args({t});
  b->ArgNames({"t"});
  b->UseRealTime();
}

// Sets meld's pool and OpenMP to t threads (outside the timed loop: resizing starts threads).
inline void use_threads(int t) {
  if (meld::num_threads() != t) meld::set_num_threads(t);
  omp_set_num_threads(t);
}

// Runs f(begin, end) over [0, n) split into one contiguous segment per thread (boundaries on
// multiples of 16 elements, a cache line of floats). With one thread, f(0, n) on the caller. This
// is how a user threads a hand loop with OpenMP: no size threshold.
template <class F>
void segments(index_t n, int threads, F&& f) {
  if (threads == 1) {
    f(index_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const index_t k = omp_get_num_threads(), i = omp_get_thread_num();
    const index_t per = ((n + k - 1) / k + 15) / 16 * 16;
    const index_t b = std::min(n, i * per), e = std::min(n, b + per);
    if (b < e) f(b, e);
  }
}

// Values in [-1, 1), reproducible.
inline meld::tensor<float> data(index_t n, std::uint64_t seed) {
  return meld::uniform<float>({n}, -1.f, 1.f, seed);
}

// Bytes that an elementwise case must move per call: `streams` arrays of n floats.
inline void set_bytes(benchmark::State& state, index_t n, int streams) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * n * streams *
                          static_cast<std::int64_t>(sizeof(float)));
}

// The error of a float reduction result against a double reference, in units of
// eps * sum |terms| (the bound's scale in the README).
inline double error_in_eps(double got, double want, double abs_sum) {
  return std::abs(got - want) / (abs_sum * std::numeric_limits<float>::epsilon());
}

// The 5-op expression's scalars.
inline constexpr float a = 1.5f, b = -0.75f, c = 0.25f;

}  // namespace bench
