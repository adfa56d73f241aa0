// Where threads start to pay: the work below which an assignment should stay on the calling thread
// (meld's parallel_work_threshold, in include/meld/backend/cpu/chunks.hpp).
//
// For three expressions of different cost and sizes n = 2^9 .. 2^21, it times
//   threshold/<expr>/serial   the assignment on the calling thread (a pool of one thread), and
//   threshold/<expr>/pool     the same assignment split into one contiguous, cache-line aligned
//                             segment per thread on meld's pool (thread_pool::parallel_for; each
//                             task evaluates its segment with meld, on views made beforehand),
// which is what meld does above the threshold. Each benchmark reports `work`, the size in meld's
// cost units: n x (the expression's cost + its tensor operands + 2), the measure that meld compares
// with parallel_work_threshold. scripts/bench_table.py prints, per expression, the smallest work at
// which the pool is faster; the threshold is set near there (see benchmarks/RESULTS.md).
#include "common.hpp"

#include <chrono>
#include <thread>

namespace {

using bench::index_t;
using meld::range;
using meld::tensor;

struct add_case {
  static constexpr const char* name = "x+z";
  static constexpr int operands = 2;
  template <class X>
  static auto expr(const X& x, const X& z, const X&) {
    return x + z;
  }
};
struct fiveop_case {
  static constexpr const char* name = "5op";
  static constexpr int operands = 3;
  template <class X>
  static auto expr(const X& x, const X& z, const X& w) {
    return bench::a * x + bench::b * z - bench::c * w + x * z;
  }
};
struct exp_case {
  static constexpr const char* name = "exp";
  static constexpr int operands = 1;
  template <class X>
  static auto expr(const X& x, const X&, const X&) {
    return meld::exp(x);
  }
};

template <class Case>
constexpr int units() {
  using E = decltype(Case::expr(std::declval<const tensor<float>&>(),
                                std::declval<const tensor<float>&>(),
                                std::declval<const tensor<float>&>()));
  return E::cost + Case::operands + 2;
}

template <class Case, bool Pool>
void threshold(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = Pool ? bench::all_threads() : 1;
  bench::use_threads(threads);
  tensor<float> x = bench::data(n, 1), z = bench::data(n, 2), w = bench::data(n, 3);
  tensor<float> y({n});
  // One segment per thread, boundaries on cache lines (16 floats), as meld splits.
  using view = meld::tensor_view<float>;
  std::vector<view> ys, xs, zs, ws;
  for (index_t t = 0; t < threads; ++t) {
    const index_t lo = std::min(n, (n * t / threads + 15) / 16 * 16);
    const index_t hi = t + 1 == threads ? n : std::min(n, (n * (t + 1) / threads + 15) / 16 * 16);
    ys.push_back(y.view().slice(range(lo, hi)));
    xs.push_back(x.view().slice(range(lo, hi)));
    zs.push_back(z.view().slice(range(lo, hi)));
    ws.push_back(w.view().slice(range(lo, hi)));
  }
  for (auto _ : state) {
    if constexpr (Pool) {
      meld::thread_pool::global().parallel_for(threads, [&](index_t t) {
        ys[std::size_t(t)] = Case::expr(xs[std::size_t(t)], zs[std::size_t(t)], ws[std::size_t(t)]);
      });
    } else {
      y = Case::expr(x, z, w);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["work"] = double(n) * units<Case>();
}

void sizes(benchmark::internal::Benchmark* b) {
  for (index_t n = 512; n <= (index_t(1) << 21); n *= 2) b->Args({n});
  b->ArgNames({"n"});
  b->UseRealTime();
}

BENCHMARK(threshold<add_case, false>)->Name("threshold/x+z/serial")->Apply(sizes);
BENCHMARK(threshold<add_case, true>)->Name("threshold/x+z/pool")->Apply(sizes);
BENCHMARK(threshold<fiveop_case, false>)->Name("threshold/5op/serial")->Apply(sizes);
BENCHMARK(threshold<fiveop_case, true>)->Name("threshold/5op/pool")->Apply(sizes);
BENCHMARK(threshold<exp_case, false>)->Name("threshold/exp/serial")->Apply(sizes);
BENCHMARK(threshold<exp_case, true>)->Name("threshold/exp/pool")->Apply(sizes);

// The pool's fork-join cost alone: one empty task per thread.
void pool_round_trip(benchmark::State& state) {
  bench::use_threads(bench::all_threads());
  for (auto _ : state)
    meld::thread_pool::global().parallel_for(bench::all_threads(), [](index_t) {});
}
BENCHMARK(pool_round_trip)->Name("threshold/empty/pool")->UseRealTime();

// The same after the pool has been idle for 2 ms, so that its workers have stopped spinning and
// sleep: the cost of the first parallel assignment after a pause.
void pool_round_trip_cold(benchmark::State& state) {
  bench::use_threads(bench::all_threads());
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto start = std::chrono::steady_clock::now();
    meld::thread_pool::global().parallel_for(bench::all_threads(), [](index_t) {});
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}
BENCHMARK(pool_round_trip_cold)->Name("threshold/empty/pool_cold")->UseManualTime();

}  // namespace
